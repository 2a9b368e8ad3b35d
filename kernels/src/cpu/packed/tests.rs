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
