//! The feed-forward activations, in place: GELU with the exact error function (BERT's
//! `gelu`), `x · Φ(x)`, through the fits in [`super::vmath`], accurate to f32 in both tails;
//! and SiLU (NomicBERT's gate), `x / (1 + e⁻ˣ)`, through the same `exp`, which is here on
//! its own too (a softmax's, outside the attention kernels).

use super::in_parallel;
use super::vmath;
#[cfg(target_arch = "x86_64")]
use super::vmath::{has_avx2_fma, has_avx512};

/// Values below which one thread does the whole pass.
const PARALLEL_MIN_VALUES: usize = 16 * 1024;
/// Work is handed out in runs of this many values (a multiple of 16 keeps the lanes whole).
const GRANULE: usize = 1024;

/// The activations served here, one dispatch for both.
#[derive(Clone, Copy)]
enum Act {
    Gelu,
    Silu,
    GeluTanh,
    Exp,
}

impl Act {
    fn one(self, x: f32) -> f32 {
        match self {
            Act::Gelu => vmath::gelu(x),
            Act::Silu => vmath::silu(x),
            Act::GeluTanh => vmath::gelu_tanh(x),
            Act::Exp => vmath::exp(x),
        }
    }
}

/// `x = gelu(x)` over every value, on up to `threads` threads of the current rayon pool.
pub fn gelu_in_place(x: &mut [f32], threads: usize) {
    in_place(x, threads, Act::Gelu);
}

/// `x = silu(x)` over every value, on up to `threads` threads of the current rayon pool.
pub fn silu_in_place(x: &mut [f32], threads: usize) {
    in_place(x, threads, Act::Silu);
}

/// `x = gelu(x)` by its tanh approximation (`gelu_pytorch_tanh`, Gemma's gate) over every
/// value, on up to `threads` threads of the current rayon pool.
pub fn gelu_tanh_in_place(x: &mut [f32], threads: usize) {
    in_place(x, threads, Act::GeluTanh);
}

/// `x = eˣ` over every value, on this thread (within 2 ulp; 0 below about -87.3).
pub fn exp_in_place(x: &mut [f32]) {
    activate(x, Act::Exp);
}

/// `act` over every value of `x`, in runs of [`GRANULE`] split over up to `threads`.
fn in_place(x: &mut [f32], threads: usize, act: Act) {
    let pieces = if x.len() < PARALLEL_MIN_VALUES {
        1
    } else {
        threads.max(1)
    };
    let len = x.len();
    let out = super::OutPtr(x.as_mut_ptr());
    in_parallel(len.div_ceil(GRANULE), 1, pieces, |granules| {
        let out = &out;
        let start = granules.start * GRANULE;
        let end = (granules.end * GRANULE).min(len);
        // SAFETY: start..end lies inside x, and the ranges in_parallel hands out are
        // disjoint, so no other thread touches these values.
        let part = unsafe { std::slice::from_raw_parts_mut(out.0.add(start), end - start) };
        activate(part, act);
    });
}

