//! `grpc.health.v1.Health`, as Kubernetes' gRPC probes and `grpc_health_probe` call it:
//! the server (service `""`, or the inference service's name) is SERVING when
//! `/v2/health/ready` would answer 200; a model, by its name, while a version of it serves.
//! Read at each call, not pushed: readiness has one source, the one HTTP reads. The server's
//! health is open, as HTTP's readiness is; a model's takes an API key where keys are set,
//! as HTTP's model readiness does. A watch ends once the server drains, after saying so.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::pb::grpc_inference_service_server::SERVICE_NAME;
use crate::http::AppState;

pub struct Health {
    pub state: Arc<AppState>,
}

/// How often a watch looks again.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The server's own names: `""` and the inference service.
fn is_server(service: &str) -> bool {
    service.is_empty() || service == SERVICE_NAME
}

impl Health {
    /// A model's health where keys are set needs one of them.
    fn keyed(&self, req: &Request<HealthCheckRequest>) -> Result<(), Status> {
        match is_server(&req.get_ref().service) {
            true => Ok(()),
            false => super::service::keyed(&self.state, req),
        }
    }

    /// A service's status; `None` for a name that is neither the server's nor a model's.
    fn status(&self, service: &str) -> Option<ServingStatus> {
        let state = &self.state;
        let serving = |yes: bool| match yes {
            true => ServingStatus::Serving,
            false => ServingStatus::NotServing,
        };
        if is_server(service) {
            return Some(serving(state.is_ready()));
        }
        let draining = state.draining.load(Ordering::Acquire);
        if state.registry.resolve(service, None).is_ok() {
            return Some(serving(!draining));
        }
        let known = (state.repository.as_ref())
            .is_some_and(|r| r.index().iter().any(|e| e.name == service));
        known.then_some(ServingStatus::NotServing)
    }
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

type Watch = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl tonic_health::pb::health_server::Health for Health {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.keyed(&req)?;
        let service = &req.get_ref().service;
        match self.status(service) {
            Some(status) => Ok(Response::new(answer(status))),
            None => Err(Status::not_found(format!(
                "no service or model {service:?}: ask for \"\", {SERVICE_NAME:?} or a model's name"
            ))),
        }
    }

    type WatchStream = Watch;

    /// The status now, then each change, until the client goes away.
    async fn watch(&self, req: Request<HealthCheckRequest>) -> Result<Response<Watch>, Status> {
        self.keyed(&req)?;
        let service = req.into_inner().service;
        let health = Health {
            state: self.state.clone(),
        };
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let now = health
                    .status(&service)
                    .unwrap_or(ServingStatus::ServiceUnknown);
                if last != Some(now) {
                    if tx.send(Ok(answer(now))).await.is_err() {
                        return;
                    }
                    last = Some(now);
                }
                // Draining: NOT_SERVING is said; an open watch must not hold the shutdown.
                if health.state.draining.load(Ordering::Acquire) {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(WATCH_EVERY) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
