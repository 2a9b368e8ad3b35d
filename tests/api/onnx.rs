//! ONNX models from a Triton model repository, served through ONNX Runtime: tritonclient
//! gets onnxruntime's answers (Python, on the same files); models that cannot serve (a
//! corrupt file, a config that disagrees with the graph, a config.pbtxt with a syntax
//! error, no ONNX Runtime at all) are not ready with their reason while the others serve;
//! a new version takes over live. The models come from tests/python/make_onnx_models.py
//! (onnx.helper, no downloads). Needs TANDEM_PYTHON and ORT_DYLIB_PATH, which
//! scripts/test.sh sets; without them the tests skip, unless TANDEM_REQUIRE_TOOLS is set.

use std::path::Path;
use std::time::Duration;

use crate::support::*;

/// The Python interpreter with onnx and onnxruntime, if this run has it and ONNX Runtime's
/// library.
fn python(test: &str) -> Option<String> {
    let Some(python) = std::env::var("TANDEM_PYTHON").ok() else {
        skip_or_fail(test, "TANDEM_PYTHON not set (scripts/test.sh sets it)");
        return None;
    };
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        skip_or_fail(test, "ORT_DYLIB_PATH not set (scripts/test.sh sets it)");
        return None;
    }
    Some(python)
}

fn make_models(python: &str, repo: &Path, which: &str) {
    let (ok, report) = run_python(
        python,
        "make_onnx_models.py",
        &[repo.to_str().unwrap(), which],
    );
    assert!(ok, "make_onnx_models.py failed:\n{report}");
    answers_not_admission(repo);
}

/// These tests are about answers, not admission: every model in `repo` without a
/// `config.toml` gets a budget that a machine busy with the other tests' servers cannot
/// make a lone request miss (a 429 for a request that sat unread there would read as a
/// wrong answer).
fn answers_not_admission(repo: &Path) {
    for entry in std::fs::read_dir(repo).unwrap() {
        let dir = entry.unwrap().path();
        let config = dir.join("config.toml");
        if dir.is_dir() && !config.exists() {
            std::fs::write(config, "p99_ms = 2000\n").unwrap();
        }
    }
}

/// `mixed`'s graph as model `name`, version 1, with `config` as its config.pbtxt.
fn mixed_with_config(root: &Path, name: &str, config: &str) {
    std::fs::create_dir_all(root.join(name).join("1")).unwrap();
    let graph = root.join(name).join("1/model.onnx");
    std::fs::copy(root.join("mixed/1/model.onnx"), graph).unwrap();
    std::fs::write(root.join(name).join("config.pbtxt"), config).unwrap();
}

/// The repository index's entry of `model`, once it has one.
fn index_entry(server: &Server, model: &str) -> Option<serde_json::Value> {
    let index = server.post_json("/v2/repository/index", &serde_json::json!({}));
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&index.body).ok()?;
    entries.into_iter().find(|e| e["name"] == model)
}

#[test]
fn a_triton_repository_of_onnx_models_gives_onnxruntimes_answers_to_tritonclient() {
    let test = "a_triton_repository_of_onnx_models_gives_onnxruntimes_answers_to_tritonclient";
    let Some(python) = python(test) else { return };
    let repo = TempDir::new("onnx");
    make_models(&python, repo.path(), "all");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let (ok, report) = run_python(
        &python,
        "onnx_check.py",
        &[
            "--url",
            &server.addr.to_string(),
            "--repo",
            repo.path().to_str().unwrap(),
        ],
    );
    assert!(
        ok,
        "onnx_check.py failed:\n{report}\nserver log:\n{}",
        server.log()
    );
    assert!(report.contains("all checks passed"), "{report}");
}

