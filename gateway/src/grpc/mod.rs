//! The gRPC API on its own listener (`grpc_listen`, Triton's 8001 by default): KServe v2's
//! `inference.GRPCInferenceService` ([`service`]), `grpc.health.v1.Health` ([`health`])
//! and server reflection (v1 and v1alpha, for `grpcurl`). Connections are HTTP's
//! (`http::serve`): TLS, the connection limit both listeners share, HTTP/2's limits, the
//! idle and write-stall watchdogs and graceful shutdown; [`Services`] routes each call by
//! its path to the service that answers it. Inference goes through the same core as HTTP
//! ([`infer`], [`wire`]); errors map to gRPC codes by [`status`].

mod health;
mod infer;
mod json;
mod limits;
mod service;
mod status;
mod tei;
pub(crate) mod wire;

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use tonic::body::Body;
use tonic::codec::CompressionEncoding;
use tonic::server::NamedService;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// The messages and server of `inference.GRPCInferenceService`, generated at build time.
#[allow(clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("inference");
}

/// The client's address, for the calls only loopback clients may make without a token.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

/// When a call's head arrived: its deadline (`grpc-timeout`) and its arrival count from
/// here, not from when its message was read and decoded.
#[derive(Clone, Copy, Debug)]
pub struct Began(pub tokio::time::Instant);

impl Began {
    /// A call's start, as `Services::answer` stamped it.
    fn of<T>(req: &tonic::Request<T>) -> tokio::time::Instant {
        (req.extensions().get::<Began>()).map_or_else(tokio::time::Instant::now, |b| b.0)
    }
}

type Routed = BoxCloneSyncService<Request<Incoming>, Response<Body>, Infallible>;

/// Every gRPC service tandem serves, by its path prefix (`/package.Service/`).
pub struct Services {
    routes: Vec<(String, Routed)>,
}

impl Services {
    /// The services over `state`; a request message may be at most `max_message_bytes`,
    /// HTTP's body limit. Answers are not bounded, as HTTP's are not: a model's output is
    /// sent whole once it has been computed. Fails where reflection cannot read the
    /// compiled descriptors.
    pub fn new(
        state: Arc<crate::http::AppState>,
        max_message_bytes: usize,
    ) -> Result<Services, tonic_reflection::server::Error> {
        use pb::grpc_inference_service_server::GrpcInferenceServiceServer as InferenceServer;
        use tonic_health::pb::health_server::HealthServer;
        let inference = InferenceServer::new(service::Inference {
            state: state.clone(),
        })
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(usize::MAX)
        // Compressed requests are read; answers go uncompressed (as Triton's do), even to
        // clients that accept gzip, as grpcio's all do: a row of floats barely compresses.
        .accept_compressed(CompressionEncoding::Gzip);
        let tei = tei::Tei {
            state: state.clone(),
        };
        let health = HealthServer::new(health::Health { state });
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(json::DESCRIPTORS)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let v1 = reflection().build_v1()?;
        let v1alpha = reflection().build_v1alpha()?;
        // Each generated server has its own builder methods: one macro bounds them all.
        macro_rules! bounded {
            ($server:expr) => {
                $server
                    .max_decoding_message_size(max_message_bytes)
                    .max_encoding_message_size(usize::MAX)
            };
        }
        use tei::pb::{embed_server, info_server, predict_server, rerank_server, tokenize_server};
        let routes = vec![
            route(inference),
            route(bounded!(info_server::InfoServer::new(tei.clone()))),
            route(bounded!(embed_server::EmbedServer::new(tei.clone()))),
            route(bounded!(predict_server::PredictServer::new(tei.clone()))),
            route(bounded!(rerank_server::RerankServer::new(tei.clone()))),
            route(bounded!(tokenize_server::TokenizeServer::new(tei))),
            route(health),
            route(v1),
            route(v1alpha),
        ];
        Ok(Services { routes })
    }
}

#[async_trait::async_trait]
impl crate::http::Calls for Services {
    async fn answer(
        &self,
        mut req: Request<Incoming>,
        peer: std::net::SocketAddr,
    ) -> Response<Body> {
        let began = tokio::time::Instant::now();
        req.extensions_mut().insert(Began(began));
        req.extensions_mut().insert(Peer(peer));
        let path = req.uri().path();
        let Some((_, service)) = self
            .routes
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
        else {
            let status = tonic::Status::unimplemented(format!("no gRPC method {path}"));
            return status.into_http();
        };
        let counted = COUNTED.contains(&path);
        let response = service.clone().oneshot(req).await;
        let response = response.unwrap_or_else(|never| match never {});
        let (response, refused) = limits::client_faults(response);
        // A message refused before the handler ran is an inference request answered all
        // the same, as HTTP counts its 400s and 413s.
        if let Some(status) = refused.filter(|_| counted) {
            crate::http::count::finished(None, status, "grpc", began.elapsed());
        }
        response
    }
}

/// The unary calls counted in `tandem_requests_total` (streams count each request).
const COUNTED: &[&str] = &[
    "/inference.GRPCInferenceService/ModelInfer",
    "/tei.v1.Embed/Embed",
    "/tei.v1.Embed/EmbedSparse",
    "/tei.v1.Embed/EmbedAll",
    "/tei.v1.Predict/Predict",
    "/tei.v1.Predict/PredictPair",
    "/tei.v1.Rerank/Rerank",
];

fn route<S>(service: S) -> (String, Routed)
where
    S: NamedService
        + tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    (format!("/{}/", S::NAME), BoxCloneSyncService::new(service))
}
