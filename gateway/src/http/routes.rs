//! Routing and handlers for the v2 protocol, `/metrics`, and health.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::{AppState, error_response, json_response};
use super::{body, content_coding};
use crate::batching::Pending;
use crate::batching::feedback::Answered;
use crate::config::PolicyKind;
use crate::error::ApiError;
use crate::metrics as names;
use crate::protocol::response::{self, ResponseFields};
use crate::protocol::{InferRequest, binary, json_de};
use crate::registry::ModelVersion;
use crate::stats::RequestTimes;
use crate::validate::validate;

pub const BINARY_HEADER: &str = "inference-header-content-length";
/// The time left to a request's caller, in microseconds, as a proxy or client propagates
/// its own deadline (gRPC's `grpc-timeout` idea): the server counts it from arrival, as it
/// does `parameters.timeout`, and answers 504 at once when nothing is left.
pub const TIMEOUT_HEADER: &str = "tandem-timeout-us";
/// The same in milliseconds, as Envoy sets it on the requests it routes.
pub const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";

pub async fn handle(
    state: Arc<AppState>,
    req: Request<Limited<Incoming>>,
    metrics_only: bool,
    peer: std::net::SocketAddr,
    arrival: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // Segments as the client meant them: tritonclient percent-encodes a model named `a b`
    // as `a%20b`.
    let decoded: Vec<String> = match path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect()
    {
        Ok(d) => d,
        Err(e) => return error_response(&e),
    };
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    // HEAD is GET without the body (RFC 9110 §9.3.2): routed as GET, and hyper, which
    // remembers the method it parsed, sends the headers and holds the body back.
    let mut req = req;
    if method == Method::HEAD {
        *req.method_mut() = Method::GET;
    }
    let routed = req.method().clone();
    let result = match (metrics_only, &routed, segments.as_slice()) {
        (_, &Method::GET, ["metrics"]) => Ok(metrics(&state)),
        (true, _, _) => Err(not_found(&method, &path)),
        (_, &Method::GET, ["v2"]) => Ok(server_metadata()),
        (_, &Method::GET, ["v2", "health", "live"]) => Ok(empty(StatusCode::OK)),
        (_, &Method::GET, ["v2", "health", "ready"]) => health_ready(&state),
        (_, &Method::GET, ["v2", "models", "stats"]) => statistics(&state, None, None),
        (_, &Method::GET, ["v2", "models", m, "stats"]) => statistics(&state, Some(m), None),
        (_, &Method::GET, ["v2", "models", m, "versions", v, "stats"]) => {
            statistics(&state, Some(m), Some(v))
        }
        (_, &Method::GET, ["v2", "models", m]) => model_metadata(&state, m, None),
        (_, &Method::GET, ["v2", "models", m, "versions", v]) => model_metadata(&state, m, Some(v)),
        (_, &Method::GET, ["v2", "models", m, "config"]) => model_config(&state, m, None),
        (_, &Method::GET, ["v2", "models", m, "versions", v, "config"]) => {
            model_config(&state, m, Some(v))
        }
        (_, &Method::GET, ["v2", "models", m, "ready"]) => model_ready(&state, m, None),
        (_, &Method::GET, ["v2", "models", m, "versions", v, "ready"]) => {
            model_ready(&state, m, Some(v))
        }
        (_, &Method::POST, ["v2", "models", m, "infer"]) => {
            let (m, v) = (m.to_string(), None);
            return infer(&state, &m, v, req, arrival).await;
        }
        (_, &Method::POST, ["v2", "models", m, "versions", v, "infer"]) => {
            let (m, v) = (m.to_string(), Some(v.to_string()));
            return infer(&state, &m, v, req, arrival).await;
        }
        (_, &Method::POST, ["v2", "repository", "index"]) => {
            super::repository::index(&state, req).await
        }
        (_, &Method::POST, ["v2", "repository", "models", m, "load"]) => {
            let m = m.to_string();
            super::repository::load(&state, &m, req, peer).await
        }
        (_, &Method::POST, ["v2", "repository", "models", m, "unload"]) => {
            let m = m.to_string();
            super::repository::unload(&state, &m, req, peer).await
        }
        (_, _, ["admin", ..]) => {
            let segments: Vec<String> = segments.iter().map(|s| s.to_string()).collect();
            super::admin::handle(&state, req, peer, &segments).await
        }
        _ => match allowed_methods(&segments) {
            Some(allow) => Err(ApiError::MethodNotAllowed {
                method: method.to_string(),
                path: path.clone(),
                allow,
            }),
            None => Err(not_found(&method, &path)),
        },
    };
    result.unwrap_or_else(|e| error_response(&e))
}

