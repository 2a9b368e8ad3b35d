//! bf16x3's products against float64 references: f32's tolerance, far closer than bf16's,
//! the path each batch size takes, and the split of the input rows.

use half::{bf16, f16};

use super::super::tests::products_here;
use super::super::{MatmulPrecision, PackedLinear};
use super::{split, split_rows, width};
use crate::cpu::test_support::{assert_close, reference, values};
use crate::{Activation, HostWeights};

/// Whether this CPU runs bf16x3 products (AMX); says SKIPPED where it does not.
fn bf16x3_products_here(test: &str) -> bool {
    products_here(MatmulPrecision::Bf16x3, test)
}

/// bf16x3 products of weights in every format meet the f32 kernels' tolerance against the
/// float64 products of the operands as they are, on shapes that take odd features, whole and
/// partial blocks of 32 rows, one or two panels, and several threads.
#[test]
fn bf16x3_products_match_f32_products() {
    if !bf16x3_products_here("bf16x3_products_match_f32_products") {
        return;
    }
    for (k, n) in [(13, 7), (64, 130), (257, 33), (1, 48), (384, 48), (768, 80)] {
        let (raw, bias) = (values(k * n, 51), values(n, 52));
        let halves: Vec<f16> = raw.iter().map(|&v| f16::from_f32(v)).collect();
        let brains: Vec<bf16> = raw.iter().map(|&v| bf16::from_f32(v)).collect();
        let formats = [
            HostWeights::F32(&raw),
            HostWeights::F16(&halves),
            HostWeights::BF16(&brains),
        ];
        let wide: Vec<f32> = halves.iter().map(|v| v.to_f32()).collect();
        let narrow: Vec<f32> = brains.iter().map(|v| v.to_f32()).collect();
        for (weights, stored) in formats.into_iter().zip([&raw, &wide, &narrow]) {
            let precision = MatmulPrecision::Bf16x3;
            let layer = PackedLinear::with_precision(weights, &bias, k, n, precision).unwrap();
            assert_eq!(layer.precision(), precision);
            for rows in (1..=5).chain([17, 32, 33, 64, 101]) {
                let x = values(rows * k, rows as u64 + 53);
                let want = reference(stored, &bias, &x, rows, k, Activation::Relu);
                for threads in [1, 2, 3] {
                    let mut y = vec![f32::NAN; rows * n];
                    layer
                        .forward(&x, rows, &mut y, Activation::Relu, threads)
                        .unwrap();
                    let context = format!("bf16x3 k={k} n={n} rows={rows} threads={threads}");
                    assert_close(&y, &want, &context);
                }
            }
        }
    }
}

/// Against the float64 products, a layer of 384 features with bf16x3 products is off by
/// what 16 significant bits explain: not exact, and hundreds of times closer than bf16's,
/// on the tiles (40 rows) and on the recombined weights (8 rows).
#[test]
fn bf16x3_products_are_far_closer_than_bf16s() {
    if !bf16x3_products_here("bf16x3_products_are_far_closer_than_bf16s") {
        return;
    }
    let (k, n) = (384, 64);
    let (raw, bias) = (values(k * n, 55), values(n, 56));
    for rows in [8, 40] {
        let x = values(rows * k, 57);
        let want = reference(&raw, &bias, &x, rows, k, Activation::Identity);
        let error = |precision| {
            let w = HostWeights::F32(&raw);
            let layer = PackedLinear::with_precision(w, &bias, k, n, precision).unwrap();
            let mut y = vec![0f32; rows * n];
            layer
                .forward(&x, rows, &mut y, Activation::Identity, 1)
                .unwrap();
            let diff = y.iter().zip(&want).map(|(a, b)| (*a as f64 - b).powi(2));
            (diff.sum::<f64>() / want.iter().map(|b| b * b).sum::<f64>()).sqrt()
        };
        let (split, rounded) = (error(MatmulPrecision::Bf16x3), error(MatmulPrecision::Bf16));
        // Each operand keeps 16 bits (up to 2^-16 of itself left out) and lo·lo (2^-16 of the
        // product) is dropped; the errors of 384 products of random sign partly cancel.
        assert!(
            split > 0.0 && split < 2e-5,
            "{rows} rows: bf16x3 error {split}"
        );
        assert!(
            rounded > 100.0 * split,
            "{rows} rows: bf16 {rounded}, bf16x3 {split}"
        );
    }
}

