//! Traces over OTLP: a real receiver (hyper, decoding with the opentelemetry-proto
//! definitions) gets each request's spans — `request` continuing the client's
//! `traceparent`, with `admission`, `queue`, `batch` (holding `forward`) and `write` under
//! it, in time order and inside it, with the request's method, path, status, id and model;
//! a malformed `traceparent` starts a new trace with a warning and the request is served;
//! an endpoint tandem cannot use stops the start.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The spans received, with their resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP receiver on a free port, on its own thread.
fn receiver() -> (SocketAddr, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let sink = sink.clone();
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let sink = sink.clone();
                        async move {
                            assert_eq!(req.uri().path(), "/v1/traces");
                            let body = req.into_body().collect().await?.to_bytes();
                            let export =
                                ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                            for resource in export.resource_spans {
                                let service = resource
                                    .resource
                                    .iter()
                                    .flat_map(|r| &r.attributes)
                                    .find(|a| a.key == "service.name")
                                    .map(|a| text(a.value.as_ref()))
                                    .unwrap_or_default();
                                for scope in resource.scope_spans {
                                    for span in scope.spans {
                                        sink.lock().unwrap().push((service.clone(), span));
                                    }
                                }
                            }
                            Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::new())))
                        }
                    });
                tokio::spawn(async move {
                    let http1 = hyper::server::conn::http1::Builder::new();
                    let _ = http1.serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
    });
    (rx.recv().unwrap(), received)
}

fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|a| (a.key.clone(), text(a.value.as_ref())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn start(collector: SocketAddr) -> (Server, TempDir) {
    let dir = TempDir::new("otlp");
    write_version(dir.path(), "mlp", 1, &[4, 8, 3], 1);
    let endpoint = format!("http://{collector}");
    let args = [
        "--model-repository",
        dir.path().to_str().unwrap(),
        "--otlp-endpoint",
        &endpoint,
        "--otlp-service-name",
        "tandem-under-test",
    ];
    let server = Server::start_with(&args, |c| {
        c.env("OTEL_BSP_SCHEDULE_DELAY", "100");
    });
    (server, dir)
}

/// A single-row inference with this `traceparent` and request id, answered 200.
fn infer(server: &Server, traceparent: &str, id: &str) {
    let body = infer_body(&inputs(4, 1), 1).to_string();
    let headers = [
        ("traceparent", traceparent.to_string()),
        ("x-request-id", id.to_string()),
    ];
    let path = "/v2/models/mlp/infer";
    let r = request(server.addr, "POST", path, &headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[test]
fn each_request_exports_its_spans_under_the_callers_trace() {
    let (collector, received) = receiver();
    let (server, _dir) = start(collector);
    infer(&server, &format!("00-{TRACE}-{PARENT}-01"), "traced-1");

    let names = ["request", "admission", "queue", "batch", "forward", "write"];
    let ours = || -> Vec<(String, Span)> {
        let all = received.lock().unwrap();
        all.iter()
            .filter(|(_, s)| hex(&s.trace_id) == TRACE)
            .cloned()
            .collect()
    };
    assert!(
        poll_until(Duration::from_secs(10), || ours().len() >= names.len()),
        "spans received: {:?}\n{}",
        ours()
            .iter()
            .map(|(_, s)| s.name.clone())
            .collect::<Vec<_>>(),
        server.log()
    );
    let spans: HashMap<String, (String, Span)> = ours()
        .into_iter()
        .map(|(svc, s)| (s.name.clone(), (svc, s)))
        .collect();
    for name in names {
        assert!(spans.contains_key(name), "no {name} span");
    }
    let (service, request) = &spans["request"];
    assert_eq!(service, "tandem-under-test");
    assert_eq!(
        hex(&request.parent_span_id),
        PARENT,
        "continues the caller's span"
    );
    let attrs = attributes(request);
    assert_eq!(attrs["http.request.method"], "POST");
    assert_eq!(attrs["url.path"], "/v2/models/mlp/infer");
    assert_eq!(attrs["http.response.status_code"], "200");
    assert_eq!(attrs["tandem.request_id"], "traced-1");
    assert_eq!(attrs["tandem.model"], "mlp");
    let within = |inner: &Span, outer: &Span| {
        inner.start_time_unix_nano >= outer.start_time_unix_nano
            && inner.end_time_unix_nano <= outer.end_time_unix_nano
            && inner.start_time_unix_nano <= inner.end_time_unix_nano
    };
    for name in ["admission", "queue", "batch", "write"] {
        let span = &spans[name].1;
        assert_eq!(span.parent_span_id, request.span_id, "{name} under request");
        assert!(
            within(span, request),
            "{name} inside request: {span:?} {request:?}"
        );
    }
    let (batch, forward) = (&spans["batch"].1, &spans["forward"].1);
    assert_eq!(forward.parent_span_id, batch.span_id, "forward under batch");
    let order = ["admission", "queue", "batch", "write"].map(|n| spans[n].1.start_time_unix_nano);
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "phases in order: {order:?}"
    );
}

#[test]
fn a_malformed_traceparent_starts_a_new_trace_with_a_warning() {
    let (collector, received) = receiver();
    let (server, _dir) = start(collector);
    infer(&server, "00-not-a-trace-01", "malformed-1");
    server.assert_logs_within(Duration::from_secs(5), "ignoring a malformed traceparent");
    let root = || {
        received.lock().unwrap().iter().find_map(|(_, s)| {
            let ours = s.name == "request" && attributes(s)["tandem.request_id"] == "malformed-1";
            ours.then(|| s.clone())
        })
    };
    assert!(poll_until(Duration::from_secs(10), || root().is_some()));
    let span = root().unwrap();
    assert!(span.parent_span_id.is_empty(), "a root span");
    assert_eq!(span.trace_id.len(), 16);
}

#[test]
fn an_endpoint_tandem_cannot_use_stops_the_start() {
    let dir = TempDir::new("otlp-bad");
    write_version(dir.path(), "mlp", 1, &[4, 8, 3], 1);
    let repo = dir.path().to_str().unwrap();
    for (endpoint, says) in [
        ("collector:4318", "http://host:port"),
        ("https://collector:4318", "http://host:port"),
    ] {
        let args = ["--model-repository", repo, "--otlp-endpoint", endpoint];
        assert_start_fails(&args, &["--otlp-endpoint", says]);
    }
}
