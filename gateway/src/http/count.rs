//! Every inference request counted once, by one function, whichever API answered it.

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use tokio::time::Instant;

use crate::lifecycle::registry::ModelVersion;
use crate::metrics as names;

/// Counts an inference request of any API, whatever its outcome:
/// `tandem_requests_total{model, code}` and its duration, under `_unknown` when no model was
/// resolved (the label set stays bounded), and a failure in the version's statistics.
pub fn count(version: Option<&ModelVersion>, response: &Response<Full<Bytes>>, started: Instant) {
    let label = version.map_or("_unknown".to_string(), |v| v.name.clone());
    if let Some(v) = version
        && !response.status().is_success()
    {
        v.stats.failed(started.elapsed());
    }
    let code = response.status().as_u16().to_string();
    metrics::counter!(names::REQUESTS, "model" => label.clone(), "code" => code).increment(1);
    metrics::histogram!(names::REQUEST_DURATION, "model" => label)
        .record(started.elapsed().as_secs_f64());
}
