//! The gRPC API against real clients. `inference.GRPCInferenceService`, health and
//! reflection with `tritonclient.grpc` and grpcio: tests/python/grpc_check.py drives every
//! RPC over a repository of an MLP, a heavy MLP with a queue of two (for shedding), a
//! synthetic text encoder and, where ONNX Runtime is there, ONNX models of every tensor
//! kind; its answers are checked against numpy and against the same requests over HTTP.
//! TEI's `tei.v1` with stubs grpcio-tools generates from gateway/proto/tei.proto:
//! tests/python/tei_grpc_check.py against TEI's HTTP routes. Need TANDEM_PYTHON (and
//! ORT_DYLIB_PATH for the ONNX part), which scripts/test.sh sets; without them the tests
//! skip, unless TANDEM_REQUIRE_TOOLS is set.

use crate::support::*;

#[test]
fn tritonclient_grpc_works_unchanged_and_agrees_with_http() {
    let test = "tritonclient_grpc_works_unchanged_and_agrees_with_http";
    let Ok(python) = std::env::var("TANDEM_PYTHON") else {
        return skip_or_fail(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let repo = TempDir::new("grpc");
    write_version(repo.path(), "m", 1, &[10, 20, 4], 7);
    write_version(repo.path(), "slow", 1, &[512, 4096, 4096, 10], 8);
    std::fs::write(
        repo.path().join("slow/config.toml"),
        "policy = \"static\"\nmax_batch_size = 1\nmax_queue_delay_us = 0\nqueue_capacity = 2\n",
    )
    .unwrap();
    crate::support::text::synthetic(&repo.path().join("text/1"), 3);
    std::fs::write(repo.path().join("text/config.toml"), "p99_ms = 2000\n").unwrap();
    let onnx = std::env::var_os("ORT_DYLIB_PATH").is_some();
    if onnx {
        let (ok, report) = run_python(
            &python,
            "make_onnx_models.py",
            &[repo.path().to_str().unwrap(), "grpc"],
        );
        assert!(ok, "make_onnx_models.py failed:\n{report}");
    } else {
        skip_or_fail(test, "ORT_DYLIB_PATH not set: the ONNX part is skipped");
    }
    let server = Server::start(&[
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--log-format",
        "json",
        "--access-log",
    ]);
    let (grpc, http) = (server.grpc_addr().to_string(), server.addr.to_string());
    let weights = repo.path().join("m/1/model.safetensors");
    let mut args = vec![
        "--grpc", &grpc, "--http", &http, "--mlp", "m", "--slow", "slow", "--text", "text",
    ];
    args.extend(["--weights", weights.to_str().unwrap()]);
    if onnx {
        args.push("--onnx");
    }
    let (ok, report) = run_python(&python, "grpc_check.py", &args);
    assert!(
        ok,
        "grpc_check.py failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
    let grpc_requests = server.series(
        "tandem_requests_total",
        &["protocol=\"grpc\"", "code=\"200\""],
    );
    assert!(
        grpc_requests > 0.0,
        "no gRPC request counted under protocol=\"grpc\""
    );
    // The 17 MiB message tonic refused before the handler ran is counted too, as HTTP
    // counts a 413.
    let too_large = server.series(
        "tandem_requests_total",
        &["model=\"_unknown\"", "protocol=\"grpc\"", "code=\"413\""],
    );
    assert!(
        too_large >= 1.0,
        "the refused 17 MiB message was not counted"
    );
    // The access log gives each call's grpc-status: OK from an answer's trailers, NOT_FOUND
    // (5) from a refusal's head.
    let statuses: Vec<String> = server
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| {
            l["target"] == "access"
                && l["span"]["route"] == "/inference.GRPCInferenceService/ModelInfer"
        })
        .filter_map(|l| l["grpc_status"].as_str().map(str::to_string))
        .collect();
    for code in ["0", "5"] {
        assert!(
            statuses.iter().any(|s| s == code),
            "no ModelInfer access line with grpc_status {code}: {statuses:?}"
        );
    }
}

#[test]
fn tei_grpc_clients_get_what_tei_s_http_routes_answer() {
    let test = "tei_grpc_clients_get_what_tei_s_http_routes_answer";
    let Ok(python) = std::env::var("TANDEM_PYTHON") else {
        return skip_or_fail(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let repo = TempDir::new("tei-grpc");
    for (model, labels, seed) in [("nli", 3, 21), ("rerank", 1, 22), ("enc", 0, 23)] {
        let spec = models::encoder::synthetic::SyntheticSpec {
            labels,
            seed,
            ..Default::default()
        };
        models::encoder::synthetic::write_synthetic(&repo.path().join(model).join("1"), &spec)
            .unwrap();
        std::fs::write(
            repo.path().join(model).join("config.toml"),
            "p99_ms = 2000\n",
        )
        .unwrap();
    }
    crate::support::text::synthetic_sparse(&repo.path().join("sparse/1"), 24);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let (grpc, http) = (server.grpc_addr().to_string(), server.addr.to_string());
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway/proto");
    let args = [
        "--grpc",
        &grpc,
        "--http",
        &http,
        "--proto",
        proto,
        "--embed",
        "enc",
        "--sparse",
        "sparse",
        "--classifier",
        "nli",
        "--reranker",
        "rerank",
    ];
    let (ok, report) = run_python(&python, "tei_grpc_check.py", &args);
    assert!(
        ok,
        "tei_grpc_check.py failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
}

#[test]
fn api_keys_guard_grpc_as_they_guard_http() {
    let test = "api_keys_guard_grpc_as_they_guard_http";
    let Ok(python) = std::env::var("TANDEM_PYTHON") else {
        return skip_or_fail(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let repo = TempDir::new("grpc-keys");
    write_version(repo.path(), "m", 1, &[10, 20, 4], 7);
    let repo_arg = repo.path().to_str().unwrap();
    let server = Server::start(&["--model-repository", repo_arg, "--api-key", "s3cret"]);
    let grpc = server.grpc_addr().to_string();
    let args = ["--grpc", &grpc, "--mlp", "m", "--key", "s3cret"];
    let (ok, report) = run_python(&python, "grpc_check.py", &args);
    assert!(
        ok,
        "grpc_check.py --key failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
}

#[test]
fn a_draining_server_says_so_over_grpc_serves_on_and_ends_its_health_watches() {
    let test = "a_draining_server_says_so_over_grpc_serves_on_and_ends_its_health_watches";
    let Ok(python) = std::env::var("TANDEM_PYTHON") else {
        return skip_or_fail(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
    };
    let repo = TempDir::new("grpc-drain");
    write_version(repo.path(), "m", 1, &[10, 20, 4], 7);
    let config = repo.path().join("tandem.toml");
    let toml = format!(
        "model_repository = \"{}\"\n[limits]\nshutdown_drain_ms = 3000\n",
        repo.path().display()
    );
    std::fs::write(&config, toml).unwrap();
    let mut server = Server::start(&["--config", config.to_str().unwrap()]);
    let (grpc, pid) = (server.grpc_addr().to_string(), server.pid().to_string());
    let args = ["--grpc", &grpc, "--mlp", "m", "--drain-pid", &pid];
    let (ok, report) = run_python(&python, "grpc_check.py", &args);
    assert!(
        ok,
        "grpc_check.py --drain-pid failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
    let exited = server.wait_exit(std::time::Duration::from_secs(30));
    assert!(
        exited.is_some_and(|s| s.success()),
        "{exited:?}\n{}",
        server.log()
    );
}
