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
//!
//! Because it waits on them, 16-bit weights (f16, bf16) stay 16-bit here — half the bytes
//! to stream — and are widened in registers as they are loaded. Widening is exact, so the
//! outputs are bit for bit those of weights widened to f32 at load.

use std::ops::Range;

use half::{bf16, f16};

use super::small_batch::Shape;
use super::{Aligned, AlignedVec, Element, OutPtr, check_buffers, in_parallel, threads_for};
use crate::{Activation, HostWeights, KernelError};

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
    panels: Panels,
    /// `panels * PANEL` biases, zeros past `outputs`.
    bias: Vec<f32>,
}

impl PackedLinear {
    /// Takes a `[outputs, inputs]` row-major weight matrix (PyTorch's `nn.Linear` layout), in
    /// the precision it was stored in, and `outputs` biases.
    pub fn new(
        weight: HostWeights<'_>,
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
        let panels = match weight {
            HostWeights::F32(w) => Panels::F32(pack(w, inputs, outputs, |v| v)),
            HostWeights::F16(w) => Panels::F16(pack(w, inputs, outputs, f16::to_bits)),
            HostWeights::BF16(w) => Panels::BF16(pack(w, inputs, outputs, bf16::to_bits)),
        };
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(outputs.div_ceil(PANEL) * PANEL, 0.0);
        Ok(PackedLinear {
            inputs,
            outputs,
            panels,
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
            let bias = &self.bias[..];
            // SAFETY: x holds rows * inputs values and y rows * outputs (checked above); the
            // panels and biases were sized in `new`; each call writes only the columns of its
            // own panels, and the ranges are disjoint.
            unsafe {
                match &self.panels {
                    Panels::F32(p) => dense::<F32>(x, p, bias, out.0, shape, panels, act),
                    Panels::F16(p) => dense::<F16>(x, p, bias, out.0, shape, panels, act),
                    Panels::BF16(p) => dense::<BF16>(x, p, bias, out.0, shape, panels, act),
                }
            }
        });
        Ok(())
    }
}

/// The panels in the checkpoint's precision.
#[derive(Clone, Debug)]
enum Panels {
    F32(AlignedVec),
    /// IEEE half precision, as bits.
    F16(Aligned<u16>),
    /// bfloat16 (the top half of an f32), as bits.
    BF16(Aligned<u16>),
}

/// `weight` (`[outputs, inputs]`) rearranged into `[panels][inputs][PANEL]`, zero-padded,
/// each value stored as `store` gives it: written straight into the one buffer the layer
/// keeps, so loading a model holds no second copy of its weights.
fn pack<T: Copy, B: Element>(
    weight: &[T],
    inputs: usize,
    outputs: usize,
    store: impl Fn(T) -> B,
) -> Aligned<B> {
    let mut packed = Aligned::default();
    packed.resize(outputs.div_ceil(PANEL) * inputs * PANEL);
    for (o, row) in weight.chunks_exact(inputs.max(1)).enumerate().take(outputs) {
        let panel = &mut packed[(o / PANEL) * inputs * PANEL..][..inputs * PANEL];
        for (k, &w) in row.iter().enumerate() {
            panel[k * PANEL + o % PANEL] = store(w);
        }
    }
    packed
}

/// How the weights of a panel are stored, and widened to f32.
trait Format {
    type Bits: Copy;
    fn widen(bits: Self::Bits) -> f32;
    /// Eight consecutive weights as f32 lanes.
    ///
    /// # Safety
    /// `p` points to eight readable values on a 16-byte boundary, and the caller runs with
    /// AVX2 and F16C enabled.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self::Bits) -> std::arch::x86_64::__m256;
}

struct F32;
struct F16;
struct BF16;

impl Format for F32 {
    type Bits = f32;
    fn widen(bits: f32) -> f32 {
        bits
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: f32 panels start on a cache line and rows are 64 bytes, so eight values
        // at a row or half-row offset are 32-byte aligned (the caller's contract).
        unsafe { std::arch::x86_64::_mm256_load_ps(p) }
    }
}

impl Format for F16 {
    type Bits = u16;
    fn widen(bits: u16) -> f32 {
        f16::from_bits(bits).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: sixteen aligned bytes (the caller's contract); F16C converts them exactly.
        unsafe { _mm256_cvtph_ps(_mm_load_si128(p.cast())) }
    }
}

impl Format for BF16 {
    type Bits = u16;
    fn widen(bits: u16) -> f32 {
        bf16::from_bits(bits).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: sixteen aligned bytes (the caller's contract). A bf16 is the top half of
        // an f32: zero-extend each to 32 bits and shift it up.
        unsafe {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_load_si128(p.cast()),
            )))
        }
    }
}

