//! `ModelInfer` and `ModelStreamInfer` on the inference core: each request resolved,
//! admitted before it is validated (unless the response cache may answer it), validated
//! as HTTP's v2 requests are ([`super::wire`]), run, answered with raw contents, recorded
//! and counted under `protocol="grpc"`.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::{pb, status, wire};
use crate::cache::Policy;
use crate::error::ApiError;
use crate::http::AppState;
use crate::infer::Arrival;
use crate::infer::validated;
use crate::lifecycle::registry::ModelVersion;

/// One request of a call: when it began, and the caller's deadline (`grpc-timeout`, which
/// bounds a whole stream).
#[derive(Clone, Copy)]
pub struct Call {
    pub began: Instant,
    pub deadline: Option<Instant>,
}

/// One request, answered and counted.
pub async fn infer(
    state: &AppState,
    req: pb::ModelInferRequest,
    call: Call,
) -> Result<(pb::ModelInferResponse, Option<&'static str>), ApiError> {
    let started = Instant::now();
    let resolved = state
        .registry
        .resolve(&req.model_name, version_of(&req.model_version));
    let (version, answer) = match resolved {
        Ok(v) => {
            let answer = infer_on(state, &v, req, call).await;
            (Some(v), answer)
        }
        Err(e) => (None, Err(e.into())),
    };
    let status = answer
        .as_ref()
        .map_or_else(|e| e.status(), |_| http::StatusCode::OK);
    crate::http::count::finished(version.as_deref(), status, "grpc", started.elapsed());
    answer
}

/// A request refused before its model was looked up (a malformed `grpc-timeout`): counted
/// under `_unknown` as a 400, as HTTP counts a request it cannot read.
pub fn refused_unread<T>(req: &tonic::Request<T>) {
    let took = super::Began::of(req).elapsed();
    crate::http::count::finished(None, http::StatusCode::BAD_REQUEST, "grpc", took);
}

/// `""` is the newest version, as Triton reads it.
fn version_of(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

async fn infer_on(
    state: &AppState,
    version: &ModelVersion,
    req: pb::ModelInferRequest,
    call: Call,
) -> Result<(pb::ModelInferResponse, Option<&'static str>), ApiError> {
    let arrival = Arrival {
        arrived: call.began.into_std(),
        read_from: Instant::now().into_std(),
        deadline: call.deadline.map(Instant::into_std),
        cache: Policy::USE,
    };
    let admitted = validated::admit(version, &arrival)?;
    let (request, binary) = wire::request_of(req)?;
    let valid =
        crate::validate::validate(request, &binary, &version.signature(), &version.settings())?;
    drop(binary);
    let wait = state.request_timeout();
    let served = validated::serve(version, valid, arrival, admitted, wait).await?;
    let response = wire::response_of(version, &served)?;
    let cache = served.record(version).map(|o| o.as_str());
    Ok((response, cache))
}

/// Requests of one stream in flight at once, at most: beyond it the stream is not read
/// (HTTP/2 flow control holds the client).
const STREAM_IN_FLIGHT: usize = 64;
/// Answers of one stream waiting to be sent, at most: a client that does not read holds
/// no more than these and the requests in flight.
const STREAM_WAITING: usize = 8;

pub type AnswerStream =
    Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

/// `ModelStreamInfer`: each request run as it arrives, answered as it completes (in any
/// order, each with its request id), a failed one as its error message; the stream ends
/// when the client's ends and every answer is sent. A client that goes away cancels what
/// it left in flight.
pub fn stream(
    state: Arc<AppState>,
    mut requests: tonic::Streaming<pb::ModelInferRequest>,
    call: Call,
) -> AnswerStream {
    let (tx, rx) = mpsc::channel(STREAM_WAITING);
    tokio::spawn(async move {
        let room = Arc::new(Semaphore::new(STREAM_IN_FLIGHT));
        loop {
            let Ok(permit) = room.clone().acquire_owned().await else {
                break;
            };
            let req = tokio::select! {
                next = requests.next() => next,
                _ = tx.closed() => break,
            };
            let req = match req {
                Some(Ok(req)) => req,
                Some(Err(e)) => {
                    let _ = tx.send(Err(super::limits::message_status(e))).await;
                    break;
                }
                None => break,
            };
            let (state, tx) = (state.clone(), tx.clone());
            let call = Call {
                began: Instant::now(),
                ..call
            };
            tokio::spawn(async move {
                tokio::select! {
                    answer = stream_answer(&state, req, call) => {
                        let _ = tx.send(Ok(answer)).await;
                    }
                    _ = tx.closed() => {}
                }
                drop(permit);
            });
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// A streamed request's answer, or its error with the request's identity.
async fn stream_answer(
    state: &AppState,
    req: pb::ModelInferRequest,
    call: Call,
) -> pb::ModelStreamInferResponse {
    let identity = pb::ModelInferResponse {
        model_name: req.model_name.clone(),
        model_version: req.model_version.clone(),
        id: req.id.clone(),
        ..Default::default()
    };
    match infer(state, req, call).await {
        Ok((response, _)) => pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        },
        Err(e) => pb::ModelStreamInferResponse {
            error_message: status::status_of(&e).message().to_string(),
            infer_response: Some(identity),
        },
    }
}
