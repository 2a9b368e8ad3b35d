//! What the CPU kernels' tests share: deterministic values and the float64 reference.

use crate::Activation;

/// `n` values in [-0.5, 0.5) from a fixed linear congruential sequence.
pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
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

/// `act(x · Wᵀ + b)` in float64, for `[n, k]` weights and `n` biases.
pub(crate) fn reference(
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
            y[b * n + o] = match act {
                Activation::Identity => s,
                Activation::Relu => s.max(0.0),
                // The exact GELU needs erf, which std lacks; GELU's tests compare the fused
                // kernel with Identity followed by `gelu_in_place` instead.
                Activation::Gelu => panic!("the f64 reference has no GELU"),
            };
        }
    }
    y
}

/// Panics with `context` and the first element that is further from the reference than
/// f32 arithmetic explains.
pub(crate) fn assert_close(got: &[f32], want: &[f64], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (*a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{context} at {i}: {a} vs {b}"
        );
    }
}
