//! Our own kernel for dense layers at small batch sizes (a few rows).
//!
//! The `gemm` crate packs its right-hand side on every call, which costs as much as the
//! product itself when only a few rows come in: at 8 rows of 1024×1024 it runs at a third
//! of the machine's speed. Here the weights stay in PyTorch's `[out, in]` layout, so every
//! output is a dot product of a weight row with an input row; a 4×3 register tile (twelve
//! 8-lane accumulators) reuses each weight load for three rows and each input load for four
//! outputs, and the weights are streamed from memory once per call. It stays ahead of `gemm`
//! up to a few hundred rows (benches/gemm.rs).

use crate::Activation;

/// Computes `y[b, o] = act(bias[o] + sum_k x[b, k] * w[o, k])` for `o` in `outs` and every row
/// `b < rows`.
///
/// # Safety
/// `x` holds `rows * k` values, `w` holds at least `outs.end * k`, `bias` at least `outs.end`,
/// and `y` points to `rows * n` writable values with `outs.end <= n`. No other thread may
/// write the columns `outs` of `y` while this runs.
pub(crate) unsafe fn dense_rows(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    y: *mut f32,
    shape: Shape,
    outs: std::ops::Range<usize>,
    act: Activation,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); the caller upholds the
            // buffer contract, which is the same for both implementations.
            unsafe { avx2::dense_rows(x, w, bias, y, shape, outs, act) };
            return;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { portable::dense_rows(x, w, bias, y, shape, outs, act) }
}

/// The layer's dimensions: `rows` inputs of `k` features, `n` outputs per row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

#[inline(always)]
fn finish(sum: f32, bias: f32, act: Activation) -> f32 {
    super::activate(sum + bias, act)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Shape, finish};
    use crate::Activation;
    use std::arch::x86_64::*;

    /// # Safety
    /// As [`super::dense_rows`], and the CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dense_rows(
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        outs: std::ops::Range<usize>,
        act: Activation,
    ) {
        let mut o = outs.start;
        while o + 4 <= outs.end {
            let mut b = 0;
            while b + 3 <= s.rows {
                // SAFETY: o + 4 <= outs.end and b + 3 <= rows keep every access in bounds.
                unsafe { tile::<4, 3>(x, w, bias, y, s, o, b, act) };
                b += 3;
            }
            if b + 2 <= s.rows {
                // SAFETY: as above, for two rows.
                unsafe { tile::<4, 2>(x, w, bias, y, s, o, b, act) };
                b += 2;
            }
            if b < s.rows {
                // SAFETY: as above, for the one remaining row.
                unsafe { tile::<4, 1>(x, w, bias, y, s, o, b, act) };
            }
            o += 4;
        }
        while o < outs.end {
            for b in 0..s.rows {
                // SAFETY: o < outs.end and b < rows.
                unsafe { tile::<1, 1>(x, w, bias, y, s, o, b, act) };
            }
            o += 1;
        }
    }

    /// One register tile: outputs `o..o+NO` for rows `b..b+NB`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const NO: usize, const NB: usize>(
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        o: usize,
        b: usize,
        act: Activation,
    ) {
        let k = s.k;
        let k8 = k / 8 * 8;
        let xp = x.as_ptr();
        let wp = w.as_ptr();
        // SAFETY (whole block): every pointer offset stays below (b + NB) * k for x and
        // (o + NO) * k for w, which the caller guarantees are in bounds; y offsets stay below
        // (b + NB) * n.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); NB]; NO];
            let mut kk = 0;
            while kk < k8 {
                let mut xv = [_mm256_setzero_ps(); NB];
                for (j, v) in xv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(xp.add((b + j) * k + kk));
                }
                for (i, row) in acc.iter_mut().enumerate() {
                    let wv = _mm256_loadu_ps(wp.add((o + i) * k + kk));
                    for (a, xj) in row.iter_mut().zip(xv.iter()) {
                        *a = _mm256_fmadd_ps(wv, *xj, *a);
                    }
                }
                kk += 8;
            }
            for (i, row) in acc.iter().enumerate() {
                for (j, a) in row.iter().enumerate() {
                    let mut sum = hsum(*a);
                    for t in k8..k {
                        sum += *xp.add((b + j) * k + t) * *wp.add((o + i) * k + t);
                    }
                    *y.add((b + j) * s.n + o + i) = finish(sum, bias[o + i], act);
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        // SAFETY: plain register arithmetic; AVX is enabled by the enclosing function.
        unsafe {
            let lo = _mm256_castps256_ps128(v);
            let hi = _mm256_extractf128_ps(v, 1);
            let s = _mm_add_ps(lo, hi);
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            _mm_cvtss_f32(s)
        }
    }
}

