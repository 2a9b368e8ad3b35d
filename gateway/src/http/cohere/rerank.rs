//! Cohere's rerank API, `POST /v1/rerank` and `POST /v2/rerank`, for a cross-encoder: the
//! shape Jina's, vLLM's and Infinity's servers also answer, and what Cohere's SDK (and so
//! LangChain's and LlamaIndex's Cohere rerankers) posts. `query` and `documents` (strings,
//! or objects with a `text`) in; each document's relevance (the sigmoid of the model's
//! logit for the pair `(query, document)`), best first, out. A pair past the model's limit
//! is cut longest text first, as the model's tokenizer cuts it. Fields that only tune
//! Cohere's own service (`max_tokens_per_doc`, `priority`, ...) are accepted and ignored.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::ApiVersion;
use super::document::Document;
use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::cohere_error;
use crate::http::text_handler::{Named, Received, Served, read_named, respond};
use crate::http::{AppState, content_coding};
use crate::infer::input::Input;
use crate::infer::scores::{Activation, pairs, require_one_label, rerank_scores};
use crate::infer::text::classify;
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::bounded::Bounded;

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

/// `POST /v1/rerank` and `POST /v2/rerank`.
pub async fn rerank(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    api: ApiVersion,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "rerank", started).await {
        Err(e) => Err(e),
        Ok(read) => rerank_on(state, &read.version, read.received, read.request, api).await,
    };
    respond(result, coding, cohere_error).await
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
    let wait = state.request_timeout();
    let out = classify(version, &received.arrival, inputs, Truncation::Right, wait).await?;
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
