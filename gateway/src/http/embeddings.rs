//! OpenAI's `POST /v1/embeddings`, on the same inference core as v2 (through
//! [`super::text_request`]): `model`, `input` as a string, token ids, or an array of
//! either, `encoding_format` `float` or `base64`, `dimensions` for a model served to be cut
//! ([`super::matryoshka`]); answered in OpenAI's
//! shape with `usage.prompt_tokens`, its errors in OpenAI's error object, and 429s that carry
//! `retry-after-ms` beside `Retry-After` (the `openai` client honours both). TEI's API is in
//! [`super::tei`].
//!
//! Inputs are truncated at the model's limit, as TEI's OpenAI route truncates them. Token ids
//! are the model's own (its tokenizer's, special tokens included), as OpenAI's, vLLM's and
//! TEI's servers take them.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::inputs::{Input, Inputs, MAX_TEXTS};
use super::matryoshka::Asked;
use super::text_request::{Ask, Outputs, Received, Served, Task, answer_read, receive, run};
use super::{AppState, content_coding, error_response};
use crate::error::ApiError;
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
    pub(crate) dimensions: Option<u64>,
    /// tandem's addition, as TEI's: the prompt put before each text, by name.
    #[serde(default)]
    pub(crate) prompt_name: Option<String>,
}

/// `input`/`inputs`: a string, an array of token ids, or an array of strings and arrays of
/// ids; at least one input, no text empty.
pub(crate) fn inputs(field: &str, inputs: Inputs) -> Result<Vec<Input>, ApiError> {
    let inputs = match inputs {
        Inputs::List(inputs) => inputs,
        Inputs::TooMany(n) => {
            return Err(ApiError::too_large(format!(
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
        return Err(ApiError::empty(format!("{field} holds no text")));
    }
    let empty = |input: &Input| matches!(input, Input::Text(t) if t.is_empty());
    if let Some(i) = inputs.iter().position(empty) {
        return Err(ApiError::empty(format!("{field}: text {i} is empty")));
    }
    Ok(inputs)
}

/// `POST /v1/embeddings`.
pub async fn openai(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let read = read_openai(state, req, clock, started)
        .await
        .and_then(|(received, request)| {
            let version = state.registry.resolve(&request.model, None)?;
            super::access::record_model(&version.name);
            Ok((received, request, version))
        });
    let on = async |version: Arc<ModelVersion>, received, request| {
        answer_openai(state, &version, received, request).await
    };
    answer_read(read, on, started, coding, openai_error).await
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
) -> Result<Served, ApiError> {
    let base64 = request.encoding_format.as_deref() == Some("base64");
    let ask = Ask {
        inputs: inputs("input", request.input)?,
        truncation: Truncation::Right,
        normalize: None,
        prompt_name: request.prompt_name,
        task: Task::Embed,
        dimensions: Asked {
            field: "dimensions",
            size: request.dimensions,
        },
    };
    let e = run(state, version, &received.arrival, ask).await?;
    let meta = e.meta;
    let body = openai_body(&version.name, e, base64);
    Ok(Served { body, meta })
}

fn parse_openai(body: &[u8]) -> Result<OpenAiRequest, ApiError> {
    let request: OpenAiRequest =
        json_de::from_slice(body).map_err(|e| ApiError::unreadable("embeddings", e))?;
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
        "usage": {"prompt_tokens": e.meta.tokens, "total_tokens": e.meta.tokens},
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
pub(super) fn encode_base64(values: &[f32]) -> String {
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
