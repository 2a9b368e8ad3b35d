//! Hugging Face TEI's gRPC API (`tei.v1`: Info, Embed, Predict, Rerank, Tokenize), answered
//! as TEI answers it, on the same inference core as TEI's HTTP routes: the text model
//! loaded (or the one a `model` metadata entry names, tandem's addition for servers of
//! several models). Each request, streamed or not, is counted under `protocol="grpc"`;
//! streams answer in order, as TEI's do, and end at the first error.

mod classify;
mod embed;
mod tokens;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::limits::message_status;
use super::status::{status_of, timeout_of};
use crate::error::ApiError;
use crate::http::AppState;
use crate::http::text_handler::text_version;
use crate::infer::Arrival;
use crate::infer::input::MAX_TEXTS;
use crate::infer::text::Metadata;
use crate::infer::tokenize::text_model;
use crate::lifecycle::registry::ModelVersion;

/// The messages and servers of `tei.v1`, generated at build time.
#[allow(clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("tei.v1");
}

/// Every TEI service, over the server's state.
#[derive(Clone)]
pub struct Tei {
    pub state: Arc<AppState>,
}

/// One call's context: which model, by when, and when its head arrived (`None` for a
/// stream's requests, each of which arrives when it is read).
#[derive(Clone)]
struct Call {
    state: Arc<AppState>,
    model: Option<String>,
    deadline: Option<Instant>,
    began: Option<Instant>,
}

impl Tei {
    /// A call, with its API key checked, its model named and its deadline read.
    fn call<T>(&self, req: &Request<T>) -> Result<Call, Status> {
        super::service::keyed(&self.state, req)?;
        let timeout = timeout_of(req.metadata()).map_err(|e| status_of(&e))?;
        let model = (req.metadata().get("model"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let began = super::Began::of(req);
        Ok(Call {
            state: self.state.clone(),
            model,
            deadline: timeout.and_then(|t| began.checked_add(t)),
            began: Some(began),
        })
    }

    /// [`Tei::call`] for a stream, whose requests arrive as they are read.
    fn stream_call<T>(&self, req: &Request<T>) -> Result<Call, Status> {
        let call = self.call(req)?;
        Ok(Call {
            began: None,
            ..call
        })
    }
}

impl Call {
    /// One request on the call's model: run by `work` with its arrival and the longest it
    /// may wait, counted once whatever its outcome.
    async fn run<T, F, Fut>(&self, work: F) -> Result<T, Status>
    where
        F: FnOnce(Arc<ModelVersion>, Arrival, Duration) -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let began = self.began.unwrap_or_else(Instant::now);
        let arrival = Arrival {
            arrived: began.into_std(),
            read_from: began.into_std(),
            deadline: self.deadline.map(Instant::into_std),
            cache: crate::cache::Policy::USE,
        };
        let version = text_version(&self.state, self.model.as_deref());
        let (version, answer) = match version {
            Ok(v) => {
                let wait = self.state.request_timeout();
                (Some(v.clone()), work(v, arrival, wait).await)
            }
            Err(e) => (None, Err(e)),
        };
        let status = answer
            .as_ref()
            .map_or_else(|e| e.status(), |_| http::StatusCode::OK);
        crate::http::count::finished(version.as_deref(), status, "grpc", began.elapsed());
        answer.map_err(|e| status_of(&e))
    }

    /// `work` on the call's model, not counted as an inference (tokenizing, decoding), as
    /// HTTP's `/tokenize` and `/decode` are not.
    async fn uncounted<T, F, Fut>(&self, work: F) -> Result<T, Status>
    where
        F: FnOnce(Arc<ModelVersion>) -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let answer = match text_version(&self.state, self.model.as_deref()) {
            Ok(version) => work(version).await,
            Err(e) => Err(e),
        };
        answer.map_err(|e| status_of(&e))
    }
}

/// Requests of one stream in flight at once, at most, and answers waiting to be sent (as
/// the inference service's).
const STREAM_IN_FLIGHT: usize = 64;
const STREAM_WAITING: usize = 8;

