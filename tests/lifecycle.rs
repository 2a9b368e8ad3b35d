//! Lifecycle under load: hot-loading new versions fails no request, a corrupt version is
//! ignored while the previous one keeps serving, and SIGTERM loses no in-flight request.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

const DIMS: [usize; 3] = [16, 32, 6];

fn config(repo: &TempDir, extra: &str) -> String {
    let path = repo.path().join("tandem.toml");
    std::fs::write(
        &path,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 100\n{extra}",
            repo.path().join("models").display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn new_versions_hot_load_under_load_and_a_corrupt_one_is_ignored() {
    let repo = TempDir::new("hotload");
    let models_dir = repo.path().join("models");
    let mut versions = vec![write_version(&models_dir, "m", 1, &DIMS, 1)];
    let server = Server::start(&["--config", &config(&repo, "keep_versions = 2\n")]);
    let addr = server.addr;
    // The warm-up's timings, one per batch-size bucket, are in the log for operators.
    // (Ready means warmed up; the log's reader thread may still be a line behind.)
    let warmed = |log: &str| {
        log.lines()
            .find(|l| l.contains("warmed up") && l.contains("model=m"))
            .map(str::to_owned)
    };
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let line = loop {
        let log = server.log();
        match warmed(&log) {
            Some(line) => break line,
            None if std::time::Instant::now() > give_up => panic!("no warm-up line in:\n{log}"),
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    let timings = line.split("warmup_us=").nth(1).unwrap_or_default();
    let first = timings.split([',', ' ']).next().unwrap_or_default();
    assert!(
        first.starts_with("1:") && first[2..].parse::<u64>().is_ok(),
        "{line}"
    );
    // So is the batch size adaptive batches wait to grow towards.
    let efficient = line.split("efficient_batch=").nth(1).unwrap_or_default();
    let efficient = efficient.split(' ').next().unwrap_or_default();
    assert!(
        efficient.parse::<usize>().is_ok_and(|rows| rows >= 1),
        "{line}"
    );
    let x = inputs(DIMS[0], 3);
    let body = infer_body(&x, 1);

    let stop = Arc::new(AtomicBool::new(false));
    // (version that answered, its output) for every response.
    type Seen = std::sync::Mutex<Vec<(u64, Vec<f32>)>>;
    let seen: Arc<Seen> = Default::default();
    let failures = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, seen, failures, body) =
                (stop.clone(), seen.clone(), failures.clone(), body.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = post_json(addr, "/v2/models/m/infer", &body);
                    if r.status != 200 {
                        failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed: {} {}", r.status, r.text());
                        continue;
                    }
                    let v: u64 = r.json()["model_version"].as_str().unwrap().parse().unwrap();
                    seen.lock().unwrap().push((v, r.output_values()));
                }
            })
        })
        .collect();
    let wait_for_version = |v: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if seen.lock().unwrap().iter().any(|(s, _)| *s == v) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("version {v} never served:\n{}", server.log());
    };
    wait_for_version(1);
    versions.push(write_version(&models_dir, "m", 2, &DIMS, 2));
    wait_for_version(2);

    // A corrupt version 3: logged, ignored; version 2 keeps serving.
    let v3 = models_dir.join("m/3");
    std::fs::create_dir_all(&v3).unwrap();
    std::fs::write(
        v3.join("model.safetensors"),
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(server.log().contains("failed to load"), "{}", server.log());
    assert_eq!(server.get("/v2/health/ready").status, 200);

    // Version 4 replaces it; with keep_versions = 2, version 1 is unloaded.
    versions.push(write_version(&models_dir, "m", 4, &DIMS, 4));
    wait_for_version(4);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }

    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed during hot loads"
    );
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 20, "only {} requests", seen.len());
    for (v, out) in seen.iter() {
        assert_ne!(*v, 3, "the corrupt version served");
        let ckpt = match v {
            1 => &versions[0],
            2 => &versions[1],
            4 => &versions[2],
            other => panic!("unexpected version {other}"),
        };
        assert_close(out, &reference(ckpt, &x, 1));
    }
    let meta = server.get("/v2/models/m").json();
    assert_eq!(meta["versions"], serde_json::json!(["2", "4"]));
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits() {
    let repo = TempDir::new("sigterm");
    let models_dir = repo.path().join("models");
    let ckpt = write_version(&models_dir, "m", 1, &DIMS, 1);
    // Requests wait 400 ms in the queue, so SIGTERM arrives while they are in flight.
    let mut server = Server::start(&[
        "--config",
        &config(
            &repo,
            "[defaults]\npolicy = \"static\"\nmax_queue_delay_us = 400000\nmax_batch_size = 64\n[limits]\nshutdown_drain_ms = 300\nshutdown_grace_ms = 5000\n",
        ),
    ]);
    let addr = server.addr;
    let x = inputs(DIMS[0], 8);
    let want = reference(&ckpt, &x, 1);
    let in_flight: Vec<_> = (0..16)
        .map(|_| {
            let body = infer_body(&x, 1);
            std::thread::spawn(move || post_json(addr, "/v2/models/m/infer", &body))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(50));
    // Draining: not ready, but still serving.
    assert_eq!(server.get("/v2/health/ready").status, 503);
    assert_eq!(server.get("/v2/health/live").status, 200);
    for t in in_flight {
        let r = t.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_close(&r.output_values(), &want);
    }
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exited after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", server.log());
    assert!(signalled.elapsed() < Duration::from_secs(6));
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still accepting after exit"
    );
}
