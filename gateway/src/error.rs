//! One error chain, one status table: every way a request can fail is an [`ApiError`], and
//! [`ApiError::status`] and [`ApiError::reason`] are the only places that map it to an HTTP
//! status and to the `reason` label of the metrics.

use std::time::Duration;

use http::StatusCode;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ApiError {
    /// The body is not what the protocol allows: bad JSON, a lying binary size, ...
    #[error("{0}")]
    Malformed(String),

    /// Well-formed, but not what the model takes: wrong name, shape, datatype or value.
    #[error("{0}")]
    Invalid(String),

    #[error("unknown model {model:?}")]
    UnknownModel { model: String },

    #[error("model {model:?} has no loaded version {version:?} (loaded: {loaded})")]
    UnknownVersion {
        model: String,
        version: String,
        loaded: String,
    },

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

    /// Shed before queueing: the queue is full or the deadline cannot be met.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after: Duration,
        reason: &'static str,
    },

    #[error("{0}")]
    Unavailable(String),

    /// The request's deadline passed while it waited.
    #[error("request deadline passed after {waited_ms} ms in the queue")]
    DeadlineExceeded { waited_ms: u64 },

    #[error("request timed out after {0:?}")]
    Timeout(Duration),

    /// The client sent its headers but not its whole body in time.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(Duration),

    #[error("model failed: {0}")]
    ModelFailure(String),

    #[error("admin API: {0}")]
    Forbidden(String),

    #[error("admin API: {0}")]
    Unauthorized(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Malformed(_) | ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::UnknownModel { .. }
            | ApiError::UnknownVersion { .. }
            | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::BodyTooLarge { .. } | ApiError::DecodedBodyTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::DeadlineExceeded { .. } | ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::ModelFailure(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        }
    }

    /// The bounded `reason` label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::Malformed(_) => "malformed",
            ApiError::Invalid(_) => "invalid",
            ApiError::UnknownModel { .. } => "unknown_model",
            ApiError::UnknownVersion { .. } => "unknown_version",
            ApiError::NotFound { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::BodyTooLarge { .. } | ApiError::DecodedBodyTooLarge { .. } => {
                "body_too_large"
            }
            ApiError::UnsupportedEncoding(_) => "unsupported_encoding",
            ApiError::Overloaded { reason, .. } => reason,
            ApiError::Unavailable(_) => "unavailable",
            ApiError::DeadlineExceeded { .. } => "expired",
            ApiError::Timeout(_) => "timeout",
            ApiError::BodyTimeout(_) => "body_timeout",
            ApiError::ModelFailure(_) => "model_failure",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Unauthorized(_) => "unauthorized",
        }
    }

    /// For 429: whole seconds to wait, at least one (the header's resolution).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::Overloaded { retry_after, .. } => {
                Some(retry_after.as_secs_f64().ceil().max(1.0) as u64)
            }
            _ => None,
        }
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
