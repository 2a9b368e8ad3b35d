//! Traces exported over OTLP/HTTP (protobuf) with the OpenTelemetry SDK: its batch
//! processor exports from its own thread, through [`RuntimeClient`], which sends each batch
//! with hyper on tandem's runtime. Off unless an endpoint is configured, and then each
//! request costs a handful of spans made when it is answered.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TracerProvider;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};

/// A batch that takes longer than this to send is dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a collector's answer read.
const MAX_ANSWER_BYTES: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
#[error("--otlp-endpoint {endpoint:?}: {reason}")]
pub struct OtlpError {
    endpoint: String,
    reason: String,
}

/// The tracer requests' spans come from, and the provider that exports them.
pub struct Traces {
    pub tracer: Tracer,
    provider: SdkTracerProvider,
}

impl Traces {
    /// Exports to `endpoint` (a collector's base URL, `http://host:4318`; `/v1/traces` is
    /// added) as `service`. Must be called on the runtime the exports are to run on.
    pub fn start(endpoint: &str, service: &str) -> Result<Traces, OtlpError> {
        let error = |reason: String| OtlpError {
            endpoint: endpoint.to_string(),
            reason,
        };
        let url = traces_url(endpoint).map_err(error)?;
        let client = RuntimeClient {
            runtime: tokio::runtime::Handle::try_current().map_err(|e| error(e.to_string()))?,
            client: Client::builder(TokioExecutor::new()).build_http(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| error(e.to_string()))?;
        let resource = Resource::builder()
            .with_service_name(service.to_string())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Traces {
            tracer: provider.tracer("tandem"),
            provider,
        })
    }

    /// Sends what is still buffered (at shutdown).
    pub fn flush(&self) {
        if let Err(e) = self
            .provider
            .shutdown_with_timeout(EXPORT_TIMEOUT + Duration::from_secs(1))
        {
            tracing::warn!(error = %e, "could not export the last traces");
        }
    }
}

/// `endpoint` checked and with `/v1/traces` added unless it is there.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let uri: http::Uri = endpoint.parse().map_err(|e| format!("not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err("expected http://host:port (a collector beside tandem, or its sidecar)".into());
    }
    let base = endpoint.trim_end_matches('/');
    Ok(match base.ends_with("/v1/traces") {
        true => base.to_string(),
        false => format!("{base}/v1/traces"),
    })
}

/// Sends the SDK's requests on tandem's runtime: its exporting thread has none of its own.
struct RuntimeClient {
    runtime: tokio::runtime::Handle,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for RuntimeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuntimeClient")
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let send = async move {
            let answer = client.request(request.map(Full::new)).await?;
            let (parts, body) = answer.into_parts();
            let body = http_body_util::Limited::new(body, MAX_ANSWER_BYTES);
            let bytes = body.collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, bytes))
        };
        // The timer is made on the runtime too: the exporting thread has no tokio clock.
        let sent = self
            .runtime
            .spawn(async move { tokio::time::timeout(EXPORT_TIMEOUT, send).await });
        match sent.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the collector did not answer in time".into()),
            Err(e) => Err(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_collector_base_url_over_http() {
        assert_eq!(
            traces_url("http://c:4318").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces/").unwrap(),
            "http://c:4318/v1/traces"
        );
        for bad in ["c:4318", "https://c:4318", "not a url", "http://"] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
