//! Real peers of the server: `promtool check metrics` on a live scrape, and Triton's own
//! Python client. Both run in CI, where `.ci/run` installs promtool and scripts/test.sh
//! makes the Python environment; elsewhere a missing tool skips the test with a reason,
//! unless TANDEM_REQUIRE_TOOLS is set.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::*;

#[test]
fn promtool_finds_nothing_wrong_with_a_live_scrape() {
    if Command::new("promtool").arg("--version").output().is_err() {
        return skip_or_fail(
            "promtool_finds_nothing_wrong_with_a_live_scrape",
            "promtool not installed",
        );
    }
    let repo = TempDir::new("promtool");
    write_version(repo.path(), "m", 1, &[8, 8, 3], 1);
    let socket = repo.path().join("coloc.sock");
    // A priced device, so the cost families are in the scrape too.
    let config = repo.path().join("tandem.toml");
    std::fs::write(&config, "[cost]\ndevice_hour_usd = 3.6\n").unwrap();
    let server = Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--coloc-socket",
        socket.to_str().unwrap(),
    ]);
    // A trainer connected, so the co-location families are in the scrape too.
    let mut trainer = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "train",
            "--device",
            "cpu",
            "--seconds",
            "30",
            "--threads",
            "1",
            "--checkpoint-every",
            "100",
        ])
        .arg("--coloc-socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Exercise every family: successes, client errors, unknown models.
    server.assert_serves("m", 8);
    let x = inputs(8, 1);
    assert_eq!(
        server
            .post_json("/v2/models/m/infer", &serde_json::json!({"inputs": []}))
            .status,
        400
    );
    assert_eq!(
        server
            .post_json("/v2/models/zz/infer", &infer_body(&x, 1))
            .status,
        404
    );
    // One busy-ratio sample, and a report and an ack from the trainer.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let scrape = server.get("/metrics");
    assert_eq!(scrape.status, 200);
    let text = scrape.text();
    for family in [
        "tandem_requests_total",
        "tandem_request_duration_seconds_bucket",
        "tandem_queue_duration_seconds_bucket",
        "tandem_compute_duration_seconds_bucket",
        "tandem_batch_rows_bucket",
        "tandem_batches_total",
        "tandem_queue_depth_requests",
        "tandem_device_busy_ratio",
        "tandem_process_context_switches_total",
        "tandem_model_version_loaded",
        "tandem_training_allowance",
        "tandem_trainers_connected",
        "tandem_trainer_directives_total",
        "tandem_trainer_samples_per_second",
        "tandem_trainer_ack_duration_seconds_bucket",
        "tandem_cost_usd_total",
        "tandem_cost_per_inference_usd",
        "tandem_load_ratio",
        "tandem_training_harvested_device_seconds_total",
    ] {
        assert!(text.contains(family), "{family} missing from:\n{text}");
    }
    assert!(!text.contains("zz"), "an unknown model became a label");
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = trainer.kill();
    let _ = trainer.wait();
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool:\n{report}"
    );
}

#[test]
fn tritonclient_default_calls_work_unchanged() {
    let Some(python) = std::env::var_os("TANDEM_PYTHON") else {
        return skip_or_fail(
            "tritonclient_default_calls_work_unchanged",
            "TANDEM_PYTHON not set (scripts/test.sh sets it)",
        );
    };
    let repo = TempDir::new("triton");
    write_version(repo.path(), "m", 1, &[10, 20, 4], 7);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/tritonclient_check.py"
    );
    let out = Command::new(python)
        .arg(script)
        .args(["--url", &server.addr.to_string(), "--model", "m"])
        .arg("--weights")
        .arg(repo.path().join("m/1/model.safetensors"))
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "tritonclient check failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
}
