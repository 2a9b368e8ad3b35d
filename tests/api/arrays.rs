//! A JSON array where the protocol defines an object is malformed input: serde's derived
//! structs would take one, filling the fields by position. On every route a client can
//! reach — infer, the admin API, the repository extension — an array (empty, positional or
//! nested) gets a 400 that says an object was expected, and changes nothing.

use crate::support::*;
use serde_json::{Value, json};

const DIMS: [usize; 3] = [8, 16, 3];

fn start() -> (Server, TempDir) {
    let repo = TempDir::new("arrays");
    write_version(repo.path(), "m", 1, &DIMS, 1);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    (server, repo)
}

fn send(server: &Server, method: &str, path: &str, body: &Value) -> HttpResponse {
    request(
        server.addr,
        method,
        path,
        &[("Content-Type", "application/json".into())],
        body.to_string().as_bytes(),
    )
}

fn assert_refused(server: &Server, method: &str, path: &str, body: &Value) {
    let r = send(server, method, path, body);
    assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.text());
    let error = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("object"),
        "{method} {path} {body}: the error does not say an object was expected: {error}"
    );
}

fn row() -> Vec<f32> {
    inputs(DIMS[0], 1)
}

#[test]
fn infer_takes_objects_only() {
    let (server, _repo) = start();
    let tensor =
        json!({"name": "input-0", "datatype": "FP32", "shape": [1, DIMS[0]], "data": row()});
    let with = |key: &str, value: Value| {
        let mut body = json!({ "inputs": [tensor.clone()] });
        body[key] = value;
        body
    };
    let mut input_params = tensor.clone();
    input_params["parameters"] = json!([]);
    let cases = [
        json!([]),
        json!([null, [tensor.clone()]]),
        json!([[null, [tensor.clone()]]]),
        json!({"inputs": [["input-0", "FP32", [1, DIMS[0]], {}, row()]]}),
        with("outputs", json!([["output-0"]])),
        with("parameters", json!([])),
        with("parameters", json!([1])),
        json!({ "inputs": [input_params] }),
    ];
    for body in &cases {
        assert_refused(&server, "POST", "/v2/models/m/infer", body);
    }
    // The objects those arrays stand for are served.
    let ok = with("parameters", json!({"priority": 1}));
    let r = send(&server, "POST", "/v2/models/m/infer", &ok);
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn the_admin_api_takes_objects_only_and_changes_nothing() {
    let (server, _repo) = start();
    let slo = || server.get("/admin/models/m/slo").json();
    let log = || server.get("/admin/log").json();
    let (slo_before, log_before) = (slo(), log());
    for body in [
        json!([]),
        json!(["static", 10.0, 8, 100, 16]),
        json!([null, null, null, null, null]),
        json!([["static", 10.0]]),
    ] {
        assert_refused(&server, "PUT", "/admin/models/m/slo", &body);
    }
    for body in [json!([]), json!(["info"]), json!([["debug"]])] {
        assert_refused(&server, "PUT", "/admin/log", &body);
    }
    assert_eq!(slo(), slo_before);
    assert_eq!(log(), log_before);
    // The objects are taken.
    let r = send(
        &server,
        "PUT",
        "/admin/models/m/slo",
        &json!({"policy": "static"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(slo()["policy"], "static");
}

#[test]
fn the_repository_extension_takes_objects_only_and_changes_nothing() {
    let (server, _repo) = start();
    for body in [json!([]), json!([true]), json!([{"ready": true}])] {
        assert_refused(&server, "POST", "/v2/repository/index", &body);
    }
    for action in ["load", "unload"] {
        let path = format!("/v2/repository/models/m/{action}");
        for body in [json!([]), json!([{}]), json!([[]])] {
            assert_refused(&server, "POST", &path, &body);
        }
    }
    // Still loaded and serving: the refused unloads unloaded nothing.
    server.assert_serves("m", DIMS[0]);
    let index = send(&server, "POST", "/v2/repository/index", &json!({}));
    assert_eq!(index.status, 200, "{}", index.text());
    assert_eq!(index.json()[0]["state"], "READY", "{}", index.text());
}
