//! Reading a request body whole, bounded in size and in time. The size bound is the
//! `Limited` wrapper of [`super::BodyLimitLayer`]; the time bound is here: a client that
//! sends its headers and then stalls mid-body would otherwise hold its connection, and one
//! of the `max_connections` permits, for as long as it likes (the header timeout has
//! stopped counting by then).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::ApiError;

/// The whole body within `timeout`, 413 past `limit` bytes, 408 when it does not arrive in
/// time.
pub async fn read_body(
    body: Limited<Incoming>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let collected = tokio::time::timeout(timeout, body.collect())
        .await
        .map_err(|_| ApiError::BodyTimeout(timeout))?;
    collected.map(|c| c.to_bytes()).map_err(|e| {
        if e.downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            ApiError::BodyTooLarge { limit }
        } else {
            ApiError::malformed(format!("cannot read the request body: {e}"))
        }
    })
}
