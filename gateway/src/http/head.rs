//! What a request's headers say before its body is read, for every API: the caller's
//! remaining time, the body's content coding and the answer's, v2's binary header length;
//! and when the request arrived.

use std::time::Duration;

use http::HeaderMap;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::content_coding;
use crate::error::ApiError;
use crate::infer::Arrival;

pub const BINARY_HEADER: &str = "inference-header-content-length";
/// The time left to a request's caller, in microseconds, as a proxy or client propagates
/// its own deadline (gRPC's `grpc-timeout` idea): the server counts it from arrival, as it
/// does `parameters.timeout`, and answers 504 at once when nothing is left.
pub const TIMEOUT_HEADER: &str = "tandem-timeout-us";
/// The same in milliseconds, as Envoy sets it on the requests it routes.
pub const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";

/// How the response cache answered a request: `hit`, `miss` or `partial`.
pub const CACHE_HEADER: &str = "x-tandem-cache";

/// What the headers say about the body and the answer, read before the body.
pub struct Head {
    /// `Inference-Header-Content-Length`: the JSON part's length in a binary request.
    pub binary_header_len: Option<usize>,
    /// The caller's remaining time, from the propagation headers.
    propagated: Option<Duration>,
    pub coding: content_coding::Coding,
    pub answer_coding: content_coding::Coding,
    /// `Cache-Control: no-cache` (no lookup) and `no-store` (no storing).
    pub cache: crate::cache::Policy,
}

pub fn read_head(headers: &HeaderMap) -> Result<Head, ApiError> {
    let binary_header_len = match headers.get(BINARY_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    ApiError::malformed(format!(
                        "Inference-Header-Content-Length must be a byte count, got {v:?}"
                    ))
                })?,
        ),
    };
    Ok(Head {
        binary_header_len,
        propagated: propagated_timeout(headers)?,
        coding: content_coding::coding(headers)?,
        answer_coding: content_coding::accepted(headers),
        cache: cache_control(headers),
    })
}

/// What `Cache-Control` lets the response cache do with this request: `no-cache`, look
/// nothing up (the answer is computed, and stored); `no-store`, store nothing.
fn cache_control(headers: &HeaderMap) -> crate::cache::Policy {
    let mut policy = crate::cache::Policy::USE;
    let directives = (headers.get_all(http::header::CACHE_CONTROL).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for directive in directives {
        let directive = directive.trim();
        if directive.eq_ignore_ascii_case("no-cache") {
            policy.lookup = false;
        } else if directive.eq_ignore_ascii_case("no-store") {
            policy.store = false;
        }
    }
    policy
}

/// The caller's remaining time from [`TIMEOUT_HEADER`] or [`ENVOY_TIMEOUT_HEADER`] (the
/// shorter when both are set).
fn propagated_timeout(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    let read = |name: &str, unit: fn(u64) -> Duration| -> Result<Option<Duration>, ApiError> {
        let Some(v) = headers.get(name) else {
            return Ok(None);
        };
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|n| Some(unit(n)))
            .ok_or_else(|| ApiError::malformed(format!("{name} must be a whole number, got {v:?}")))
    };
    let us = read(TIMEOUT_HEADER, Duration::from_micros)?;
    let ms = read(ENVOY_TIMEOUT_HEADER, Duration::from_millis)?;
    Ok(us.into_iter().chain(ms).min())
}

/// When the request arrived: when the kernel received its bytes, if that was earlier than
/// the handler started (it waited in the socket while the runtime served others). A
/// client may send any deadline; one an `Instant` cannot hold is no deadline at all.
pub fn arrival_of(started: Instant, clock: &ArrivalClock, head: &Head) -> Arrival {
    let read_from = started.into_std();
    let arrived = clock
        .take()
        .map_or(read_from, |k| k.into_std().min(read_from));
    Arrival {
        arrived,
        read_from,
        deadline: head.propagated.and_then(|t| arrived.checked_add(t)),
        cache: head.cache,
    }
}
