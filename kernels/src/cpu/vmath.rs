//! The exponential and the normal distribution's CDF, eight lanes at a time on AVX2 + FMA
//! and one at a time elsewhere, with the same formulas on both paths so that the results
//! agree to rounding.
//!
//! - `exp`: Cephes' `expf` — range reduction by ln 2 in two parts and a degree-5
//!   polynomial, within 2 ulp over the range softmax and GELU use.
//! - `phi` (Φ, for GELU with the exact error function): Numerical Recipes' Chebyshev
//!   fit of erfc, whose relative error is below 1.2e-7 everywhere, so Φ keeps f32
//!   precision even far into the lower tail, where 1 + erf would cancel.
//!
//! Both polynomials are evaluated by Estrin's scheme (pairs, then powers t², t⁴, t⁸)
//! rather than Horner's: a chain of 16 cycles instead of 36 for erfc, which matters because
//! a GELU over a layer's activations is one long dependency chain per vector, and the
//! out-of-order window holds only a few of them (`cargo test --release -p kernels --lib
//! gelu_one_core -- --ignored --nocapture`).

/// ln 2 in two parts: the first has few bits, so `n * LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// Past these, expf overflows or is subnormal. Inputs above the first are clamped to it;
/// below the second the result is 0, not a subnormal: a subnormal costs some hundred
/// cycles in every product it enters (a masked attention score's weight times the values,
/// say), and nothing that small changes a sum of f32 values.
const EXP_MAX: f32 = 88.3;
const EXP_MIN: f32 = -87.3;
const EXP_POLY: [f32; 6] = [
    1.987_569_2e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

/// Numerical Recipes' `erfcc`: erfc(a) = t · exp(-a² + P(t)) with t = 1 / (1 + a/2).
const ERFC_POLY: [f32; 10] = [
    0.170_872_77,
    -0.822_152_23,
    1.488_515_9,
    -1.135_204,
    0.278_868_07,
    -0.186_288_06,
    0.096_784_18,
    0.374_091_96,
    1.000_023_7,
    -1.265_512_2,
];

/// e^x for one value, as [`avx2::exp`] computes it per lane.
#[inline]
pub(crate) fn exp(x: f32) -> f32 {
    if x < EXP_MIN {
        return 0.0;
    }
    let x = x.min(EXP_MAX);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let r2 = r * r;
    let e = &EXP_POLY;
    // e[5 - i] is the coefficient of rⁱ.
    let q0 = e[4].mul_add(r, e[5]);
    let q1 = e[2].mul_add(r, e[3]);
    let q2 = e[0].mul_add(r, e[1]);
    let p = q2.mul_add(r2, q1).mul_add(r2, q0);
    let y = p.mul_add(r2, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Φ(x), the standard normal CDF, for one value, as [`avx2::phi`] computes it per lane.
#[inline]
pub(crate) fn phi(x: f32) -> f32 {
    let a = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (0.5f32).mul_add(a, 1.0);
    let c = &ERFC_POLY;
    // c[9 - i] is the coefficient of tⁱ.
    let (t2, q4) = (t * t, c[0].mul_add(t, c[1]));
    let (t4, q3) = (t2 * t2, c[2].mul_add(t, c[3]));
    let (q2, q1, q0) = (
        c[4].mul_add(t, c[5]),
        c[6].mul_add(t, c[7]),
        c[8].mul_add(t, c[9]),
    );
    let r0 = q1.mul_add(t2, q0);
    let r1 = q3.mul_add(t2, q2);
    let p = q4.mul_add(t4 * t4, r1.mul_add(t4, r0));
    // erfc(|x| / √2) / 2: Φ of -|x|.
    let lower = 0.5 * t * exp((-a).mul_add(a, p));
    if x >= 0.0 { 1.0 - lower } else { lower }
}

/// GELU with the exact error function: x · Φ(x).
#[inline]
pub(crate) fn gelu(x: f32) -> f32 {
    x * phi(x)
}

/// SiLU: x / (1 + e⁻ˣ). `exp` saturates at both ends, so a large `-x` gives a tiny
/// quotient, never a NaN.
#[inline]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// −2·√(2/π): GELU's tanh approximation `0.5·x·(1 + tanh(z))` is `x / (1 + e^(−2z))` with
/// `z = √(2/π)·(x + 0.044715·x³)`.
const GELU_TANH_SCALE: f32 = -1.595_769;
const GELU_TANH_CUBIC: f32 = 0.044_715;

/// GELU by its tanh approximation (torch's `gelu(x, approximate="tanh")`), as
/// `x / (1 + e^(−2z))`; `exp` saturates at both ends, so it is finite everywhere.
#[inline]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    let inner = (x * x * x).mul_add(GELU_TANH_CUBIC, x);
    x / (1.0 + exp(inner * GELU_TANH_SCALE))
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{ERFC_POLY, EXP_MAX, EXP_MIN, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
    use super::{GELU_TANH_CUBIC, GELU_TANH_SCALE};

    /// [`super::gelu_tanh`] per lane.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn gelu_tanh(x: __m256) -> __m256 {
        let cube = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        let inner = _mm256_fmadd_ps(cube, _mm256_set1_ps(GELU_TANH_CUBIC), x);
        // SAFETY: AVX2 and FMA are enabled for this function.
        let e = unsafe { exp(_mm256_mul_ps(inner, _mm256_set1_ps(GELU_TANH_SCALE))) };
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// e^x per lane.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp(x: __m256) -> __m256 {
        let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_MIN));
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_MIN)),
            _mm256_set1_ps(EXP_MAX),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let r2 = _mm256_mul_ps(r, r);
        let c = |i: usize| _mm256_set1_ps(EXP_POLY[i]);
        let q0 = _mm256_fmadd_ps(c(4), r, c(5));
        let q1 = _mm256_fmadd_ps(c(2), r, c(3));
        let q2 = _mm256_fmadd_ps(c(0), r, c(1));
        let p = _mm256_fmadd_ps(_mm256_fmadd_ps(q2, r2, q1), r2, q0);
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(bits)))
    }

    /// Φ(x) per lane.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn phi(x: __m256) -> __m256 {
        let sign = _mm256_set1_ps(-0.0);
        let a = _mm256_mul_ps(
            _mm256_andnot_ps(sign, x),
            _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2),
        );
        let one = _mm256_set1_ps(1.0);
        let half = _mm256_set1_ps(0.5);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(half, a, one));
        let c = |i: usize| _mm256_set1_ps(ERFC_POLY[i]);
        let (t2, q4) = (_mm256_mul_ps(t, t), _mm256_fmadd_ps(c(0), t, c(1)));
        let (t4, q3) = (_mm256_mul_ps(t2, t2), _mm256_fmadd_ps(c(2), t, c(3)));
        let q2 = _mm256_fmadd_ps(c(4), t, c(5));
        let q1 = _mm256_fmadd_ps(c(6), t, c(7));
        let q0 = _mm256_fmadd_ps(c(8), t, c(9));
        let r0 = _mm256_fmadd_ps(q1, t2, q0);
        let r1 = _mm256_fmadd_ps(q3, t2, q2);
        let p = _mm256_fmadd_ps(q4, _mm256_mul_ps(t4, t4), _mm256_fmadd_ps(r1, t4, r0));
        // SAFETY: AVX2 and FMA are enabled for this function.
        let e = unsafe { exp(_mm256_fnmadd_ps(a, a, p)) };
        let lower = _mm256_mul_ps(_mm256_mul_ps(half, t), e);
        let upper = _mm256_sub_ps(one, lower);
        let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
        _mm256_blendv_ps(upper, lower, negative)
    }

    /// x · Φ(x) per lane.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn gelu(x: __m256) -> __m256 {
        // SAFETY: AVX2 and FMA are enabled for this function.
        _mm256_mul_ps(x, unsafe { phi(x) })
    }

    /// x / (1 + e⁻ˣ) per lane, as [`super::silu`] computes it.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn silu(x: __m256) -> __m256 {
        // SAFETY: AVX2 and FMA are enabled for this function.
        let e = unsafe { exp(_mm256_sub_ps(_mm256_setzero_ps(), x)) };
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e))
    }

    /// The sum of the eight lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }

    /// The largest of the eight lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn hmax(v: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_max_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{ERFC_POLY, EXP_MAX, EXP_MIN, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
    use super::{GELU_TANH_CUBIC, GELU_TANH_SCALE};

    /// [`super::gelu_tanh`] per lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn gelu_tanh(x: __m512) -> __m512 {
        let cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        let inner = _mm512_fmadd_ps(cube, _mm512_set1_ps(GELU_TANH_CUBIC), x);
        // SAFETY: AVX-512 F is enabled for this function.
        let e = unsafe { exp(_mm512_mul_ps(inner, _mm512_set1_ps(GELU_TANH_SCALE))) };
        _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
    }

    /// e^x per lane, as [`super::avx2::exp`] computes it.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn exp(x: __m512) -> __m512 {
        let kept = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(EXP_MIN));
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(EXP_MIN)),
            _mm512_set1_ps(EXP_MAX),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let r2 = _mm512_mul_ps(r, r);
        let c = |i: usize| _mm512_set1_ps(EXP_POLY[i]);
        let q0 = _mm512_fmadd_ps(c(4), r, c(5));
        let q1 = _mm512_fmadd_ps(c(2), r, c(3));
        let q2 = _mm512_fmadd_ps(c(0), r, c(1));
        let p = _mm512_fmadd_ps(_mm512_fmadd_ps(q2, r2, q1), r2, q0);
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        _mm512_maskz_mul_ps(kept, y, _mm512_castsi512_ps(bits))
    }

    /// Φ(x) per lane, as [`super::avx2::phi`] computes it.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn phi(x: __m512) -> __m512 {
        let a = _mm512_mul_ps(
            _mm512_abs_ps(x),
            _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2),
        );
        let one = _mm512_set1_ps(1.0);
        let half = _mm512_set1_ps(0.5);
        let t = _mm512_div_ps(one, _mm512_fmadd_ps(half, a, one));
        let c = |i: usize| _mm512_set1_ps(ERFC_POLY[i]);
        let (t2, q4) = (_mm512_mul_ps(t, t), _mm512_fmadd_ps(c(0), t, c(1)));
        let (t4, q3) = (_mm512_mul_ps(t2, t2), _mm512_fmadd_ps(c(2), t, c(3)));
        let q2 = _mm512_fmadd_ps(c(4), t, c(5));
        let q1 = _mm512_fmadd_ps(c(6), t, c(7));
        let q0 = _mm512_fmadd_ps(c(8), t, c(9));
        let r0 = _mm512_fmadd_ps(q1, t2, q0);
        let r1 = _mm512_fmadd_ps(q3, t2, q2);
        let p = _mm512_fmadd_ps(q4, _mm512_mul_ps(t4, t4), _mm512_fmadd_ps(r1, t4, r0));
        // SAFETY: AVX-512 F is enabled for this function.
        let e = unsafe { exp(_mm512_fnmadd_ps(a, a, p)) };
        let lower = _mm512_mul_ps(_mm512_mul_ps(half, t), e);
        let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        _mm512_mask_blend_ps(negative, _mm512_sub_ps(one, lower), lower)
    }

    /// x · Φ(x) per lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn gelu(x: __m512) -> __m512 {
        // SAFETY: AVX-512 F is enabled for this function.
        _mm512_mul_ps(x, unsafe { phi(x) })
    }

    /// x / (1 + e⁻ˣ) per lane, as [`super::silu`] computes it.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn silu(x: __m512) -> __m512 {
        // SAFETY: AVX-512 F is enabled for this function.
        let e = unsafe { exp(_mm512_sub_ps(_mm512_setzero_ps(), x)) };
        _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e))
    }
}