/// Computes the outputs of `panels` for every row.
///
/// # Safety
/// `x` holds `rows * k` values; `p` holds `[panels.end][k][PANEL]` values, starting on a
/// cache line, and `bias` `panels.end * PANEL`; `y` points to `rows * n` writable values with
/// `(panels.end - 1) * PANEL < n`. No other thread writes those panels' columns of `y`.
unsafe fn dense<F: Format>(
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    shape: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: the CPU supports AVX2, FMA and F16C (checked above); the caller upholds
            // the buffer contract, which is the same for both implementations.
            unsafe { avx2::dense::<F>(x, p, bias, y, shape, panels, act) };
            return;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { portable::dense::<F>(x, p, bias, y, shape, panels, act) }
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

    use super::{Format, PANEL, ROW_BLOCK, Shape, tile_rows};
    use crate::Activation;

    /// # Safety
    /// As [`super::dense`], and the CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dense<F: Format>(
        x: &[f32],
        p: &[F::Bits],
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
                    unsafe { tile::<F, 1, 2, 3>(x, p, bias, y, s, panel, block, act) };
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
                            6 => tile::<F, 6, 1, 1>(x, p, bias, y, s, panel, b, act),
                            5 => tile::<F, 5, 1, 1>(x, p, bias, y, s, panel, b, act),
                            4 => tile::<F, 4, 1, 1>(x, p, bias, y, s, panel, b, act),
                            3 => tile::<F, 3, 1, 2>(x, p, bias, y, s, panel, b, act),
                            2 => tile::<F, 2, 1, 3>(x, p, bias, y, s, panel, b, act),
                            _ => tile::<F, 1, 1, 6>(x, p, bias, y, s, panel, b, act),
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
    unsafe fn tile<F: Format, const NR: usize, const NP: usize, const SPLIT: usize>(
        x: &[f32],
        p: &[F::Bits],
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
        // start on a cache line (Aligned) and their rows are PANEL values wide, so every
        // eight weights loaded start on 16 bytes (32 for f32), as `Format::load8` needs.
        unsafe {
            let xp = x.as_ptr();
            // The j-th 8-lane column of the tile at feature kk: panel j / 2, half j % 2.
            let weights = |kk: usize, j: usize| {
                F::load8(
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

    use super::{Format, PANEL, Shape};
    use crate::Activation;
    use crate::cpu::activate;

    /// # Safety
    /// As [`super::dense`].
    pub(super) unsafe fn dense<F: Format>(
        x: &[f32],
        p: &[F::Bits],
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
                    for (sum, &wv) in sums.iter_mut().zip(w) {
                        *sum += xv * F::widen(wv);
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
            let layer = PackedLinear::new(HostWeights::F32(&w), &bias, k, n).unwrap();
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

    /// The same weights as f32, f16 and bf16 layers: the 16-bit ones hold values that f32
    /// holds exactly, so widening them in registers must give what the f32 layer gives, bit
    /// for bit.
    fn in_every_format(k: usize, n: usize, seed: u64) -> (Vec<f32>, Vec<f32>, [PackedLinear; 3]) {
        let bias = values(n, seed + 1);
        let raw = values(k * n, seed);
        let halves: Vec<f16> = raw.iter().map(|&v| f16::from_f32(v)).collect();
        let brains: Vec<bf16> = raw.iter().map(|&v| bf16::from_f32(v)).collect();
        let layers = [
            PackedLinear::new(HostWeights::F32(&raw), &bias, k, n).unwrap(),
            PackedLinear::new(HostWeights::F16(&halves), &bias, k, n).unwrap(),
            PackedLinear::new(HostWeights::BF16(&brains), &bias, k, n).unwrap(),
        ];
        (
            halves.iter().map(|v| v.to_f32()).collect(),
            brains.iter().map(|v| v.to_f32()).collect(),
            layers,
        )
    }

    #[test]
    fn sixteen_bit_weights_give_exactly_what_their_widened_values_give() {
        for (k, n) in [(13, 7), (64, 130), (257, 33)] {
            let (halves, brains, [_, f16_layer, bf16_layer]) = in_every_format(k, n, 7);
            let bias = values(n, 8);
            for (widened, layer) in [(halves, f16_layer), (brains, bf16_layer)] {
                let f32_layer = PackedLinear::new(HostWeights::F32(&widened), &bias, k, n).unwrap();
                for rows in [1, 2, 5, 8, 49] {
                    let x = values(rows * k, rows as u64);
                    let (mut got, mut want) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
                    layer
                        .forward(&x, rows, &mut got, Activation::Relu, 2)
                        .unwrap();
                    f32_layer
                        .forward(&x, rows, &mut want, Activation::Relu, 2)
                        .unwrap();
                    assert_eq!(
                        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "k={k} n={n} rows={rows}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_portable_kernel_matches_in_every_format() {
        let (k, n, rows) = (37, 21, 9);
        let (halves, brains, layers) = in_every_format(k, n, 3);
        let bias = values(n, 4);
        let x = values(rows * k, 5);
        let raw = values(k * n, 3);
        for (weights, layer) in [raw, halves, brains].iter().zip(&layers) {
            let mut y = vec![f32::NAN; rows * n];
            let shape = Shape { rows, k, n };
            // SAFETY: the buffers are those `forward` would pass, for all of the layer's panels.
            unsafe {
                let (out, bias) = (y.as_mut_ptr(), &layer.bias[..]);
                match &layer.panels {
                    Panels::F32(p) => {
                        portable::dense::<F32>(&x, p, bias, out, shape, 0..2, Activation::Relu)
                    }
                    Panels::F16(p) => {
                        portable::dense::<F16>(&x, p, bias, out, shape, 0..2, Activation::Relu)
                    }
                    Panels::BF16(p) => {
                        portable::dense::<BF16>(&x, p, bias, out, shape, 0..2, Activation::Relu)
                    }
                }
            };
            let want = reference(weights, &bias, &x, rows, k, Activation::Relu);
            for (a, b) in y.iter().zip(&want) {
                assert!(
                    (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn mismatched_buffers_are_an_error() {
        assert!(PackedLinear::new(HostWeights::F32(&[0.0; 5]), &[0.0; 2], 3, 2).is_err());
        let layer = PackedLinear::new(HostWeights::F32(&[0.0; 6]), &[0.0; 2], 3, 2).unwrap();
        let mut y = vec![0.0; 4];
        let err = layer
            .forward(&[0.0; 5], 2, &mut y, Activation::Relu, 1)
            .unwrap_err();
        assert!(err.to_string().contains("2 rows need 6 inputs"), "{err}");
    }
}
