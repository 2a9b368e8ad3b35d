//! The embedding endpoints users already call, on the same inference core as v2: what they
//! share (reading the body, admitting, tokenizing and running a request, counting it), and
//! OpenAI's `POST /v1/embeddings` (`model`, `input` as a string, token ids, or an array of
//! either, `encoding_format` `float` or `base64`; `dimensions` refused), answered in OpenAI's
//! shape with `usage.prompt_tokens`, its errors in OpenAI's error object, and 429s that carry
//! `retry-after-ms` beside `Retry-After` (the `openai` client honours both). TEI's API is in
//! [`super::tei`].
//!
//! Inputs are truncated at the model's limit unless a request says `truncate: false`; then
//! an over-long input is a 400 that says how many tokens it has and how many fit. Token ids
//! are the model's own (its tokenizer's, special tokens included), as OpenAI's, vLLM's and
//! TEI's servers take them.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::infer::{arrival_of, read_head, record};
use super::inputs::{Input, Inputs, MAX_TEXTS};
use super::{AppState, body, content_coding, error_response, text};
use crate::error::ApiError;
use crate::metrics as names;
use crate::protocol::json_de;
use crate::registry::ModelVersion;

/// OpenAI's request; other fields (`user`) are accepted and ignored, as OpenAI does.
#[derive(Debug, Deserialize)]
pub(crate) struct OpenAiRequest {
    pub(crate) model: String,
    pub(crate) input: Inputs,
    #[serde(default)]
    pub(crate) encoding_format: Option<String>,
    #[serde(default)]
    pub(crate) dimensions: Option<serde_json::Value>,
    /// tandem's addition, as TEI's: the prompt put before each text, by name.
    #[serde(default)]
    pub(crate) prompt_name: Option<String>,
}

/// What a text request asks for, whichever API it came through.
pub(super) struct Ask {
    pub(super) inputs: Vec<Input>,
    pub(super) truncate: bool,
    /// L2-normalise what comes back: an embedding model's default when `None`; never for a
    /// classifier's logits.
    pub(super) normalize: Option<bool>,
    pub(super) prompt_name: Option<String>,
    pub(super) task: Task,
}

/// What an endpoint serves, which the model must do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Task {
    Embed,
    Classify,
}

/// What came back.
pub(super) struct Outputs {
    /// Row-major `[texts, width]`.
    pub(super) values: Vec<f32>,
    pub(super) width: usize,
    pub(super) tokens: usize,
}

/// `input`/`inputs`: a string, an array of token ids, or an array of strings and arrays of
/// ids; at least one input, no text empty.
pub(crate) fn inputs(field: &str, inputs: Inputs) -> Result<Vec<Input>, ApiError> {
    let inputs = match inputs {
        Inputs::List(inputs) => inputs,
        Inputs::TooMany(n) => {
            return Err(ApiError::invalid(format!(
                "{field} holds {n} texts; a request takes at most {MAX_TEXTS}"
            )));
        }
        Inputs::Invalid => {
            return Err(ApiError::invalid(format!(
                "{field} must be a string, an array of token ids, or an array of strings and \
                 arrays of token ids (integers from 0)"
            )));
        }
    };
    if inputs.is_empty() {
        return Err(ApiError::invalid(format!("{field} holds no text")));
    }
    let empty = |input: &Input| matches!(input, Input::Text(t) if t.is_empty());
    if let Some(i) = inputs.iter().position(empty) {
        return Err(ApiError::invalid(format!("{field}: text {i} is empty")));
    }
    Ok(inputs)
}

/// A request read whole, decoded from its content coding, with when it arrived.
pub(super) struct Received {
    pub(super) body: Bytes,
    pub(super) arrival: crate::infer::Arrival,
}

