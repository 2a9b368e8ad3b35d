use std::ops::Range;

use super::*;
use crate::cpu::test_support::{assert_close, reference, values};

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
                    let context = format!("k={k} n={n} rows={rows} threads={threads} {act:?}");
                    assert_close(&y, &want, &context);
                }
            }
        }
    }
}

/// Every path this CPU has (AVX-512, AVX2, portable) against the reference, in every
/// format, on shapes that take every tile: whichever `forward` picks, the others stay
/// checked on this machine.
#[test]
fn every_instruction_set_matches_the_reference() {
    for isa in [Isa::Avx512, Isa::Avx2, Isa::Portable] {
        if !isa.available() {
            crate::cuda::report_skip(
                "every_instruction_set_matches_the_reference",
                &format!("no {isa:?} on this CPU"),
            );
            continue;
        }
        for (k, n) in [(13, 7), (64, 130), (257, 33), (5, 16), (3, 48)] {
            let (halves, brains, layers) = in_every_format(k, n, 9);
            let bias = values(n, 10);
            let raw = values(k * n, 9);
            for rows in (1..=20).chain([47, 48, 49, 101]) {
                let x = values(rows * k, rows as u64);
                for (weights, layer) in [&raw, &halves, &brains].into_iter().zip(&layers) {
                    let want = reference(weights, &bias, &x, rows, k, Activation::Relu);
                    let panels = n.div_ceil(PANEL);
                    // Whole layers, and ranges that start on an odd panel or hold one.
                    for range in [0..panels, panels / 2..panels, panels - 1..panels] {
                        // Columns outside the range are not written: they keep the answer.
                        let mut y: Vec<f32> = (want.iter().enumerate())
                            .map(|(i, w)| match range.contains(&((i % n) / PANEL)) {
                                true => f32::NAN,
                                false => *w as f32,
                            })
                            .collect();
                        run_on(
                            isa,
                            layer,
                            &x,
                            rows,
                            &mut y,
                            range.clone(),
                            Activation::Relu,
                        );
                        let context = format!("{isa:?} k={k} n={n} rows={rows} panels {range:?}");
                        assert_close(&y, &want, &context);
                    }
                }
            }
        }
    }
}

