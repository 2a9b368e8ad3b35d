//! `Mlp::forward` against a float64 reference computed here, on fresh random weights and
//! inputs, with the output poisoned first. The same bodies run on the CPU and, where a
//! device exists, on CUDA; the CUDA variants say why they skip when none does.

use kernels::{DType, Device};
use models::rng::SplitMix64;
use models::{Checkpoint, Mlp, Model};

const BATCHES: [usize; 5] = [1, 2, 7, 64, 513];
const DIMS: [usize; 4] = [784, 256, 96, 10];

/// The float64 forward pass on the stored (possibly 16-bit) weights.
fn reference(ckpt: &Checkpoint, input: &[f32], rows: usize) -> Vec<f64> {
    ckpt.forward_f64(input, rows)
}

/// max |got - want| / max |want|: the error relative to the output's scale.
fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    assert!(
        got.iter().all(|v| v.is_finite()),
        "output holds non-finite values"
    );
    err / scale
}

fn check(device: &Device, dtype: DType, tolerance: f64, seed: u64) {
    let ckpt = Checkpoint::random(&DIMS, dtype, seed);
    let mut mlp = Mlp::new(&ckpt, device).unwrap();
    let mut rng = SplitMix64::new(seed ^ 0xfeed);
    for rows in BATCHES {
        let input: Vec<f32> = (0..rows * DIMS[0]).map(|_| rng.normal()).collect();
        let mut output = vec![f32::NAN; rows * DIMS[3]];
        mlp.forward_rows(&input, rows, &mut output).unwrap();
        let err = relative_error(&output, &reference(&ckpt, &input, rows));
        assert!(
            err <= tolerance,
            "{device:?} {dtype} rows={rows}: relative error {err:e} > {tolerance:e}"
        );
    }
}

macro_rules! on_every_device {
    ($name:ident, $dtype:expr, $tol:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn cpu() {
                check(&Device::Cpu, $dtype, $tol, 11);
            }

            #[test]
            fn cuda() {
                let test = concat!(stringify!($name), "::cuda");
                if let Some(device) = kernels::cuda::device_for_test(test) {
                    check(&Device::Cuda(device), $dtype, $tol, 11);
                }
            }
        }
    };
}

on_every_device!(f32_weights, DType::F32, 1e-5);
on_every_device!(f16_weights, DType::F16, 1e-2);
on_every_device!(bf16_weights, DType::BF16, 1e-2);

#[test]
fn wrong_buffer_sizes_are_errors_not_panics() {
    let ckpt = Checkpoint::random(&[4, 3, 2], DType::F32, 1);
    let mut mlp = Mlp::new(&ckpt, &Device::Cpu).unwrap();
    let mut out = vec![0.0; 4];
    let err = mlp.forward_rows(&[0.0; 7], 2, &mut out).unwrap_err();
    assert!(err.to_string().contains("expected 2 rows x 4 = 8"), "{err}");
    let err = mlp.forward_rows(&[0.0; 8], 2, &mut out[..3]).unwrap_err();
    assert!(err.to_string().contains("expected 4"), "{err}");
}

#[test]
fn the_input_s_place_in_memory_does_not_change_the_answer() {
    // A misaligned input is copied onto a cache line first; the copy must change nothing,
    // whichever of the 16 f32 offsets in a line the input starts at, and a buffer left
    // longer by an earlier, larger batch must not leak into a smaller one.
    let ckpt = Checkpoint::random(&DIMS, DType::F32, 3);
    let mut mlp = Mlp::new(&ckpt, &Device::Cpu).unwrap();
    let mut rng = SplitMix64::new(11);
    let rows = 7;
    let values: Vec<f32> = (0..(rows + 1) * DIMS[0]).map(|_| rng.normal()).collect();
    let mut big = vec![0.0; 64 * DIMS[3]];
    let mut want = vec![f32::NAN; rows * DIMS[3]];
    mlp.forward_rows(&values[..rows * DIMS[0]], rows, &mut want)
        .unwrap();
    for offset in 0..16 {
        let mut shifted = vec![0.0; offset + rows * DIMS[0]];
        shifted[offset..].copy_from_slice(&values[..rows * DIMS[0]]);
        let big_input: Vec<f32> = (0..64 * DIMS[0]).map(|_| rng.normal()).collect();
        mlp.forward_rows(&big_input, 64, &mut big).unwrap();
        let mut got = vec![f32::NAN; rows * DIMS[3]];
        mlp.forward_rows(&shifted[offset..], rows, &mut got)
            .unwrap();
        assert_eq!(got, want, "input {offset} f32s into its buffer");
    }
}

#[test]
fn metadata_follows_the_design() {
    let ckpt = Checkpoint::random(&[64, 32, 10], DType::F16, 1);
    let mlp = Mlp::new(&ckpt, &Device::Cpu).unwrap();
    let meta = mlp.metadata();
    assert_eq!(meta.inputs[0].name, "input-0");
    assert_eq!(meta.inputs[0].datatype, "FP32");
    assert_eq!(meta.inputs[0].shape, vec![-1, 64]);
    assert_eq!(meta.outputs[0].name, "output-0");
    assert_eq!(meta.outputs[0].shape, vec![-1, 10]);
    assert_eq!(mlp.macs_per_row(), 64 * 32 + 32 * 10);
}

/// bf16 products (`LoadOptions::cpu_precision`): within what rounding the operands to 8
/// significant bits explains, in every weight format, and not f32's answer.
#[test]
fn bf16_products_stay_near_the_reference_on_the_cpu() {
    let test = "bf16_products_stay_near_the_reference_on_the_cpu";
    if !models::MatmulPrecision::Bf16.available() {
        return kernels::cuda::report_skip(test, "no AVX-512 BF16 on this CPU");
    }
    let options = models::LoadOptions {
        cpu_precision: models::MatmulPrecision::Bf16,
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let ckpt = Checkpoint::random(&DIMS, dtype, 12);
        let mut bf16 = Mlp::with_options(&ckpt, &Device::Cpu, options).unwrap();
        let mut f32 = Mlp::new(&ckpt, &Device::Cpu).unwrap();
        let mut rng = SplitMix64::new(13);
        for rows in BATCHES {
            let input: Vec<f32> = (0..rows * DIMS[0]).map(|_| rng.normal()).collect();
            let (mut got, mut exact) = (vec![f32::NAN; rows * DIMS[3]], vec![0.0; rows * DIMS[3]]);
            bf16.forward_rows(&input, rows, &mut got).unwrap();
            f32.forward_rows(&input, rows, &mut exact).unwrap();
            let err = relative_error(&got, &reference(&ckpt, &input, rows));
            assert!(err <= 2e-2, "{dtype} rows={rows}: relative error {err:e}");
            assert_ne!(
                got, exact,
                "{dtype} rows={rows}: bf16 products gave f32's answer"
            );
        }
    }
}
