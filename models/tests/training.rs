//! Training math against a float64 reference: gradients by finite differences, gradient
//! accumulation over micro-batches equal to one full batch, and a falling loss. The same
//! bodies run on CUDA where a device exists.

use kernels::{DType, Device};
use models::train::{Adam, StepOptions, trainer};
use models::{Checkpoint, rng::SplitMix64};

const DIMS: [usize; 4] = [5, 7, 4, 3];

/// Mean softmax cross-entropy in f64.
fn loss(ckpt: &Checkpoint, x: &[f32], labels: &[u32]) -> f64 {
    let rows = labels.len();
    let logits = ckpt.forward_f64(x, rows);
    let c = ckpt.layers[ckpt.layers.len() - 1].outputs;
    (0..rows)
        .map(|r| {
            let z = &logits[r * c..(r + 1) * c];
            let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
            s.ln() + m - z[labels[r] as usize]
        })
        .sum::<f64>()
        / rows as f64
}

fn batch(rows: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut rng = SplitMix64::new(seed);
    let x = (0..rows * DIMS[0]).map(|_| rng.normal()).collect();
    let y = (0..rows).map(|_| rng.below(DIMS[3]) as u32).collect();
    (x, y)
}

/// An "optimiser" that moves each parameter by exactly minus its gradient: Adam with no
/// momentum and an epsilon that swamps the second moment (Δp = -lr·g/(|g|+eps) ≈ -g).
fn gradient_extractor() -> Adam {
    Adam {
        lr: 1e6,
        beta1: 0.0,
        beta2: 0.0,
        eps: 1e6,
    }
}

fn check_gradients(device: &Device) {
    let init = Checkpoint::random(&DIMS, DType::F32, 3);
    let (x, y) = batch(6, 4);
    for micro in [6, 4, 1] {
        let mut t = trainer(&init, device, gradient_extractor()).unwrap();
        t.step(
            &x,
            &y,
            StepOptions {
                threads: 2,
                micro_batch: micro,
            },
        )
        .unwrap();
        let after = t.checkpoint().unwrap();
        for (li, (l0, l1)) in init.layers.iter().zip(&after.layers).enumerate() {
            // Weights (every third) and then biases: parameter index pi over both.
            let w_len = l0.inputs * l0.outputs;
            let p0s: Vec<f32> = l0
                .weight
                .to_f32()
                .into_iter()
                .chain(l0.bias.iter().copied())
                .collect();
            let p1s: Vec<f32> = l1
                .weight
                .to_f32()
                .into_iter()
                .chain(l1.bias.iter().copied())
                .collect();
            for (pi, (&p0, &p1)) in p0s.iter().zip(&p1s).enumerate().step_by(3) {
                let analytic = (p0 - p1) as f64;
                let h = 1e-3f32;
                let mut plus = init.clone();
                let mut minus = init.clone();
                let bump = |c: &mut Checkpoint, d: f32| {
                    if pi < w_len {
                        let mut w = c.layers[li].weight.to_f32();
                        w[pi] += d;
                        c.layers[li].weight = models::WeightData::F32(w);
                    } else {
                        c.layers[li].bias[pi - w_len] += d;
                    }
                };
                bump(&mut plus, h);
                bump(&mut minus, -h);
                let numeric = (loss(&plus, &x, &y) - loss(&minus, &x, &y)) / (2.0 * h as f64);
                assert!(
                    (analytic - numeric).abs() <= 2e-3 * (1.0 + numeric.abs()) + 1e-4,
                    "{device:?} micro {micro} layer {li} parameter {pi}: {analytic} vs {numeric}"
                );
            }
        }
    }
}

fn check_loss_falls(device: &Device) {
    let init = Checkpoint::random(&DIMS, DType::F32, 5);
    let (x, y) = batch(32, 6);
    let before = loss(&init, &x, &y);
    let mut t = trainer(
        &init,
        device,
        Adam {
            lr: 1e-2,
            ..Adam::default()
        },
    )
    .unwrap();
    let mut last = None;
    for _ in 0..200 {
        last = Some(
            t.step(
                &x,
                &y,
                StepOptions {
                    threads: 1,
                    micro_batch: 8,
                },
            )
            .unwrap(),
        );
    }
    let after = loss(&t.checkpoint().unwrap(), &x, &y);
    assert!(after < before * 0.5, "{device:?}: loss {before} -> {after}");
    let s = last.unwrap();
    assert_eq!((s.rows, s.micro_batches), (32, 4));
}

#[test]
fn gradients_match_finite_differences_cpu() {
    check_gradients(&Device::Cpu);
}

#[test]
fn gradients_match_finite_differences_cuda() {
    if let Some(d) = kernels::cuda::device_for_test("gradients_match_finite_differences_cuda") {
        check_gradients(&Device::Cuda(d));
    }
}