#[test]
fn onnx_models_that_cannot_serve_say_why_and_the_others_serve() {
    let Some(python) = python("onnx_models_that_cannot_serve_say_why_and_the_others_serve") else {
        return;
    };
    let repo = TempDir::new("onnx-bad");
    make_models(&python, repo.path(), "all");
    let root = repo.path();
    // A file that is not ONNX at all.
    std::fs::create_dir_all(root.join("corrupt/1")).unwrap();
    std::fs::write(
        root.join("corrupt/1/model.onnx"),
        b"\x08\x07not a protobuf graph",
    )
    .unwrap();
    // A config that names a datatype the graph does not have.
    let config = std::fs::read_to_string(root.join("mixed/config.pbtxt")).unwrap();
    mixed_with_config(
        root,
        "disagrees",
        &config
            .replace("\"mixed\"", "\"disagrees\"")
            .replacen("TYPE_FP32", "TYPE_INT32", 1),
    );
    // A syntax error on line 2, and a field the configuration has no place for.
    mixed_with_config(root, "typo", "name: \"typo\"\nmax_batch_size: [\n");
    mixed_with_config(root, "unknown", "max_batch_size: 8\nmax_batch: 4\n");
    // A warm-up request of a shape the graph refuses: not ready, with ONNX Runtime's reason.
    let warmup = "model_warmup [ { name: \"bad\" batch_size: 1 inputs { key: \"x\" value: \
                  { data_type: TYPE_FP32 dims: [ 5 ] zero_data: true } } } ]\n";
    mixed_with_config(root, "warmfail", &format!("max_batch_size: 4\n{warmup}"));
    // An MLP of tandem's own, side by side.
    let ckpt = write_version(root, "mlp", 1, &[4, 8, 2], 3);
    answers_not_admission(root);

    let server = Server::spawn(&["--model-repository", root.to_str().unwrap()]);
    let reasons = [
        ("corrupt", "cannot load"),
        ("disagrees", "TYPE_INT32"),
        ("typo", "line 2"),
        ("unknown", "max_batch"),
        ("warmfail", "model_warmup 0 (\"bad\")"),
    ];
    for (model, says) in reasons {
        let reported = poll_until(Duration::from_secs(30), || {
            index_entry(&server, model).is_some_and(|e| e["state"] == "UNAVAILABLE")
        });
        let entry = index_entry(&server, model);
        assert!(reported, "{model}: {entry:?}\n{}", server.log());
        let reason = entry.unwrap()["reason"].as_str().unwrap_or("").to_string();
        assert!(reason.contains(says), "{model}: {reason:?} lacks {says:?}");
        assert_ne!(server.get(&format!("/v2/models/{model}/ready")).status, 200);
    }
    // The others serve, tandem's MLP among them.
    assert!(poll_until(Duration::from_secs(30), || {
        server.get("/v2/models/mixed/ready").status == 200
    }));
    let input = [0.5f32, -1.0, 2.0, 0.25];
    let r = server.post_json("/v2/models/mlp/infer", &infer_body(&input, 1));
    assert_eq!(r.status, 200, "{}", r.text());
    let body = serde_json::json!({"inputs": [
        {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "ids", "datatype": "INT64", "shape": [1, 2], "data": [3, -4]}
    ]});
    let r = server.post_json("/v2/models/mixed/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(answer["outputs"][1]["data"], serde_json::json!([6, -8]));
    let _ = ckpt;
}

#[test]
fn an_onnx_runtime_failure_answers_its_batch_500_and_the_model_keeps_serving() {
    let test = "an_onnx_runtime_failure_answers_its_batch_500_and_the_model_keeps_serving";
    let Some(python) = python(test) else { return };
    let repo = TempDir::new("onnx-fail");
    make_models(&python, repo.path(), "all");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let body = |len: usize| {
        serde_json::json!({"inputs": [
            {"name": "seq", "datatype": "FP32", "shape": [1, len], "data": vec![1.0f32; len]}
        ]})
    };
    // An odd length cannot be reshaped into pairs: ONNX Runtime's own error, as a 500.
    let r = server.post_json("/v2/models/fragile/infer", &body(3));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().to_lowercase().contains("reshape"), "{}", r.text());
    for _ in 0..3 {
        let r = server.post_json("/v2/models/fragile/infer", &body(4));
        assert_eq!(r.status, 200, "{}", r.text());
        let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(answer["outputs"][0]["data"], serde_json::json!([2.0, 2.0]));
    }
    assert_eq!(
        server.series(
            "tandem_requests_total",
            &["model=\"fragile\"", "code=\"500\""]
        ),
        1.0
    );
}

