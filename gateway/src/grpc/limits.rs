//! A message over the size limit is RESOURCE_EXHAUSTED, as gRPC's own servers answer it
//! and docs/api.md promises (tonic says OUT_OF_RANGE): rewritten on a unary call's
//! trailers-only answer, and on a stream's when its handler reads the message.

use http::Response;
use tonic::body::Body;
use tonic::{Code, Status};

/// What tonic says of a message past `max_decoding_message_size`.
const TONIC_TOO_LARGE: &str = "message length too large";

fn is_oversized(status: &Status) -> bool {
    status.code() == Code::OutOfRange && status.message().contains(TONIC_TOO_LARGE)
}

fn exhausted(status: &Status) -> Status {
    Status::resource_exhausted(format!(
        "the request message exceeds limits.max_body_bytes ({})",
        status.message()
    ))
}

/// A stream's read error as the client is told it.
pub fn message_status(status: Status) -> Status {
    match is_oversized(&status) {
        true => exhausted(&status),
        false => status,
    }
}

/// A unary call refused for its message's size, as RESOURCE_EXHAUSTED.
pub fn oversized_as_exhausted(response: Response<Body>) -> Response<Body> {
    match Status::from_header_map(response.headers()) {
        Some(status) if is_oversized(&status) => exhausted(&status).into_http(),
        _ => response,
    }
}
