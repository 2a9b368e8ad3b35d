//! What tandem's edge does to every request besides routing it: its span (request id,
//! method, route and, once resolved, model: on every log line the request causes), the
//! access log line, and CORS.

use std::time::Duration;

use http::{HeaderValue, Method, Request, StatusCode, header};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::config::Config;

/// The per-listener settings of the edge, read once at start.
pub struct Edge {
    pub cors: Option<CorsLayer>,
    pub access_log: bool,
}

impl Edge {
    pub fn new(config: &Config) -> Edge {
        Edge {
            cors: cors(&config.cors_allow_origins),
            access_log: config.access_log,
        }
    }
}

/// The request's span. It is made at error level so that it is there whatever level the
/// log filter lets through: a warning inside a request still carries the request's id.
pub fn span<B>(req: &Request<B>, id: &HeaderValue) -> tracing::Span {
    tracing::error_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        method = %req.method(),
        route = req.uri().path(),
        model = tracing::field::Empty,
    )
}

/// Names the model on the current request's span.
pub fn record_model(name: &str) {
    tracing::Span::current().record("model", name);
    crate::infer::phases::model(name);
}

/// The access log line of an answered request, inside its span; a gRPC call's with its
/// `grpc-status` (its HTTP status is 200 whatever the outcome).
pub fn log(status: StatusCode, grpc_status: Option<&str>, latency: Duration) {
    let latency_ms = latency.as_micros() as f64 / 1e3;
    match grpc_status {
        Some(grpc_status) => tracing::info!(
            target: "access",
            status = status.as_u16(),
            grpc_status,
            latency_ms,
            "answered"
        ),
        None => tracing::info!(
            target: "access",
            status = status.as_u16(),
            latency_ms,
            "answered"
        ),
    }
}

/// CORS for the origins configured (none: no layer). Preflights are answered before any
/// key is asked for, as browsers send them without credentials.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::HEAD, Method::POST])
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([
                super::request_id::HEADER,
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
            ])
            .max_age(Duration::from_secs(3600)),
    )
}