#[test]
fn requests_of_different_shapes_each_get_their_own_rows() {
    let Some(python) = python("requests_of_different_shapes_each_get_their_own_rows") else {
        return;
    };
    let repo = TempDir::new("onnx-shapes");
    make_models(&python, repo.path(), "all");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let addr = server.addr;
    // Sequences of 3 and 5 values, 1 or 2 rows each, sent at once from many threads: each
    // answer holds its own rows' sums, whatever batch its request joined.
    let threads: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let (rows, len) = (1 + i % 2, 3 + 2 * (i % 3 == 0) as usize);
                let data: Vec<f32> = (0..rows * len).map(|v| (v + i) as f32).collect();
                let body = serde_json::json!({"inputs": [
                    {"name": "seq", "datatype": "FP32", "shape": [rows, len], "data": data}
                ]});
                for _ in 0..10 {
                    let r = post_json(addr, "/v2/models/varlen/infer", &body);
                    assert_eq!(r.status, 200, "{}", r.text());
                    let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
                    let want: Vec<f32> = data.chunks(len).map(|row| row.iter().sum()).collect();
                    assert_eq!(answer["outputs"][0]["data"], serde_json::json!(want));
                    assert_eq!(answer["outputs"][0]["shape"], serde_json::json!([rows, 1]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_new_onnx_version_takes_over_live() {
    let Some(python) = python("a_new_onnx_version_takes_over_live") else {
        return;
    };
    let repo = TempDir::new("onnx-swap");
    make_models(&python, repo.path(), "all");
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let body = serde_json::json!({"inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 3, 8, 8], "data": vec![0.5f32; 192]}
    ]});
    let answer = |server: &Server| {
        let r = server.post_json("/v2/models/cnn/infer", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()
    };
    let first = answer(&server);
    assert_eq!(first["model_version"], "1");
    make_models(&python, repo.path(), "cnn-v2");
    // config.pbtxt keeps the newest version only: 2 replaces 1.
    assert!(
        poll_until(Duration::from_secs(30), || {
            server.get("/v2/models/cnn").text().contains("[\"2\"]")
        }),
        "{}",
        server.log()
    );
    let second = answer(&server);
    assert_eq!(second["model_version"], "2");
    assert_ne!(first["outputs"][0]["data"], second["outputs"][0]["data"]);
}

/// Triton's `response_cache { enable: true }` turns the cache on for an ONNX model: a
/// request is one entry, found again whatever outputs it asks for.
#[test]
fn an_onnx_model_with_triton_s_response_cache_answers_a_repeat_from_it() {
    let test = "an_onnx_model_with_triton_s_response_cache_answers_a_repeat_from_it";
    let Some(python) = python(test) else { return };
    let repo = TempDir::new("onnx-cache");
    make_models(&python, repo.path(), "all");
    let pbtxt = repo.path().join("mixed/config.pbtxt");
    let config = std::fs::read_to_string(&pbtxt).unwrap();
    std::fs::write(
        &pbtxt,
        format!("{config}response_cache {{ enable: true }}\n"),
    )
    .unwrap();
    let tandem = repo.path().join("tandem.toml");
    let text = format!(
        "model_repository = \"{}\"\n[cache]\nmax_bytes = 1048576\n",
        repo.path().display()
    );
    std::fs::write(&tandem, text).unwrap();
    let server = Server::start(&["--config", tandem.to_str().unwrap()]);
    let body = |x: f32, outputs: serde_json::Value| {
        serde_json::json!({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": [x, 1, 2, 3, 4, 5, 6, 7]},
            {"name": "ids", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}
        ], "outputs": outputs})
    };
    let infer = |body: &serde_json::Value| {
        let r = server.post_json("/v2/models/mixed/infer", body);
        assert_eq!(r.status, 200, "{}", r.text());
        r
    };
    let all = serde_json::json!([{"name": "sum"}, {"name": "doubled"}]);
    let miss = infer(&body(0.0, all.clone()));
    let hit = infer(&body(0.0, all));
    assert_eq!(miss.header("x-tandem-cache"), Some("miss"));
    assert_eq!(hit.header("x-tandem-cache"), Some("hit"));
    assert_eq!(hit.body, miss.body);
    let only_sum = infer(&body(0.0, serde_json::json!([{"name": "sum"}])));
    assert_eq!(only_sum.header("x-tandem-cache"), Some("hit"));
    assert_eq!(only_sum.json()["outputs"][0], miss.json()["outputs"][0]);
    // Any byte of any input makes another entry.
    let other = infer(&body(0.5, serde_json::json!([{"name": "sum"}])));
    assert_eq!(other.header("x-tandem-cache"), Some("miss"));
    assert_eq!(other.json()["outputs"][0]["data"][0], 1.0);
    let stats = server.get("/v2/models/mixed/stats").json();
    let inference = &stats["model_stats"][0]["inference_stats"];
    assert_eq!(inference["cache_hit"]["count"], 2, "{stats}");
    assert_eq!(inference["cache_miss"]["count"], 2, "{stats}");
}

#[test]
fn without_onnx_runtime_onnx_models_wait_and_the_others_serve() {
    let Some(python) = python("without_onnx_runtime_onnx_models_wait_and_the_others_serve") else {
        return;
    };
    let repo = TempDir::new("onnx-nort");
    make_models(&python, repo.path(), "all");
    write_version(repo.path(), "mlp", 1, &[4, 8, 2], 3);
    let server = Server::spawn_with(
        &["--model-repository", repo.path().to_str().unwrap()],
        |c| {
            c.env_remove("ORT_DYLIB_PATH");
        },
    );
    assert!(poll_until(Duration::from_secs(30), || {
        server.get("/v2/models/mlp/ready").status == 200
    }));
    assert!(poll_until(Duration::from_secs(30), || {
        index_entry(&server, "cnn").is_some_and(|e| e["state"] == "UNAVAILABLE")
    }));
    let reason = index_entry(&server, "cnn").unwrap()["reason"].to_string();
    assert!(
        reason.contains("ORT_DYLIB_PATH") && reason.contains("setup-python.sh"),
        "{reason}"
    );
    // A library of the wrong kind is a clear load error, not a crash.
    let wrong = Server::spawn_with(
        &["--model-repository", repo.path().to_str().unwrap()],
        |c| {
            c.env("ORT_DYLIB_PATH", env!("CARGO_BIN_EXE_tandem"));
        },
    );
    assert!(poll_until(Duration::from_secs(30), || {
        index_entry(&wrong, "cnn").is_some_and(|e| e["state"] == "UNAVAILABLE")
    }));
    let reason = index_entry(&wrong, "cnn").unwrap()["reason"].to_string();
    assert!(reason.contains("ONNX Runtime is not available"), "{reason}");
    assert_eq!(wrong.get("/v2/models/mlp/ready").status, 200);
}
