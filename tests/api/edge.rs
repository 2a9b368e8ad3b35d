//! What the edge does to every request: HTTP/2 by prior knowledge beside HTTP/1.1, with the
//! body limit and a bounded header list; request ids echoed (or made, UUID v7) and stamped
//! on JSON log lines with the route, model, status and latency; CORS preflights answered
//! before any key is asked for; bad settings stop the start with a clear error.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

const DIMS: [usize; 3] = [4, 8, 3];

struct Setup {
    server: Server,
    ckpt: models::Checkpoint,
    _dir: TempDir,
}

fn start(tag: &str, toml: &str, args: &[&str]) -> Setup {
    let dir = TempDir::new(tag);
    let repo = dir.path().join("models");
    let ckpt = write_version(&repo, "mlp", 1, &DIMS, 1);
    let config = dir.path().join("tandem.toml");
    let text = format!("model_repository = \"{}\"\n{toml}", repo.display());
    std::fs::write(&config, text).unwrap();
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let server = Server::start(&all);
    Setup {
        server,
        ckpt,
        _dir: dir,
    }
}

type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// An HTTP/2 connection by prior knowledge (h2c), as hyper's client makes it.
async fn h2c(addr: SocketAddr) -> H2 {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

async fn send(
    h2: &mut H2,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(http::response::Parts, Bytes), hyper::Error> {
    let mut req = http::Request::post(format!("http://localhost{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    h2.ready().await?;
    let (parts, body) = h2.send_request(req).await?.into_parts();
    Ok((parts, body.collect().await?.to_bytes()))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn http2_by_prior_knowledge_serves_concurrent_requests_within_the_limits() {
    let s = start("h2", "[limits]\nmax_body_bytes = 4096\n", &[]);
    let rows = inputs(4, 3);
    let body = infer_body(&rows, 1).to_string();
    let want = reference(&s.ckpt, &rows, 1);
    runtime().block_on(async {
        let h2 = h2c(s.server.addr).await;
        // Sixteen requests at once on one connection, each with its own answer and id.
        let answers = (0..16).map(|_| {
            let (mut h2, body) = (h2.clone(), body.clone());
            tokio::spawn(async move {
                send(&mut h2, "/v2/models/mlp/infer", &[], body.as_bytes()).await
            })
        });
        let answers: Vec<_> = answers.collect();
        let mut ids = std::collections::HashSet::new();
        for answer in answers {
            let (parts, bytes) = answer.await.unwrap().unwrap();
            assert_eq!(parts.version, http::Version::HTTP_2);
            assert_eq!(parts.status, 200, "{}", String::from_utf8_lossy(&bytes));
            let json: Value = serde_json::from_slice(&bytes).unwrap();
            let got: Vec<f32> = json["outputs"][0]["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            assert_close(&got, &want);
            ids.insert(parts.headers["x-request-id"].to_str().unwrap().to_string());
        }
        assert_eq!(ids.len(), 16, "each request its own id");

        // The body limit holds for a stream as for HTTP/1.
        let mut h2b = h2.clone();
        let (parts, _) = send(&mut h2b, "/v2/models/mlp/infer", &[], &vec![b' '; 8192])
            .await
            .unwrap();
        assert_eq!(parts.status, 413);

        // A header list past 64 KiB is refused 431; the connection still serves.
        let big = "x".repeat(80 << 10);
        let mut h2c2 = h2.clone();
        match send(
            &mut h2c2,
            "/v2/models/mlp/infer",
            &[("x-big", &big)],
            body.as_bytes(),
        )
        .await
        {
            Ok((parts, _)) => assert_eq!(parts.status, 431),
            Err(e) => panic!("oversized headers: {e}"),
        }
        let (parts, _) = send(&mut h2c2, "/v2/models/mlp/infer", &[], body.as_bytes())
            .await
            .unwrap();
        assert_eq!(parts.status, 200);
        // HEAD over HTTP/2: GET's headers, no body (a body would be a protocol error).
        let head = http::Request::head("http://localhost/v2/health/ready")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let mut h2h = h2.clone();
        h2h.ready().await.unwrap();
        let answer = h2h.send_request(head).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert!(
            answer
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .is_empty()
        );
    });
    // HTTP/1.1 on the same listener, as before.
    let r = s
        .server
        .post_json("/v2/models/mlp/infer", &infer_body(&rows, 1));
    assert_eq!(r.status, 200);
}

#[test]
fn request_ids_are_echoed_or_made_and_json_log_lines_carry_them() {
    let s = start("ids", "", &["--log-format", "json", "--access-log"]);
    let body = infer_body(&inputs(4, 1), 1);
    let given = [
        ("Content-Type", "application/json".to_string()),
        ("x-request-id", "trace-me-42".into()),
    ];
    let r = request(
        s.server.addr,
        "POST",
        "/v2/models/mlp/infer",
        &given,
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("trace-me-42"));
    // None given, or one that cannot be logged safely: a fresh UUID v7.
    for extra in [vec![], vec![("x-request-id", "bad id".to_string())]] {
        let r = request(
            s.server.addr,
            "POST",
            "/v2/models/mlp/infer",
            &extra,
            body.to_string().as_bytes(),
        );
        let id = r.header("x-request-id").unwrap();
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(&id[14..15], "7", "UUID v7: {id}");
    }
    // An answer from the body limit carries its id too.
    let head = "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                x-request-id: too-big-1\r\nContent-Length: 20000000\r\n\r\n";
    let r = raw(s.server.addr, head.as_bytes()).unwrap();
    assert_eq!(r.status, 413);
    assert_eq!(r.header("x-request-id"), Some("too-big-1"));
    // An error is answered with its id too.
    let r = request(
        s.server.addr,
        "POST",
        "/v2/models/nope/infer",
        &given,
        b"{}",
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-request-id"), Some("trace-me-42"));

    let access = |status: u64| -> Option<Value> {
        s.server
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| {
                l["target"] == "access"
                    && l["status"] == status
                    && l["span"]["request_id"] == "trace-me-42"
            })
    };
    assert!(poll_until(Duration::from_secs(5), || access(404).is_some()));
    for line in s.server.log().lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for key in ["timestamp", "level", "target"] {
            assert!(parsed.get(key).is_some(), "{key} missing: {line}");
        }
    }
    let ok = access(200).unwrap();
    assert_eq!(ok["span"]["request_id"], "trace-me-42", "{ok}");
    assert_eq!(ok["span"]["route"], "/v2/models/mlp/infer");
    assert_eq!(ok["span"]["method"], "POST");
    assert_eq!(ok["span"]["model"], "mlp");
    assert_eq!(ok["level"], "INFO");
    assert!(ok["latency_ms"].as_f64().unwrap() > 0.0, "{ok}");
}

#[test]
fn cors_preflights_are_answered_before_any_key_is_asked_for() {
    let s = start(
        "cors",
        "",
        &[
            "--cors-allow-origin",
            "https://app.example,http://localhost:3000",
            "--api-key",
            "k1",
        ],
    );
    let preflight = |origin: &str| {
        let headers = [
            ("Origin", origin.to_string()),
            ("Access-Control-Request-Method", "POST".into()),
            (
                "Access-Control-Request-Headers",
                "authorization,content-type".into(),
            ),
        ];
        request(s.server.addr, "OPTIONS", "/v1/embeddings", &headers, b"")
    };
    let allowed = preflight("https://app.example");
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let methods = allowed.header("access-control-allow-methods").unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let headers = allowed.header("access-control-allow-headers").unwrap();
    assert!(headers.contains("authorization"), "{headers}");
    let other = preflight("https://evil.example");
    assert_eq!(other.header("access-control-allow-origin"), None);
    // The admin API answers no browser.
    let admin = [
        ("Origin", "https://app.example".to_string()),
        ("Access-Control-Request-Method", "PUT".into()),
    ];
    let r = request(s.server.addr, "OPTIONS", "/admin/log", &admin, b"");
    assert_eq!(
        r.header("access-control-allow-origin"),
        None,
        "{}",
        r.text()
    );

    // The request itself still needs its key, and carries the CORS headers either way.
    let body = infer_body(&inputs(4, 1), 1).to_string();
    let call = |key: Option<&str>| {
        let mut headers = vec![("Origin", "http://localhost:3000".to_string())];
        if let Some(k) = key {
            headers.push(("Authorization", format!("Bearer {k}")));
        }
        request(
            s.server.addr,
            "POST",
            "/v2/models/mlp/infer",
            &headers,
            body.as_bytes(),
        )
    };
    for (key, status) in [(None, 401), (Some("k1"), 200)] {
        let r = call(key);
        assert_eq!(r.status, status, "{}", r.text());
        assert_eq!(
            r.header("access-control-allow-origin"),
            Some("http://localhost:3000")
        );
        let exposed = r.header("access-control-expose-headers").unwrap();
        assert!(exposed.contains("x-request-id"), "{exposed}");
    }
}

#[test]
fn an_unknown_log_format_or_a_bad_origin_stops_the_start_with_a_clear_error() {
    let dir = TempDir::new("edge-bad");
    let repo = dir.path().join("models");
    write_version(&repo, "mlp", 1, &DIMS, 1);
    let repo = repo.to_str().unwrap();
    let fails = |args: &[&str], says: &[&str]| {
        assert_start_fails(&[&["--model-repository", repo], args].concat(), says)
    };
    fails(&["--log-format", "yaml"], &["--log-format", "text", "json"]);
    fails(
        &["--cors-allow-origin", "app.example"],
        &["app.example", "not an origin"],
    );
    fails(
        &["--cors-allow-origin", "*,https://a.example"],
        &["cannot be listed"],
    );
}

#[test]
fn silent_and_idle_connections_are_closed_after_the_header_timeout() {
    use std::io::{Read, Write};
    let s = start("silent", "[limits]\nheader_read_timeout_ms = 1000\n", &[]);
    // A connection that goes on sending requests lives past the timeout.
    let mut kept = std::net::TcpStream::connect(s.server.addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let ask = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n";
    for _ in 0..8 {
        kept.write_all(ask).unwrap();
        let mut answer = [0u8; 512];
        let n = kept.read(&mut answer).unwrap();
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut silent = std::net::TcpStream::connect(s.server.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let began = std::time::Instant::now();
    let mut buf = Vec::new();
    let _ = silent.read_to_end(&mut buf);
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "held {:?}",
        began.elapsed()
    );
    let cut = s.server.series(
        "tandem_http_connections_cut_total",
        &["reason=\"header_timeout\""],
    );
    assert!(cut >= 1.0, "{cut}");

    // An HTTP/2 connection idle for the timeout is closed (GOAWAY), though it answers pings.
    runtime().block_on(async {
        let tcp = tokio::net::TcpStream::connect(s.server.addr).await.unwrap();
        let (mut h2, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .keep_alive_interval(Duration::from_millis(200))
            .timer(hyper_util::rt::TokioTimer::new())
            .handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let body = infer_body(&inputs(4, 1), 1).to_string();
        let path = "/v2/models/mlp/infer";
        let (parts, _) = send(&mut h2, path, &[], body.as_bytes()).await.unwrap();
        assert_eq!(parts.status, 200);
        let closed = tokio::time::timeout(Duration::from_secs(5), conn).await;
        assert!(closed.is_ok(), "an idle HTTP/2 connection stayed open");
    });
}

#[test]
fn an_http2_client_that_never_reads_its_response_is_cut_after_the_write_stall_timeout() {
    let s = start(
        "h2-stall",
        "[limits]\nresponse_write_timeout_ms = 500\n",
        &[],
    );
    let addr = s.server.addr;
    // A window of 0: the server may send headers, and not a byte of a body; of 1: a byte.
    for window in [0, 1] {
        unread(addr, window);
    }
    let cut = s.server.series(
        "tandem_http_connections_cut_total",
        &["reason=\"write_stall\""],
    );
    assert!(cut >= 2.0, "{cut}");
    // The server goes on serving, HTTP/2 clients that read included.
    runtime().block_on(async {
        let mut h2 = h2c(addr).await;
        h2.ready().await.unwrap();
        let ask = http::Request::get(format!("http://{addr}/metrics"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = h2.send_request(ask).await.unwrap();
        assert_eq!(answer.status(), 200);
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert!(body.len() > 1000, "{}", body.len());
    });
}

/// Asks for `/metrics` over HTTP/2 with a stream window of `window` bytes, never reads the
/// answer, and waits for the server to close the connection.
fn unread(addr: SocketAddr, window: u32) {
    runtime().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut h2, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(window)
            .handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        h2.ready().await.unwrap();
        let ask = http::Request::get(format!("http://{addr}/metrics"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = h2.send_request(ask).await.unwrap();
        assert_eq!(answer.status(), 200);
        let began = std::time::Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(10), conn).await;
        assert!(
            closed.is_ok(),
            "an unread HTTP/2 response (window {window}) held its connection"
        );
        assert!(
            began.elapsed() >= Duration::from_millis(400),
            "{:?}",
            began.elapsed()
        );
        drop(answer);
    });
}
