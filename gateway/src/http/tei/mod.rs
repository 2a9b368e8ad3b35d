//! Hugging Face TEI's API, answered as TEI answers it, for the text encoder loaded (or the
//! one a `model` field names, tandem's addition for servers of several models):
//! - `POST /embed`, and `POST /` as TEI routes it for an embedding model (what
//!   `huggingface_hub`'s `InferenceClient.feature_extraction` posts to a server's URL):
//!   `inputs`, `normalize`, `truncate`, `truncation_direction`; an array of embeddings back;
//! - `POST /embed_all`: `inputs`, `truncate`, `truncation_direction`, `prompt_name`; each
//!   text's every token's state (special tokens included), not normalised;
//! - `POST /embed_sparse`, the same fields, for a sparse encoder (SPLADE): each text's
//!   weights above zero as `{"index", "value"}`, by vocabulary index;
//! - `POST /similarity`, in [`similarity`];
//! - `POST /predict` and `POST /rerank` for a classifier, in [`classify`];
//! - `GET /info`: the model and the limits it is served with, in TEI's fields;
//! - `GET /health`: 200 once serving, 503 before and while draining.
//!
//! Errors are `{"error": ..., "error_type": ...}` with TEI's types and status codes
//! ([`crate::http::errors::tei_kind`]).

mod classify;
mod embed;
mod request;
mod similarity;
mod tokens;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde_json::json;

use crate::error::ApiError;
use crate::http::AppState;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::json_response;
use crate::http::text_handler::{served_text_version, text_version};
use crate::infer::input::MAX_TEXTS;
use crate::infer::tokenize::text_model;
use request::TRUNCATE_BY_DEFAULT;

pub use classify::{predict, rerank};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use classify::{predict_inputs, rerank_inputs};
pub use embed::{post_embed, post_embed_all, post_embed_sparse};
pub(crate) use request::truncation;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use request::{PredictRequest, RerankRequest, TeiRequest};
pub use similarity::post_similarity;
pub use tokens::{decode, tokenize};

/// `POST /` (and SageMaker's `/invocations`), as TEI routes it by what `/info` calls the
/// model: rerank for a reranker (a classifier of one label), predict for another
/// classifier, embed otherwise (or similarity, for a body of that shape).
pub async fn post_root(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let labels = text_version(state, None)
        .ok()
        .and_then(|v| v.text.as_ref().map(|t| t.input.labels.len()))
        .unwrap_or(0);
    match labels {
        0 => embed::embed_or_similarity(state, req, clock, true).await,
        1 => classify::rerank(state, req, clock).await,
        _ => classify::predict(state, req, clock).await,
    }
}

/// `GET /info`: TEI's description of the model and its limits.
pub fn info(state: &AppState) -> Result<Response<Full<Bytes>>, ApiError> {
    let version = served_text_version(state, None)?;
    let text = text_model(&version)?;
    let settings = version.settings();
    let model_type = model_type(&text.input);
    let dtype = match text.input.precision {
        models::DType::F32 => "float32",
        models::DType::F16 => "float16",
        models::DType::BF16 => "bfloat16",
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
            models::encoder::Pooling::LastToken => "last_token",
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
