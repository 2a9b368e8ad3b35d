//! Cohere's rerank API, `POST /v1/rerank` and `POST /v2/rerank`, for a cross-encoder: the
//! shape Jina's, vLLM's and Infinity's servers also answer, and what Cohere's SDK (and so
//! LangChain's and LlamaIndex's Cohere rerankers) posts. `query` and `documents` (strings,
//! or objects with a `text`) in; each document's relevance (the sigmoid of the model's
//! logit for the pair `(query, document)`), best first, out. A pair past the model's limit
//! is cut longest text first, as the model's tokenizer cuts it. Fields that only tune
//! Cohere's own service (`max_tokens_per_doc`, `priority`, ...) are accepted and ignored.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::arrival::ArrivalClock;
use super::classify::{
    Activation, Bounded, Document, classify, pairs, require_one_label, rerank_scores,
};
use super::inputs::Input;
pub(super) use super::tei::Named;
use super::tei::serve_named;
use super::text_request::{Received, Served};
use super::{AppState, error_response};
use crate::error::ApiError;
use crate::registry::ModelVersion;

#[derive(Deserialize)]
pub(crate) struct CohereRequest {
    /// The model; without it, the one text model loaded.
    #[serde(default)]
    model: Option<String>,
    query: String,
    documents: Bounded<Document>,
    #[serde(default)]
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: bool,
}

/// Which of Cohere's API versions a request came through, for `meta.api_version`.
#[derive(Clone, Copy)]
pub enum ApiVersion {
    V1,
    V2,
}

impl ApiVersion {
    /// As `meta.api_version.version` gives it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "1",
            ApiVersion::V2 => "2",
        }
    }
}

/// `POST /v1/rerank` and `POST /v2/rerank`.
pub async fn rerank(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    api: ApiVersion,
) -> Response<Full<Bytes>> {
    let on = async |version: Arc<ModelVersion>, received, request| {
        rerank_on(state, &version, received, request, api).await
    };
    serve::<CohereRequest>(state, req, clock, "rerank", on).await
}

/// Reads a request to one of Cohere's routes as `T` and answers it with `on`, as
/// [`serve_named`] does, with errors in Cohere's shape.
pub(super) async fn serve<T: DeserializeOwned + Named>(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    what: &str,
    on: impl AsyncFnOnce(Arc<ModelVersion>, Received, T) -> Result<Served, ApiError>,
) -> Response<Full<Bytes>> {
    serve_named(state, req, clock, what, cohere_error, on).await
}

impl Named for CohereRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

async fn rerank_on(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: CohereRequest,
    api: ApiVersion,
) -> Result<Served, ApiError> {
    require_one_label(version)?;
    let documents = &request.documents;
    let inputs = rerank_inputs(&request)?;
    let out = classify(state, version, &received, inputs, Truncation::Right).await?;
    let mut ranked = rerank_scores(&out.values, Activation::Sigmoid);
    ranked.truncate(request.top_n.unwrap_or(ranked.len()));
    let results: Vec<serde_json::Value> = ranked
        .into_iter()
        .map(|(index, score)| {
            let mut r = json!({"index": index, "relevance_score": score});
            if request.return_documents {
                r["document"] = json!({"text": documents.items[index].0});
            }
            r
        })
        .collect();
    let body = json!({
        "model": version.name,
        "results": results,
        "meta": {"api_version": {"version": api.as_str()},
                 "billed_units": {"search_units": 1}},
        "usage": {"total_tokens": out.meta.tokens},
    });
    Ok(Served {
        body: body.to_string().into_bytes(),
        meta: out.meta,
    })
}

/// The pairs `(query, document)` a rerank request scores, in the order of its documents.
pub(crate) fn rerank_inputs(request: &CohereRequest) -> Result<Vec<Input>, ApiError> {
    let documents = &request.documents;
    let texts = documents.items.iter().map(|d| d.0.clone());
    pairs(&request.query, texts, documents.count)
}

/// An error as Cohere's API gives it: `{"message": ...}`.
pub(super) fn cohere_error(e: &ApiError) -> Response<Full<Bytes>> {
    let mut response = error_response(e);
    let body = json!({"message": e.to_string()});
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
