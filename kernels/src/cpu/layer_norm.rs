//! Layer normalisation over the rows of a matrix, with the residual added first: a
//! transformer layer's `x = LayerNorm(x + f(x))` in one pass over each row while it is in
//! L1. Statistics in f32 with eight independent partial sums per row (two passes: the mean,
//! then the variance around it, which does not cancel the way E[x²] − E[x]² does).

use super::in_parallel;
#[cfg(target_arch = "x86_64")]
use super::vmath::has_avx2_fma;
use crate::KernelError;

/// A layer norm's parameters: `y = (x − mean) / sqrt(var + eps) · gamma + beta`.
#[derive(Clone, Copy, Debug)]
pub struct NormParams<'a> {
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub eps: f32,
}

/// Rows below this many values per thread are not worth waking another thread for.
const PARALLEL_MIN_VALUES: usize = 32 * 1024;

/// `x[r] = LayerNorm(x[r] + add[r])` (or of `x[r]` alone without `add`) for every row of
/// width `gamma.len()`, on up to `threads` threads of the current rayon pool.
pub fn add_layer_norm(
    x: &mut [f32],
    add: Option<&[f32]>,
    norm: NormParams<'_>,
    threads: usize,
) -> Result<(), KernelError> {
    let width = norm.gamma.len();
    let shape_error = |detail: String| KernelError::Shape {
        op: "cpu::add_layer_norm",
        detail,
    };
    if width == 0 || norm.beta.len() != width || !x.len().is_multiple_of(width) {
        return Err(shape_error(format!(
            "{} values in rows of gamma {} / beta {}",
            x.len(),
            width,
            norm.beta.len()
        )));
    }
    if let Some(add) = add
        && add.len() != x.len()
    {
        return Err(shape_error(format!(
            "x has {} values, the residual {}",
            x.len(),
            add.len()
        )));
    }
    let rows = x.len() / width;
    let pieces = if x.len() < PARALLEL_MIN_VALUES {
        1
    } else {
        threads.max(1)
    };
    let out = super::OutPtr(x.as_mut_ptr());
    in_parallel(rows, 1, pieces, |range| {
        let out = &out;
        for r in range {
            // SAFETY: row r lies inside x (rows * width values); the ranges handed out by
            // in_parallel are disjoint, so no other thread touches this row.
            let row = unsafe { std::slice::from_raw_parts_mut(out.0.add(r * width), width) };
            let add_row = add.map(|a| &a[r * width..(r + 1) * width]);
            normalize_row(row, add_row, norm);
        }
    });
    Ok(())
}

fn normalize_row(row: &mut [f32], add: Option<&[f32]>, norm: NormParams<'_>) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() && row.len().is_multiple_of(8) {
        // SAFETY: the CPU supports AVX2 and FMA (checked above); all slices have the row's
        // length, a multiple of 8 (checked by the caller and above).
        unsafe { avx2::normalize_row(row, add, norm) };
        return;
    }
    portable_normalize_row(row, add, norm)
}

fn portable_normalize_row(row: &mut [f32], add: Option<&[f32]>, norm: NormParams<'_>) {
    if let Some(add) = add {
        for (v, a) in row.iter_mut().zip(add) {
            *v += a;
        }
    }
    let n = row.len() as f32;
    let mean = lanes_sum(row.iter().copied()) / n;
    let var = lanes_sum(row.iter().map(|v| (v - mean) * (v - mean))) / n;
    let inv = 1.0 / (var + norm.eps).sqrt();
    for ((v, g), b) in row.iter_mut().zip(norm.gamma).zip(norm.beta) {
        *v = (*v - mean) * inv * g + b;
    }
}