mod portable {
    use super::{Shape, finish};
    use crate::Activation;

    /// # Safety
    /// As [`super::dense_rows`].
    pub(super) unsafe fn dense_rows(
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        outs: std::ops::Range<usize>,
        act: Activation,
    ) {
        for b in 0..s.rows {
            let xr = &x[b * s.k..(b + 1) * s.k];
            for o in outs.clone() {
                let wr = &w[o * s.k..(o + 1) * s.k];
                // Eight independent lanes so the compiler can vectorise without reordering
                // a single chain of float additions.
                let mut lanes = [0f32; 8];
                let (xc, xt) = xr.split_at(s.k / 8 * 8);
                let (wc, wt) = wr.split_at(s.k / 8 * 8);
                for (xs, ws) in xc.chunks_exact(8).zip(wc.chunks_exact(8)) {
                    for l in 0..8 {
                        lanes[l] += xs[l] * ws[l];
                    }
                }
                let mut sum: f32 = lanes.iter().sum();
                for (a, c) in xt.iter().zip(wt) {
                    sum += a * c;
                }
                // SAFETY: b < rows and o < outs.end <= n, per the caller's contract.
                unsafe { *y.add(b * s.n + o) = finish(sum, bias[o], act) };
            }
        }
    }
}

/// Not a test: the measurement behind `AlignedVec` (the weights' alignment cannot be chosen
/// through the public API any more, so it lives here). Run by hand:
/// `cargo test --release -p kernels --lib alignment_cost -- --ignored --nocapture`.
#[cfg(test)]
mod alignment_cost {
    use super::{Shape, dense_rows};
    use crate::Activation;
    use crate::cpu::AlignedVec;

    #[test]
    #[ignore = "a measurement, run by hand"]
    fn alignment_cost() {
        let (k, n, rows) = (1024usize, 1024usize, 16usize);
        // Buffers on a cache line, read from `offset` bytes into them.
        let values = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7919) % 1000) as f32 * 1e-3)
                .collect()
        };
        let x = AlignedVec::from_slice(&values(rows * k + 16));
        let w = AlignedVec::from_slice(&values(n * k + 16));
        let bias = vec![0.0; n];
        let mut y = vec![0.0; rows * n];
        for round in 1..=3 {
            for (x_off, w_off) in [(0, 0), (16, 0), (0, 16), (16, 16)] {
                let (xs, ws) = (&x[x_off / 4..][..rows * k], &w[w_off / 4..][..n * k]);
                let calls = 300;
                let started = std::time::Instant::now();
                for _ in 0..calls {
                    // SAFETY: x holds rows * k values, w n * k, bias n, y rows * n.
                    unsafe {
                        dense_rows(
                            xs,
                            ws,
                            &bias,
                            y.as_mut_ptr(),
                            Shape { rows, k, n },
                            0..n,
                            Activation::Relu,
                        )
                    };
                }
                let per_call = started.elapsed().as_secs_f64() / calls as f64;
                println!(
                    "round {round}: input {x_off:>2} bytes off a line, weights {w_off:>2}: {:.1} GFLOP/s",
                    2.0 * (rows * k * n) as f64 / per_call / 1e9
                );
            }
        }
    }
}