pub type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// A stream's requests each run by `answer` as it arrives, answered in order; the stream
/// ends after the first error, or when the client's ends and every answer is sent. A
/// client that goes away cancels what it left in flight.
fn in_order<Req, Resp, F, Fut>(
    mut requests: tonic::Streaming<Req>,
    call: Call,
    answer: F,
) -> Answers<Resp>
where
    Req: Send + 'static,
    Resp: Send + 'static,
    F: Fn(Call, Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(STREAM_WAITING);
    let (pending_tx, mut pending_rx) = mpsc::channel(STREAM_IN_FLIGHT);
    let gone = tx.clone();
    tokio::spawn(async move {
        while let Some(next) = requests.next().await {
            let gone = gone.clone();
            let running = match next {
                Ok(req) => {
                    let answering = answer(call.clone(), req);
                    tokio::spawn(async move {
                        tokio::select! {
                            answered = answering => answered,
                            _ = gone.closed() => Err(Status::cancelled("the client went away")),
                        }
                    })
                }
                Err(e) => tokio::spawn(async move { Err(message_status(e)) }),
            };
            if pending_tx.send(running).await.is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        while let Some(running) = pending_rx.recv().await {
            let answered = running
                .await
                .unwrap_or_else(|_| Err(Status::internal("a streamed request's task failed")));
            let failed = answered.is_err();
            if tx.send(answered).await.is_err() || failed {
                return;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Every message of a client stream: at most [`MAX_TEXTS`] of them, and at most
/// `max_bytes` of them in all (each message's `size`), as one HTTP body holds.
async fn collected<Req>(
    mut requests: tonic::Streaming<Req>,
    max_bytes: usize,
    size: impl Fn(&Req) -> usize,
) -> Result<Vec<Req>, Status> {
    let (mut all, mut bytes) = (Vec::new(), 0);
    while let Some(next) = requests.next().await {
        if all.len() == MAX_TEXTS {
            return Err(Status::invalid_argument(format!(
                "the stream holds more than {MAX_TEXTS} texts; a request takes at most that many"
            )));
        }
        let next = next.map_err(message_status)?;
        bytes += size(&next);
        if bytes > max_bytes {
            return Err(Status::resource_exhausted(format!(
                "the stream's texts exceed limits.max_body_bytes ({max_bytes} bytes) in all"
            )));
        }
        all.push(next);
    }
    Ok(all)
}

/// TEI's `Metadata`: what serving took.
fn metadata_of(meta: &Metadata) -> pb::Metadata {
    let ns = |d: Duration| d.as_nanos() as u64;
    pb::Metadata {
        compute_chars: meta.characters as u32,
        compute_tokens: meta.tokens as u32,
        total_time_ns: ns(meta.arrived.elapsed()),
        tokenization_time_ns: ns(meta.tokenization),
        queue_time_ns: ns(meta.queue),
        inference_time_ns: ns(meta.inference),
    }
}

/// TEI's truncation: `truncate` and its direction.
fn truncation_of(truncate: bool, direction: i32) -> Result<models::Truncation, ApiError> {
    let direction = match pb::TruncationDirection::try_from(direction) {
        Ok(pb::TruncationDirection::Right) => "right",
        Ok(pb::TruncationDirection::Left) => "left",
        Err(_) => {
            return Err(ApiError::invalid(format!(
                "truncation_direction {direction}: 0 cuts the end off, 1 the start"
            )));
        }
    };
    crate::http::tei::truncation(Some(truncate), Some(direction))
}

#[tonic::async_trait]
impl pb::info_server::Info for Tei {
    async fn info(
        &self,
        req: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        let call = self.call(&req)?;
        let version =
            text_version(&call.state, call.model.as_deref()).map_err(|e| status_of(&e))?;
        let text = text_model(&version).map_err(|e| status_of(&e))?;
        let settings = version.settings();
        let model_type = match text.input.labels.len() {
            0 => pb::ModelType::Embedding,
            1 => pb::ModelType::Reranker,
            _ => pb::ModelType::Classifier,
        };
        let dtype = match text.input.precision {
            models::DType::F32 => "float32",
            models::DType::F16 => "float16",
            models::DType::BF16 => "bfloat16",
        };
        Ok(Response::new(pb::InfoResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            model_id: version.name.clone(),
            model_dtype: dtype.into(),
            model_type: model_type as i32,
            max_concurrent_requests: settings.queue_capacity as u32,
            max_input_length: text.input.max_seq_len as u32,
            max_batch_tokens: settings.max_batch_tokens as u32,
            max_batch_requests: Some(settings.max_batch_size as u32),
            max_client_batch_size: MAX_TEXTS as u32,
            tokenization_workers: 1,
            ..Default::default()
        }))
    }
}