/// A sum in eight interleaved partial sums, as the AVX2 path adds.
fn lanes_sum(values: impl Iterator<Item = f32>) -> f32 {
    let mut lanes = [0f32; 8];
    for (i, v) in values.enumerate() {
        lanes[i % 8] += v;
    }
    lanes.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::NormParams;
    use crate::cpu::vmath::avx2::hsum;

    /// # Safety
    /// The CPU supports AVX2 and FMA; `row`, `add`, gamma and beta have the same length, a
    /// multiple of 8.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn normalize_row(row: &mut [f32], add: Option<&[f32]>, norm: NormParams<'_>) {
        let n = row.len();
        let p = row.as_mut_ptr();
        // SAFETY (whole block): every offset i stays below n, the length of every slice.
        unsafe {
            let mut sum = _mm256_setzero_ps();
            for i in (0..n).step_by(8) {
                let mut v = _mm256_loadu_ps(p.add(i));
                if let Some(a) = add {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(a.as_ptr().add(i)));
                    _mm256_storeu_ps(p.add(i), v);
                }
                sum = _mm256_add_ps(sum, v);
            }
            let mean = _mm256_set1_ps(hsum(sum) / n as f32);
            let mut sq = _mm256_setzero_ps();
            for i in (0..n).step_by(8) {
                let d = _mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mean);
                sq = _mm256_fmadd_ps(d, d, sq);
            }
            let var = hsum(sq) / n as f32;
            let inv = _mm256_set1_ps(1.0 / (var + norm.eps).sqrt());
            for i in (0..n).step_by(8) {
                let d = _mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mean);
                let g = _mm256_loadu_ps(norm.gamma.as_ptr().add(i));
                let b = _mm256_loadu_ps(norm.beta.as_ptr().add(i));
                _mm256_storeu_ps(p.add(i), _mm256_fmadd_ps(_mm256_mul_ps(d, inv), g, b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::values;
    use super::*;

    fn reference(x: &[f32], add: &[f32], gamma: &[f32], beta: &[f32], eps: f64) -> Vec<f64> {
        let w = gamma.len();
        let mut out = Vec::with_capacity(x.len());
        for (xr, ar) in x.chunks(w).zip(add.chunks(w)) {
            let v: Vec<f64> = xr
                .iter()
                .zip(ar)
                .map(|(a, b)| *a as f64 + *b as f64)
                .collect();
            let mean = v.iter().sum::<f64>() / w as f64;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / w as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for (i, a) in v.iter().enumerate() {
                out.push((a - mean) * inv * gamma[i] as f64 + beta[i] as f64);
            }
        }
        out
    }

    #[test]
    fn matches_float64_with_and_without_a_residual_on_both_paths() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (width, rows) in [(384, 3), (384, 200), (32, 5), (13, 4), (1536, 2)] {
            let gamma: Vec<f32> = values(width, 1).iter().map(|v| 1.0 + v).collect();
            let beta = values(width, 2);
            let x0: Vec<f32> = values(width * rows, 3)
                .iter()
                .map(|v| 3.0 + 4.0 * v)
                .collect();
            let add = values(width * rows, 4);
            let norm = NormParams {
                gamma: &gamma,
                beta: &beta,
                eps: 1e-12,
            };
            let want = reference(&x0, &add, &gamma, &beta, 1e-12);
            let mut x = x0.clone();
            pool.install(|| add_layer_norm(&mut x, Some(&add), norm, 2))
                .unwrap();
            let mut portable = x0.clone();
            for (row, a) in portable.chunks_mut(width).zip(add.chunks(width)) {
                portable_normalize_row(row, Some(a), norm);
            }
            for (got, name) in [(&x, "dispatched"), (&portable, "portable")] {
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 2e-6 * (1.0 + w.abs()),
                        "{name} width {width} at {i}: {g} vs {w}"
                    );
                }
            }
            let zeros = vec![0.0; add.len()];
            let mut plain = x0.clone();
            add_layer_norm(&mut plain, None, norm, 1).unwrap();
            let want = reference(&x0, &zeros, &gamma, &beta, 1e-12);
            for (g, w) in plain.iter().zip(&want) {
                assert!((*g as f64 - w).abs() < 2e-6 * (1.0 + w.abs()));
            }
        }
    }

    #[test]
    fn shapes_that_disagree_are_errors() {
        let g = [1.0; 4];
        let norm = NormParams {
            gamma: &g,
            beta: &g,
            eps: 1e-5,
        };
        assert!(add_layer_norm(&mut [0.0; 6], None, norm, 1).is_err());
        assert!(add_layer_norm(&mut [0.0; 8], Some(&[0.0; 4]), norm, 1).is_err());
    }
}
