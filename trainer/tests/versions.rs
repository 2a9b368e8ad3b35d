//! A long run's checkpoints take bounded space: of the versions a run writes, only the
//! newest `keep_versions` stay on disk, and versions that were there before are untouched.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kernels::Device;
use models::train::Adam;
use trainer::run::{DataSource, TrainConfig, run};

fn versions_on_disk(model_dir: &std::path::Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(model_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn only_the_newest_versions_of_this_run_stay_on_disk() {
    let dir = std::env::temp_dir().join(format!("tandem-train-keep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A version someone else put there: the trainer numbers after it and never deletes it.
    let model_dir = dir.join("syn");
    std::fs::create_dir_all(model_dir.join("1")).unwrap();
    std::fs::write(model_dir.join("1").join("model.safetensors"), b"not ours").unwrap();

    let cfg = TrainConfig {
        data: DataSource::Synthetic(vec![8, 16, 4]),
        hidden: Vec::new(),
        device: Device::Cpu,
        batch: 16,
        adam: Adam::default(),
        max_steps: Some(12),
        max_time: Some(Duration::from_secs(60)),
        target_accuracy: None,
        threads: 1,
        seed: 3,
        repository: Some(dir.clone()),
        model_name: "syn".into(),
        // A checkpoint after every step.
        checkpoint_every: Duration::ZERO,
        keep_versions: 2,
        coloc_socket: None,
        name: "test".into(),
        idle_priority: false,
        unmanaged: true,
    };
    let summary = run(&cfg, &AtomicBool::new(false)).unwrap();
    let written = &summary.versions_written;
    assert!(written.len() >= 5, "wrote {written:?}");
    assert_eq!(written[0], 2, "numbered after the version already there");
    let newest = &written[written.len() - 2..];
    let mut expected = vec![1];
    expected.extend_from_slice(newest);
    assert_eq!(versions_on_disk(&model_dir), expected);
    // What is kept is whole and servable.
    for v in newest {
        models::Checkpoint::read(&model_dir.join(v.to_string()).join("model.safetensors")).unwrap();
    }
    assert_eq!(
        std::fs::read(model_dir.join("1").join("model.safetensors")).unwrap(),
        b"not ours"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