/// Reads the body (bounded in size and time) and decodes it. Both APIs name the model in
/// the body, so admission comes after this read, before tokenizing: the expensive part.
pub(super) async fn receive(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<Received, ApiError> {
    let head = read_head(req.headers())?;
    let config = state.config();
    let limit = config.limits.max_body_bytes;
    let body = body::read_body(req.into_body(), limit, config.limits.body_read_timeout()).await?;
    let arrival = arrival_of(started, clock, &head);
    let body = content_coding::decode(body, head.coding, limit).await?;
    Ok(Received { body, arrival })
}

/// Admits, tokenizes and runs one text request on `version`.
pub(super) async fn run(
    state: &AppState,
    version: &ModelVersion,
    arrival: &crate::infer::Arrival,
    ask: Ask,
) -> Result<Outputs, ApiError> {
    let classifier = text::text_model(version)?.input.is_classifier();
    match (ask.task, classifier) {
        (Task::Embed, true) => {
            return Err(ApiError::invalid(format!(
                "model {:?} is a classifier: it answers /predict, /rerank and v2 infer \
                 (logits), not embeddings",
                version.name
            )));
        }
        (Task::Classify, false) => {
            return Err(ApiError::invalid(format!(
                "model {:?} gives embeddings, not scores: /predict and /rerank take a \
                 classifier (BertForSequenceClassification)",
                version.name
            )));
        }
        _ => {}
    }
    version.core.admit_unparsed(arrival)?;
    let settings = version.settings();
    if ask.inputs.len() > settings.max_batch_size {
        return Err(ApiError::invalid(format!(
            "{} texts exceed the model's max_batch_size of {}",
            ask.inputs.len(),
            settings.max_batch_size
        )));
    }
    let normalize = ask
        .normalize
        .unwrap_or(text::text_model(version)?.input.normalize_by_default);
    let tokenized = text::tokenize(
        version,
        ask.inputs,
        ask.truncate,
        ask.prompt_name.as_deref(),
    )
    .await?;
    let tokens = tokenized.count;
    let timeout = (settings.default_timeout_us > 0)
        .then(|| std::time::Duration::from_micros(settings.default_timeout_us));
    let submission = tokenized.submission(settings.default_priority, timeout);
    let rows = submission.outputs;
    let queued = std::time::Instant::now();
    let wait = state.config().limits.request_timeout();
    let completed = version.core.submit(submission, arrival, wait).await?;
    record(version, arrival, queued, rows, &completed);
    let width = version.info.output_width;
    Ok(Outputs {
        values: text::normalized(completed.output, width, normalize),
        width,
        tokens,
    })
}

/// Counts an embedding request as v2's infer does, whatever its outcome:
/// `tandem_requests_total{model, code}` and its duration, under `_unknown` when no model was
/// resolved (the label set stays bounded), and a failure in the version's statistics.
fn count(version: Option<&ModelVersion>, response: &Response<Full<Bytes>>, started: Instant) {
    let label = version.map_or("_unknown".to_string(), |v| v.name.clone());
    if let Some(v) = version
        && !response.status().is_success()
    {
        v.stats.failed(started.elapsed());
    }
    let code = response.status().as_u16().to_string();
    metrics::counter!(names::REQUESTS, "model" => label.clone(), "code" => code).increment(1);
    metrics::histogram!(names::REQUEST_DURATION, "model" => label)
        .record(started.elapsed().as_secs_f64());
}

/// `POST /v1/embeddings`.
pub async fn openai(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let (version, result) = match read_openai(state, req, clock, started).await {
        Err(e) => (None, Err(e)),
        Ok((received, request)) => match state.registry.resolve(&request.model, None) {
            Err(e) => (None, Err(e.into())),
            Ok(version) => {
                let answer = answer_openai(state, &version, received, request).await;
                (Some(version), answer)
            }
        },
    };
    let answer = Answered {
        version,
        result,
        started,
    };
    answer.respond(coding, openai_error).await
}

/// What an embedding handler came to, to be answered and counted.
pub(super) struct Answered {
    pub(super) version: Option<Arc<ModelVersion>>,
    pub(super) result: Result<Vec<u8>, ApiError>,
    pub(super) started: Instant,
}

impl Answered {
    /// The body in the coding the client accepts, or the error in its API's shape; counted
    /// either way.
    pub(super) async fn respond(
        self,
        coding: content_coding::Coding,
        error: fn(&ApiError) -> Response<Full<Bytes>>,
    ) -> Response<Full<Bytes>> {
        let response = match self.result {
            Ok(body) => content_coding::respond(body, "application/json", coding).await,
            Err(e) => error(&e),
        };
        count(self.version.as_deref(), &response, self.started);
        response
    }
}

async fn read_openai(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<(Received, OpenAiRequest), ApiError> {
    let received = receive(state, req, clock, started).await?;
    let request = parse_openai(&received.body)?;
    Ok((received, request))
}

async fn answer_openai(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: OpenAiRequest,
) -> Result<Vec<u8>, ApiError> {
    let base64 = request.encoding_format.as_deref() == Some("base64");
    let ask = Ask {
        inputs: inputs("input", request.input)?,
        truncate: true,
        normalize: None,
        prompt_name: request.prompt_name,
        task: Task::Embed,
    };
    let e = run(state, version, &received.arrival, ask).await?;
    Ok(openai_body(&version.name, e, base64))
}

fn parse_openai(body: &[u8]) -> Result<OpenAiRequest, ApiError> {
    let request: OpenAiRequest = json_de::from_slice(body)
        .map_err(|e| ApiError::malformed(format!("invalid embeddings request JSON: {e}")))?;
    if request.dimensions.is_some() {
        return Err(ApiError::invalid(
            "dimensions: this model's embeddings have one size; leave it out",
        ));
    }
    match request.encoding_format.as_deref() {
        None | Some("float") | Some("base64") => Ok(request),
        Some(other) => Err(ApiError::invalid(format!(
            "encoding_format must be \"float\" or \"base64\", got {other:?}"
        ))),
    }
}

fn openai_body(model: &str, e: Outputs, base64: bool) -> Vec<u8> {
    let data: Vec<serde_json::Value> = e
        .values
        .chunks_exact(e.width.max(1))
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                json!(encode_base64(v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": e.tokens, "total_tokens": e.tokens},
    });
    body.to_string().into_bytes()
}

/// An error in OpenAI's shape, with `retry-after-ms` on a 429.
pub fn openai_error(e: &ApiError) -> Response<Full<Bytes>> {
    let status = e.status();
    let (kind, code) = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ("authentication_error", None),
        StatusCode::NOT_FOUND => ("invalid_request_error", Some("model_not_found")),
        StatusCode::TOO_MANY_REQUESTS => ("rate_limit_error", Some("rate_limit_exceeded")),
        s if s.is_server_error() => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let body =
        json!({"error": {"message": e.to_string(), "type": kind, "param": null, "code": code}});
    let mut response = error_response(e);
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    if let Some(after) = e.retry_after() {
        let ms = after.as_millis().max(1).to_string();
        if let Ok(v) = HeaderValue::from_str(&ms) {
            response.headers_mut().insert("retry-after-ms", v);
        }
    }
    response
}

/// Standard base64 (RFC 4648) of the f32 values' little-endian bytes, as OpenAI encodes
/// embeddings.
fn encode_base64(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let word = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= n {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648_of_the_little_endian_bytes() {
        // 1.0f32 = 00 00 80 3f; 2.0 = 00 00 00 40.
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        assert_eq!(encode_base64(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(encode_base64(&[]), "");
    }
}
