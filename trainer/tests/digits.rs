//! The reference trainer's correctness test: on the UCI digits it reaches at least 95%
//! accuracy on the held-out fifth, as served (raw pixels through the exported checkpoint).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kernels::Device;
use models::train::Adam;
use trainer::run::{DataSource, TrainConfig, run};

fn config(dir: &std::path::Path, device: Device) -> TrainConfig {
    TrainConfig {
        data: DataSource::Digits,
        hidden: vec![128, 64],
        device,
        batch: 64,
        adam: Adam::default(),
        max_steps: Some(20_000),
        max_time: Some(Duration::from_secs(120)),
        target_accuracy: Some(0.95),
        threads: 1,
        seed: 1,
        repository: Some(dir.to_path_buf()),
        model_name: "digits".into(),
        checkpoint_every: Duration::from_millis(200),
        keep_versions: 0,
        coloc_socket: None,
        name: "test".into(),
        idle_priority: false,
        unmanaged: true,
    }
}

#[test]
fn digits_reach_95_percent_held_out_and_checkpoints_load() {
    reaches_95_percent(Device::Cpu, "cpu");
}

/// The same on the GPU: forward, backward and Adam in CUDA kernels and cuBLAS.
#[test]
fn digits_reach_95_percent_on_cuda() {
    if let Some(d) = kernels::cuda::device_for_test("digits_reach_95_percent_on_cuda") {
        reaches_95_percent(Device::Cuda(d), "cuda");
    }
}

fn reaches_95_percent(device: Device, tag: &str) {
    let dir = std::env::temp_dir().join(format!("tandem-train-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let summary = run(&config(&dir, device), &AtomicBool::new(false)).unwrap();
    let acc = summary.test_accuracy.unwrap();
    assert!(acc >= 0.95, "held-out accuracy {acc}");
    assert!(!summary.versions_written.is_empty());
    // Every version written is a valid checkpoint the gateway can serve.
    for v in &summary.versions_written {
        let path = dir
            .join("digits")
            .join(v.to_string())
            .join("model.safetensors");
        models::Checkpoint::read(&path).unwrap();
    }
    // Versions count up without gaps.
    let expected: Vec<u64> = (1..=summary.versions_written.len() as u64).collect();
    assert_eq!(summary.versions_written, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
