//! The cores' f32 multiply-add peak: the denominator of a "% of peak" figure. Clocks drop
//! as more cores run and drift with the host's load, so a share of peak means something
//! only when its peak was measured on the same threads and at the same time as the figure
//! it divides; benchmarks call [`measure`] in turn with what they measure.

use std::time::Instant;

use super::clock::process_cpu_time;

/// What [`measure`] found.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    /// FLOPs per wall-clock second, all threads together.
    pub wall_gflops: f64,
    /// FLOPs per second of this process's CPU time: one core's rate while all ran.
    pub gflops_per_cpu_second: f64,
}

/// Runs `steps` rounds of sixteen independent chains of vector FMAs (more than the units'
/// latency × count, so the units never wait) on each of `threads` threads at once, with
/// the widest vectors this CPU has.
pub fn measure(threads: usize, steps: usize) -> Peak {
    let (start, cpu) = (Instant::now(), process_cpu_time());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| std::hint::black_box(fma_chains(steps)));
        }
    });
    let flops = (threads.max(1) * steps * flops_per_step()) as f64;
    Peak {
        wall_gflops: flops / start.elapsed().as_secs_f64() / 1e9,
        gflops_per_cpu_second: flops / (process_cpu_time() - cpu).as_secs_f64() / 1e9,
    }
}

/// The vector width [`measure`] uses, in f32 lanes.
pub fn lanes() -> usize {
    if has_avx512() { 16 } else { 8 }
}

/// FLOPs of one step: sixteen FMAs of the vector width, 2 FLOPs a lane.
fn flops_per_step() -> usize {
    16 * lanes() * 2
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512() -> bool {
    false
}

/// `steps` rounds of sixteen dependent-per-chain FMAs; returns a value that depends on all.
fn fma_chains(steps: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512() {
            // SAFETY: AVX-512F is present (checked).
            return unsafe { fma_avx512(steps) };
        }
        if super::vmath::has_avx2_fma() {
            // SAFETY: AVX2 and FMA are present (checked).
            return unsafe { fma_avx2(steps) };
        }
    }
    let mut acc = [1.0f32; 16];
    for _ in 0..steps {
        for a in &mut acc {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512(steps: usize) -> f32 {
    use std::arch::x86_64::*;
    let (m, a) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); 16];
    for _ in 0..steps {
        for v in &mut acc {
            *v = _mm512_fmadd_ps(*v, m, a);
        }
    }
    acc.iter().map(|v| _mm512_reduce_add_ps(*v)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2(steps: usize) -> f32 {
    use std::arch::x86_64::*;
    let (m, a) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); 16];
    let mut out = [0f32; 8];
    for _ in 0..steps {
        for v in &mut acc {
            *v = _mm256_fmadd_ps(*v, m, a);
        }
    }
    for v in &acc {
        let mut lanes = [0f32; 8];
        // SAFETY: eight f32 to an array of eight.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *v) };
        out.iter_mut().zip(lanes).for_each(|(o, l)| *o += l);
    }
    out.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_reports_a_positive_rate_per_thread_and_in_all() {
        let one = measure(1, 10_000);
        let two = measure(2, 10_000);
        for p in [one, two] {
            assert!(p.wall_gflops.is_finite() && p.wall_gflops > 0.0, "{p:?}");
            assert!(p.gflops_per_cpu_second.is_finite() && p.gflops_per_cpu_second > 0.0);
        }
    }
}