/// The panels `range` of `layer` on `isa`'s path, into `y`.
fn run_on(
    isa: Isa,
    layer: &PackedLinear,
    x: &[f32],
    rows: usize,
    y: &mut [f32],
    range: Range<usize>,
    act: Activation,
) {
    let shape = Shape {
        rows,
        k: layer.inputs,
        n: layer.outputs,
    };
    let (out, bias) = (y.as_mut_ptr(), &layer.bias[..]);
    // SAFETY: the buffers are those `forward` would pass, for a range of the layer's panels,
    // and the CPU supports `isa` (checked by the caller).
    unsafe {
        match &layer.panels {
            Panels::F32(p) => dense_on::<F32>(isa, x, p, bias, out, shape, range, act),
            Panels::F16(p) => dense_on::<F16>(isa, x, p, bias, out, shape, range, act),
            Panels::BF16(p) => dense_on::<BF16>(isa, x, p, bias, out, shape, range, act),
            Panels::Bf16Pairs(_) | Panels::Bf16x3Pairs(_) => {
                unreachable!("bf16 products have one path")
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_tiles_take_one_to_eight_rows_and_cover_the_block() {
    for rows in 1..=ROW_BLOCK {
        let mut left = rows;
        while left > 0 {
            let take = avx512::tile_rows(left);
            assert!(
                (1..=8).contains(&take) && take <= left,
                "{rows}: {take} of {left}"
            );
            left -= take;
        }
    }
    assert_eq!([9, 12, 15, 16, 17].map(avx512::tile_rows), [5, 6, 8, 8, 8]);
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

/// GELU in the epilogue, on every path this CPU has and in every format: the affine part
/// (Identity on the same path) with the scalar GELU applied after, to the 4 ulp by which
/// the vector fits may differ from the scalar one.
#[test]
fn gelu_in_the_epilogue_is_gelu_of_the_affine_part() {
    for isa in [Isa::Avx512, Isa::Avx2, Isa::Portable] {
        if !isa.available() {
            crate::cuda::report_skip(
                "gelu_in_the_epilogue_is_gelu_of_the_affine_part",
                &format!("no {isa:?} on this CPU"),
            );
            continue;
        }
        for (k, n) in [(13, 7), (64, 130), (257, 33)] {
            let (_, _, layers) = in_every_format(k, n, 11);
            let panels = n.div_ceil(PANEL);
            for rows in [1, 5, 8, 13, 49] {
                let x: Vec<f32> = values(rows * k, rows as u64)
                    .iter()
                    .map(|v| v * 8.0)
                    .collect();
                for layer in &layers {
                    let mut affine = vec![f32::NAN; rows * n];
                    run_on(
                        isa,
                        layer,
                        &x,
                        rows,
                        &mut affine,
                        0..panels,
                        Activation::Identity,
                    );
                    let mut fused = vec![f32::NAN; rows * n];
                    run_on(
                        isa,
                        layer,
                        &x,
                        rows,
                        &mut fused,
                        0..panels,
                        Activation::Gelu,
                    );
                    for (i, (got, a)) in fused.iter().zip(&affine).enumerate() {
                        let want = crate::cpu::vmath::gelu(*a);
                        assert!(
                            (got - want).abs() <= 4.0 * f32::EPSILON * want.abs().max(1e-30),
                            "{isa:?} k={k} n={n} rows={rows} [{i}]: gelu({a}) = {got}, want {want}"
                        );
                    }
                }
            }
        }
    }
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
                Panels::Bf16Pairs(_) | Panels::Bf16x3Pairs(_) => {
                    unreachable!("built only by with_precision")
                }
            }
        };
        let want = reference(weights, &bias, &x, rows, k, Activation::Relu);
        assert_close(&y, &want, "portable");
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

/// `v` rounded to bfloat16, to nearest even, as the CPU rounds it (which also flushes
/// subnormals to zero: the test values have none).
fn bf16_rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()
}

/// Whether this CPU runs bf16 products; says SKIPPED where it does not.
fn bf16_products_here(test: &str) -> bool {
    products_here(MatmulPrecision::Bf16, test)
}

/// Whether this CPU runs `precision`'s products; says SKIPPED where it does not.
pub(super) fn products_here(precision: MatmulPrecision, test: &str) -> bool {
    let here = precision.available();
    if !here {
        let reason = format!("no {} on this CPU", precision.requires());
        crate::cuda::report_skip(test, &reason);
    }
    here
}

/// bf16 products of weights in every format, on shapes that take every tile, an odd
/// number of features (a pair half padding) and several threads: the float64 products of
/// the operands rounded to bf16, to f32's accuracy, since two bf16 values multiply exactly
/// in f32.
#[test]
fn bf16_products_are_those_of_the_rounded_operands() {
    if !bf16_products_here("bf16_products_are_those_of_the_rounded_operands") {
        return;
    }
    for (k, n) in [(13, 7), (64, 130), (257, 33), (5, 16), (1, 48), (384, 48)] {
        let raw = values(k * n, 21);
        let bias = values(n, 22);
        let halves: Vec<f16> = raw.iter().map(|&v| f16::from_f32(v)).collect();
        let brains: Vec<bf16> = raw.iter().map(|&v| bf16::from_f32(v)).collect();
        let formats = [
            HostWeights::F32(&raw),
            HostWeights::F16(&halves),
            HostWeights::BF16(&brains),
        ];
        let wide: Vec<f32> = halves.iter().map(|v| v.to_f32()).collect();
        for (weights, stored) in formats.into_iter().zip([&raw, &wide, &raw]) {
            let layer =
                PackedLinear::with_precision(weights, &bias, k, n, MatmulPrecision::Bf16).unwrap();
            assert_eq!(layer.precision(), MatmulPrecision::Bf16);
            let w = bf16_rounded(stored);
            for rows in (1..=20).chain([47, 48, 49, 101]) {
                let x = values(rows * k, rows as u64 + 30);
                for act in [Activation::Identity, Activation::Relu] {
                    let want = reference(&w, &bias, &bf16_rounded(&x), rows, k, act);
                    for threads in [1, 2, 3] {
                        let mut y = vec![f32::NAN; rows * n];
                        layer.forward(&x, rows, &mut y, act, threads).unwrap();
                        let context = format!("bf16 k={k} n={n} rows={rows} threads={threads}");
                        assert_close(&y, &want, &context);
                    }
                }
            }
        }
    }
}

/// Where the CPU has AMX, its tiles and the AVX-512 BF16 kernel (which Zen 4 runs) give
/// the same products, each against the reference, on odd shapes, blocks of 32 rows and
/// their remainders, and ranges of panels of every parity.
#[cfg(target_arch = "x86_64")]
#[test]
fn amx_tiles_and_avx512_bf16_give_the_products_of_the_rounded_operands() {
    let test = "amx_tiles_and_avx512_bf16_give_the_products_of_the_rounded_operands";
    if !bf16_products_here(test) {
        return;
    }
    use bf16_forward::Bf16Kernel;
    let kernels: &[Bf16Kernel] = if amx::available() {
        &[Bf16Kernel::Avx512, Bf16Kernel::Tiles]
    } else {
        println!("SKIPPED {test} (AMX part): this CPU has no AMX tiles");
        &[Bf16Kernel::Avx512]
    };
    for (k, n) in [(7, 20), (64, 33), (100, 48), (768, 80)] {
        let (raw, bias) = (values(k * n, 41), values(n, 42));
        let layer = PackedLinear::with_precision(
            HostWeights::F32(&raw),
            &bias,
            k,
            n,
            MatmulPrecision::Bf16,
        )
        .unwrap();
        let Panels::Bf16Pairs(p) = &layer.panels else {
            unreachable!("bf16 products keep pairs")
        };
        let w = bf16_rounded(&raw);
        for rows in [1, 15, 16, 17, 31, 32, 33, 64, 65, 130] {
            let x = values(rows * k, rows as u64 + 43);
            let want = reference(&w, &bias, &bf16_rounded(&x), rows, k, Activation::Relu);
            for (&kernel, threads) in kernels.iter().zip([1, 3]).chain(kernels.iter().zip([2, 1])) {
                let mut y = vec![f32::NAN; rows * n];
                let shape = Shape { rows, k, n };
                (layer.bf16_products(p, &x, &mut y, shape, Activation::Relu, threads, kernel))
                    .unwrap();
                let context = format!("{kernel:?} k={k} n={n} rows={rows} threads={threads}");
                assert_close(&y, &want, &context);
            }
        }
    }
}

/// The rounding is the operands' only error: against the exact f32 layer, a layer of
/// 384 features is within what bf16's 8 significant bits explain, and not exact.
#[test]
fn bf16_products_stay_near_f32_products() {
    if !bf16_products_here("bf16_products_stay_near_f32_products") {
        return;
    }
    let (k, n, rows) = (384, 64, 16);
    let (raw, bias, x) = (values(k * n, 5), values(n, 6), values(rows * k, 7));
    let exact = PackedLinear::new(HostWeights::F32(&raw), &bias, k, n).unwrap();
    let rounded =
        PackedLinear::with_precision(HostWeights::F32(&raw), &bias, k, n, MatmulPrecision::Bf16)
            .unwrap();
    let (mut a, mut b) = (vec![0f32; rows * n], vec![0f32; rows * n]);
    exact
        .forward(&x, rows, &mut a, Activation::Identity, 1)
        .unwrap();
    rounded
        .forward(&x, rows, &mut b, Activation::Identity, 1)
        .unwrap();
    let norm = |v: &[f32]| v.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
    let diff: Vec<f32> = a.iter().zip(&b).map(|(a, b)| a - b).collect();
    let relative = norm(&diff) / norm(&a);
    // Each operand is off by up to 2^-9 of itself; summed over 384 products of random
    // sign, the error is a few thousandths of the result.
    assert!(
        relative > 0.0 && relative < 1e-2,
        "relative error {relative}"
    );
}

/// GELU in the epilogue of bf16 products: the affine part with the scalar GELU after.
#[test]
fn bf16_products_take_gelu_in_the_epilogue() {
    if !bf16_products_here("bf16_products_take_gelu_in_the_epilogue") {
        return;
    }
    let (k, n, rows) = (37, 40, 11);
    let (raw, bias, x) = (values(k * n, 8), values(n, 9), values(rows * k, 10));
    let layer =
        PackedLinear::with_precision(HostWeights::F32(&raw), &bias, k, n, MatmulPrecision::Bf16)
            .unwrap();
    let (mut fused, mut after) = (vec![0f32; rows * n], vec![0f32; rows * n]);
    layer
        .forward(&x, rows, &mut fused, Activation::Gelu, 1)
        .unwrap();
    layer
        .forward(&x, rows, &mut after, Activation::Identity, 1)
        .unwrap();
    crate::cpu::gelu_in_place(&mut after, 1);
    for (i, (a, b)) in fused.iter().zip(&after).enumerate() {
        assert!(
            (a - b).abs() <= 4.0 * f32::EPSILON * (1.0 + b.abs()),
            "{i}: {a} vs {b}"
        );
    }
}
