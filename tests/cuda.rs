//! The gateway serving on a GPU, end to end through HTTP (and the same body on the CPU): every weight type answers as the
//! float64 reference does, for single rows and for the batches that concurrent clients make.
//! Without a CUDA device each test says on stderr that it is skipped; scripts/gpu-check.sh
//! runs them on one and fails if any is skipped there.

mod support;

use std::sync::Arc;

use kernels::DType;
use models::Checkpoint;
use support::*;

const DIMS: [usize; 4] = [64, 256, 128, 10];

/// `got` within `tolerance` of `want`, relative to the largest reference value.
fn assert_within(got: &[f32], want: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    let scale = want.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = ((*g as f64) - w).abs() / scale;
        assert!(err <= tolerance, "{what}: element {i}: {g} vs {w}");
    }
}

/// The same body on the CPU, so that CI runs what the GPU check runs.
#[test]
fn serving_on_the_cpu_answers_as_the_reference_for_every_weight_type() {
    serves_as_the_reference("cpu");
}

#[test]
fn serving_on_cuda_answers_as_the_reference_for_every_weight_type() {
    let test = "serving_on_cuda_answers_as_the_reference_for_every_weight_type";
    if kernels::cuda::device_for_test(test).is_some() {
        serves_as_the_reference("cuda:0");
    }
}

fn serves_as_the_reference(device: &str) {
    let repo = TempDir::new("cuda");
    // f32 is exact up to summation order; 16-bit weights are converted and accumulate in
    // f32, as the kernels tests allow.
    let models = [
        ("f32", DType::F32, 1e-5),
        ("f16", DType::F16, 1e-2),
        ("bf16", DType::BF16, 1e-2),
    ];
    let mut checkpoints = Vec::new();
    for (i, (name, dtype, _)) in models.iter().enumerate() {
        let ckpt = Checkpoint::random(&DIMS, *dtype, 10 + i as u64);
        ckpt.write_atomic(&repo.path().join(name).join("1").join("model.safetensors"))
            .unwrap();
        checkpoints.push(ckpt);
    }
    let server = Arc::new(Server::start(&[
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--device",
        device,
    ]));
    // Every model loaded on the device asked for (the log is read as it arrives).
    let loaded_on_device = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains("model version loaded") && l.contains(&format!("device={device} "))
            })
            .count()
    };
    poll_until(std::time::Duration::from_secs(10), || {
        loaded_on_device(&server.log()) == models.len()
    });
    let log = server.log();
    assert_eq!(loaded_on_device(&log), models.len(), "{log}");

    for ((name, _, tolerance), ckpt) in models.iter().zip(&checkpoints) {
        for rows in [1, 7, 64] {
            let x = inputs(rows * DIMS[0], rows as u64);
            let r = server.post_json(&format!("/v2/models/{name}/infer"), &infer_body(&x, rows));
            assert_eq!(r.status, 200, "{name} rows={rows}: {}", r.text());
            let want = reference(ckpt, &x, rows);
            assert_within(&r.output_values(), &want, *tolerance, name);
        }
    }

    // Concurrent single-row clients: the batcher may join them into GPU batches, and each
    // client gets its own row back.
    let ckpt = Arc::new(checkpoints.swap_remove(0));
    let clients: Vec<_> = (0..16u64)
        .map(|c| {
            let (server, ckpt) = (server.clone(), ckpt.clone());
            std::thread::spawn(move || {
                for i in 0..20 {
                    let x = inputs(DIMS[0], 1000 * c + i);
                    let r = server.post_json("/v2/models/f32/infer", &infer_body(&x, 1));
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_within(&r.output_values(), &reference(&ckpt, &x, 1), 1e-5, "f32");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let metrics = server.get("/metrics").text();
    let batched = metrics
        .lines()
        .filter(|l| l.starts_with("tandem_batch_rows_sum{") && l.contains("model=\"f32\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(
        batched,
        320.0 + 72.0,
        "rows the f32 model served in batches"
    );
}
