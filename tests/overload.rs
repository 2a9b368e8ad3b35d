//! Three times more load than the device can serve, for a minute: the adaptive policy sheds
//! at the door with 429 + Retry-After, the p99 of the requests it admits stays within the
//! budget, memory stays flat, and normal service returns within two seconds of the load
//! ending.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// A model whose batches stream ~75 MB of weights: a few hundred rows per second on two
/// cores, so that three times that is within reach of the load generator.
const DIMS: [usize; 4] = [512, 4096, 4096, 10];
const BUDGET_MS: f64 = 50.0;

fn rss_bytes(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn three_times_overload_for_a_minute_is_shed_and_recovered_from() {
    let repo = TempDir::new("overload");
    write_version(repo.path(), "big", 1, &DIMS, 1);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[defaults]\npolicy = \"adaptive\"\np99_ms = {BUDGET_MS}\nmax_batch_size = 4\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let x = inputs(DIMS[0], 2);

    // Capacity, measured closed-loop: 8 clients back to back for 3 s keep every batch full
    // (one batch of 4 running, the next one waiting). Capacity is what is served: when a
    // slow batch makes the controller shed one, that client backs off briefly.
    let started = Instant::now();
    let done: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while started.elapsed() < Duration::from_secs(3) {
                        let r = server.post_json("/v2/models/big/infer", &infer_body(&x, 1));
                        match r.status {
                            200 => n += 1,
                            429 => std::thread::sleep(Duration::from_millis(10)),
                            other => panic!("{other}: {}", r.text()),
                        }
                    }
                    n
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let capacity = done as f64 / started.elapsed().as_secs_f64();
    let rate = 3.0 * capacity;
    eprintln!("capacity {capacity:.0} req/s; offering {rate:.0} req/s for 60 s");

    let report = repo.path().join("load.json");
    let mut load = Command::new(support::tandem_bench())
        .args([
            "load",
            "--url",
            &format!("http://{}", server.addr),
            "--model",
            "big",
        ])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            "60",
            "--shape",
            "poisson",
        ])
        .args([
            "--budget-ms",
            &BUDGET_MS.to_string(),
            "--connections",
            "256",
        ])
        .arg("--json")
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // While it runs: memory, and what a refused client is told.
    let mut rss = Vec::new();
    let mut retry_after = None;
    let t0 = Instant::now();
    while load.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(500));
        if t0.elapsed() > Duration::from_secs(10) {
            rss.push(rss_bytes(server.pid()));
        }
        if retry_after.is_none() {
            let r = server.post_json("/v2/models/big/infer", &infer_body(&x, 1));
            if r.status == 429 {
                retry_after = r.header("retry-after").map(str::to_string);
                assert!(
                    r.json()["error"]
                        .as_str()
                        .unwrap()
                        .contains("over capacity"),
                    "{}",
                    r.text()
                );
            }
        }
    }
    assert!(load.wait().unwrap().success());
    let ended = Instant::now();

    // Recovery: normal service within two seconds of the load ending.
    let mut recovered = None;
    while ended.elapsed() < Duration::from_secs(5) {
        let t = Instant::now();
        let r = server.post_json("/v2/models/big/infer", &infer_body(&x, 1));
        if r.status == 200 && t.elapsed() < Duration::from_secs_f64(BUDGET_MS / 1000.0) {
            recovered = Some(ended.elapsed());
            break;
        }
    }
    let recovered = recovered.expect("no normal answer within 5 s of the load ending");
    assert!(
        recovered <= Duration::from_secs(2),
        "recovered after {recovered:?}"
    );
    for _ in 0..10 {
        assert_eq!(
            server
                .post_json("/v2/models/big/infer", &infer_body(&x, 1))
                .status,
            200
        );
    }

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    eprintln!("{}", serde_json::to_string(&r["outcomes"]).unwrap());
    let outcome = |k: &str| r["outcomes"][k].as_u64().unwrap_or(0);
    let sent = r["sent"].as_u64().unwrap();
    assert!(
        outcome("429") as f64 >= 0.3 * sent as f64,
        "too little shed: {}",
        r["outcomes"]
    );
    assert_eq!(
        outcome("200") + outcome("429"),
        sent,
        "every request answered 200 or 429: {}",
        r["outcomes"]
    );
    let p99 = r["p99_ms"].as_f64().unwrap();
    assert!(p99 <= BUDGET_MS, "p99 of admitted requests {p99} ms");
    assert!(
        retry_after
            .as_deref()
            .is_some_and(|s| s.parse::<u64>().is_ok_and(|v| v >= 1)),
        "Retry-After {retry_after:?}"
    );
    // Memory: flat once the first ten seconds have passed (bounded queues, nothing leaks).
    let (lo, hi) = (rss.iter().min().unwrap(), rss.iter().max().unwrap());
    assert!(hi - lo < 64 << 20, "RSS grew from {lo} to {hi} bytes");
}