fn activate(x: &mut [f32], act: Act) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        let whole = x.len() / 16 * 16;
        // SAFETY: AVX-512 F is present (checked above); only the first `whole` values, a
        // multiple of 16, are touched.
        unsafe { avx512::activate(&mut x[..whole], act) };
        x[whole..].iter_mut().for_each(|v| *v = act.one(*v));
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        let whole = x.len() / 8 * 8;
        // SAFETY: AVX2 and FMA are present (checked above); only the first `whole` values,
        // a multiple of 8, are touched.
        unsafe { avx2::activate(&mut x[..whole], act) };
        x[whole..].iter_mut().for_each(|v| *v = act.one(*v));
        return;
    }
    x.iter_mut().for_each(|v| *v = act.one(*v));
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Act;
    use crate::cpu::vmath::avx2::{exp, gelu, gelu_tanh, silu};

    /// # Safety
    /// The CPU supports AVX2 and FMA; `x.len()` is a multiple of 8.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn activate(x: &mut [f32], act: Act) {
        let p = x.as_mut_ptr();
        for i in (0..x.len()).step_by(8) {
            // SAFETY: i + 8 <= x.len(); the features are enabled for this function.
            unsafe {
                let v = _mm256_loadu_ps(p.add(i));
                let y = match act {
                    Act::Gelu => gelu(v),
                    Act::Silu => silu(v),
                    Act::GeluTanh => gelu_tanh(v),
                    Act::Exp => exp(v),
                };
                _mm256_storeu_ps(p.add(i), y);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::Act;
    use crate::cpu::vmath::avx512::{exp, gelu, gelu_tanh, silu};

    /// # Safety
    /// The CPU supports AVX-512 F; `x.len()` is a multiple of 16.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn activate(x: &mut [f32], act: Act) {
        let p = x.as_mut_ptr();
        for i in (0..x.len()).step_by(16) {
            // SAFETY: i + 16 <= x.len(); the feature is enabled for this function.
            unsafe {
                let v = _mm512_loadu_ps(p.add(i));
                let y = match act {
                    Act::Gelu => gelu(v),
                    Act::Silu => silu(v),
                    Act::GeluTanh => gelu_tanh(v),
                    Act::Exp => exp(v),
                };
                _mm512_storeu_ps(p.add(i), y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// torch's formula, `0.5·x·(1 + tanh(z))`, in f64, within f32's rounding; and the
    /// softmax's `exp` within 2 ulp, 0 far below.
    #[test]
    fn gelu_tanh_and_exp_match_their_formulas_in_every_lane() {
        let x0: Vec<f32> = (0..4099).map(|i| (i as f32 * 0.37).sin() * 12.0).collect();
        let mut x = x0.clone();
        gelu_tanh_in_place(&mut x, 1);
        for (g, v) in x.iter().zip(&x0) {
            let v = *v as f64;
            let z = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3));
            let want = 0.5 * v * (1.0 + z.tanh());
            assert!(
                (*g as f64 - want).abs() <= 2e-6 * want.abs().max(1e-3),
                "{v}: {g} {want}"
            );
        }
        let mut e: Vec<f32> = (0..100).map(|i| i as f32 * 0.5 - 60.0).collect();
        let e0 = e.clone();
        exp_in_place(&mut e);
        for (got, v) in e.iter().zip(&e0) {
            let want = (*v as f64).exp();
            assert!(
                (*got as f64 - want).abs() <= 3e-7 * want,
                "exp({v}) = {got}, want {want}"
            );
        }
        let mut ends = [-1e4_f32, -100.0, 0.0, 100.0, 1e4].repeat(4);
        gelu_tanh_in_place(&mut ends, 1);
        assert!(ends.iter().all(|v| v.is_finite()), "{ends:?}");
    }

    #[test]
    fn silu_is_x_times_its_sigmoid_and_finite_everywhere() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for len in [0, 7, 40_000] {
            let x0: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 30.0).collect();
            let mut x = x0.clone();
            pool.install(|| silu_in_place(&mut x, 2));
            for (s, v) in x.iter().zip(&x0) {
                let want = (*v as f64) / (1.0 + (-*v as f64).exp());
                assert!(
                    (*s as f64 - want).abs() <= 1e-6 * want.abs().max(1e-6),
                    "silu({v}) = {s}, want {want}"
                );
            }
        }
        // Four times over, so that the vector lanes see them as well as the scalar tail.
        let mut ends = [-1e4_f32, -100.0, 0.0, 100.0, 1e4].repeat(4);
        silu_in_place(&mut ends, 1);
        assert!(ends.iter().all(|v| v.is_finite()), "{ends:?}");
        for five in ends.chunks(5) {
            assert_eq!((five[2], five[3], five[4]), (0.0, 100.0, 1e4), "{ends:?}");
        }
    }

    #[test]
    fn every_value_is_transformed_once_on_any_split() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for len in [0, 5, 8, 1023, 40_000] {
            let x0: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 6.0).collect();
            let mut x = x0.clone();
            pool.install(|| gelu_in_place(&mut x, 2));
            for (g, v) in x.iter().zip(&x0) {
                let want = vmath::gelu(*v);
                assert!(
                    (g - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1e-30),
                    "gelu({v}) = {g}, want {want}"
                );
            }
        }
    }
}
