//! End-to-end: the real binary on 127.0.0.1:0, every endpoint of the v2 protocol, and
//! outputs compared with the float64 reference.

use crate::support::*;
use serde_json::json;

const DIMS: [usize; 3] = [12, 24, 5];

struct Fixture {
    server: Server,
    v1: models::Checkpoint,
    v2: models::Checkpoint,
    _repo: TempDir,
}

fn fixture() -> Fixture {
    let repo = TempDir::new("api");
    let v1 = write_version(repo.path(), "mlp", 1, &DIMS, 1);
    let v2 = write_version(repo.path(), "mlp", 2, &DIMS, 2);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    Fixture {
        server,
        v1,
        v2,
        _repo: repo,
    }
}

#[test]
fn health_server_and_model_metadata() {
    let f = fixture();
    let s = &f.server;
    assert_eq!(s.get("/v2/health/live").status, 200);
    assert_eq!(s.get("/v2/health/ready").status, 200);
    let meta = s.get("/v2").json();
    assert_eq!(meta["name"], "tandem");
    assert!(
        meta["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!("binary_tensor_data"))
    );

    let m = s.get("/v2/models/mlp").json();
    assert_eq!(m["name"], "mlp");
    assert_eq!(m["versions"], json!(["1", "2"]));
    assert_eq!(
        m["inputs"][0],
        json!({"name": "input-0", "datatype": "FP32", "shape": [-1, 12]})
    );
    assert_eq!(
        m["outputs"][0],
        json!({"name": "output-0", "datatype": "FP32", "shape": [-1, 5]})
    );
    assert_eq!(
        s.get("/v2/models/mlp/versions/1").json()["versions"],
        json!(["1"])
    );
    assert_eq!(s.get("/v2/models/mlp/ready").status, 200);
    assert_eq!(s.get("/v2/models/mlp/versions/2/ready").status, 200);

    let r = s.get("/v2/models/nope");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("nope"));
    let r = s.get("/v2/models/mlp/versions/7/ready");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("loaded: 1, 2"));
    assert_eq!(s.get("/v2/nothing/here").status, 404);
    assert_eq!(
        request(s.addr, "DELETE", "/v2/models/mlp", &[], b"").status,
        405
    );
    assert!(
        s.get("/metrics")
            .text()
            .contains("tandem_model_version_loaded")
    );
}

#[test]
fn head_is_get_without_the_body_and_405_names_the_methods() {
    let f = fixture();
    let s = &f.server;
    let get = s.get("/v2/models/mlp");
    // HEAD, then GET on the same keep-alive connection: had the HEAD answer carried its
    // body, the second answer would be read from the middle of it.
    let r = raw(
        s.addr,
        b"HEAD /v2/models/mlp HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /v2/health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let length = get.body.len().to_string();
    assert_eq!(r.header("content-length"), Some(length.as_str()));
    assert!(
        r.body.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "after the HEAD answer: {:?}",
        r.text()
    );
    assert_eq!(request(s.addr, "HEAD", "/metrics", &[], b"").status, 200);
    assert!(
        request(s.addr, "HEAD", "/metrics", &[], b"")
            .body
            .is_empty()
    );

    for (method, path, allow) in [
        ("DELETE", "/v2/models/mlp", "GET, HEAD"),
        ("POST", "/v2/health/ready", "GET, HEAD"),
        ("GET", "/v2/models/mlp/versions/1/infer", "POST"),
        ("HEAD", "/v2/models/mlp/infer", "POST"),
        ("PUT", "/v2/repository/index", "POST"),
    ] {
        let r = request(s.addr, method, path, &[], b"");
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
    }
}

#[test]
fn json_nested_and_flat_match_the_reference_on_every_version() {
    let f = fixture();
    let s = &f.server;
    let rows = 3;
    let x = inputs(rows * DIMS[0], 5);
    let nested: Vec<Vec<f32>> = x.chunks(DIMS[0]).map(|c| c.to_vec()).collect();
    let body_nested = json!({
        "id": "abc-1",
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [rows, DIMS[0]], "data": nested}]
    });
    let r = s.post_json("/v2/models/mlp/infer", &body_nested);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["id"], "abc-1");
    assert_eq!(v["model_name"], "mlp");
    assert_eq!(
        v["model_version"], "2",
        "the newest version serves by default"
    );
    assert_eq!(v["outputs"][0]["shape"], json!([rows, DIMS[2]]));
    assert_close(&r.output_values(), &reference(&f.v2, &x, rows));

    let r = s.post_json("/v2/models/mlp/versions/1/infer", &infer_body(&x, rows));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model_version"], "1");
    assert_close(&r.output_values(), &reference(&f.v1, &x, rows));
}

