//! API keys on the inference routes: each API family refuses a request without a key or
//! with a wrong one (401, `WWW-Authenticate: Bearer`, its own error shape) and serves one
//! with a key from the flags or the key file; health, readiness and `/metrics` stay open;
//! the key file is read again on SIGHUP; a key file with an empty line stops the start with
//! a clear error; the openai client, tritonclient and huggingface_hub, given the key, work
//! unchanged.

use std::process::Command;
use std::time::Duration;

use crate::support::text::*;
use crate::support::*;
use serde_json::{Value, json};

struct Setup {
    server: Server,
    keys: std::path::PathBuf,
    _dir: TempDir,
}

fn start() -> Setup {
    let dir = TempDir::new("auth");
    let repo = dir.path().join("models");
    synthetic(&repo.join("enc/1"), 7);
    std::fs::write(repo.join("enc/config.toml"), "p99_ms = 2000\n").unwrap();
    write_version(&repo, "mlp", 1, &[4, 8, 3], 1);
    let keys = dir.path().join("keys");
    std::fs::write(&keys, "from-file\n").unwrap();
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\napi_keys_file = \"keys\"\n",
            repo.display()
        ),
    )
    .unwrap();
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--api-key",
        "from-flag",
    ];
    let server = Server::start(&args);
    Setup {
        server,
        keys,
        _dir: dir,
    }
}

fn post(server: &Server, path: &str, body: &Value, key: Option<&str>) -> HttpResponse {
    let auth = key.map(|k| ("authorization", format!("Bearer {k}")));
    let headers: Vec<(&str, String)> = auth.into_iter().collect();
    request(
        server.addr,
        "POST",
        path,
        &headers,
        body.to_string().as_bytes(),
    )
}

/// A family's name, a route of it, a body it serves, and how its error reads.
type Route = (&'static str, &'static str, Value, fn(&Value) -> bool);

fn routes() -> Vec<Route> {
    vec![
        (
            "v2",
            "/v2/models/mlp/infer",
            infer_body(&inputs(4, 1), 1),
            |e| e["error"].is_string(),
        ),
        (
            "openai",
            "/v1/embeddings",
            json!({"model": "enc", "input": ["a cat"]}),
            |e| e["error"]["type"] == "authentication_error",
        ),
        ("tei", "/embed", json!({"inputs": "a cat"}), |e| {
            e["error"].is_string() && e["error_type"].is_string()
        }),
        (
            "cohere",
            "/v2/embed",
            json!({"model": "enc", "texts": ["a cat"], "input_type": "search_document",
                   "embedding_types": ["float"]}),
            |e| e["message"].is_string(),
        ),
    ]
}

