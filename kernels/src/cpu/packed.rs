//! Dense layers for inference, on weights repacked once at load.
//!
//! [`super::Linear`] keeps PyTorch's `[out, in]` layout, which training updates in place, and
//! its small-batch kernel computes dot products: every output ends in a horizontal sum, and
//! a 4×3 tile loads seven vectors for twelve multiply-adds. A served model's weights never
//! change, so here they are rearranged once into panels of [`PANEL`] outputs, each panel
//! k-major (`[panel][k][16]`). Then a register tile of up to six rows × 16 outputs takes,
//! per input feature, two weight vectors and one broadcast input value per row — twelve
//! multiply-adds for eight loads at six rows, with no horizontal sums — and each panel is one
//! sequential stream. `tandem bench forward` alternating with the build before (two
//! threads, medians): on the 784→1024→1024→10 MLP +10% at 1 row, +20% at 4, +16% at 8, +15%
//! at 16, +8% at 512 (where `Linear` uses `gemm`), level at 2; on the bundled digits model,
//! whose weights stay in cache, 1.5–2× at 4–16 rows. Serving the large MLP did not get
//! cheaper: in a serving process the kernel waits on its weight loads (benches/README.md).

use std::ops::Range;

use super::small_batch::Shape;
use super::{AlignedVec, OutPtr, check_buffers, in_parallel, threads_for};
use crate::{Activation, KernelError};

/// Outputs per panel: two 8-lane vectors.
pub const PANEL: usize = 16;

/// Rows per block when a batch is large: a block's inputs (48 rows of 1024 features, 192 KB)
/// stay in L2 while every panel of weights passes over them once.
const ROW_BLOCK: usize = 48;

/// A dense layer `y = act(x · Wᵀ + b)` with its weights in panels, for inference.
#[derive(Clone, Debug)]
pub struct PackedLinear {
    inputs: usize,
    outputs: usize,
    /// `[panels][inputs][PANEL]`; the outputs past `outputs` in the last panel are zeros.
    panels: AlignedVec,
    /// `panels * PANEL` biases, zeros past `outputs`.
    bias: Vec<f32>,
}

