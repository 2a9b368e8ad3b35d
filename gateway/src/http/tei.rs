//! Hugging Face TEI's API, answered as TEI answers it, for the text encoder loaded (or the
//! one a `model` field names, tandem's addition for servers of several models):
//! - `POST /embed`, and `POST /` as TEI routes it for an embedding model (what
//!   `huggingface_hub`'s `InferenceClient.feature_extraction` posts to a server's URL):
//!   `inputs`, `normalize`, `truncate`, `truncation_direction`; an array of embeddings back;
//! - `POST /embed_all`: `inputs`, `truncate`, `truncation_direction`, `prompt_name`; each
//!   text's every token's state (special tokens included), not normalised;
//! - `POST /embed_sparse`, the same fields, for a sparse encoder (SPLADE): each text's
//!   weights above zero as `{"index", "value"}`, by vocabulary index;
//! - `POST /similarity`, in [`super::similarity`];
//! - `POST /predict` and `POST /rerank` for a classifier, in [`super::classify`];
//! - `GET /info`: the model and the limits it is served with, in TEI's fields;
//! - `GET /health`: 200 once serving, 503 before and while draining.
//!
//! Errors are `{"error": ..., "error_type": ...}` with TEI's types and status codes
//! ([`tei_kind`]).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::embeddings::inputs;
use super::inputs::{Inputs, MAX_TEXTS};
use super::text_common::{TRUNCATE_BY_DEFAULT, served_text_version, tei_error, truncation};
use super::text_request::{Ask, Received, Served, Task, answer_read, receive, run};
use super::{AppState, content_coding, json_response};
use crate::error::ApiError;
use crate::protocol::json_de;
use crate::registry::ModelVersion;

/// TEI's request, with `model` as tandem's own addition for servers of several models.
/// Other fields are ignored, as TEI ignores them: clients send some (LangChain's
/// `parameters`, `huggingface_hub`'s `encoding_format`).
#[derive(Debug, Deserialize)]
pub(crate) struct TeiRequest {
    pub(crate) inputs: Inputs,
    #[serde(default)]
    pub(crate) normalize: Option<bool>,
    #[serde(default)]
    pub(crate) truncate: Option<bool>,
    /// TEI's `Right` (the default: keep the start) or `Left` (keep the end).
    #[serde(default)]
    pub(crate) truncation_direction: Option<String>,
    /// The prompt put before each text, by its name in the model's folder.
    #[serde(default)]
    pub(crate) prompt_name: Option<String>,
    /// TEI's Matryoshka cut, for a model served to be cut ([`super::matryoshka`]).
    #[serde(default)]
    pub(crate) dimensions: Option<u64>,
    #[serde(default)]
    pub(crate) model: Option<String>,
}

/// TEI's `/embed_all` and `/embed_sparse` request: [`TeiRequest`] without what only dense
/// pooled embeddings take (`normalize`, `dimensions`).
#[derive(Debug, Deserialize)]
struct EmbedAllRequest {
    inputs: Inputs,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Option<String>,
    #[serde(default)]
    prompt_name: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// `POST /` (and SageMaker's `/invocations`), as TEI routes it by what `/info` calls the
/// model: rerank for a reranker (a classifier of one label), predict for another
/// classifier, embed otherwise (or similarity, for a body of that shape).
pub async fn post_root(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let labels = served_text_version(state, None)
        .ok()
        .and_then(|v| v.text.as_ref().map(|t| t.input.labels.len()))
        .unwrap_or(0);
    match labels {
        0 => embed_or_similarity(state, req, clock, true).await,
        1 => super::classify::rerank(state, req, clock).await,
        _ => super::classify::predict(state, req, clock).await,
    }
}

/// `POST /embed`.
pub async fn post_embed(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    embed_or_similarity(state, req, clock, false).await
}

/// Embeds, or with `similarity_too` answers a body of `/similarity`'s shape as that route.
async fn embed_or_similarity(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    similarity_too: bool,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let received = receive(state, req, clock, started).await;
    if similarity_too
        && let Ok(r) = &received
        && let Ok(request) = super::similarity::parse(&r.body)
    {
        let read = received.map(|r| (r, request));
        return super::similarity::answer(state, coding, started, read).await;
    }
    let on = async |version: Arc<ModelVersion>, received, request| {
        answer(state, &version, received, request).await
    };
    let read = received.and_then(|r| read(state, r));
    answer_read(read, on, started, coding, tei_error).await
}

/// `POST /embed_all`.
pub async fn post_embed_all(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let on = async |version: Arc<ModelVersion>, received, request| {
        let e = unpooled(state, &version, received, request, Task::TokenStates).await?;
        let mut states = e.values.chunks_exact(e.width.max(1));
        let texts: Vec<Vec<&[f32]>> = (e.lengths.iter())
            .map(|&n| states.by_ref().take(n).collect())
            .collect();
        // Written straight from the rows: a JSON value of every state first would be one
        // allocation a number.
        let body = serde_json::to_vec(&texts).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Served { body, meta: e.meta })
    };
    serve_named(state, req, clock, "embed_all", tei_error, on).await
}

