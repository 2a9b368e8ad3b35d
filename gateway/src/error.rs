//! One error chain, one status table. Each layer has its own error —
//! [`RequestError`] (decoding, validation), [`LookupError`] (the registry), [`InferError`]
//! (admission and inference) — joined here into [`ApiError`] with `#[from]`, alongside what
//! only HTTP can get wrong. [`ApiError::status`], [`ApiError::body`] and
//! [`ApiError::retry_after`] map an error to what the client sees (the foreign APIs' shapes
//! wrap them; TEI's routes use TEI's codes, `http::tei`); the metrics `reason` of a refusal
//! is [`crate::infer::outcome::Refusal::reason`].

use std::time::Duration;

use http::StatusCode;
use thiserror::Error;

use crate::infer::InferError;
use crate::lifecycle::registry::{Busy, LookupError};
pub use crate::protocol::RequestError;

#[derive(Debug, Error)]
pub enum ApiError {
    #[error(transparent)]
    Request(#[from] RequestError),

    #[error(transparent)]
    Lookup(#[from] LookupError),

    #[error(transparent)]
    Infer(#[from] InferError),

    #[error("no route for {method} {path}")]
    NotFound { method: String, path: String },

    /// `allow` lists the methods the path does take, for the `Allow` header.
    #[error("method {method} not allowed on {path}; it takes {allow}")]
    MethodNotAllowed {
        method: String,
        path: String,
        allow: &'static str,
    },

    #[error("request body exceeds the {limit}-byte limit")]
    BodyTooLarge { limit: usize },

    /// A compressed body that inflates past the body limit (a "bomb", or just too big).
    #[error("the request body, decoded from {coding}, exceeds the {limit}-byte limit")]
    DecodedBodyTooLarge { coding: &'static str, limit: usize },

    /// A `Content-Encoding` this server does not decode.
    #[error("{0}")]
    UnsupportedEncoding(String),

    /// The client sent its headers but not its whole body in time.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(Duration),

    /// Not ready, draining, or busy with an earlier change.
    #[error("{0}")]
    Unavailable(String),

    #[error("admin API: {0}")]
    Forbidden(String),

    #[error("admin API: {0}")]
    Unauthorized(String),

    /// A model's tokenizer failed on a text: a fault of the model's folder.
    #[error("{0}")]
    Tokenizer(String),

    /// What the server got wrong itself (a handler panicked).
    #[error("{0}")]
    Internal(String),
}

impl From<Busy> for ApiError {
    fn from(b: Busy) -> ApiError {
        ApiError::Unavailable(b.to_string())
    }
}

impl ApiError {
    pub fn malformed(message: impl Into<String>) -> ApiError {
        RequestError::Malformed(message.into()).into()
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        RequestError::Invalid(message.into()).into()
    }

    /// A body that is not the `what` request: bytes that are not JSON are malformed, JSON of
    /// another shape (a wrong type, a missing field) invalid.
    pub fn unreadable(what: &str, e: crate::protocol::json_de::Error) -> ApiError {
        let message = format!("invalid {what} request JSON: {e}");
        match e.is_data() {
            true => ApiError::invalid(message),
            false => ApiError::malformed(message),
        }
    }

    pub fn empty(message: impl Into<String>) -> ApiError {
        RequestError::Empty(message.into()).into()
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        RequestError::TooLarge(message.into()).into()
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Request(_) => StatusCode::BAD_REQUEST,
            ApiError::Lookup(_) | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Infer(e) => match e {
                InferError::Refused(r) if r.timed_out() => StatusCode::GATEWAY_TIMEOUT,
                InferError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                InferError::Refused(_) => StatusCode::TOO_MANY_REQUESTS,
                InferError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                InferError::Model(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::BodyTooLarge { .. } | ApiError::DecodedBodyTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Tokenizer(_) | ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// For 429: when to come back.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Infer(InferError::Refused(r)) => r.retry_after(),
            _ => None,
        }
    }

    /// For 429: whole seconds to wait, at least one (the header's resolution).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after()
            .map(|d| d.as_secs_f64().ceil().max(1.0) as u64)
    }

    /// For 405: the methods the path takes.
    pub fn allow(&self) -> Option<&'static str> {
        match self {
            ApiError::MethodNotAllowed { allow, .. } => Some(allow),
            _ => None,
        }
    }

    /// Whether the connection must close after this answer: the rest of a body that did
    /// not arrive would be read as the next request.
    pub fn closes_connection(&self) -> bool {
        matches!(self, ApiError::BodyTimeout(_))
    }

    /// `{"error": "..."}`.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({ "error": self.to_string() }))
            .unwrap_or_else(|_| b"{\"error\":\"internal error\"}".to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_maps_to_its_status() {
        use crate::infer::outcome::Refusal;
        let refused = |r: Refusal| ApiError::from(InferError::from(r));
        let shed = refused(Refusal::Shed {
            message: "m".into(),
            retry_after: Duration::from_millis(1500),
        });
        assert_eq!(shed.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(shed.retry_after_secs(), Some(2));
        let expired = refused(Refusal::Expired { waited_ms: 3 });
        assert_eq!(expired.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(expired.retry_after_secs(), None);
        assert_eq!(ApiError::malformed("x").status(), StatusCode::BAD_REQUEST);
        let unknown = ApiError::from(LookupError::UnknownModel { model: "m".into() });
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            ApiError::from(InferError::Model("x".into())).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
