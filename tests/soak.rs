//! `tandem-bench soak` for two minutes, as CI runs it: the real binary starts its own
//! server and runs every fault of the full soak (docs/soak.md) on a faster schedule. The
//! command judges the run and fails on any violation; this test also reads its report, so
//! that a fault that silently stopped happening fails too.

mod support;

use std::process::Command;
use std::time::Instant;

use support::TempDir;

#[test]
fn two_minutes_under_faults_lose_nothing_and_grow_nothing() {
    let dir = TempDir::new("soak");
    let json = dir.path().join("soak.json");
    let started = Instant::now();
    let out = Command::new(support::tandem_bench())
        .args(["soak", "--duration", "120", "--warmup-share", "0.25"])
        .args(["--dims", "64,128,128,10", "--budget-ms", "50"])
        // Correctness is judged as strictly as in the full soak: no 5xx, nothing lost, no
        // growth beyond the same tolerances. Latency is judged with room for neighbours:
        // on two cores shared with other tests, a runnable neighbour holds a core for
        // whole scheduler slices, which moves the p99 of an unloaded server by tens of
        // milliseconds, and the adaptive controller refuses what those delays would make
        // late. A server that stalls (a swap or a reload blocking the runtime or a
        // worker) costs hundreds of milliseconds each time, several times a second here,
        // and still fails twice the budget and 5% refused.
        .args(["--p99-limit-ms", "100", "--max-refused-share", "0.05"])
        // The capacity search stops at 1,000 req/s: the load stays light for the shared
        // cores, and the search short.
        .args([
            "--min-rate",
            "250",
            "--max-rate",
            "1000",
            "--load-fraction",
            "0.7",
        ])
        .args(["--swap-every", "1.5", "--corrupt-every", "5"])
        .args(["--trainer-kill-every", "8", "--sighup-every", "4"])
        .args(["--slow-clients", "6", "--garbage-rate", "10"])
        .args(["--segment", "10", "--connections", "16"])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run tandem-bench soak");
    let output = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("soak took {:.0} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "the soak failed:\n{output}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["passed"], true, "{output}");
    let load = &r["load"];
    assert_eq!(
        (load["five_xx"].as_u64(), load["lost"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(load["ok"].as_u64().unwrap() > 10_000, "{load}");

    // Every fault happened, about as often as scheduled.
    let at_least = |section: &str, field: &str, n: u64| {
        let got = r[section][field].as_u64().unwrap_or(0);
        assert!(got >= n, "{section}.{field}: {got} < {n}\n{output}");
    };
    at_least("faults", "versions_written", 40);
    at_least("faults", "corrupt_versions_written", 8);
    at_least("faults", "trainers_killed", 8);
    at_least("faults", "trainers_joined", 8);
    at_least("faults", "reloads_sent", 20);
    at_least("faults", "invalid_reloads_sent", 5);
    at_least("slow_clients", "connections", 24);
    at_least("garbage_clients", "connections", 500);
    let loads = r["server"]["version_loads"]["ok"].as_f64().unwrap_or(0.0);
    assert!(
        loads >= 30.0,
        "hot swaps that took effect: {loads}\n{output}"
    );

    // Every figure was sampled and judged flat.
    let figures: Vec<&str> = r["flatness"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["figure"].as_str().unwrap())
        .collect();
    for figure in [
        "rss_bytes",
        "threads",
        "fds",
        "fds_not_sockets",
        "sockets_not_http_connections",
        "metrics_bytes",
    ] {
        assert!(
            figures.contains(&figure),
            "{figure} not judged: {figures:?}"
        );
    }
}