/// One weight of a sparse embedding, as TEI answers it.
#[derive(serde::Serialize)]
struct SparseValue {
    index: usize,
    value: f32,
}

/// `POST /embed_sparse`.
pub async fn post_embed_sparse(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let on = async |version: Arc<ModelVersion>, received, request| {
        let e = unpooled(state, &version, received, request, Task::Sparse).await?;
        let texts: Vec<Vec<SparseValue>> = (e.values.chunks_exact(e.width.max(1)))
            .map(|weights| {
                let above_zero = weights.iter().enumerate().filter(|(_, w)| **w > 0.0);
                above_zero
                    .map(|(index, &value)| SparseValue { index, value })
                    .collect()
            })
            .collect();
        let body = serde_json::to_vec(&texts).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(Served { body, meta: e.meta })
    };
    serve_named(state, req, clock, "embed_sparse", tei_error, on).await
}

/// A request that may name its model (tandem's `model` on TEI's and Cohere's routes).
pub(super) trait Named {
    fn model(&self) -> Option<&str>;
}

impl Named for EmbedAllRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// Reads a request to `route` as `T`, finds the model it names (without one, the one text
/// model loaded), answers it with `on`, and counts it; errors in `error`'s shape.
pub(super) async fn serve_named<T: serde::de::DeserializeOwned + Named>(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    route: &str,
    error: fn(&ApiError) -> Response<Full<Bytes>>,
    on: impl AsyncFnOnce(Arc<ModelVersion>, Received, T) -> Result<Served, ApiError>,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let read = |received: Received| {
        let request: T =
            json_de::from_slice(&received.body).map_err(|e| ApiError::unreadable(route, e))?;
        let version = served_text_version(state, request.model())?;
        Ok::<_, ApiError>((received, request, version))
    };
    let read = receive(state, req, clock, started).await.and_then(read);
    answer_read(read, on, started, coding, error).await
}

/// Runs `request` for `task` (token states or sparse weights: neither normalised nor cut).
async fn unpooled(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: EmbedAllRequest,
    task: Task,
) -> Result<super::text_request::Outputs, ApiError> {
    let ask = Ask {
        inputs: inputs("inputs", request.inputs)?,
        truncation: truncation(request.truncate, request.truncation_direction.as_deref())?,
        normalize: Some(false),
        prompt_name: request.prompt_name,
        task,
        dimensions: super::matryoshka::Asked::NONE,
    };
    run(state, version, &received.arrival, ask).await
}

fn read(
    state: &AppState,
    received: Received,
) -> Result<(Received, TeiRequest, Arc<ModelVersion>), ApiError> {
    let request: TeiRequest =
        json_de::from_slice(&received.body).map_err(|e| ApiError::unreadable("embed", e))?;
    let version = served_text_version(state, request.model.as_deref())?;
    Ok((received, request, version))
}

async fn answer(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: TeiRequest,
) -> Result<Served, ApiError> {
    let ask = Ask {
        inputs: inputs("inputs", request.inputs)?,
        truncation: truncation(request.truncate, request.truncation_direction.as_deref())?,
        normalize: Some(request.normalize.unwrap_or(true)),
        prompt_name: request.prompt_name,
        task: Task::Embed,
        dimensions: super::matryoshka::Asked {
            field: "dimensions",
            size: request.dimensions,
        },
    };
    let e = run(state, version, &received.arrival, ask).await?;
    let rows: Vec<&[f32]> = e.values.chunks_exact(e.width.max(1)).collect();
    Ok(Served {
        body: json!(rows).to_string().into_bytes(),
        meta: e.meta,
    })
}