/// A path segment with its `%XX` escapes decoded; the result must be UTF-8.
fn percent_decode(segment: &str) -> Result<String, ApiError> {
    if !segment.contains('%') {
        return Ok(segment.to_string());
    }
    let bad = || {
        ApiError::Malformed(format!(
            "the path segment {segment:?} is not valid percent-encoded UTF-8"
        ))
    };
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let digit = |b: u8| (b as char).to_digit(16).ok_or_else(bad);
            out.push((digit(hex[0])? * 16 + digit(hex[1])?) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The methods routed at this path, for a 405's `Allow` header; `None` where nothing is
/// (a 404). `/admin/` answers its own.
fn allowed_methods(segments: &[&str]) -> Option<&'static str> {
    const READ: &str = "GET, HEAD";
    match segments {
        ["metrics"] | ["v2"] | ["v2", "health", "live" | "ready"] => Some(READ),
        ["v2", "repository", "index"] => Some("POST"),
        ["v2", "repository", "models", _, "load" | "unload"] => Some("POST"),
        ["v2", "models", _] | ["v2", "models", _, "versions", _] => Some(READ),
        ["v2", "models", _, last] | ["v2", "models", _, "versions", _, last] => match *last {
            "infer" => Some("POST"),
            "ready" | "config" | "stats" => Some(READ),
            _ => None,
        },
        _ => None,
    }
}

fn not_found(method: &Method, path: &str) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: path.to_string(),
    }
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