impl PackedLinear {
    /// Takes a `[outputs, inputs]` row-major weight matrix (PyTorch's `nn.Linear` layout) and
    /// `outputs` biases.
    pub fn new(
        weight: &[f32],
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<Self, KernelError> {
        if weight.len() != inputs * outputs || bias.len() != outputs {
            return Err(KernelError::Shape {
                op: "cpu::PackedLinear::new",
                detail: format!(
                    "weight has {} values and bias {}, expected {outputs}x{inputs} and {outputs}",
                    weight.len(),
                    bias.len(),
                ),
            });
        }
        let panel_count = outputs.div_ceil(PANEL);
        let mut packed = vec![0f32; panel_count * inputs * PANEL];
        for (o, row) in weight.chunks_exact(inputs.max(1)).enumerate().take(outputs) {
            let panel = &mut packed[(o / PANEL) * inputs * PANEL..][..inputs * PANEL];
            for (k, &w) in row.iter().enumerate() {
                panel[k * PANEL + o % PANEL] = w;
            }
        }
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(panel_count * PANEL, 0.0);
        Ok(PackedLinear {
            inputs,
            outputs,
            panels: AlignedVec::from_slice(&packed),
            bias: padded_bias,
        })
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// `y[rows, outputs] = act(x[rows, inputs] · Wᵀ + b)`, the panels split over up to
    /// `threads` threads of the current rayon pool.
    pub fn forward(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        check_buffers(
            "cpu::PackedLinear::forward",
            x,
            y,
            rows,
            self.inputs,
            self.outputs,
        )?;
        if rows == 0 || self.outputs == 0 {
            return Ok(());
        }
        let threads = threads_for(rows, self.inputs, self.outputs, threads);
        let shape = Shape {
            rows,
            k: self.inputs,
            n: self.outputs,
        };
        let out = OutPtr(y.as_mut_ptr());
        in_parallel(self.outputs.div_ceil(PANEL), 1, threads, |panels| {
            let out = &out;
            // SAFETY: x holds rows * inputs values and y rows * outputs (checked above); the
            // panels and biases were sized in `new`; each call writes only the columns of its
            // own panels, and the ranges are disjoint.
            unsafe { dense(x, &self.panels, &self.bias, out.0, shape, panels, act) }
        });
        Ok(())
    }
}

/// Computes the outputs of `panels` for every row.
///
/// # Safety
/// `x` holds `rows * k` values; `p` holds `[panels.end][k][PANEL]` values and `bias`
/// `panels.end * PANEL`; `y` points to `rows * n` writable values with
/// `(panels.end - 1) * PANEL < n`. No other thread writes those panels' columns of `y`.
unsafe fn dense(
    x: &[f32],
    p: &[f32],
    bias: &[f32],
    y: *mut f32,
    shape: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); the caller upholds the
            // buffer contract, which is the same for both implementations.
            unsafe { avx2::dense(x, p, bias, y, shape, panels, act) };
            return;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { portable::dense(x, p, bias, y, shape, panels, act) }
}

/// How many of the `left` rows of a block the next tile takes: 1 to 6. Six rows keep twelve
/// accumulators busy; five, ten. Fewer leave the multiply-add units waiting on their own
/// latency (five cycles, two units: ten chains to fill them), so a block is cut to avoid
/// tiles of one, two or four rows (8 = 5 + 3, not 6 + 2 or 4 + 4), which a batch of that
/// size alone still needs.
fn tile_rows(left: usize) -> usize {
    match left {
        0..=6 => left,
        7 => 4,
        8 | 10 | 13 => 5,
        _ => 6,
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{PANEL, ROW_BLOCK, Shape, tile_rows};
    use crate::Activation;

    /// # Safety
    /// As [`super::dense`], and the CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dense(
        x: &[f32],
        p: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        panels: Range<usize>,
        act: Activation,
    ) {
        let mut block = 0;
        while block < s.rows {
            let block_rows = ROW_BLOCK.min(s.rows - block);
            let mut panel = panels.start;
            while panel < panels.end {
                if block_rows == 1 && panel + 2 <= panels.end {
                    // One row: two panels at a time, the features split three ways, so the
                    // tile has twelve accumulators and two weight streams.
                    // SAFETY: block < s.rows and panel + 2 <= panels.end, per the contract.
                    unsafe { tile::<1, 2, 3>(x, p, bias, y, s, panel, block, act) };
                    panel += 2;
                    continue;
                }
                let mut b = block;
                let mut left = block_rows;
                while left > 0 {
                    let rows = tile_rows(left);
                    // SAFETY: b + rows <= s.rows and panel < panels.end, per the contract.
                    unsafe {
                        // Two and three rows split the feature loop into 3 and 2 independent
                        // accumulator sets, so every tile has 8–12 chains.
                        match rows {
                            6 => tile::<6, 1, 1>(x, p, bias, y, s, panel, b, act),
                            5 => tile::<5, 1, 1>(x, p, bias, y, s, panel, b, act),
                            4 => tile::<4, 1, 1>(x, p, bias, y, s, panel, b, act),
                            3 => tile::<3, 1, 2>(x, p, bias, y, s, panel, b, act),
                            2 => tile::<2, 1, 3>(x, p, bias, y, s, panel, b, act),
                            _ => tile::<1, 1, 6>(x, p, bias, y, s, panel, b, act),
                        }
                    }
                    b += rows;
                    left -= rows;
                }
                panel += 1;
            }
            block += block_rows;
        }
    }

    /// One register tile: rows `b..b+NR` of panels `panel..panel+NP`, the features taken
    /// `SPLIT` at a time into separate accumulators.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const NR: usize, const NP: usize, const SPLIT: usize>(
        x: &[f32],
        p: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        panel: usize,
        b: usize,
        act: Activation,
    ) {
        let k = s.k;
        // SAFETY (whole block): x is read below (b + NR) * k, the panels' values below
        // (panel + NP) * k * PANEL, the biases below (panel + NP) * PANEL, and y is written
        // below (b + NR) * n at columns < n — all within the caller's contract. The panels
        // start on a cache line (AlignedVec) and are PANEL floats wide, so the aligned
        // loads are aligned.
        unsafe {
            let xp = x.as_ptr();
            // The j-th 8-lane column of the tile at feature kk: panel j / 2, half j % 2.
            let weights = |kk: usize, j: usize| {
                _mm256_load_ps(
                    p.as_ptr()
                        .add((panel + j / 2) * k * PANEL + kk * PANEL + j % 2 * 8),
                )
            };
            let mut acc = [[[[_mm256_setzero_ps(); 2]; NP]; NR]; SPLIT];
            let whole = k / SPLIT * SPLIT;
            let mut kk = 0;
            while kk < whole {
                for (u, acc) in acc.iter_mut().enumerate() {
                    let mut w = [[_mm256_setzero_ps(); 2]; NP];
                    for (q, w) in w.iter_mut().enumerate() {
                        *w = [weights(kk + u, 2 * q), weights(kk + u, 2 * q + 1)];
                    }
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let v = _mm256_broadcast_ss(&*xp.add((b + r) * k + kk + u));
                        for (acc, w) in acc.iter_mut().zip(&w) {
                            acc[0] = _mm256_fmadd_ps(v, w[0], acc[0]);
                            acc[1] = _mm256_fmadd_ps(v, w[1], acc[1]);
                        }
                    }
                }
                kk += SPLIT;
            }
            while kk < k {
                for (r, acc) in acc[0].iter_mut().enumerate() {
                    let v = _mm256_broadcast_ss(&*xp.add((b + r) * k + kk));
                    for (q, acc) in acc.iter_mut().enumerate() {
                        acc[0] = _mm256_fmadd_ps(v, weights(kk, 2 * q), acc[0]);
                        acc[1] = _mm256_fmadd_ps(v, weights(kk, 2 * q + 1), acc[1]);
                    }
                }
                kk += 1;
            }
            for q in 0..NP {
                let o = (panel + q) * PANEL;
                let valid = (s.n - o).min(PANEL);
                for r in 0..NR {
                    let mut v0 = _mm256_loadu_ps(bias.as_ptr().add(o));
                    let mut v1 = _mm256_loadu_ps(bias.as_ptr().add(o + 8));
                    for acc in &acc {
                        v0 = _mm256_add_ps(v0, acc[r][q][0]);
                        v1 = _mm256_add_ps(v1, acc[r][q][1]);
                    }
                    if act == Activation::Relu {
                        let zero = _mm256_setzero_ps();
                        v0 = _mm256_max_ps(v0, zero);
                        v1 = _mm256_max_ps(v1, zero);
                    }
                    let yp = y.add((b + r) * s.n + o);
                    if valid == PANEL {
                        _mm256_storeu_ps(yp, v0);
                        _mm256_storeu_ps(yp.add(8), v1);
                    } else {
                        // The last panel of a layer whose outputs are not a multiple of 16:
                        // only its real columns are written.
                        let mut lanes = [0f32; PANEL];
                        _mm256_storeu_ps(lanes.as_mut_ptr(), v0);
                        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), v1);
                        std::ptr::copy_nonoverlapping(lanes.as_ptr(), yp, valid);
                    }
                }
            }
        }
    }
}