/// `GET /info`: TEI's description of the model and its limits.
pub fn info(state: &AppState) -> Result<Response<Full<Bytes>>, ApiError> {
    let version = served_text_version(state, None)?;
    let text = super::text::text_model(&version)?;
    let settings = version.settings();
    let model_type = model_type(&text.input);
    let dtype = match text.input.precision {
        kernels::DType::F32 => "float32",
        kernels::DType::F16 => "float16",
        kernels::DType::BF16 => "bfloat16",
    };
    let body = json!({
        "model_id": version.name,
        "served_model_name": version.name,
        "model_sha": null,
        "model_dtype": dtype,
        "model_type": model_type,
        "max_concurrent_requests": settings.queue_capacity,
        "max_input_length": text.input.max_seq_len,
        "max_batch_tokens": settings.max_batch_tokens,
        "max_batch_requests": settings.max_batch_size,
        "max_client_batch_size": MAX_TEXTS,
        "auto_truncate": TRUNCATE_BY_DEFAULT,
        "tokenization_workers": 1,
        "version": env!("CARGO_PKG_VERSION"),
        "sha": null,
        "docker_label": null,
    });
    Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
}

/// TEI's `model_type`: an embedding model's pooling, a classifier's labels both ways (a
/// reranker's when it has one label).
fn model_type(input: &models::TextInput) -> serde_json::Value {
    if !input.is_classifier() {
        let pooling = match input.pooling {
            _ if input.sparse => "splade",
            models::encoder::Pooling::Mean => "mean",
            models::encoder::Pooling::Cls => "cls",
        };
        return json!({"embedding": {"pooling": pooling}});
    }
    let id2label: serde_json::Map<String, serde_json::Value> = (input.labels.iter().enumerate())
        .map(|(i, l)| (i.to_string(), json!(l)))
        .collect();
    let label2id: serde_json::Map<String, serde_json::Value> = (input.labels.iter().enumerate())
        .map(|(i, l)| (l.clone(), json!(i)))
        .collect();
    let kind = match input.labels.len() {
        1 => "reranker",
        _ => "classifier",
    };
    json!({kind: {"id2label": id2label, "label2id": label2id}})
}

/// TEI's answers other than embeddings: its error shape for whatever went wrong.
pub fn answer_or_error(result: Result<Response<Full<Bytes>>, ApiError>) -> Response<Full<Bytes>> {
    result.unwrap_or_else(|e| tei_error(&e))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt;

    use http::header;

    use super::*;
    use crate::infer::{InferError, Refusal};
    use crate::registry::LookupError;

    fn shed() -> ApiError {
        let refusal = Refusal::Shed {
            message: "busy".into(),
            retry_after: Duration::from_secs(2),
        };
        InferError::from(refusal).into()
    }

    /// Each kind of error answers with TEI's status and `error_type`, and the body says what
    /// went wrong; a 429 keeps its `Retry-After`.
    #[tokio::test]
    async fn every_error_answers_with_teis_status_and_type() {
        let cases: [(ApiError, u16, &str); 11] = [
            (ApiError::empty("inputs holds no text"), 400, "Empty"),
            (ApiError::malformed("not JSON"), 400, "Validation"),
            (
                ApiError::too_large("text 0 has 300 tokens"),
                413,
                "Validation",
            ),
            (ApiError::BodyTooLarge { limit: 8 }, 413, "Validation"),
            (ApiError::invalid("truncation_direction"), 422, "Validation"),
            (ApiError::Tokenizer("failed".into()), 422, "Tokenizer"),
            (InferError::Model("nan".into()).into(), 424, "Backend"),
            (shed(), 429, "Overloaded"),
            (ApiError::Unavailable("draining".into()), 503, "Unhealthy"),
            (InferError::Timeout(Duration::ZERO).into(), 504, "Backend"),
            (LookupError::NoTextModel.into(), 404, "Validation"),
        ];
        for (e, status, kind) in cases {
            let response = tei_error(&e);
            assert_eq!(response.status().as_u16(), status, "{e}");
            let bytes = response.into_body().collect().await.map(|b| b.to_bytes());
            let body: serde_json::Value =
                serde_json::from_slice(&bytes.unwrap_or_default()).unwrap_or_default();
            assert_eq!(body["error_type"], kind, "{e}");
            assert_eq!(body["error"], e.to_string());
        }
        assert_eq!(tei_error(&shed()).headers()[header::RETRY_AFTER], "2");
    }
}