/// From 16 rows the tiles run (hi·hi + hi·lo + lo·hi); below, f32 products with the
/// recombined weights (x · (hi + lo)). On operands whose low parts are all positive and whose
/// split is exact, the two differ by Σ lo(x)·lo(w), which no rounding of the sums hides at
/// 32 features: each batch must land on its own path's value.
#[test]
fn bf16x3_runs_the_tiles_from_16_rows_and_the_recombined_weights_below() {
    if !bf16x3_products_here("bf16x3_runs_the_tiles_from_16_rows_and_the_recombined_weights_below")
    {
        return;
    }
    let (k, n) = (32, 48);
    // hi in [1, 2) with 8 significant bits; lo 0.4375 of hi's last place, below its half.
    let parts = |len: usize, seed| -> Vec<(f64, f64)> {
        let lo = 0.875 / 256.0;
        let hi = values(len, seed)
            .into_iter()
            .map(|v| 1.0 + ((v + 0.5) * 128.0).floor() / 128.0);
        hi.map(|hi| (hi as f64, lo)).collect()
    };
    let joined = |p: &[(f64, f64)]| -> Vec<f32> { p.iter().map(|(h, l)| (h + l) as f32).collect() };
    let wp = parts(k * n, 71);
    let layer = PackedLinear::with_precision(
        HostWeights::F32(&joined(&wp)),
        &vec![0.0; n],
        k,
        n,
        MatmulPrecision::Bf16x3,
    )
    .unwrap();
    for rows in [1, 8, 15, 16, 17, 40] {
        let xp = parts(rows * k, 72 + rows as u64);
        let mut y = vec![f32::NAN; rows * n];
        let x = joined(&xp);
        layer
            .forward(&x, rows, &mut y, Activation::Identity, 1)
            .unwrap();
        for (i, got) in y.iter().enumerate() {
            let (r, o) = (i / n, i % n);
            let terms = (0..k).map(|j| (xp[r * k + j], wp[o * k + j]));
            let tiles: f64 = terms
                .clone()
                .map(|((xh, xl), (wh, wl))| xh * wh + xh * wl + xl * wh)
                .sum();
            let recombined: f64 = terms
                .map(|((xh, xl), (wh, wl))| (xh + xl) * (wh + wl))
                .sum();
            let (want, other) = match rows >= 16 {
                true => (tiles, recombined),
                false => (recombined, tiles),
            };
            let gap = (want - other).abs();
            assert!(
                (*got as f64 - want).abs() < gap / 2.0,
                "{rows} rows, output {i}: {got}, want {want}, the other path's {other}"
            );
        }
    }
}

/// The split rows are `[lo, hi]` of each value, each part zero-padded, as the scalar split
/// gives them; the two parts add up to the value within 2^-16 of it.
#[test]
fn rows_split_into_low_and_high_parts() {
    if !products_here(MatmulPrecision::Bf16, "rows_split_into_low_and_high_parts") {
        return;
    }
    for k in [1, 13, 16, 40, 384] {
        let rows = 3;
        let x = values(rows * k, k as u64);
        let width = width(k);
        let mut out = vec![u16::MAX; rows * width];
        // SAFETY: x holds rows * k values, out rows * width(k), and the CPU has AVX-512 BF16
        // (checked above).
        unsafe { split_rows(&x, k, 0..rows, out.as_mut_ptr()) };
        let kp = width / 2;
        for (r, row) in out.chunks_exact(width).enumerate() {
            for i in 0..kp {
                let (hi, lo) = match i < k {
                    true => split(x[r * k + i]),
                    false => (bf16::ZERO, bf16::ZERO),
                };
                let parts = [row[i], row[kp + i]];
                assert_eq!(parts, [lo.to_bits(), hi.to_bits()], "k={k} {r},{i}");
                if i < k {
                    let v = x[r * k + i];
                    let sum = hi.to_f32() + lo.to_f32();
                    assert!(
                        (sum - v).abs() <= v.abs() / 65536.0,
                        "{v} split {hi} + {lo}"
                    );
                }
            }
        }
    }
}
