//! OpenAI's `POST /v1/embeddings`, on the same inference core as v2 (through
//! [`crate::infer::text`]): `model`, `input` as a string, token ids, or an array of
//! either, `encoding_format` `float` or `base64`, `dimensions` for a model served to be cut
//! ([`crate::infer::dimensions`]); answered in OpenAI's
//! shape with `usage.prompt_tokens`, its errors in OpenAI's error object, and 429s that carry
//! `retry-after-ms` beside `Retry-After` (the `openai` client honours both). TEI's API is in
//! [`crate::http::tei`].
//!
//! Inputs are truncated at the model's limit, as TEI's OpenAI route truncates them. Token ids
//! are the model's own (its tokenizer's, special tokens included), as OpenAI's, vLLM's and
//! TEI's servers take them.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::openai_error;
use crate::http::text_handler::{Read, Received, Served, receive, respond};
use crate::http::{AppState, content_coding};
use crate::infer::dimensions::Asked;
use crate::infer::text::{Task, TextAnswer, TextRequest, run};
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::base64::encode_base64;
use crate::protocol::json_de;
use crate::protocol::text_inputs::Inputs;

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

/// `POST /v1/embeddings`.
pub async fn openai(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_openai(state, req, clock, started).await {
        Err(e) => Err(e),
        Ok(read) => answer_openai(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, openai_error).await
}

/// The body read and parsed, and the model it names resolved.
async fn read_openai(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<Read<OpenAiRequest>, ApiError> {
    let received = receive(state, req, clock, started).await?;
    let request = parse_openai(&received.body)?;
    let version = state.registry.resolve(&request.model, None)?;
    crate::http::count::serving(&version);
    Ok(Read {
        received,
        request,
        version,
    })
}

async fn answer_openai(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: OpenAiRequest,
) -> Result<Served, ApiError> {
    let base64 = request.encoding_format.as_deref() == Some("base64");
    let ask = TextRequest {
        inputs: request.input.checked("input")?,
        truncation: Truncation::Right,
        normalize: None,
        prompt_name: request.prompt_name,
        task: Task::Embed,
        dimensions: Asked {
            field: "dimensions",
            size: request.dimensions,
        },
    };
    let e = run(version, &received.arrival, ask, state.request_timeout()).await?;
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

fn openai_body(model: &str, e: TextAnswer, base64: bool) -> Vec<u8> {
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