#[test]
fn other_datatypes_convert_where_exact() {
    let f = fixture();
    let s = &f.server;
    let ints: Vec<i64> = (0..DIMS[0] as i64).map(|i| i - 6).collect();
    let as_f32: Vec<f32> = ints.iter().map(|v| *v as f32).collect();
    let want = reference(&f.v2, &as_f32, 1);
    for dt in ["INT8", "INT16", "INT32", "INT64", "FP64", "FP16", "FP32"] {
        let body = json!({"inputs": [{"name": "input-0", "datatype": dt, "shape": [1, DIMS[0]], "data": ints}]});
        let r = s.post_json("/v2/models/mlp/infer", &body);
        assert_eq!(r.status, 200, "{dt}: {}", r.text());
        assert_close(&r.output_values(), &want);
    }
    let bools: Vec<bool> = (0..DIMS[0]).map(|i| i % 2 == 0).collect();
    let body = json!({"inputs": [{"name": "input-0", "datatype": "BOOL", "shape": [1, DIMS[0]], "data": bools}]});
    let r = s.post_json("/v2/models/mlp/infer", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let as_f32: Vec<f32> = bools.iter().map(|b| *b as u8 as f32).collect();
    assert_close(&r.output_values(), &reference(&f.v2, &as_f32, 1));
}

/// Builds a binary-extension request: JSON header, then the tensor's bytes.
fn binary_request(
    datatype: &str,
    bytes: &[u8],
    rows: usize,
    binary_output: bool,
) -> (Vec<u8>, usize) {
    let header = json!({
        "inputs": [{"name": "input-0", "datatype": datatype, "shape": [rows, DIMS[0]],
                    "parameters": {"binary_data_size": bytes.len()}}],
        "outputs": [{"name": "output-0", "parameters": {"binary_data": binary_output}}]
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend_from_slice(bytes);
    (body, header.len())
}

#[test]
fn binary_extension_both_ways() {
    let f = fixture();
    let s = &f.server;
    let rows = 4;
    let x = inputs(rows * DIMS[0], 9);
    let want = reference(&f.v2, &x, rows);

    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (body, n) = binary_request("FP32", &bytes, rows, true);
    let r = request(
        s.addr,
        "POST",
        "/v2/models/mlp/infer",
        &[("Inference-Header-Content-Length", n.to_string())],
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let header_len: usize = r
        .header("inference-header-content-length")
        .unwrap()
        .parse()
        .unwrap();
    let header: serde_json::Value = serde_json::from_slice(&r.body[..header_len]).unwrap();
    assert_eq!(
        header["outputs"][0]["parameters"]["binary_data_size"],
        rows * DIMS[2] * 4
    );
    let out: Vec<f32> = r.body[header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_close(&out, &want);

    // FP16 and BF16 arrive only this way; the reference takes the same rounded values.
    for (dt, bytes, rounded) in [
        (
            "FP16",
            x.iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect::<Vec<u8>>(),
            x.iter()
                .map(|v| half::f16::from_f32(*v).to_f32())
                .collect::<Vec<f32>>(),
        ),
        (
            "BF16",
            x.iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
            x.iter()
                .map(|v| half::bf16::from_f32(*v).to_f32())
                .collect(),
        ),
    ] {
        let (body, n) = binary_request(dt, &bytes, rows, false);
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[("Inference-Header-Content-Length", n.to_string())],
            &body,
        );
        assert_eq!(r.status, 200, "{dt}: {}", r.text());
        assert!(
            r.header("inference-header-content-length").is_none(),
            "JSON output was asked for"
        );
        assert_close(&r.output_values(), &reference(&f.v2, &rounded, rows));
    }
}

#[test]
fn binary_data_output_parameter_makes_every_output_binary() {
    let f = fixture();
    let x = inputs(DIMS[0], 3);
    let body = json!({
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, DIMS[0]], "data": x}],
        "parameters": {"binary_data_output": true}
    });
    let r = f.server.post_json("/v2/models/mlp/infer", &body);
    assert_eq!(r.status, 200);
    let n: usize = r
        .header("inference-header-content-length")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(r.body.len() - n, DIMS[2] * 4);
}

fn compressed(coding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let level = flate2::Compression::fast();
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
        _ => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    }
}

/// `Content-Encoding: gzip` and `deflate` bodies, JSON and binary, as tritonclient sends
/// them with `request_compression_algorithm`: the binary header length counts the
/// decoded body.
#[test]
fn compressed_request_bodies_are_decoded() {
    let f = fixture();
    let s = &f.server;
    let rows = 3;
    let x = inputs(rows * DIMS[0], 11);
    let want = reference(&f.v2, &x, rows);
    let json_body = infer_body(&x, rows).to_string().into_bytes();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let (binary_body, n) = binary_request("FP32", &bytes, rows, false);
    for coding in ["gzip", "deflate", "x-gzip"] {
        let algorithm = if coding == "deflate" {
            "deflate"
        } else {
            "gzip"
        };
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[("Content-Encoding", coding.to_string())],
            &compressed(algorithm, &json_body),
        );
        assert_eq!(r.status, 200, "{coding}, JSON: {}", r.text());
        assert_close(&r.output_values(), &want);
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[
                ("Content-Encoding", coding.to_string()),
                ("Inference-Header-Content-Length", n.to_string()),
            ],
            &compressed(algorithm, &binary_body),
        );
        assert_eq!(r.status, 200, "{coding}, binary: {}", r.text());
        assert_close(&r.output_values(), &want);
    }
}

