//! What the text APIs' handlers (OpenAI's, TEI's, Cohere's) share, below all of them: the
//! body read and decoded, the text model a request names (or the only one loaded), and the
//! answer written, with what serving it took in TEI's headers.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::head::{CACHE_HEADER, arrival_of, read_head};
use super::{AppState, body, content_coding};
use crate::error::ApiError;
use crate::infer::text::Metadata;
use crate::lifecycle::registry::{LookupError, ModelVersion};
use crate::protocol::json_de;

/// What serving took, as TEI's headers tell it, in whole milliseconds as TEI gives them.
fn write_metadata(meta: &Metadata, headers: &mut HeaderMap) {
    let total = meta.arrived.elapsed().as_millis();
    let values = [
        ("x-compute-time", total),
        ("x-total-time", total),
        ("x-compute-characters", meta.characters as u128),
        ("x-compute-tokens", meta.tokens as u128),
        ("x-tokenization-time", meta.tokenization.as_millis()),
        ("x-queue-time", meta.queue.as_millis()),
        ("x-inference-time", meta.inference.as_millis()),
    ];
    for (name, value) in values {
        headers.insert(name, HeaderValue::from(value as u64));
    }
    headers.insert("x-compute-type", HeaderValue::from_static(meta.device));
    if let Some(outcome) = meta.cache {
        headers.insert(CACHE_HEADER, HeaderValue::from_static(outcome.as_str()));
    }
}

/// A text request's answer, and what serving it took.
pub(crate) struct Served {
    pub(crate) body: Vec<u8>,
    pub(crate) meta: Metadata,
}

/// A request read whole, decoded from its content coding, with when it arrived.
pub(crate) struct Received {
    pub(crate) body: Bytes,
    pub(crate) arrival: crate::infer::Arrival,
}

/// Reads the body (bounded in size and time) and decodes it. These APIs name the model in
/// the body, so admission comes after this read, before tokenizing: the expensive part.
pub(crate) async fn receive(
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

/// A text request read: its body, what it asks, and the version that answers it.
pub(crate) struct Read<T> {
    pub(crate) received: Received,
    pub(crate) request: T,
    pub(crate) version: Arc<ModelVersion>,
}

/// A text request's answer in the coding the client accepts, with what serving it took in
/// TEI's headers, or its error in its API's shape.
pub(crate) async fn respond(
    result: Result<Served, ApiError>,
    coding: content_coding::Coding,
    error: fn(&ApiError) -> Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    match result {
        Ok(Served { body, meta }) => {
            let mut response = content_coding::respond(body, "application/json", coding).await;
            write_metadata(&meta, response.headers_mut());
            response
        }
        Err(e) => error(&e),
    }
}

/// The text model TEI's routes serve: the one named, or the only one loaded.
pub(crate) fn served_text_version(
    state: &AppState,
    named: Option<&str>,
) -> Result<Arc<ModelVersion>, ApiError> {
    let served = text_version(state, named)?;
    super::count::serving(&served);
    Ok(served)
}

/// The text model a request names, or the only one loaded, without naming it as the one
/// serving the request (`POST /` peeks at it to pick a route).
pub(crate) fn text_version(
    state: &AppState,
    named: Option<&str>,
) -> Result<Arc<ModelVersion>, ApiError> {
    if let Some(m) = named {
        return Ok(state.registry.resolve(m, None)?);
    }
    let text_models: Vec<_> = state
        .registry
        .model_names()
        .into_iter()
        .filter_map(|m| state.registry.resolve(&m, None).ok())
        .filter(|v| v.text.is_some())
        .collect();
    match text_models.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(LookupError::NoTextModel.into()),
        several => Err(ApiError::invalid(format!(
            "several text models are loaded ({}); name one in a \"model\" field (/info \
             describes only a single one)",
            several
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// A request that may name its model (tandem's `model` on TEI's and Cohere's routes).
pub(crate) trait Named {
    fn model(&self) -> Option<&str>;
}

/// Reads a request to `route` as `T` and finds the model it names (without one, the one
/// text model loaded).
pub(crate) async fn read_named<T: serde::de::DeserializeOwned + Named>(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    route: &str,
    started: Instant,
) -> Result<Read<T>, ApiError> {
    let received = receive(state, req, clock, started).await?;
    let request: T =
        json_de::from_slice(&received.body).map_err(|e| ApiError::unreadable(route, e))?;
    let version = served_text_version(state, request.model())?;
    Ok(Read {
        received,
        request,
        version,
    })
}
