//! TEI's embedding routes: `POST /embed` (and `POST /` for an embedding model, which also
//! answers a body of `/similarity`'s shape), `POST /embed_all` and `POST /embed_sparse`.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde_json::json;
use tokio::time::Instant;

use super::request::{EmbedAllRequest, TeiRequest, truncation};
use super::similarity;
use crate::error::ApiError;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::tei_error;
use crate::http::text_handler::{
    Named, Read, Received, Served, read_named, receive, respond, served_text_version,
};
use crate::http::{AppState, content_coding};
use crate::infer::dimensions::Asked;
use crate::infer::text::{Task, TextAnswer, TextRequest, run};
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::json_de;

/// `POST /embed`.
pub async fn post_embed(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    embed_or_similarity(state, req, clock, false).await
}

/// Embeds, or with `similarity_too` answers a body of `/similarity`'s shape as that route.
pub(super) async fn embed_or_similarity(
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
        && let Ok(request) = similarity::parse(&r.body)
    {
        let read = received.map(|r| (r, request));
        return similarity::answer(state, coding, read).await;
    }
    let result = match received.and_then(|r| read(state, r)) {
        Err(e) => Err(e),
        Ok(read) => answer(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, tei_error).await
}

/// `POST /embed_all`.
pub async fn post_embed_all(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "embed_all", started).await {
        Err(e) => Err(e),
        Ok(read) => token_states(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, tei_error).await
}

/// Each text's every token's state, in TEI's JSON.
async fn token_states(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: EmbedAllRequest,
) -> Result<Served, ApiError> {
    let e = unpooled(state, version, received, request, Task::TokenStates).await?;
    let mut states = e.values.chunks_exact(e.width.max(1));
    let texts: Vec<Vec<&[f32]>> = (e.lengths.iter())
        .map(|&n| states.by_ref().take(n).collect())
        .collect();
    // Written straight from the rows: a JSON value of every state first would be one
    // allocation a number.
    let body = serde_json::to_vec(&texts).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Served { body, meta: e.meta })
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
    let started = Instant::now();
    let coding = content_coding::accepted(req.headers());
    let result = match read_named(state, req, clock, "embed_sparse", started).await {
        Err(e) => Err(e),
        Ok(read) => sparse_weights(state, &read.version, read.received, read.request).await,
    };
    respond(result, coding, tei_error).await
}

/// Each text's weights above zero, in TEI's JSON.
async fn sparse_weights(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: EmbedAllRequest,
) -> Result<Served, ApiError> {
    let e = unpooled(state, version, received, request, Task::Sparse).await?;
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
}

impl Named for EmbedAllRequest {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// Runs `request` for `task` (token states or sparse weights: neither normalised nor cut).
async fn unpooled(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: EmbedAllRequest,
    task: Task,
) -> Result<TextAnswer, ApiError> {
    let ask = TextRequest {
        inputs: request.inputs.checked("inputs")?,
        truncation: truncation(request.truncate, request.truncation_direction.as_deref())?,
        normalize: Some(false),
        prompt_name: request.prompt_name,
        task,
        dimensions: Asked::NONE,
    };
    run(version, &received.arrival, ask, state.request_timeout()).await
}

fn read(state: &AppState, received: Received) -> Result<Read<TeiRequest>, ApiError> {
    let request: TeiRequest =
        json_de::from_slice(&received.body).map_err(|e| ApiError::unreadable("embed", e))?;
    let version = served_text_version(state, request.model.as_deref())?;
    Ok(Read {
        received,
        request,
        version,
    })
}

async fn answer(
    state: &AppState,
    version: &ModelVersion,
    received: Received,
    request: TeiRequest,
) -> Result<Served, ApiError> {
    let ask = TextRequest {
        inputs: request.inputs.checked("inputs")?,
        truncation: truncation(request.truncate, request.truncation_direction.as_deref())?,
        normalize: Some(request.normalize.unwrap_or(true)),
        prompt_name: request.prompt_name,
        task: Task::Embed,
        dimensions: Asked {
            field: "dimensions",
            size: request.dimensions,
        },
    };
    let e = run(version, &received.arrival, ask, state.request_timeout()).await?;
    let rows: Vec<&[f32]> = e.values.chunks_exact(e.width.max(1)).collect();
    Ok(Served {
        body: json!(rows).to_string().into_bytes(),
        meta: e.meta,
    })
}
