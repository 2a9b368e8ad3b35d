//! Reading a request body whole, bounded in size and in time. The size bound is the
//! `Limited` wrapper of [`super::BodyLimitLayer`]; the time bound is here: a client that
//! sends its headers and then stalls mid-body would otherwise hold its connection, and one
//! of the `max_connections` permits, for as long as it likes (the header timeout has
//! stopped counting by then).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use http::Request;

use super::AppState;
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

/// The most a request to the admin API (or the repository's) may hold, decoded.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// A request to the admin API's body, read within the server's limits and decoded, at most
/// [`MAX_ADMIN_BODY`] bytes.
pub async fn read_admin_body(
    state: &AppState,
    req: Request<Limited<Incoming>>,
) -> Result<Bytes, ApiError> {
    let limits = state.config().limits.clone();
    let coding = super::content_coding::coding(req.headers())?;
    let body = read_body(
        req.into_body(),
        limits.max_body_bytes,
        limits.body_read_timeout(),
    )
    .await?;
    let body = super::content_coding::decode(body, coding, MAX_ADMIN_BODY).await?;
    if body.len() > MAX_ADMIN_BODY {
        return Err(ApiError::BodyTooLarge {
            limit: MAX_ADMIN_BODY,
        });
    }
    Ok(body)
}
