//! `tandem-bench sweep` and `tandem-bench load` against a real server: what they report, and that
//! a failing rate is confirmed before the search gives up on it.

mod support;

use std::process::{Command, Stdio};

use support::*;

fn sweep(server: &Server, dir: &TempDir, budget_ms: &str, max_rate: &str) -> serde_json::Value {
    let json = dir.path().join(format!("sweep-{budget_ms}.json"));
    let status = Command::new(support::tandem_bench())
        .args(["sweep", "--url", &format!("http://{}", server.addr)])
        .args([
            "--model",
            "m",
            "--budget-ms",
            budget_ms,
            "--duration",
            "0.5",
        ])
        .args([
            "--min-rate",
            "100",
            "--max-rate",
            max_rate,
            "--cooldown",
            "0",
        ])
        .args(["--connections", "4", "--bodies", "3"])
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(json.with_extension("svg").exists(), "the sweep's plot");
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// Runs `cmd` with `--json json`, which must succeed; the report it wrote.
fn report_of(mut cmd: Command, json: &std::path::Path) -> serde_json::Value {
    let status = cmd.arg("--json").arg(json).stdout(Stdio::null()).status();
    assert!(status.unwrap().success(), "{cmd:?}");
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

/// Runs `tandem-bench ARGS`, which must fail with an error that names `flag`.
fn refused(args: &[&str], flag: &str) {
    let out = Command::new(support::tandem_bench())
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(flag), "{stderr}");
}

#[test]
fn a_sweep_finds_the_highest_passing_rate_and_confirms_failures() {
    let repo = TempDir::new("bench");
    write_version(repo.path(), "m", 1, &[8, 8, 3], 1);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);

    // A budget a tiny model meets at any rate tried: doubling reaches the maximum.
    let easy = sweep(&server, &repo, "1000", "200");
    assert_eq!(easy["best_rps"], 200.0, "{easy}");
    let runs = easy["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "100 then 200 req/s: {easy}");
    for run in runs {
        assert_eq!(run[0], true, "{run}");
        // Three bodies, each with its own rows, all answered.
        assert_eq!(run[1]["bodies"], 3, "{run}");
        // The server's own cost of each request, from its /metrics.
        let switches = run[1]["server_context_switches_per_request"]
            .as_f64()
            .unwrap();
        assert!(switches > 0.0, "{run}");
    }

    // A budget nothing meets: the first rate fails, is run once more, and the sweep
    // reports no passing rate rather than an error.
    let impossible = sweep(&server, &repo, "0.001", "200");
    assert!(impossible["best_rps"].is_null(), "{impossible}");
    let runs = impossible["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "the failure confirmed once: {impossible}");
    assert!(
        runs.iter()
            .all(|r| r[0] == false && r[1]["offered_rps"] == 100.0)
    );
    // A body count out of range is refused before any load is sent.
    let addr = format!("http://{}", server.addr);
    refused(
        &["load", "--url", &addr, "--model", "m", "--bodies", "0"],
        "--bodies",
    );

    // The server went on serving through all of it.
    server.assert_serves("m", 8);
}

#[test]
fn bench_forward_reports_every_batch_size_and_what_it_evicted() {
    let dir = TempDir::new("bench-forward");
    write_version(dir.path(), "m", 1, &[16, 32, 4], 1);
    let model = dir.path().join("m/1/model.safetensors");
    let json = dir.path().join("forward.json");
    let mut cmd = Command::new(support::tandem_bench());
    cmd.args(["forward", "--device", "cpu", "--batch", "1,3"])
        .args(["--seconds", "0.05", "--evict-mib", "1", "--model"])
        .arg(&model);
    let report = report_of(cmd, &json);
    assert_eq!(report["evict_mib"], 1);
    assert_eq!(report["dims"], serde_json::json!([16, 32, 4]));
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["batch"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 3]
    );
    for row in rows {
        assert!(row["iterations"].as_u64().unwrap() >= 20, "{row}");
        assert!(row["samples_per_second"].as_f64().unwrap() > 0.0, "{row}");
    }

    // An eviction larger than the flag allows is refused before anything runs.
    let model = model.to_str().unwrap();
    let args = [
        "forward",
        "--device",
        "cpu",
        "--evict-mib",
        "5000",
        "--model",
        model,
    ];
    refused(&args, "--evict-mib");
}

/// `bench load --texts` drives a text model with a file's texts: every request answered,
/// the server's own count of texts agreeing; a file with no text is refused.
#[test]
fn bench_load_sends_a_text_model_the_file_s_texts() {
    let repo = TempDir::new("bench-texts");
    support::text::synthetic(&repo.path().join("enc/1"), 7);
    std::fs::write(repo.path().join("enc/config.toml"), "p99_ms = 2000\n").unwrap();
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let texts = repo.path().join("texts.txt");
    std::fs::write(&texts, "a cat runs fast\nthe big red dog, é\n\nx\n").unwrap();
    let json = repo.path().join("load.json");
    let addr = format!("http://{}", server.addr);
    let mut cmd = Command::new(support::tandem_bench());
    cmd.args(["load", "--url", &addr, "--model", "enc"])
        .args([
            "--rate",
            "40",
            "--duration",
            "1",
            "--rows",
            "2",
            "--bodies",
            "3",
        ])
        .args(["--budget-ms", "2000", "--connections", "2"])
        .arg("--texts")
        .arg(&texts);
    let report = report_of(cmd, &json);
    let sent = report["sent"].as_u64().unwrap();
    assert!(sent >= 30, "{report}");
    assert_eq!(report["outcomes"]["200"], sent, "{report}");
    let texts_served = server.series("tandem_requests_total", &["model=\"enc\"", "code=\"200\""]);
    assert!(texts_served >= sent as f64, "{texts_served} of {sent}");
    std::fs::write(&texts, "\n \n").unwrap();
    refused(
        &[
            "load",
            "--url",
            &addr,
            "--model",
            "enc",
            "--texts",
            texts.to_str().unwrap(),
        ],
        "no text",
    );
    let r = server.post_json("/embed", &serde_json::json!({"inputs": "a cat"}));
    assert_eq!(r.status, 200, "{}", r.text());
}