fn metrics(state: &AppState) -> Response<Full<Bytes>> {
    let loaded: Vec<(String, u64)> = state
        .registry
        .all()
        .iter()
        .map(|v| (v.name.clone(), v.version))
        .collect();
    let mut text = state.metrics.render();
    text.push_str(&names::render_loaded_versions(&loaded));
    let mut r = Response::new(Full::new(Bytes::from(text)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

fn server_metadata() -> Response<Full<Bytes>> {
    let body = json!({
        "name": "tandem",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": ["binary_tensor_data", "model_configuration", "model_repository", "statistics"],
    });
    json_response(StatusCode::OK, body.to_string().into_bytes())
}

fn health_ready(state: &AppState) -> Result<Response<Full<Bytes>>, ApiError> {
    if state.draining.load(std::sync::atomic::Ordering::Acquire) {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    if !state.is_ready() {
        return Err(ApiError::Unavailable(
            "models are still loading and warming up".into(),
        ));
    }
    Ok(empty(StatusCode::OK))
}

fn model_metadata(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let v = state.registry.resolve(model, version)?;
    let versions: Vec<String> = match version {
        Some(_) => vec![v.version.to_string()],
        None => state
            .registry
            .versions(model)
            .iter()
            .map(|v| v.to_string())
            .collect(),
    };
    let meta = &v.info.metadata;
    let body = json!({
        "name": v.name,
        "versions": versions,
        "platform": "tandem_mlp",
        "inputs": meta.inputs,
        "outputs": meta.outputs,
    });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

/// `GET /v2/models[/{m}[/versions/{v}]]/stats`: Triton's statistics of every loaded
/// version, of every version of one model, or of one version ([`crate::stats`]).
fn statistics(
    state: &AppState,
    model: Option<&str>,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let versions = match (model, version) {
        (None, _) => state.registry.all(),
        (Some(m), Some(v)) => vec![state.registry.resolve(m, Some(v))?],
        (Some(m), None) => {
            let all: Vec<_> = state
                .registry
                .all()
                .into_iter()
                .filter(|v| v.name == m)
                .collect();
            if all.is_empty() {
                return Err(ApiError::UnknownModel {
                    model: m.to_string(),
                });
            }
            all
        }
    };
    let model_stats: Vec<serde_json::Value> = versions
        .iter()
        .map(|v| v.stats.to_json(&v.name, v.version))
        .collect();
    let body = json!({ "model_stats": model_stats });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

/// `GET /v2/models/{m}[/versions/{v}]/config`: the settings a version serves with, in the
/// shape of Triton's model configuration, for `tritonclient`'s `get_model_config` and the
/// tools that read `max_batch_size` and the tensors' dims from it (dims without the batch
/// dimension, as Triton gives them when `max_batch_size` > 0). What Triton's schema has no
/// field for (the policy, the p99 budget) is under `parameters`, as Triton's string
/// parameters.
fn model_config(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let v = state.registry.resolve(model, version)?;
    let s = v.settings();
    let tensor = |name: &str, width: usize| json!({"name": name, "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [width]});
    let text = |value: String| json!({ "string_value": value });
    let policy = match s.policy {
        PolicyKind::Adaptive => "adaptive",
        PolicyKind::Static => "static",
    };
    let kind = if v.info.device.starts_with("cuda") {
        "KIND_GPU"
    } else {
        "KIND_CPU"
    };
    let body = json!({
        "name": v.name,
        "platform": "tandem_mlp",
        "backend": "tandem",
        "max_batch_size": s.max_batch_size,
        "input": [tensor("input-0", v.info.input_width)],
        "output": [tensor("output-0", v.info.output_width)],
        "instance_group": [{"name": v.name, "kind": kind, "count": s.replicas}],
        "dynamic_batching": {
            "max_queue_delay_microseconds": s.max_queue_delay_us,
            "priority_levels": s.priority_levels,
            "default_priority_level": s.default_priority,
            "default_queue_policy": {
                "default_timeout_microseconds": s.default_timeout_us,
                "max_queue_size": s.queue_capacity,
            },
        },
        "parameters": {
            "policy": text(policy.to_string()),
            "p99_ms": text(s.p99_ms.to_string()),
            "device": text(v.info.device.clone()),
            "version": text(v.version.to_string()),
        },
    });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

fn model_ready(
    state: &AppState,
    model: &str,
    version: Option<&str>,
) -> Result<Response<Full<Bytes>>, ApiError> {
    state.registry.resolve(model, version)?;
    Ok(empty(StatusCode::OK))
}

/// The caller's remaining time from [`TIMEOUT_HEADER`] or [`ENVOY_TIMEOUT_HEADER`] (the
/// shorter when both are set).
fn propagated_timeout(headers: &http::HeaderMap) -> Result<Option<Duration>, ApiError> {
    let read = |name: &str, unit: fn(u64) -> Duration| -> Result<Option<Duration>, ApiError> {
        let Some(v) = headers.get(name) else {
            return Ok(None);
        };
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|n| Some(unit(n)))
            .ok_or_else(|| ApiError::Malformed(format!("{name} must be a whole number, got {v:?}")))
    };
    let us = read(TIMEOUT_HEADER, Duration::from_micros)?;
    let ms = read(ENVOY_TIMEOUT_HEADER, Duration::from_millis)?;
    Ok(us.into_iter().chain(ms).min())
}

/// `arrived + timeout`. A client may send any u64; a sum an `Instant` cannot hold (plain
/// addition panics there) is no deadline at all.
fn deadline_after(arrived: Instant, timeout: Duration) -> Option<Instant> {
    arrived.checked_add(timeout)
}

/// `POST /v2/models/{m}[/versions/{v}]/infer`.
async fn infer(
    state: &AppState,
    model: &str,
    version: Option<String>,
    req: Request<Limited<Incoming>>,
    arrival: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let mut arrived = Instant::now();
    let resolved = state.registry.resolve(model, version.as_deref());
    // Only models that exist become metric labels: the label set stays bounded.
    let label = if resolved.is_ok() { model } else { "_unknown" };
    let result = match resolved {
        Ok(v) => {
            let result = infer_on(state, &v, req, arrival, &mut arrived).await;
            if result.is_err() {
                v.stats.failed(arrived.elapsed());
            }
            result
        }
        Err(e) => Err(e),
    };
    let response = result.unwrap_or_else(|e| error_response(&e));
    let code = response.status().as_u16().to_string();
    metrics::counter!(names::REQUESTS, "model" => label.to_string(), "code" => code).increment(1);
    metrics::histogram!(names::REQUEST_DURATION, "model" => label.to_string())
        .record(arrived.elapsed().as_secs_f64());
    response
}

/// What a request refused for lateness is told to wait: the server cannot tell how long
/// its backlog of unread requests takes to drain (the header's resolution is a second).
const LATE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A request refused before its body was parsed: counted where the batcher counts its own
/// refusals (`counter`, one of `version.unparsed_refusals`, and the trainer coordinator's
/// reading).
fn refused_unparsed(
    version: &ModelVersion,
    counter: &metrics::Counter,
    message: String,
    retry_after: Duration,
    reason: &'static str,
) -> ApiError {
    counter.increment(1);
    version.health.add_turned_away(1);
    ApiError::Overloaded {
        message,
        retry_after,
        reason,
    }
}

async fn infer_on(
    state: &AppState,
    version: &Arc<ModelVersion>,
    req: Request<Limited<Incoming>>,
    arrival: &ArrivalClock,
    arrived: &mut Instant,
) -> Result<Response<Full<Bytes>>, ApiError> {
    // Until the kernel's stamp replaces it below: when hyper handed the headers over.
    let read_from = *arrived;
    let header_len = match req.headers().get(BINARY_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError::Malformed(format!(
                        "Inference-Header-Content-Length must be a byte count, got {v:?}"
                    ))
                })?,
        ),
    };
    let propagated = propagated_timeout(req.headers())?;
    let coding = content_coding::coding(req.headers())?;
    let answer_coding = content_coding::accepted(req.headers());
    let config = state.config();
    let limit = config.limits.max_body_bytes;
    let body = body::read_body(req.into_body(), limit, config.limits.body_read_timeout()).await?;
    // The request arrived when the kernel received its bytes, if that was earlier than the
    // handler started (it waited in the socket while the runtime served others).
    if let Some(kernel) = arrival.take() {
        *arrived = kernel.min(*arrived);
    }
    let arrived = *arrived;
    // A caller with no time left gets its answer before any parsing (the body is read, so
    // the connection stays usable).
    let propagated_deadline = propagated.and_then(|t| deadline_after(arrived, t));
    if propagated_deadline.is_some_and(|d| d <= Instant::now()) {
        return Err(ApiError::DeadlineExceeded {
            waited_ms: arrived.elapsed().as_millis() as u64,
        });
    }
    // Shedding: refuse before parsing.
    if let Some(retry_after) = version.health.shedding() {
        return Err(refused_unparsed(
            version,
            &version.unparsed_refusals.shed,
            format!(
                "over capacity: model {:?} is shedding load; retry after the queue drains",
                version.name
            ),
            retry_after,
            "shed",
        ));
    }
    // A request that cannot be answered within the policy's horizon of its arrival even at
    // the most urgent priority (the queue ahead is too long, or it waited too long in its
    // socket) is refused unparsed: the batcher would refuse it whatever its body. Alone in
    // front of an idle device the batcher admits anything, but one that sat unread past the
    // horizon (and a couple of milliseconds) is refused here all the same: the front end is
    // behind, and parsing bodies only to refuse them or answer them late takes the cores the
    // next requests need, until every request arrives late (1,000 connections offering
    // 20,000 req/s: 97% of the CPU went to the HTTP threads and 250–600 req/s were
    // answered; benches/README.md, "Refused before parsing").
    let late = version
        .health
        .too_late(arrived.into_std(), read_from.into_std());
    if let Some(after) = late {
        return Err(refused_unparsed(
            version,
            &version.unparsed_refusals.late,
            format!(
                "over capacity: model {:?} could answer this request {:.1} ms after it \
                 arrived at the earliest, past its budget; retry when the load eases",
                version.name,
                after.as_secs_f64() * 1e3
            ),
            LATE_RETRY_AFTER,
            "late",
        ));
    }
    // Inflated only now: a request refused above costs no decompression.
    let body = content_coding::decode(body, coding, limit).await?;
    let (json_part, binary_part) = match header_len {
        Some(n) => binary::split(&body, n)?,
        None => (&body[..], &[][..]),
    };
    let request: InferRequest = json_de::from_slice(json_part)
        .map_err(|e| ApiError::Malformed(format!("invalid inference request JSON: {e}")))?;
    let settings = version.settings();
    let valid = validate(request, binary_part, version.info.input_width, &settings)?;
    drop(body);

    let (tx, rx) = oneshot::channel();
    let rows = valid.rows;
    let pending = Pending {
        input: valid.input,
        rows,
        priority: valid.priority,
        enqueued: arrived,
        deadline: valid
            .timeout
            .and_then(|t| deadline_after(arrived, t))
            .into_iter()
            .chain(propagated_deadline)
            .min(),
        reply: tx,
    };
    let queued = Instant::now();
    version.requests.try_send(pending).map_err(|e| match e {
        tokio::sync::mpsc::error::TrySendError::Full(_) => ApiError::Overloaded {
            message: format!(
                "model {:?} has {} requests waiting to be queued",
                version.name, settings.queue_capacity
            ),
            retry_after: std::time::Duration::from_secs(1),
            reason: "queue_full",
        },
        tokio::sync::mpsc::error::TrySendError::Closed(_) => {
            ApiError::Unavailable(format!("model {:?} is unloading", version.name))
        }
    })?;
    let timeout = config.limits.request_timeout();
    let completed = match tokio::time::timeout(timeout, rx).await {
        Err(_) => return Err(ApiError::Timeout(timeout)),
        Ok(Err(_)) => {
            return Err(ApiError::ModelFailure(
                "the request was dropped by its worker".into(),
            ));
        }
        Ok(Ok(reply)) => reply?,
    };
    let version_label = version.version.to_string();
    let fields = ResponseFields {
        model_name: &version.name,
        model_version: &version_label,
        id: valid.id.as_deref(),
        rows,
        width: version.info.output_width,
    };
    let encoded = response::encode(&fields, &valid.outputs, &completed.output)?;
    // The binary header's length counts the uncompressed body, as Triton's does.
    let compressed = answer_coding != content_coding::Coding::Identity
        && encoded.body.len() >= content_coding::MIN_COMPRESSED;
    let body = if compressed {
        content_coding::encode(encoded.body, answer_coding).await
    } else {
        encoded.body
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    let headers = resp.headers_mut();
    if compressed {
        headers.insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static(answer_coding.name()),
        );
    }
    if answer_coding != content_coding::Coding::Identity {
        headers.insert(
            header::VARY,
            header::HeaderValue::from_static("accept-encoding"),
        );
    }
    match encoded.header_len {
        Some(n) => {
            headers.insert(BINARY_HEADER, n.into());
            headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/octet-stream"),
            );
        }
        None => {
            headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
        }
    }
    // The response is written as soon as this returns, on this task: this is the latency
    // the client sees, less the wire.
    let latency = arrived.elapsed();
    let after_compute = latency.saturating_sub(completed.queue_time + completed.compute_time);
    version.responses.record(Answered {
        latency,
        after_compute,
    });
    // The worker's queue time counts from arrival; the stats split off decoding.
    let input = queued.saturating_duration_since(arrived);
    version.stats.succeeded(
        rows,
        RequestTimes {
            total: latency,
            input,
            queue: completed.queue_time.saturating_sub(input),
            infer: completed.compute_time,
            output: after_compute,
        },
    );
    Ok(resp)
}
