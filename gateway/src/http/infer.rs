//! `POST /v2/models/{m}[/versions/{v}]/infer`: read the head, read the body, admit before
//! parsing, decode, validate, submit, encode. Each step is a function below; admission,
//! submission and the wait belong to the version's inference core ([`crate::infer`]).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::{AppState, body, content_coding, error_response, text};
use crate::batching::feedback::Answered;
use crate::batching::{Completed, Payload};
use crate::error::ApiError;
use crate::infer::{Arrival, Submission};
use crate::metrics as names;
use crate::protocol::response::{self, Encoded, ResponseFields};
use crate::protocol::{InferRequest, binary, json_de, tensor_response};
use crate::registry::ModelVersion;
use crate::stats::RequestTimes;
use crate::validate::{Signature, ValidInput, ValidRequest, validate};

pub const BINARY_HEADER: &str = "inference-header-content-length";
/// The time left to a request's caller, in microseconds, as a proxy or client propagates
/// its own deadline (gRPC's `grpc-timeout` idea): the server counts it from arrival, as it
/// does `parameters.timeout`, and answers 504 at once when nothing is left.
pub const TIMEOUT_HEADER: &str = "tandem-timeout-us";
/// The same in milliseconds, as Envoy sets it on the requests it routes.
pub const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";

/// Answers one infer request, counting it under its model and status.
pub async fn infer(
    state: &AppState,
    model: &str,
    version: Option<String>,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let resolved = state.registry.resolve(model, version.as_deref());
    // Only models that exist become metric labels: the label set stays bounded.
    let label = if resolved.is_ok() { model } else { "_unknown" };
    let response = match resolved {
        Ok(v) => {
            super::access::record_model(&v.name);
            let result = infer_on(state, &v, req, clock, started).await;
            if result.is_err() {
                v.stats.failed(started.elapsed());
            }
            result.unwrap_or_else(|e| error_response(&e))
        }
        Err(e) => error_response(&e.into()),
    };
    let code = response.status().as_u16().to_string();
    metrics::counter!(names::REQUESTS, "model" => label.to_string(), "code" => code).increment(1);
    metrics::histogram!(names::REQUEST_DURATION, "model" => label.to_string())
        .record(started.elapsed().as_secs_f64());
    response
}

/// What the headers say about the body and the answer, read before the body.
pub(super) struct Head {
    /// `Inference-Header-Content-Length`: the JSON part's length in a binary request.
    binary_header_len: Option<usize>,
    /// The caller's remaining time, from the propagation headers.
    propagated: Option<Duration>,
    pub(super) coding: content_coding::Coding,
    answer_coding: content_coding::Coding,
}

pub(super) fn read_head(headers: &HeaderMap) -> Result<Head, ApiError> {
    let binary_header_len = match headers.get(BINARY_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError::malformed(format!(
                        "Inference-Header-Content-Length must be a byte count, got {v:?}"
                    ))
                })?,
        ),
    };
    Ok(Head {
        binary_header_len,
        propagated: propagated_timeout(headers)?,
        coding: content_coding::coding(headers)?,
        answer_coding: content_coding::accepted(headers),
    })
}

/// The caller's remaining time from [`TIMEOUT_HEADER`] or [`ENVOY_TIMEOUT_HEADER`] (the
/// shorter when both are set).
fn propagated_timeout(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let read = |name: &str, unit: fn(u64) -> Duration| -> Result<Option<Duration>, ApiError> {
        let Some(v) = headers.get(name) else {
            return Ok(None);
        };
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|n| Some(unit(n)))
            .ok_or_else(|| ApiError::malformed(format!("{name} must be a whole number, got {v:?}")))
    };
    let us = read(TIMEOUT_HEADER, Duration::from_micros)?;
    let ms = read(ENVOY_TIMEOUT_HEADER, Duration::from_millis)?;
    Ok(us.into_iter().chain(ms).min())
}

/// When the request arrived: when the kernel received its bytes, if that was earlier than
/// the handler started (it waited in the socket while the runtime served others). A
/// client may send any deadline; one an `Instant` cannot hold is no deadline at all.
pub(super) fn arrival_of(started: Instant, clock: &ArrivalClock, head: &Head) -> Arrival {
    let read_from = started.into_std();
    let arrived = clock
        .take()
        .map_or(read_from, |k| k.into_std().min(read_from));
    Arrival {
        arrived,
        read_from,
        deadline: head.propagated.and_then(|t| arrived.checked_add(t)),
    }
}