/// Triton's statistics extension: per version, what was answered and where the time went.
#[test]
fn statistics_count_requests_rows_and_batches_per_version() {
    let f = fixture();
    let s = &f.server;
    let empty = s.get("/v2/models/mlp/versions/1/stats").json();
    assert_eq!(empty["model_stats"][0]["inference_count"], 0);
    // Two requests of 1 and 3 rows to version 2, one to version 1, one refused by version 2.
    for rows in [1, 3] {
        let x = inputs(rows * DIMS[0], rows as u64);
        let r = s.post_json("/v2/models/mlp/infer", &infer_body(&x, rows));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let x = inputs(DIMS[0], 9);
    let r = s.post_json("/v2/models/mlp/versions/1/infer", &infer_body(&x, 1));
    assert_eq!(r.status, 200);
    let bad = json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]});
    assert_eq!(s.post_json("/v2/models/mlp/infer", &bad).status, 400);

    let all = s.get("/v2/models/mlp/stats").json();
    let stats = all["model_stats"].as_array().unwrap();
    assert_eq!(stats.len(), 2, "{all}");
    let v2 = stats.iter().find(|v| v["version"] == "2").unwrap();
    assert_eq!(v2["name"], "mlp");
    assert_eq!(v2["inference_count"], 4, "rows answered");
    let i = &v2["inference_stats"];
    assert_eq!(i["success"]["count"], 2);
    assert_eq!(i["fail"]["count"], 1);
    for part in ["queue", "compute_input", "compute_infer", "compute_output"] {
        assert_eq!(i[part]["count"], 2, "{part}");
    }
    // The parts fit inside the whole.
    let ns = |part: &str| i[part]["ns"].as_u64().unwrap();
    assert!(ns("compute_infer") > 0);
    assert!(
        ns("compute_input") + ns("queue") + ns("compute_infer") + ns("compute_output")
            <= ns("success") + 1000,
        "{i}"
    );
    // Requests sent one after the other run as batches of their own rows.
    let executions = v2["execution_count"].as_u64().unwrap();
    assert_eq!(executions, 2, "{v2}");
    let sizes: Vec<u64> = v2["batch_stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["batch_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1, 3]);
    assert!(v2["last_inference"].as_u64().unwrap() > 0);

    let v1 = s.get("/v2/models/mlp/versions/1/stats").json();
    assert_eq!(v1["model_stats"][0]["inference_count"], 1);
    let everything = s.get("/v2/models/stats").json();
    assert_eq!(everything["model_stats"].as_array().unwrap().len(), 2);
    assert_eq!(s.get("/v2/models/nope/stats").status, 404);
    assert_eq!(s.get("/v2/models/mlp/versions/5/stats").status, 404);
    assert!(
        s.get("/v2").json()["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!("statistics"))
    );
}

fn decompressed(coding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(data).read_to_end(&mut out),
        _ => flate2::read::ZlibDecoder::new(data).read_to_end(&mut out),
    }
    .unwrap();
    out
}

/// `Accept-Encoding: gzip` or `deflate` (tritonclient's `response_compression_algorithm`):
/// answers of 1 KiB or more come compressed, JSON and binary (whose header length counts
/// the uncompressed body); small ones, and clients that ask for neither, get them as they are.
#[test]
fn responses_are_compressed_when_asked_and_worth_it() {
    let f = fixture();
    let s = &f.server;
    // 60 rows of 5 outputs: 1,200 bytes in binary, more in JSON.
    let rows = 60;
    let x = inputs(rows * DIMS[0], 21);
    let want = reference(&f.v2, &x, rows);
    let body = infer_body(&x, rows).to_string().into_bytes();
    for coding in ["gzip", "deflate"] {
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[("Accept-Encoding", format!("br, {coding}"))],
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-encoding"), Some(coding));
        let plain = HttpResponse {
            body: decompressed(coding, &r.body),
            ..r
        };
        assert!(plain.body.len() >= 1024);
        assert_close(&plain.output_values(), &want);

        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (binary_body, n) = binary_request("FP32", &bytes, rows, true);
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[
                ("Accept-Encoding", coding.to_string()),
                ("Inference-Header-Content-Length", n.to_string()),
            ],
            &binary_body,
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(coding));
        let header_len: usize = r
            .header("inference-header-content-length")
            .unwrap()
            .parse()
            .unwrap();
        let plain = decompressed(coding, &r.body);
        let out: Vec<f32> = plain[header_len..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_close(&out, &want);
    }
    // One row's answer is too small to gain anything; q=0 refuses a coding.
    let one = inputs(DIMS[0], 22);
    for (accept, rows, x) in [("gzip", 1, &one), ("gzip;q=0", rows, &x)] {
        let r = request(
            s.addr,
            "POST",
            "/v2/models/mlp/infer",
            &[("Accept-Encoding", accept.to_string())],
            infer_body(x, rows).to_string().as_bytes(),
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), None, "{accept}");
        assert_close(&r.output_values(), &reference(&f.v2, x, rows));
    }
}
