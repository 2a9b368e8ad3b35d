//! What the text APIs' handlers share, below all of them: which text model a request names,
//! TEI's truncation parameters, and TEI's error shape (which TEI's routes, the classifier and
//! similarity routes, and the tokenizer's answer with).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use models::Truncation;
use serde_json::json;

use super::{AppState, error_response};
use crate::error::{ApiError, RequestError};
use crate::infer::InferError;
use crate::registry::{LookupError, ModelVersion};

/// Whether TEI's routes cut an over-long input when a request does not say: TEI's default
/// since 1.9 (`--auto-truncate`).
pub(super) const TRUNCATE_BY_DEFAULT: bool = true;
/// What TEI's `truncate` (on unless a request says, [`TRUNCATE_BY_DEFAULT`]) and
/// `truncation_direction` (`Right`, the default, cuts the end off; `Left` the start) ask
/// of an over-long input.
pub(crate) fn truncation(
    truncate: Option<bool>,
    direction: Option<&str>,
) -> Result<Truncation, ApiError> {
    let cut = match direction {
        None | Some("Right" | "right") => Truncation::Right,
        Some("Left" | "left") => Truncation::Left,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "truncation_direction {other:?}: \"Right\" cuts the end off, \"Left\" the start"
            )));
        }
    };
    Ok(match truncate.unwrap_or(TRUNCATE_BY_DEFAULT) {
        true => cut,
        false => Truncation::Refuse,
    })
}

/// TEI's status and `error_type` for `e`. Clients act on them: a 413 (TEI's code for an
/// input or a batch past its limits) makes some split their batch and retry, a 400 (nothing
/// to embed, or a body that is not JSON) or a 422 (JSON of another shape, or input the
/// model cannot take) must not be retried.
pub(crate) fn tei_kind(e: &ApiError) -> (StatusCode, &'static str) {
    match e {
        ApiError::Request(RequestError::Empty(_)) => (StatusCode::BAD_REQUEST, "Empty"),
        ApiError::Request(RequestError::TooLarge(_))
        | ApiError::BodyTooLarge { .. }
        | ApiError::DecodedBodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "Validation"),
        ApiError::Request(RequestError::Invalid(_)) => {
            (StatusCode::UNPROCESSABLE_ENTITY, "Validation")
        }
        ApiError::Tokenizer(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Tokenizer"),
        ApiError::Infer(InferError::Model(_)) => (StatusCode::FAILED_DEPENDENCY, "Backend"),
        e => match e.status() {
            s @ StatusCode::TOO_MANY_REQUESTS => (s, "Overloaded"),
            s @ StatusCode::SERVICE_UNAVAILABLE => (s, "Unhealthy"),
            s if s.is_server_error() => (s, "Backend"),
            s => (s, "Validation"),
        },
    }
}

/// The text model TEI's routes serve: the one named, or the only one loaded.
pub(crate) fn served_text_version(
    state: &AppState,
    named: Option<&str>,
) -> Result<Arc<ModelVersion>, ApiError> {
    let served = text_version(state, named)?;
    super::access::record_model(&served.name);
    Ok(served)
}

fn text_version(state: &AppState, named: Option<&str>) -> Result<Arc<ModelVersion>, ApiError> {
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

/// An error as TEI gives it: `{"error": ..., "error_type": ...}` with TEI's status.
pub(crate) fn tei_error(e: &ApiError) -> Response<Full<Bytes>> {
    let (status, kind) = tei_kind(e);
    let mut response = error_response(e);
    *response.status_mut() = status;
    let body = json!({"error": e.to_string(), "error_type": kind});
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
