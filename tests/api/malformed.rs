//! Bad input gets a clear error and loses nothing: each malformed request below gets the
//! right 4xx with a JSON `{"error": ...}` naming the problem, and the server answers the
//! next valid request correctly.

use crate::support::*;
use serde_json::{Value, json};

const DIMS: [usize; 3] = [12, 16, 4];
const MAX_BODY: usize = 65536;

enum Body {
    Json(Value),
    Text(&'static str),
    /// A binary-extension body: JSON header, its declared length, and the bytes after it.
    Binary(Value, Option<String>, Vec<u8>),
    Raw(Vec<u8>),
    /// Bytes sent with this `Content-Encoding`.
    Encoded(&'static str, Vec<u8>),
}

struct Case {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    body: Body,
    status: u16,
    /// Words the error message must contain.
    mentions: &'static [&'static str],
}

fn row() -> Vec<f32> {
    (0..DIMS[0]).map(|i| i as f32 * 0.1).collect()
}

fn input(datatype: &str, shape: Value, data: Value) -> Value {
    json!({"inputs": [{"name": "input-0", "datatype": datatype, "shape": shape, "data": data}]})
}

/// An FP32 input of shape `[1, width]` whose `data`, after the shape, holds `values` ones.
fn shape_then_data(width: usize, values: usize) -> Vec<u8> {
    let data = vec!["1.0"; values].join(",");
    format!(
        r#"{{"inputs":[{{"name":"input-0","datatype":"FP32","shape":[1,{width}],"data":[{data}]}}]}}"#
    )
    .into_bytes()
}

fn binary_header(datatype: &str, shape: Value, size: usize) -> Value {
    json!({"inputs": [{"name": "input-0", "datatype": datatype, "shape": shape,
                       "parameters": {"binary_data_size": size}}]})
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn cases() -> Vec<Case> {
    let ok_row = json!([row()]);
    let w = DIMS[0];
    let mut nan_row = row();
    nan_row[3] = f32::NAN;
    let infer = "/v2/models/m/infer";
    let c = |name, body, status, mentions| Case {
        name,
        method: "POST",
        path: infer,
        body,
        status,
        mentions,
    };
    vec![
        c("not json", Body::Text("this is not json"), 400, &["JSON"]),
        c("empty body", Body::Text(""), 400, &["JSON"]),
        c("json array", Body::Json(json!([1, 2])), 400, &["JSON"]),
        c("missing inputs", Body::Json(json!({"id": "x"})), 400, &["inputs"]),
        c("no inputs", Body::Json(json!({"inputs": []})), 400, &["input-0"]),
        c("wrong input name", Body::Json(json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, w], "data": ok_row}]})), 400, &["input-0", "x"]),
        c("two inputs", Body::Json(json!({"inputs": [
            {"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row},
            {"name": "input-1", "datatype": "FP32", "shape": [1, w], "data": ok_row}]})), 400, &["exactly one"]),
        c("unknown datatype", Body::Json(input("FP8", json!([1, w]), ok_row.clone())), 400, &["FP8", "FP32"]),
        c("bytes datatype", Body::Json(input("BYTES", json!([1, w]), ok_row.clone())), 400, &["BYTES"]),
        c("1-d shape", Body::Json(input("FP32", json!([w]), ok_row.clone())), 400, &["shape", "[rows, 12]"]),
        c("wrong width", Body::Json(input("FP32", json!([1, w + 1]), ok_row.clone())), 400, &["12", "13"]),
        c("zero rows", Body::Json(input("FP32", json!([0, w]), json!([]))), 400, &["rows >= 1"]),
        c("negative rows", Body::Json(input("FP32", json!([-1, w]), ok_row.clone())), 400, &["shape"]),
        c("huge shape", Body::Json(input("FP32", json!([i64::MAX, w]), ok_row.clone())), 400, &["max_batch_size"]),
        c("data shorter than shape", Body::Json(input("FP32", json!([2, w]), ok_row.clone())), 400, &["24 values", "12"]),
        c("string in data", Body::Json(input("FP32", json!([1, w]), json!(vec!["1"; 12]))), 400, &["JSON"]),
        c("null in data", Body::Json(input("FP32", json!([1, w]), json!(vec![Value::Null; 12]))), 400, &["JSON"]),
        c("object in data", Body::Json(input("FP32", json!([1, w]), json!([{"a": 1}]))), 400, &["JSON"]),
        c("INT8 out of range", Body::Json(input("INT8", json!([1, w]), json!(vec![300; 12]))), 400, &["element 0", "range", "INT8"]),
        c("INT32 fraction", Body::Json(input("INT32", json!([1, w]), json!([1, 1.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]))), 400, &["element 1", "integer"]),
        c("UINT8 negative", Body::Json(input("UINT8", json!([1, w]), json!(vec![-1; 12]))), 400, &["range"]),
        c("BOOL given numbers", Body::Json(input("BOOL", json!([1, w]), json!(vec![2; 12]))), 400, &["BOOL"]),
        c("FP32 given booleans", Body::Json(input("FP32", json!([1, w]), json!(vec![true; 12]))), 400, &["boolean"]),
        c("FP32 overflow", Body::Json(input("FP32", json!([1, w]), json!(vec![1e39; 12]))), 400, &["range"]),
        c("INT32 not exact in FP32", Body::Json(input("INT32", json!([1, w]), json!(vec![16777217; 12]))), 400, &["exactly"]),
        c("rows over max_batch_size", Body::Json(input("FP32", json!([9, w]), json!(vec![row(); 9]))), 400, &["max_batch_size", "8"]),
        c("NaN in binary FP32", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), None, f32_bytes(&nan_row)), 400, &["element 3", "finite"]),
        c("binary size beyond the body", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), None, f32_bytes(&row()[..6])), 400, &["binary_data_size"]),
        c("binary size not matching shape", Body::Binary(binary_header("FP32", json!([1, w]), w * 4 - 4), None, f32_bytes(&row()[..w - 1])), 400, &["takes 48 bytes"]),
        c("header length beyond the body", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), Some("100000".into()), f32_bytes(&row())), 400, &["Inference-Header-Content-Length"]),
        c("header length not a number", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), Some("twelve".into()), f32_bytes(&row())), 400, &["byte count"]),
        c("bytes no input claims", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), None, [f32_bytes(&row()), vec![0; 8]].concat()), 400, &["8 bytes"]),
        c("binary length cut mid-header", Body::Binary(binary_header("FP32", json!([1, w]), w * 4), Some("20".into()), f32_bytes(&row())), 400, &["JSON"]),
        c("data and binary size", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row, "parameters": {"binary_data_size": 48}}]})), 400, &["both"]),
        c("neither data nor binary", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w]}]})), 400, &["neither"]),
        c("unknown output", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row}], "outputs": [{"name": "logits"}]})), 400, &["logits", "output-0"]),
        c("output twice", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row}], "outputs": [{"name": "output-0"}, {"name": "output-0"}]})), 400, &["twice"]),
        c("priority out of range", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row}], "parameters": {"priority": 99}})), 400, &["priority", "99"]),
        c("priority not a number", Body::Json(json!({"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, w], "data": ok_row}], "parameters": {"priority": "high"}})), 400, &["JSON"]),
        c("unknown field", Body::Json(json!({"inputs": [], "extra": 1})), 400, &["extra"]),
        c("trailing garbage", Body::Text("{\"inputs\": []} xyz"), 400, &["JSON"]),
        c("number beyond f64", Body::Raw(format!("{{\"inputs\":[{{\"name\":\"input-0\",\"datatype\":\"FP32\",\"shape\":[1,12],\"data\":[1e400{}]}}]}}", ",1".repeat(11)).into_bytes()), 400, &["JSON", "out of range"]),
        c("number cut short", Body::Raw(format!("{{\"inputs\":[{{\"name\":\"input-0\",\"datatype\":\"FP32\",\"shape\":[1,12],\"data\":[1.{}]}}]}}", ",1".repeat(11)).into_bytes()), 400, &["JSON", "invalid number"]),
        c("deep nesting", Body::Raw(format!("{{\"inputs\":[{{\"name\":\"input-0\",\"datatype\":\"FP32\",\"shape\":[1,12],\"data\":{}1{}}}]}}", "[".repeat(500), "]".repeat(500)).into_bytes()), 400, &["JSON"]),
        Case { name: "unknown model", method: "POST", path: "/v2/models/nope/infer", body: Body::Json(input("FP32", json!([1, w]), ok_row.clone())), status: 404, mentions: &["nope"] },
        Case { name: "unknown version", method: "POST", path: "/v2/models/m/versions/9/infer", body: Body::Json(input("FP32", json!([1, w]), ok_row.clone())), status: 404, mentions: &["9", "loaded: 1"] },
        Case { name: "non-numeric version", method: "POST", path: "/v2/models/m/versions/latest/infer", body: Body::Json(input("FP32", json!([1, w]), ok_row.clone())), status: 404, mentions: &["latest"] },
        Case { name: "GET on infer", method: "GET", path: infer, body: Body::Text(""), status: 405, mentions: &["GET"] },
        c("oversized body", Body::Raw(vec![b' '; MAX_BODY + 1]), 413, &["65536"]),
        c("gzip that is not", Body::Encoded("gzip", input("FP32", json!([1, w]), ok_row.clone()).to_string().into_bytes()), 400, &["gzip"]),
        c("deflate cut short", Body::Encoded("deflate", zlib(&input("FP32", json!([1, w]), ok_row.clone()).to_string().into_bytes())[..40].to_vec()), 400, &["deflate"]),
        c("brotli", Body::Encoded("br", b"whatever".to_vec()), 415, &["br", "gzip, deflate"]),
        c("two codings", Body::Encoded("deflate, gzip", b"whatever".to_vec()), 415, &["deflate and gzip"]),
        c("INT64 below its range", Body::Raw(raw_data("INT64", "-9223372036854775809")), 400, &["element 0", "range"]),
        c("UINT64 beyond its range", Body::Raw(raw_data("UINT64", "18446744073709551616")), 400, &["element 0", "range"]),
        c("INT64 not exact in f64", Body::Raw(raw_data("INT64", "9007199254740993")), 400, &["element 0", "exactly"]),
        c("binary INT64 max", Body::Binary(binary_header("INT64", json!([1, w]), w * 8), None, ints(i64::MAX.to_le_bytes())), 400, &["element 0", "exactly"]),
        c("binary UINT64 max", Body::Binary(binary_header("UINT64", json!([1, w]), w * 8), None, ints(u64::MAX.to_le_bytes())), 400, &["element 0", "exactly"]),
        // The shape before the data, as clients write it: the reader stops at the 13th value.
        c("data far longer than its shape", Body::Raw(shape_then_data(w, 5000)), 400, &["more than the 12 values"]),
        Case { name: "bad percent-encoding", method: "POST", path: "/v2/models/%zz/infer", body: Body::Json(input("FP32", json!([1, w]), ok_row.clone())), status: 400, mentions: &["percent-encoded"] },
        c("gzip of empty members", Body::Encoded("gzip", empty_gzip_members(3000)), 400, &["gzip members"]),
        // About 16 KB that inflates to 16 MB, against a 64 KiB limit.
        c("deflate bomb", Body::Encoded("deflate", zlib(&vec![b' '; 16 << 20])), 413, &["deflate", "65536"]),
    ]
}

/// A JSON request whose first of 12 values is `first`, written as given.
fn raw_data(datatype: &str, first: &str) -> Vec<u8> {
    format!(
        "{{\"inputs\":[{{\"name\":\"input-0\",\"datatype\":\"{datatype}\",\"shape\":[1,12],\"data\":[{first}{}]}}]}}",
        ",1".repeat(11)
    )
    .into_bytes()
}

/// 12 binary 64-bit values: `first`, then ones.
fn ints(first: [u8; 8]) -> Vec<u8> {
    let mut bytes = first.to_vec();
    for _ in 0..11 {
        bytes.extend_from_slice(&1u64.to_le_bytes());
    }
    bytes
}

/// `n` gzip members holding nothing, then one holding a request.
fn empty_gzip_members(n: usize) -> Vec<u8> {
    use std::io::Write;
    let gzip = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let empty = gzip(b"");
    let mut body: Vec<u8> = empty
        .iter()
        .copied()
        .cycle()
        .take(empty.len() * n)
        .collect();
    body.extend(gzip(
        &input("FP32", json!([1, 12]), json!([row()]))
            .to_string()
            .into_bytes(),
    ));
    body
}

fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn send(addr: std::net::SocketAddr, case: &Case) -> HttpResponse {
    match &case.body {
        Body::Encoded(coding, b) => request(
            addr,
            case.method,
            case.path,
            &[("Content-Encoding", coding.to_string())],
            b,
        ),
        Body::Json(v) => request(addr, case.method, case.path, &[], v.to_string().as_bytes()),
        Body::Text(t) => request(addr, case.method, case.path, &[], t.as_bytes()),
        Body::Raw(b) => request(addr, case.method, case.path, &[], b),
        Body::Binary(header, declared, bytes) => {
            let h = header.to_string();
            let mut body = h.clone().into_bytes();
            body.extend_from_slice(bytes);
            let n = declared.clone().unwrap_or(h.len().to_string());
            request(
                addr,
                case.method,
                case.path,
                &[("Inference-Header-Content-Length", n)],
                &body,
            )
        }
    }
}

#[test]
fn every_malformed_request_gets_its_4xx_and_the_server_keeps_serving() {
    let repo = TempDir::new("malformed");
    let ckpt = write_version(repo.path(), "m", 1, &DIMS, 4);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            // A budget no stall of a loaded test machine reaches: these requests are to be
            // judged on their bodies, not refused unread.
            "model_repository = \"{}\"\n[defaults]\nmax_batch_size = 8\np99_ms = 2000\n[limits]\nmax_body_bytes = {MAX_BODY}\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let good = infer_body(&row(), 1);
    let want = reference(&ckpt, &row(), 1);
    let cases = cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for case in &cases {
        let r = send(server.addr, case);
        assert_eq!(r.status, case.status, "{}: {}", case.name, r.text());
        let msg = r.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no error field", case.name))
            .to_string();
        for word in case.mentions {
            assert!(
                msg.contains(word),
                "{}: {msg:?} does not mention {word:?}",
                case.name
            );
        }
        if r.status == 415 {
            // RFC 9110: a refused content coding is answered with the ones we take.
            assert_eq!(
                r.header("accept-encoding"),
                Some("gzip, deflate"),
                "{}",
                case.name
            );
        }
        let ok = server.post_json("/v2/models/m/infer", &good);
        assert_eq!(ok.status, 200, "after {}: {}", case.name, ok.text());
        assert_close(&ok.output_values(), &want);
    }
}

#[test]
fn oversized_chunked_bodies_are_cut_off_with_413() {
    let repo = TempDir::new("chunked");
    write_version(repo.path(), "m", 1, &DIMS, 4);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[limits]\nmax_body_bytes = {MAX_BODY}\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let chunk = vec![b' '; 40_000];
    let mut req = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..2 {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(&chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let r = raw(server.addr, &req).unwrap();
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("limit"));
    assert_eq!(
        server
            .post_json("/v2/models/m/infer", &infer_body(&row(), 1))
            .status,
        200
    );
}

/// Sends `head` on a fresh connection, then nothing more, and returns what the server
/// wrote before it closed the connection and how long it held it.
fn stall(addr: std::net::SocketAddr, head: &[u8]) -> (String, std::time::Duration) {
    use std::io::{Read, Write};
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(head).unwrap();
    let started = std::time::Instant::now();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    (
        String::from_utf8_lossy(&buf).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn slow_clients_are_cut_off_by_the_header_and_body_timeouts() {
    let repo = TempDir::new("slow");
    write_version(repo.path(), "m", 1, &DIMS, 4);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[limits]\nheader_read_timeout_ms = 300\nbody_read_timeout_ms = 300\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let held_briefly = |held: std::time::Duration| held < std::time::Duration::from_secs(5);

    // Headers never finished: closed without an answer.
    let (_, held) = stall(server.addr, b"GET /v2 HTTP/1.1\r\nHost: x\r\n");
    assert!(held_briefly(held), "connection held for {held:?}");

    // Headers sent, the body stalls halfway, on the inference and the admin routes: 408,
    // and the connection closes (what is left of the body cannot be told from a request).
    for path in ["/v2/models/m/infer", "/admin/models/m/slo"] {
        let method = if path.starts_with("/admin") {
            "PUT"
        } else {
            "POST"
        };
        let head =
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{\"inp");
        let (answer, held) = stall(server.addr, head.as_bytes());
        assert!(held_briefly(held), "{path}: connection held for {held:?}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{path}: {answer}"
        );
        assert!(answer.contains("did not arrive within"), "{path}: {answer}");
    }

    assert_eq!(
        server
            .post_json("/v2/models/m/infer", &infer_body(&row(), 1))
            .status,
        200
    );
    let metrics = server.get("/metrics").text();
    assert!(metrics.contains("code=\"408\""), "{metrics}");
    assert!(
        metrics.contains("tandem_http_connections_cut_total{reason=\"header_timeout\"}"),
        "{metrics}"
    );
}

#[test]
fn propagated_deadlines_are_honoured_and_bad_ones_refused() {
    let repo = TempDir::new("deadline-header");
    let ckpt = write_version(repo.path(), "m", 1, &DIMS, 4);
    let server = Server::start(&["--model-repository", repo.path().to_str().unwrap()]);
    let body = infer_body(&row(), 1).to_string();
    let want = reference(&ckpt, &row(), 1);
    let infer = |headers: &[(&str, String)]| {
        request(
            server.addr,
            "POST",
            "/v2/models/m/infer",
            headers,
            body.as_bytes(),
        )
    };
    let header = |name: &'static str, v: &str| (name, v.to_string());
    // Time to spare: served as usual, in either unit, up to more than any clock holds.
    for h in [
        header("tandem-timeout-us", "5000000"),
        header("x-envoy-expected-rq-timeout-ms", "5000"),
        header("tandem-timeout-us", &u64::MAX.to_string()),
        header("x-envoy-expected-rq-timeout-ms", &u64::MAX.to_string()),
    ] {
        let r = infer(std::slice::from_ref(&h));
        assert_eq!(r.status, 200, "{h:?}: {}", r.text());
        assert_close(&r.output_values(), &want);
    }
    // Nothing left, alone or as the shorter of the two: 504 at once, without parsing.
    for hs in [
        vec![header("tandem-timeout-us", "0")],
        vec![
            header("tandem-timeout-us", "0"),
            header("x-envoy-expected-rq-timeout-ms", "5000"),
        ],
        vec![header("x-envoy-expected-rq-timeout-ms", "0")],
    ] {
        let r = infer(&hs);
        assert_eq!(r.status, 504, "{hs:?}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("deadline"));
    }
    for (name, v) in [
        ("tandem-timeout-us", "soon"),
        ("tandem-timeout-us", "-5"),
        ("x-envoy-expected-rq-timeout-ms", "1.5"),
    ] {
        let r = infer(&[header(name, v)]);
        assert_eq!(r.status, 400, "{name}: {v}: {}", r.text());
        let msg = r.json()["error"].as_str().unwrap().to_string();
        assert!(msg.contains(name), "{msg}");
    }
    // The same in the request's own parameters.
    let mut endless = infer_body(&row(), 1);
    endless["parameters"] = serde_json::json!({ "timeout": u64::MAX });
    let r = server.post_json("/v2/models/m/infer", &endless);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_close(&r.output_values(), &want);
    let r = infer(&[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_close(&r.output_values(), &want);
}

#[test]
fn a_client_that_never_reads_its_responses_loses_its_connection() {
    use std::io::Write;
    // Wide outputs: each response is megabytes, so a few fill the socket buffers.
    const WIDE: [usize; 2] = [4, 4096];
    let rows = 64;
    let repo = TempDir::new("unread");
    write_version(repo.path(), "wide", 1, &WIDE, 4);
    let config = repo.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "model_repository = \"{}\"\n[limits]\nresponse_write_timeout_ms = 1000\n",
            repo.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let open_connections = || {
        let metrics = server.get("/metrics").text();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("tandem_http_connections "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("tandem_http_connections")
    };

    let input: Vec<f32> = (0..rows * WIDE[0]).map(|i| i as f32 * 0.01).collect();
    let body = infer_body(&input, rows).to_string();
    let one = format!(
        "POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut greedy = std::net::TcpStream::connect(server.addr).unwrap();
    // Eight pipelined requests, about 25 MB of answers, and not one byte read.
    greedy.write_all(one.repeat(8).as_bytes()).unwrap();
    // Counted open first (at once: the stall alone takes a second), then closed.
    assert!(
        poll_until(std::time::Duration::from_secs(20), || open_connections()
            >= 2.0),
        "the greedy connection was never counted"
    );
    assert!(
        poll_until(std::time::Duration::from_secs(20), || open_connections()
            <= 1.0),
        "the unread connection is still open; log:\n{}",
        server.log()
    );
    // Serving goes on, on the same model.
    let r = server.post_json("/v2/models/wide/infer", &infer_body(&input, rows));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.output_values().len(), rows * WIDE[1]);
    let metrics = server.get("/metrics").text();
    assert!(
        metrics.contains("tandem_http_connections_cut_total{reason=\"write_stall\"} 1"),
        "{metrics}"
    );
    drop(greedy);
}
