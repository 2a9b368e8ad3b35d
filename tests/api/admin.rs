//! Live budgets for operators: the admin API changes a model's SLO while it serves, SIGHUP
//! reloads the config file, and only loopback clients (or token holders) get in.

use std::time::Duration;

use crate::support::*;
use serde_json::json;

const DIMS: [usize; 3] = [8, 16, 3];

fn start(extra: &str, listen_any: bool) -> (Server, TempDir, std::path::PathBuf) {
    let repo = TempDir::new("admin");
    write_version(&repo.path().join("models"), "m", 1, &DIMS, 1);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n{extra}",
            repo.path().join("models").display()
        ),
    )
    .unwrap();
    let mut args = vec!["--config".to_string(), config.display().to_string()];
    if listen_any {
        args.extend(["--listen".to_string(), "0.0.0.0:0".to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    (server, repo, config)
}

fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics").text();
    text.lines()
        .find(|l| l.starts_with(name) && l.contains("model=\"m\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
}

#[test]
fn slo_changes_take_effect_while_serving() {
    let (server, _repo, _) = start("", false);
    let slo = server.get("/admin/models/m/slo").json();
    assert_eq!(slo["policy"], "adaptive");
    assert_eq!(slo["p99_ms"], 50.0);
    assert_eq!(metric(&server, "tandem_slo_p99_budget_seconds"), 0.05);

    let r = request(
        server.addr,
        "PUT",
        "/admin/models/m/slo",
        &[],
        json!({"p99_ms": 10, "max_batch_size": 4})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["p99_ms"], 10.0);
    assert_eq!(r.json()["max_batch_size"], 4);
    // The batcher took the new policy: its budget gauge says so.
    server.assert_serves("m", DIMS[0]);
    assert_eq!(metric(&server, "tandem_slo_p99_budget_seconds"), 0.01);
    // What the adaptive policy predicts, and how far batches stray from it.
    std::thread::sleep(Duration::from_millis(150));
    server.assert_serves("m", DIMS[0]);
    assert!(metric(&server, "tandem_predicted_batch_duration_seconds") > 0.0);
    assert!(metric(&server, "tandem_predicted_batch_spread_ratio") > 0.0);
    // And validation uses the new limit.
    let five = inputs(5 * DIMS[0], 2);
    let r = server.post_json("/v2/models/m/infer", &infer_body(&five, 5));
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("max_batch_size of 4")
    );

    // Back to static, then listed.
    let r = request(
        server.addr,
        "PUT",
        "/admin/models/m/slo",
        &[],
        br#"{"policy": "static", "max_queue_delay_us": 200}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let all = server.get("/admin/models").json();
    assert_eq!(all["models"][0]["policy"], "static");
    assert_eq!(
        all["models"][0]["max_batch_size"], 4,
        "earlier changes stay"
    );
    server.assert_serves("m", DIMS[0]);
    assert!(server.log().contains("SLO changed through the admin API"));
    // Under the static policy too, operators see the budget and what serving achieves
    // against it (the gauges refresh at most every 100 ms, on a completion).
    std::thread::sleep(Duration::from_millis(150));
    server.assert_serves("m", DIMS[0]);
    assert_eq!(metric(&server, "tandem_slo_p99_budget_seconds"), 0.01);
    assert!(metric(&server, "tandem_observed_p99_seconds") > 0.0);
    assert!(metric(&server, "tandem_observed_throughput_requests_per_second") > 0.0);
}

#[test]
fn bad_slo_changes_are_refused_and_change_nothing() {
    let (server, _repo, _) = start("", false);
    for (body, status, words) in [
        (r#"{"p99_ms": -1}"#, 400, "p99_ms"),
        (r#"{"p99_ms": 0}"#, 400, "p99_ms"),
        (r#"{"max_batch_size": 0}"#, 400, "max_batch_size"),
        (r#"{"policy": "fastest"}"#, 400, "fastest"),
        (r#"{"budget": 5}"#, 400, "budget"),
        ("not json", 400, "invalid SLO change"),
    ] {
        let r = request(
            server.addr,
            "PUT",
            "/admin/models/m/slo",
            &[],
            body.as_bytes(),
        );
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(
            r.json()["error"].as_str().unwrap().contains(words),
            "{body}: {}",
            r.text()
        );
    }
    assert_eq!(
        request(server.addr, "PUT", "/admin/models/zz/slo", &[], b"{}").status,
        404
    );
    let r = request(server.addr, "DELETE", "/admin/models/m/slo", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, PUT"));
    assert_eq!(server.get("/admin/nothing").status, 404);
    let slo = server.get("/admin/models/m/slo").json();
    assert_eq!(
        (slo["p99_ms"].as_f64(), slo["max_batch_size"].as_u64()),
        (Some(50.0), Some(64))
    );
}

#[test]
fn a_token_guards_the_admin_api_when_set() {
    let (server, _repo, _) = start("[admin]\ntoken = \"s3cret\"\n", false);
    assert_eq!(server.get("/admin/models/m/slo").status, 401);
    let wrong = [("Authorization", "Bearer nope".to_string())];
    assert_eq!(
        request(server.addr, "GET", "/admin/models/m/slo", &wrong, b"").status,
        401
    );
    let right = [("Authorization", "Bearer s3cret".to_string())];
    assert_eq!(
        request(server.addr, "GET", "/admin/models/m/slo", &right, b"").status,
        200
    );
}

#[test]
fn only_loopback_clients_get_in_without_a_token() {
    // Reach the server through a non-loopback address of this machine, if it has one.
    let Some(ip) = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.255:9").map(|_| s))
        .ok()
        .and_then(|s| s.local_addr().ok())
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    else {
        kernels::cuda::report_skip(
            "only_loopback_clients_get_in_without_a_token",
            "no non-loopback address",
        );
        return;
    };
    let (server, _repo, _) = start("", true);
    let external = std::net::SocketAddr::new(ip, server.addr.port());
    let r = get(external, "/admin/models/m/slo");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("loopback"));
    assert_eq!(
        get(external, "/v2/health/ready").status,
        200,
        "the v2 API answers everyone"
    );
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], server.addr.port()));
    assert_eq!(get(loopback, "/admin/models/m/slo").status, 200);
}

#[test]
fn sighup_reloads_the_config_file() {
    let (server, repo, config) = start("[defaults]\np99_ms = 50\n", false);
    assert_eq!(server.get("/admin/models/m/slo").json()["p99_ms"], 50.0);
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[defaults]\np99_ms = 20\nmax_batch_size = 16\n",
            repo.path().join("models").display()
        ),
    )
    .unwrap();
    server.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let slo = server.get("/admin/models/m/slo").json();
        if slo["p99_ms"] == 20.0 && slo["max_batch_size"] == 16 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not reloaded: {slo}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The settings apply before the line that says so reaches the log.
    server.assert_logs_within(Duration::from_secs(5), "configuration reloaded");
    // A broken file is refused; the running configuration stays.
    std::fs::write(&config, "this is [not toml").unwrap();
    server.signal(libc::SIGHUP);
    server.assert_logs_within(Duration::from_secs(5), "config reload failed");
    assert_eq!(server.get("/admin/models/m/slo").json()["p99_ms"], 20.0);
    assert_eq!(server.get("/v2/health/ready").status, 200);
}

/// `GET /v2/models/{m}/config` (Triton's model configuration, as `tritonclient`'s
/// `get_model_config` reads it) shows the settings in force, including a live change.
#[test]
fn the_model_config_endpoint_shows_the_settings_in_force() {
    let (server, _repo, _) = start(
        "[defaults]\nmax_batch_size = 16\nmax_queue_delay_us = 700\ndefault_timeout_us = 90000\n",
        false,
    );
    let c = server.get("/v2/models/m/config").json();
    assert_eq!(c["name"], "m");
    assert_eq!(c["max_batch_size"], 16);
    assert_eq!(
        c["input"],
        json!([{"name": "input-0", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [DIMS[0]]}])
    );
    assert_eq!(c["output"][0]["dims"], json!([DIMS[2]]));
    assert_eq!(c["instance_group"][0]["kind"], "KIND_CPU");
    let batching = &c["dynamic_batching"];
    assert_eq!(batching["max_queue_delay_microseconds"], 700);
    assert_eq!(
        batching["default_queue_policy"]["default_timeout_microseconds"],
        90000
    );
    assert_eq!(c["parameters"]["policy"]["string_value"], "adaptive");
    assert_eq!(c["parameters"]["p99_ms"]["string_value"], "50");
    assert_eq!(
        server.get("/v2/models/m/versions/1/config").json(),
        c,
        "the one version, by number"
    );

    let r = request(
        server.addr,
        "PUT",
        "/admin/models/m/slo",
        &[],
        json!({"p99_ms": 12.5, "max_batch_size": 4, "policy": "static"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let c = server.get("/v2/models/m/config").json();
    assert_eq!(c["max_batch_size"], 4);
    assert_eq!(c["parameters"]["policy"]["string_value"], "static");
    assert_eq!(c["parameters"]["p99_ms"]["string_value"], "12.5");

    assert_eq!(server.get("/v2/models/nope/config").status, 404);
    assert_eq!(server.get("/v2/models/m/versions/3/config").status, 404);
    let r = request(server.addr, "POST", "/v2/models/m/config", &[], b"");
    assert_eq!(r.status, 405);
}

/// A model's `config.toml` changed while the model serves is applied to the loaded version
/// at the next repository scan; one that cannot be read, or holds an invalid value, leaves
/// the settings as they are; removing it returns the defaults.
#[test]
fn a_changed_model_config_toml_applies_while_serving() {
    let (server, repo, _) = start("repository_poll_ms = 100\n", false);
    let cfg = repo.path().join("models/m/config.toml");
    let config = || server.get("/v2/models/m/config").json();
    assert_eq!(config()["max_batch_size"], 64);

    replace_file(&cfg, "max_batch_size = 5\np99_ms = 30\n");
    assert!(
        poll_until(Duration::from_secs(10), || config()["max_batch_size"] == 5),
        "{}",
        server.log()
    );
    assert_eq!(config()["parameters"]["p99_ms"]["string_value"], "30");
    assert_eq!(metric(&server, "tandem_slo_p99_budget_seconds"), 0.03);
    server.assert_serves("m", DIMS[0]);
    let six = inputs(6 * DIMS[0], 3);
    assert_eq!(
        server
            .post_json("/v2/models/m/infer", &infer_body(&six, 6))
            .status,
        400,
        "six rows are over the new max_batch_size"
    );

    for broken in ["max_batch_size = \"many\"\n", "max_batch_size = 0\n"] {
        replace_file(&cfg, broken);
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(config()["max_batch_size"], 5, "after {broken:?}");
        server.assert_serves("m", DIMS[0]);
    }

    std::fs::remove_file(&cfg).unwrap();
    assert!(poll_until(
        Duration::from_secs(10),
        || config()["max_batch_size"] == 64
    ));
    assert!(server.log().contains("changed config.toml applied"));
}

/// Replaces a file's content in one step, as editors and config managers do: a scan never
/// reads it half written (an empty `config.toml` is valid and means the defaults).
fn replace_file(path: &std::path::Path, content: &str) {
    let staged = path.with_extension("toml.new");
    std::fs::write(&staged, content).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

#[test]
fn the_log_filter_changes_while_serving() {
    let (server, _repo, _) = start("", false);
    let filter = || server.get("/admin/log").json()["filter"].clone();
    assert_eq!(filter(), "info");
    // A connection ended by a request hyper cannot parse is logged at debug level only.
    let garbage = |server: &Server| {
        let _ = raw(server.addr, b"NOT HTTP AT ALL\r\n\r\n");
    };
    garbage(&server);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!server.log().contains("connection closed"));

    let put = |body: &str| request(server.addr, "PUT", "/admin/log", &[], body.as_bytes());
    let r = put(r#"{"filter": "info,gateway::http=debug"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(filter(), "gateway::http=debug,info");
    garbage(&server);
    server.assert_logs_within(Duration::from_secs(5), "connection closed");
    assert!(
        server
            .log()
            .contains("log filter changing through the admin API")
    );

    // A span field's value is literal text, not a regular expression to compile (this one
    // took tracing's parser over 10 s as a regex).
    let r =
        put(r#"{"filter": "info,XXXXXXXXXXXPa[b{c=/........................qaci>.*te3^}]=warn"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = put(r#"{"filter": "info,gateway::http=debug"}"#);
    assert_eq!(r.status, 200, "{}", r.text());

    // Bad changes change nothing.
    for bad in [
        r#"{"filter": "gateway=loud"}"#,
        r#"{"level": "debug"}"#,
        // tracing's parser panics on this one (a multi-byte character in a span's field).
        "{\"filter\":\" a[c=!/`.*e\u{546}].f\"}",
        "{",
    ] {
        let r = put(bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(filter(), "gateway::http=debug,info");
    }
    assert_eq!(
        request(server.addr, "POST", "/admin/log", &[], b"").status,
        405
    );
    server.assert_serves("m", DIMS[0]);
}
