//! Errors as each API shapes them: v2's `{"error": ...}` (also what the server's own routes
//! answer), OpenAI's error object, TEI's `error_type`, Cohere's `message`. They sit below
//! the APIs, which each pick theirs, and below the layers (authentication, the body limit)
//! that answer for a route before its handler runs.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

use super::content_coding;
use crate::error::{ApiError, RequestError};
use crate::infer::InferError;

/// `{"error": ...}` with the status (and `Retry-After`, `Allow`) the error maps to.
pub fn error_response(e: &ApiError) -> Response<Full<Bytes>> {
    let mut resp = json_response(e.status(), e.body());
    if let Some(secs) = e.retry_after_secs() {
        resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    if let Some(allow) = e.allow() {
        resp.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static(allow));
    }
    if matches!(e, ApiError::UnsupportedEncoding(_)) {
        resp.headers_mut().insert(
            header::ACCEPT_ENCODING,
            header::HeaderValue::from_static(content_coding::ACCEPTED),
        );
    }
    if e.closes_connection() {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// An error in OpenAI's shape, with `retry-after-ms` on a 429.
pub fn openai_error(e: &ApiError) -> Response<Full<Bytes>> {
    let status = e.status();
    let (kind, code) = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ("authentication_error", None),
        StatusCode::NOT_FOUND => ("invalid_request_error", Some("model_not_found")),
        StatusCode::TOO_MANY_REQUESTS => ("rate_limit_error", Some("rate_limit_exceeded")),
        s if s.is_server_error() => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let body =
        json!({"error": {"message": e.to_string(), "type": kind, "param": null, "code": code}});
    let mut response = error_response(e);
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    if let Some(after) = e.retry_after() {
        let ms = after.as_millis().max(1).to_string();
        if let Ok(v) = HeaderValue::from_str(&ms) {
            response.headers_mut().insert("retry-after-ms", v);
        }
    }
    response
}

/// TEI's status and `error_type` for `e`. Clients act on them: a 413 (TEI's code for an
/// input or a batch past its limits) makes some split their batch and retry, a 400 (nothing
/// to embed, or a body that is not JSON) or a 422 (JSON of another shape, or input the
/// model cannot take) must not be retried.
pub fn tei_kind(e: &ApiError) -> (StatusCode, &'static str) {
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

/// An error as TEI gives it: `{"error": ..., "error_type": ...}` with TEI's status.
pub fn tei_error(e: &ApiError) -> Response<Full<Bytes>> {
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

/// An error as Cohere's API gives it: `{"message": ...}`.
pub fn cohere_error(e: &ApiError) -> Response<Full<Bytes>> {
    let mut response = error_response(e);
    let body = json!({"message": e.to_string()});
    *response.body_mut() = Full::new(Bytes::from(body.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt;

    use http::header;

    use super::*;
    use crate::infer::InferError;
    use crate::infer::outcome::Refusal;
    use crate::lifecycle::registry::LookupError;

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