#[test]
fn loss_falls_cpu() {
    check_loss_falls(&Device::Cpu);
}

#[test]
fn loss_falls_cuda() {
    if let Some(d) = kernels::cuda::device_for_test("loss_falls_cuda") {
        check_loss_falls(&Device::Cuda(d));
    }
}

#[test]
fn bad_labels_and_shapes_are_errors() {
    let init = Checkpoint::random(&DIMS, DType::F32, 5);
    let mut t = trainer(&init, &Device::Cpu, Adam::default()).unwrap();
    let opts = StepOptions {
        threads: 1,
        micro_batch: 4,
    };
    assert!(t.step(&[0.0; 10], &[0, 1], opts).is_ok());
    assert!(t.step(&[0.0; 9], &[0, 1], opts).is_err());
    assert!(t.step(&[0.0; 10], &[0, 7], opts).is_err());
}

/// What a trainer holds follows the micro-batch in force: its scratch is sized for it,
/// shrunk when it falls (before the next step, when asked), and what it reports resident
/// is its parameters' fixed part plus exactly that.
fn check_memory_follows_the_micro_batch(device: &Device) {
    let init = Checkpoint::random(&DIMS, DType::F32, 7);
    let mut t = trainer(&init, device, Adam::default()).unwrap();
    let (x, y) = batch(16, 8);
    let opts = |micro_batch| StepOptions {
        threads: 1,
        micro_batch,
    };
    t.step(&x, &y, opts(16)).unwrap();
    let full = t.resident_bytes();
    assert_eq!(full, t.bytes_for_rows(16), "{device:?}");
    // Values, gradients and two moments of every parameter, at least.
    let params: usize = DIMS.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
    assert!(t.fixed_bytes() >= 16 * params, "{device:?}");
    // A limit that fits four rows: four, freed down to them before the next step.
    let rows = t.rows_within(t.bytes_for_rows(4) as u64 + 1);
    assert_eq!(rows, 4, "{device:?}");
    t.reserve_rows(rows).unwrap();
    assert_eq!(t.resident_bytes(), t.bytes_for_rows(4), "{device:?}");
    assert!(t.resident_bytes() < full, "{device:?}");
    let s = t.step(&x, &y, opts(rows)).unwrap();
    assert_eq!(s.micro_batches, 4, "{device:?}");
    assert_eq!(t.resident_bytes(), t.bytes_for_rows(4), "{device:?}");
    // Below the fixed part, still one row.
    assert_eq!(t.rows_within(0), 1);
}

#[test]
fn memory_follows_the_micro_batch_cpu() {
    check_memory_follows_the_micro_batch(&Device::Cpu);
}

#[test]
fn memory_follows_the_micro_batch_cuda() {
    if let Some(d) = kernels::cuda::device_for_test("memory_follows_the_micro_batch_cuda") {
        check_memory_follows_the_micro_batch(&Device::Cuda(d));
    }
}

/// On a GPU, a smaller micro-batch gives the device its memory back: free memory, as the
/// driver reports it, rises by most of the scratch given up.
#[test]
fn a_smaller_micro_batch_gives_device_memory_back_cuda() {
    let test = "a_smaller_micro_batch_gives_device_memory_back_cuda";
    let Some(gpu) = kernels::cuda::device_for_test(test) else {
        return;
    };
    let dims = [2048, 4096, 10];
    let init = Checkpoint::random(&dims, DType::F32, 9);
    let mut t = trainer(&init, &Device::Cuda(gpu.clone()), Adam::default()).unwrap();
    let rows = 4096;
    let mut rng = SplitMix64::new(10);
    let x: Vec<f32> = (0..rows * dims[0]).map(|_| rng.normal()).collect();
    let y: Vec<u32> = (0..rows).map(|_| rng.below(dims[2]) as u32).collect();
    let opts = StepOptions {
        threads: 1,
        micro_batch: rows,
    };
    t.step(&x, &y, opts).unwrap();
    let before = gpu.memory_info().unwrap().free_bytes;
    let (big, small) = (t.resident_bytes(), t.bytes_for_rows(16));
    t.reserve_rows(16).unwrap();
    let after = gpu.memory_info().unwrap().free_bytes;
    let freed = after.saturating_sub(before);
    eprintln!(
        "MEASURED micro-batch {rows} -> 16: resident {big} -> {} bytes, device free +{freed}",
        t.resident_bytes()
    );
    assert_eq!(t.resident_bytes(), small);
    // Other tests allocate beside this one: three quarters of what was given up.
    assert!(
        freed >= 3 * (big - small) / 4,
        "freed {freed} of {}",
        big - small
    );
}
