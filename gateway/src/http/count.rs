//! Every inference request counted once, whichever API answers it: the router runs each
//! inference route inside [`counted`], and the handler names the version that serves the
//! request ([`serving`]) when it resolves it.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use tokio::time::Instant;

use crate::lifecycle::registry::ModelVersion;
use crate::metrics as names;

tokio::task_local! {
    /// The version serving the current inference request, once resolved.
    static SERVING: RefCell<Option<Arc<ModelVersion>>>;
}

/// The version that serves this request: named on its span and trace, and counted under
/// it. Outside an inference route (`/tokenize`, say) nothing is counted.
pub fn serving(version: &Arc<ModelVersion>) {
    super::access::record_model(&version.name);
    let _ = SERVING.try_with(|v| *v.borrow_mut() = Some(version.clone()));
}

/// Runs an inference route's handler and counts its answer, whatever its outcome:
/// `tandem_requests_total{model, code}` and its duration, under `_unknown` when no model was
/// resolved (the label set stays bounded), and a failure in the version's statistics.
pub async fn counted(
    handler: impl Future<Output = Response<Full<Bytes>>>,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let (response, version) = SERVING
        .scope(RefCell::new(None), async {
            let response = handler.await;
            (response, SERVING.with(|v| v.take()))
        })
        .await;
    let status = response.status();
    finished(version.as_deref(), status, "http", started.elapsed());
    response
}

/// One inference request answered, over `protocol` (`http` or `grpc`), with the HTTP
/// status its outcome maps to (a gRPC status's equivalent, docs/api.md): counted under its
/// model (`_unknown` where none was resolved: the label set stays bounded), and a failure
/// in the version's statistics.
pub fn finished(
    version: Option<&ModelVersion>,
    status: http::StatusCode,
    protocol: &'static str,
    took: std::time::Duration,
) {
    let label = version.map_or("_unknown".to_string(), |v| v.name.clone());
    if let Some(v) = version
        && !status.is_success()
    {
        v.stats.failed(took);
    }
    let code = status.as_u16().to_string();
    metrics::counter!(names::REQUESTS, "model" => label.clone(), "code" => code, "protocol" => protocol)
        .increment(1);
    metrics::histogram!(names::REQUEST_DURATION, "model" => label, "protocol" => protocol)
        .record(took.as_secs_f64());
}
