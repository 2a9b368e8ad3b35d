//! Cohere's API: rerank (`POST /v1/rerank`, `POST /v2/rerank`) and embed (`POST /v1/embed`,
//! `POST /v2/embed`), its errors in Cohere's shape.

mod document;
mod embed;
mod rerank;

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::http::AppState;
use crate::http::arrival::ArrivalClock;
use crate::http::errors::cohere_error;
use crate::http::text_handler::{Named, Received, Served, serve_named};
use crate::lifecycle::registry::ModelVersion;
pub use embed::embed;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use embed::{EmbedRequest, kinds, texts, truncation};
pub use rerank::rerank;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use rerank::{CohereRequest, rerank_inputs};

/// Which of Cohere's API versions a request came through, for `meta.api_version`.
#[derive(Clone, Copy)]
pub enum ApiVersion {
    V1,
    V2,
}

impl ApiVersion {
    /// As `meta.api_version.version` gives it.
    fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1 => "1",
            ApiVersion::V2 => "2",
        }
    }
}

/// Reads a request to one of Cohere's routes as `T` and answers it with `on`, as
/// [`serve_named`] does, with errors in Cohere's shape.
async fn serve<T: DeserializeOwned + Named>(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    what: &str,
    on: impl AsyncFnOnce(Arc<ModelVersion>, Received, T) -> Result<Served, ApiError>,
) -> Response<Full<Bytes>> {
    serve_named(state, req, clock, what, cohere_error, on).await
}