fn unauthorized(server: &Server, family: &str) -> f64 {
    let label = format!("family=\"{family}\"");
    let text = server.get("/metrics").text();
    text.lines()
        .filter(|l| l.starts_with("tandem_http_unauthorized_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn every_api_requires_a_key_and_health_and_metrics_stay_open() {
    let s = start();
    for (family, path, body, shaped) in routes() {
        for key in [None, Some("wrong"), Some("from-fla")] {
            let r = post(&s.server, path, &body, key);
            assert_eq!(r.status, 401, "{family} {key:?}: {}", r.text());
            assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{family}");
            assert!(shaped(&r.json()), "{family}: {}", r.text());
        }
        for key in ["from-flag", "from-file"] {
            let r = post(&s.server, path, &body, Some(key));
            assert_eq!(r.status, 200, "{family} {key}: {}", r.text());
        }
        assert_eq!(unauthorized(&s.server, family), 3.0, "{family}");
    }
    // Metadata is an API route too; health, readiness and metrics are not.
    assert_eq!(s.server.get("/v2/models/mlp").status, 401);
    assert_eq!(s.server.get("/v1/models").status, 401);
    for open in ["/v2/health/ready", "/v2/health/live", "/health", "/metrics"] {
        assert_eq!(s.server.get(open).status, 200, "{open}");
    }
    // Nothing logged the keys.
    let log = s.server.log();
    assert!(!log.contains("from-flag") && !log.contains("from-file"));
}

#[test]
fn the_key_file_is_read_again_on_sighup() {
    let s = start();
    let (_, path, body, _) = routes().remove(0);
    assert_eq!(post(&s.server, path, &body, Some("from-file")).status, 200);
    std::fs::write(&s.keys, "rotated\n").unwrap();
    unsafe { libc::kill(s.server.pid(), libc::SIGHUP) };
    let rotated = poll_until(Duration::from_secs(10), || {
        post(&s.server, path, &body, Some("rotated")).status == 200
    });
    assert!(rotated, "the new key never worked:\n{}", s.server.log());
    assert_eq!(post(&s.server, path, &body, Some("from-file")).status, 401);
    assert_eq!(post(&s.server, path, &body, Some("from-flag")).status, 200);
    // A broken file on reload is refused, and the keys in force stay.
    std::fs::write(&s.keys, "one\n\ntwo\n").unwrap();
    unsafe { libc::kill(s.server.pid(), libc::SIGHUP) };
    s.server
        .assert_logs_within(Duration::from_secs(10), "config reload failed");
    assert_eq!(post(&s.server, path, &body, Some("rotated")).status, 200);
}

#[test]
fn a_key_file_with_an_empty_line_stops_the_start_with_a_clear_error() {
    let dir = TempDir::new("auth-bad");
    let repo = dir.path().join("models");
    write_version(&repo, "mlp", 1, &[4, 8, 3], 1);
    let keys = dir.path().join("keys");
    std::fs::write(&keys, "one\n\ntwo\n").unwrap();
    let config = dir.path().join("tandem.toml");
    let toml = format!(
        "model_repository = \"{}\"\napi_keys_file = \"{}\"\n",
        repo.display(),
        keys.display()
    );
    std::fs::write(&config, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "",
            "--config",
        ])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("line 2") && stderr.contains("empty"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", ""])
        .args(["--api-key", "has space"])
        .args(["--model-repository", repo.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key"));
}

/// Real clients, given the key their own way, work unchanged; a wrong one is refused as
/// each reports it: the openai client's `api_key` (`AuthenticationError`), tritonclient's
/// `headers` (`InferenceServerException` with status 401), huggingface_hub's `token`
/// (`HfHubHTTPError` with status 401).
#[test]
fn real_clients_send_their_api_key() {
    let Ok(python) = std::env::var("TANDEM_PYTHON") else {
        assert!(
            std::env::var_os("TANDEM_REQUIRE_TOOLS").is_none(),
            "TANDEM_PYTHON not set (scripts/test.sh sets it)"
        );
        kernels::cuda::report_skip("real_clients_send_their_api_key", "no TANDEM_PYTHON");
        return;
    };
    let s = start();
    let script = r#"
import sys, openai
url = sys.argv[1]
ok = openai.OpenAI(base_url=f"http://{url}/v1", api_key="from-file")
r = ok.embeddings.create(model="enc", input=["a cat"])
assert len(r.data[0].embedding) > 0
bad = openai.OpenAI(base_url=f"http://{url}/v1", api_key="wrong", max_retries=0)
try:
    bad.embeddings.create(model="enc", input=["a cat"])
    sys.exit("no error with a wrong key")
except openai.AuthenticationError as e:
    assert e.status_code == 401, e

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
triton = httpclient.InferenceServerClient(url)
x = httpclient.InferInput("input-0", [1, 4], "FP32")
x.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
answer = triton.infer("mlp", [x], headers={"Authorization": "Bearer from-flag"})
assert answer.as_numpy("output-0").shape == (1, 3)
try:
    triton.infer("mlp", [x], headers={"Authorization": "Bearer wrong"})
    sys.exit("tritonclient: no error with a wrong key")
except InferenceServerException as e:
    assert e.status() == "401", e.status()

from huggingface_hub import InferenceClient
from huggingface_hub.errors import HfHubHTTPError
hf = InferenceClient(model=f"http://{url}", token="from-file")
assert hf.feature_extraction("a cat").shape[-1] > 0
try:
    InferenceClient(model=f"http://{url}", token="wrong").feature_extraction("a cat")
    sys.exit("huggingface_hub: no error with a wrong key")
except HfHubHTTPError as e:
    assert e.response.status_code == 401, e
print("ok")
"#;
    let out = Command::new(python)
        .args(["-c", script, &s.server.addr.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