async fn infer_on(
    state: &AppState,
    version: &ModelVersion,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<Response<Full<Bytes>>, ApiError> {
    let head = read_head(req.headers())?;
    let config = state.config();
    let limit = config.limits.max_body_bytes;
    let body = body::read_body(req.into_body(), limit, config.limits.body_read_timeout()).await?;
    let arrival = arrival_of(started, clock, &head);
    // Before any decompression or parsing: the body is read, so the connection stays
    // usable whatever the answer.
    version.core.admit_unparsed(&arrival)?;
    let body = content_coding::decode(body, head.coding, limit).await?;
    let valid = decode(&body, &head, version)?;
    drop(body);
    let (id, outputs) = (valid.id, valid.outputs);
    let (submission, normalize) =
        submission(version, valid.input, valid.priority, valid.timeout).await?;
    let queued = std::time::Instant::now();
    let rows = submission.outputs;
    let wait = config.limits.request_timeout();
    super::trace::queued(arrival.arrived);
    let mut completed = version.core.submit(submission, &arrival, wait).await?;
    super::trace::answered(completed.queue_time, completed.compute_time);
    let width = version.info.output_width;
    completed.output = text::normalized(completed.output, width, normalize);
    let encoded = match &version.info.input {
        models::InputKind::Tensors(_) => {
            encode_tensors(version, id.as_deref(), &outputs, &completed)?
        }
        _ => encode(version, id.as_deref(), &outputs, rows, &completed)?,
    };
    let response = respond(encoded, head.answer_coding).await;
    record(version, &arrival, queued, rows, &completed);
    Ok(response)
}

/// What goes to the queue: rows as they are, texts tokenized; and whether the answer is to
/// be normalised.
async fn submission(
    version: &ModelVersion,
    input: ValidInput,
    priority: u32,
    timeout: Option<Duration>,
) -> Result<(Submission, bool), ApiError> {
    let rows_of = |input: Payload, rows: usize| Submission {
        input,
        rows,
        outputs: rows,
        priority,
        timeout,
        continues: false,
    };
    match input {
        ValidInput::Dense { values, rows } => Ok((rows_of(Payload::Dense(values), rows), false)),
        ValidInput::Tensors { tensors, rows } => {
            Ok((rows_of(Payload::Tensors(tensors), rows), false))
        }
        ValidInput::Text(t) => {
            let inputs = match t.pairs {
                None => t.texts.into_iter().map(text::Input::Text).collect(),
                Some(pairs) => (t.texts.into_iter().zip(pairs))
                    .map(|(a, b)| text::Input::Pair(a.into(), b))
                    .collect(),
            };
            let tokenized =
                text::tokenize(version, inputs, t.truncation, t.prompt_name.as_deref()).await?;
            Ok((tokenized.submission(priority, timeout), t.normalize))
        }
    }
}

/// The JSON header (and binary section) into a request the model can run.
fn decode(body: &[u8], head: &Head, version: &ModelVersion) -> Result<ValidRequest, ApiError> {
    let (json_part, binary_part) = match head.binary_header_len {
        Some(n) => binary::split(body, n)?,
        None => (body, &[][..]),
    };
    let request: InferRequest = json_de::from_slice(json_part)
        .map_err(|e| ApiError::malformed(format!("invalid inference request JSON: {e}")))?;
    let settings = version.settings();
    let meta = &version.info.metadata;
    let signature = Signature {
        input: &version.info.input,
        input_name: meta.inputs.first().map_or("", |t| t.name.as_str()),
        output_name: meta.outputs.first().map_or("", |t| t.name.as_str()),
    };
    Ok(validate(request, binary_part, &signature, &settings)?)
}

fn encode(
    version: &ModelVersion,
    id: Option<&str>,
    outputs: &[response::OutputRequest],
    rows: usize,
    completed: &Completed,
) -> Result<Encoded, ApiError> {
    let version_label = version.version.to_string();
    let fields = ResponseFields {
        model_name: &version.name,
        model_version: &version_label,
        id,
        rows,
        width: version.info.output_width,
    };
    Ok(response::encode(&fields, outputs, &completed.output)?)
}

fn encode_tensors(
    version: &ModelVersion,
    id: Option<&str>,
    outputs: &[response::OutputRequest],
    completed: &Completed,
) -> Result<Encoded, ApiError> {
    let version_label = version.version.to_string();
    let who = tensor_response::Identity {
        model_name: &version.name,
        model_version: &version_label,
        id,
    };
    Ok(tensor_response::encode(&who, outputs, &completed.tensors)?)
}

/// The response, compressed when the client asked for it and it is worth it. The binary
/// header's length counts the uncompressed body, as Triton's does.
async fn respond(encoded: Encoded, coding: content_coding::Coding) -> Response<Full<Bytes>> {
    let content_type = match encoded.header_len {
        Some(_) => "application/octet-stream",
        None => "application/json",
    };
    let mut resp = content_coding::respond(encoded.body, content_type, coding).await;
    if let Some(n) = encoded.header_len {
        resp.headers_mut().insert(BINARY_HEADER, n.into());
    }
    resp
}

/// The response is written as soon as the handler returns, on this task: the latency the
/// client sees, less the wire. It goes to the feedback loop and the statistics.
pub(super) fn record(
    version: &ModelVersion,
    arrival: &Arrival,
    queued: std::time::Instant,
    rows: usize,
    completed: &Completed,
) {
    let latency = arrival.arrived.elapsed();
    let after_compute = latency.saturating_sub(completed.queue_time + completed.compute_time);
    version.core.answered(Answered {
        latency,
        after_compute,
    });
    // The worker's queue time counts from arrival; the stats split off decoding.
    let input = queued.saturating_duration_since(arrival.arrived);
    version.stats.succeeded(
        rows,
        completed.tokens,
        RequestTimes {
            total: latency,
            input,
            queue: completed.queue_time.saturating_sub(input),
            infer: completed.compute_time,
            output: after_compute,
        },
    );
}