/// Whether the AVX-512 paths may run here.
#[inline]
pub(crate) fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX2 paths may run here.
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Φ in float64 from the complementary error function's continued fraction and series
    /// (independent of the fit under test).
    fn phi_f64(x: f64) -> f64 {
        0.5 * erfc_f64(-x / std::f64::consts::SQRT_2)
    }

    fn erfc_f64(z: f64) -> f64 {
        if z < 0.0 {
            return 2.0 - erfc_f64(-z);
        }
        if z < 2.5 {
            // erf by its Taylor series, fine to 1e-16 below 2.5.
            let mut sum = 0.0f64;
            let mut term = z;
            let mut n = 0;
            while term.abs() > 1e-18 * sum.abs().max(1e-300) || n < 3 {
                sum += term / (2 * n + 1) as f64;
                n += 1;
                term *= -z * z / n as f64;
                if n > 200 {
                    break;
                }
            }
            return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum;
        }
        // Lentz's continued fraction for erfc.
        let mut f = z;
        let (mut c, mut d) = (z, 0.0);
        for n in 1..300 {
            let a = n as f64 / 2.0;
            d = z + a * d;
            c = z + a / c;
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (-z * z).exp() / (f * std::f64::consts::PI.sqrt())
    }

    fn grid() -> impl Iterator<Item = f32> {
        (-4000..=4000).map(|i| i as f32 * 0.0025)
    }

    #[test]
    fn exp_is_within_two_ulp() {
        for x in (-8700..=8800).map(|i| i as f32 * 0.01) {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            assert!(
                ((got - want) / want).abs() < 2.5e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    /// Past the range, 0 rather than a subnormal (or a clamped 1.2e-38), on both paths:
    /// a masked attention score (−∞) weighs exactly nothing.
    #[test]
    fn exp_underflows_to_zero_not_to_a_subnormal() {
        let below = [
            -87.4,
            -100.0,
            -1e30,
            f32::MIN,
            f32::NEG_INFINITY,
            -87.4,
            -88.0,
            -90.0,
        ];
        assert!(below.iter().all(|x| exp(*x) == 0.0), "{below:?}");
        assert!(exp(-87.2).is_normal());
        #[cfg(target_arch = "x86_64")]
        if has_avx2_fma() {
            use std::arch::x86_64::*;
            let mut e = [1f32; 8];
            // SAFETY: AVX2 and FMA are present (checked above); the arrays hold 8 lanes.
            unsafe {
                let v = _mm256_loadu_ps(below.as_ptr());
                _mm256_storeu_ps(e.as_mut_ptr(), avx2::exp(v));
            }
            assert_eq!(e, [0.0; 8]);
        }
    }

    #[test]
    fn phi_keeps_relative_precision_in_both_tails() {
        for x in grid() {
            let want = phi_f64(x as f64);
            let got = phi(x) as f64;
            // In the lower tail the rounding of a² = x²/2 (for e^-a²) passes into the value
            // in proportion to a².
            let tolerance = 3e-7 * (1.0 + x as f64 * x as f64 / 2.0);
            assert!(
                ((got - want) / want).abs() < tolerance,
                "phi({x}) = {got}, want {want}"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_lanes_agree_with_the_scalar_formulas() {
        use std::arch::x86_64::*;
        if !has_avx2_fma() {
            crate::cuda::report_skip("avx2_lanes_agree_with_the_scalar_formulas", "no AVX2");
            return;
        }
        let xs: Vec<f32> = grid().collect();
        for chunk in xs.chunks_exact(8) {
            let mut e = [0f32; 8];
            let mut g = [0f32; 8];
            // SAFETY: AVX2 and FMA are present (checked above); the arrays hold 8 lanes.
            unsafe {
                let v = _mm256_loadu_ps(chunk.as_ptr());
                _mm256_storeu_ps(e.as_mut_ptr(), avx2::exp(v));
                _mm256_storeu_ps(g.as_mut_ptr(), avx2::gelu(v));
            }
            for (i, &x) in chunk.iter().enumerate() {
                let (se, sg) = (exp(x), gelu(x));
                assert!(
                    (e[i] - se).abs() <= 2.0 * f32::EPSILON * se.abs(),
                    "exp({x})"
                );
                assert!(
                    (g[i] - sg).abs() <= 4.0 * f32::EPSILON * sg.abs().max(1e-30),
                    "gelu({x}): {} vs {sg}",
                    g[i]
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_lanes_agree_with_the_scalar_formulas() {
        use std::arch::x86_64::*;
        if !has_avx512() {
            crate::cuda::report_skip("avx512_lanes_agree_with_the_scalar_formulas", "no AVX-512");
            return;
        }
        // The grid, and past both ends of the range (clamped above, 0 below).
        let xs: Vec<f32> = grid()
            .chain([-200.0, -87.31, -87.29, 88.2, 89.0, 200.0])
            .collect();
        for chunk in xs.chunks(16) {
            let mut lanes = [0f32; 16];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let (mut e, mut g) = ([0f32; 16], [0f32; 16]);
            // SAFETY: AVX-512 F is present (checked above); the arrays hold 16 lanes.
            unsafe {
                let v = _mm512_loadu_ps(lanes.as_ptr());
                _mm512_storeu_ps(e.as_mut_ptr(), avx512::exp(v));
                _mm512_storeu_ps(g.as_mut_ptr(), avx512::gelu(v));
            }
            for ((x, got), gelu_got) in lanes.iter().zip(e).zip(g) {
                assert_eq!(got, exp(*x), "exp({x})");
                let want = gelu(*x);
                assert!(
                    (gelu_got - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1e-30),
                    "gelu({x}): {gelu_got} vs {want}"
                );
            }
        }
    }
}