mod portable {
    use std::ops::Range;

    use super::{PANEL, Shape};
    use crate::Activation;
    use crate::cpu::activate;

    /// # Safety
    /// As [`super::dense`].
    pub(super) unsafe fn dense(
        x: &[f32],
        p: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        panels: Range<usize>,
        act: Activation,
    ) {
        for b in 0..s.rows {
            let xr = &x[b * s.k..(b + 1) * s.k];
            for panel in panels.clone() {
                let weights = &p[panel * s.k * PANEL..(panel + 1) * s.k * PANEL];
                let mut sums = [0f32; PANEL];
                sums.copy_from_slice(&bias[panel * PANEL..][..PANEL]);
                for (xv, w) in xr.iter().zip(weights.chunks_exact(PANEL)) {
                    for (sum, wv) in sums.iter_mut().zip(w) {
                        *sum += xv * wv;
                    }
                }
                let o = panel * PANEL;
                for (j, sum) in sums
                    .iter()
                    .enumerate()
                    .take(s.n.saturating_sub(o).min(PANEL))
                {
                    // SAFETY: b < rows and o + j < n, per the caller's contract.
                    unsafe { *y.add(b * s.n + o + j) = activate(*sum, act) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    fn reference(
        w: &[f32],
        bias: &[f32],
        x: &[f32],
        rows: usize,
        k: usize,
        act: Activation,
    ) -> Vec<f64> {
        let n = bias.len();
        let mut y = vec![0f64; rows * n];
        for b in 0..rows {
            for o in 0..n {
                let mut s = bias[o] as f64;
                for i in 0..k {
                    s += x[b * k + i] as f64 * w[o * k + i] as f64;
                }
                y[b * n + o] = if act == Activation::Relu {
                    s.max(0.0)
                } else {
                    s
                };
            }
        }
        y
    }

    #[test]
    fn matches_the_reference_on_every_tile_and_odd_shapes() {
        // k not a multiple of the feature split, n not a multiple of the panel, and row
        // counts that take every tile height and cross a row block.
        for (k, n) in [(13, 7), (64, 130), (257, 33), (5, 16)] {
            let (w, bias) = (values(k * n, 1), values(n, 2));
            let layer = PackedLinear::new(&w, &bias, k, n).unwrap();
            for rows in (1..=20).chain([47, 48, 49, 101]) {
                let x = values(rows * k, rows as u64);
                for act in [Activation::Identity, Activation::Relu] {
                    let want = reference(&w, &bias, &x, rows, k, act);
                    for threads in [1, 2, 3] {
                        let mut y = vec![f32::NAN; rows * n];
                        layer.forward(&x, rows, &mut y, act, threads).unwrap();
                        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                            assert!(
                                (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                                "k={k} n={n} rows={rows} threads={threads} {act:?} at {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_take_one_to_six_rows_and_cover_the_block() {
        for rows in 1..=ROW_BLOCK {
            let mut left = rows;
            while left > 0 {
                let take = tile_rows(left);
                assert!(
                    (1..=6).contains(&take) && take <= left,
                    "{rows} rows: {take} of {left}"
                );
                left -= take;
            }
        }
        // The heights that leave the multiply-add units waiting are avoided where a block
        // can be cut otherwise.
        assert_eq!([7, 8, 9, 10, 13].map(tile_rows), [4, 5, 6, 5, 5]);
    }

    #[test]
    fn the_portable_kernel_matches_too() {
        let (k, n, rows) = (37, 21, 9);
        let (w, bias) = (values(k * n, 3), values(n, 4));
        let layer = PackedLinear::new(&w, &bias, k, n).unwrap();
        let x = values(rows * k, 5);
        let mut y = vec![f32::NAN; rows * n];
        let shape = Shape { rows, k, n };
        // SAFETY: the buffers are those `forward` would pass, for all of the layer's panels.
        unsafe {
            portable::dense(
                &x,
                &layer.panels,
                &layer.bias,
                y.as_mut_ptr(),
                shape,
                0..2,
                Activation::Relu,
            )
        };
        let want = reference(&w, &bias, &x, rows, k, Activation::Relu);
        for (a, b) in y.iter().zip(&want) {
            assert!(
                (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{a} vs {b}"
            );
        }
    }

    #[test]
    fn mismatched_buffers_are_an_error() {
        assert!(PackedLinear::new(&[0.0; 5], &[0.0; 2], 3, 2).is_err());
        let layer = PackedLinear::new(&[0.0; 6], &[0.0; 2], 3, 2).unwrap();
        let mut y = vec![0.0; 4];
        let err = layer
            .forward(&[0.0; 5], 2, &mut y, Activation::Relu, 1)
            .unwrap_err();
        assert!(err.to_string().contains("2 rows need 6 inputs"), "{err}");
    }
}
