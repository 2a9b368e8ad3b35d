//! What an adversarial pass broke, one regression test each: settings out of any sane
//! range (through the admin API, the config file, a repository's config.toml), a body of
//! empty gzip members, outputs JSON cannot carry, a dual-stack listener's loopback
//! clients, percent-encoded model names, and metric series of unloaded versions.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

const DIMS: [usize; 3] = [8, 16, 3];

fn repo_with(model: &str) -> TempDir {
    let repo = TempDir::new("adversarial");
    write_version(repo.path(), model, 1, &DIMS, 1);
    repo
}

fn put(server: &Server, path: &str, body: &serde_json::Value) -> HttpResponse {
    request(server.addr, "PUT", path, &[], body.to_string().as_bytes())
}

#[test]
fn numeric_settings_out_of_range_are_refused_on_every_path() {
    let repo = repo_with("m");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let before = server.get("/admin/models/m/slo").json();
    for (body, key) in [
        (
            json!({"queue_capacity": 4611686018427387904u64}),
            "queue_capacity",
        ),
        (
            json!({"max_queue_delay_us": u64::MAX}),
            "max_queue_delay_us",
        ),
        (json!({"p99_ms": 5e-324}), "p99_ms"),
        (json!({"p99_ms": 1e300}), "p99_ms"),
        (json!({"max_batch_size": 1u64 << 40}), "max_batch_size"),
    ] {
        let r = put(&server, "/admin/models/m/slo", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert!(r.text().contains(key), "{body}: {}", r.text());
    }
    assert_eq!(server.get("/admin/models/m/slo").json(), before);
    // A repository config.toml with such a value: the next version fails to load (and
    // says why); the one serving stays, and so does the process.
    std::fs::write(
        repo.path().join("m/config.toml"),
        "queue_capacity = 4611686018427387904\n",
    )
    .unwrap();
    write_version(repo.path(), "m", 2, &DIMS, 2);
    assert!(
        poll_until(Duration::from_secs(10), || server
            .log()
            .contains("queue_capacity must be")),
        "{}",
        server.log()
    );
    server.assert_serves("m", DIMS[0]);
    assert_eq!(server.get("/v2/models/m").json()["versions"], json!(["1"]));
}

#[test]
fn a_config_file_with_a_huge_queue_is_refused_at_start() {
    let repo = repo_with("m");
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[defaults]\nqueue_capacity = 4611686018427387904\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--device",
            "cpu",
            "--grpc-listen",
            "",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{log}");
    assert!(log.contains("queue_capacity must be 1..=1000000"), "{log}");
}

/// 16 MB of empty gzip members before a valid request: refused at once, and the server
/// answers others meanwhile (they used to burn seconds of CPU inside one poll each).
#[test]
fn a_body_of_empty_gzip_members_is_refused_without_stalling_the_server() {
    use std::io::Write;
    let repo = repo_with("m");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let gzip = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let empty = gzip(b"");
    let mut body: Vec<u8> = empty
        .iter()
        .copied()
        .cycle()
        .take(empty.len() * 800_000)
        .collect();
    body.extend(gzip(
        infer_body(&inputs(DIMS[0], 1), 1).to_string().as_bytes(),
    ));
    let addr = server.addr;
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let r = request(
                    addr,
                    "POST",
                    "/v2/models/m/infer",
                    &[("Content-Encoding", "gzip".into())],
                    &body,
                );
                (r, started.elapsed())
            })
        })
        .collect();
    let mut slowest_live = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        assert_eq!(server.get("/v2/health/live").status, 200);
        slowest_live = slowest_live.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    for s in senders {
        let (r, took) = s.join().unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains("gzip members"), "{}", r.text());
        assert!(took < Duration::from_secs(5), "refused after {took:?}");
    }
    assert!(
        slowest_live < Duration::from_millis(1000),
        "liveness took {slowest_live:?}"
    );
    server.assert_serves("m", DIMS[0]);
}

/// Inputs of 3e38: the MLP's outputs overflow to infinity. JSON cannot carry that (it
/// came back as `null`); the binary extension can.
#[test]
fn outputs_json_cannot_carry_are_an_error_in_json_and_come_back_as_binary() {
    const WIDE: [usize; 3] = [256, 256, 4];
    let repo = TempDir::new("adversarial");
    write_version(repo.path(), "m", 1, &WIDE, 1);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let big = vec![3e38f32; WIDE[0]];
    let r = server.post_json("/v2/models/m/infer", &infer_body(&big, 1));
    assert_eq!(r.status, 500, "{}", r.text());
    let error = r.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("output-0") && error.contains("binary"),
        "{error}"
    );
    let mut binary = infer_body(&big, 1);
    binary["parameters"] = json!({"binary_data_output": true});
    let r = server.post_json("/v2/models/m/infer", &binary);
    assert_eq!(r.status, 200, "{}", r.text());
    let header_len: usize = r
        .header("inference-header-content-length")
        .unwrap()
        .parse()
        .unwrap();
    let values: Vec<f32> = r.body[header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert!(values.iter().any(|v| !v.is_finite()), "{values:?}");
    server.assert_serves("m", WIDE[0]);
}

/// A dual-stack listener sees an IPv4 loopback client as `::ffff:127.0.0.1`: still
/// loopback, so the admin API answers it.
#[test]
fn the_admin_api_takes_ipv4_loopback_clients_of_a_dual_stack_listener() {
    let repo = repo_with("m");
    let server = Server::start(&[
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--listen",
        "[::]:0",
    ]);
    let v4: SocketAddr = SocketAddr::from(([127, 0, 0, 1], server.addr.port()));
    let r = get(v4, "/admin/models/m/slo");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// tritonclient percent-encodes model names: `a b` is asked for as `a%20b`.
#[test]
fn percent_encoded_model_names_are_decoded() {
    let repo = repo_with("a b");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let r = server.post_json(
        "/v2/models/a%20b/infer",
        &infer_body(&inputs(DIMS[0], 1), 1),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model_name"], "a b");
    assert_eq!(server.get("/v2/models/a%20b/ready").status, 200);
}

/// A trainer checkpointing every few seconds makes a new version each time: the series of
/// versions no longer loaded leave /metrics instead of piling up at 0.
#[test]
fn unloaded_versions_leave_the_metrics() {
    let repo = repo_with("m");
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 100\nkeep_versions = 1\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    for v in 2..=4 {
        write_version(repo.path(), "m", v, &DIMS, v);
        let want = serde_json::json!([v.to_string()]);
        assert!(poll_until(Duration::from_secs(20), || {
            server.get("/v2/models/m").json()["versions"] == want
        }));
    }
    let text = server.get("/metrics").text();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tandem_model_version_loaded{"))
        .collect();
    assert_eq!(
        series,
        vec!["tandem_model_version_loaded{model=\"m\",version=\"4\"} 1"]
    );
}
