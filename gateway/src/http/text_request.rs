//! What every text endpoint (OpenAI's and TEI's embeddings, TEI's and Cohere's
//! classification) does with a request: read its body, admit it, tokenize and run it on the
//! inference core, and answer and count it, whatever the API's shapes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{Full, Limited};
use hyper::body::Incoming;
use models::Truncation;
use tokio::time::Instant;

use super::arrival::ArrivalClock;
use super::infer::{arrival_of, read_head, record};
use super::inputs::Input;
use super::{AppState, body, content_coding, matryoshka, text};
use crate::batching::Completed;
use crate::error::ApiError;
use crate::infer::Submission;
use crate::metrics as names;
use crate::registry::ModelVersion;

/// What a text request asks for, whichever API it came through.
pub(super) struct Ask {
    pub(super) inputs: Vec<Input>,
    pub(super) truncation: Truncation,
    /// L2-normalise what comes back: an embedding model's default when `None`; never for a
    /// classifier's logits.
    pub(super) normalize: Option<bool>,
    pub(super) prompt_name: Option<String>,
    pub(super) task: Task,
    /// The size to cut each embedding to ([`super::matryoshka`]).
    pub(super) dimensions: matryoshka::Asked,
}

/// What an endpoint serves, which the model must do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Task {
    Embed,
    Classify,
    /// Every token's state of each text, not normalised (TEI's `/embed_all`).
    TokenStates,
    /// A sparse encoder's weights, not normalised (TEI's `/embed_sparse`).
    Sparse,
}

/// What came back.
pub(super) struct Outputs {
    /// Row-major `[texts, width]`, or for [`Task::TokenStates`] `[tokens, width]`.
    pub(super) values: Vec<f32>,
    pub(super) width: usize,
    /// For [`Task::TokenStates`], each text's tokens in order; empty otherwise.
    pub(super) lengths: Vec<usize>,
    pub(super) meta: Metadata,
}

/// What serving a text request took, as TEI's `x-*` response headers tell it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Metadata {
    /// When its first bytes arrived: the total runs from here.
    arrived: std::time::Instant,
    /// The characters of the texts sent (a prompt's not included).
    characters: usize,
    /// The tokens the model ran, special tokens included, after truncation.
    pub(super) tokens: usize,
    tokenization: Duration,
    /// The longest wait in a queue of the request's batches, from its submission.
    queue: Duration,
    /// The compute of its batches, summed.
    inference: Duration,
    /// TEI's `x-compute-type`: `cpu` or `gpu`.
    device: &'static str,
}

impl Metadata {
    /// TEI's headers, in whole milliseconds as TEI gives them.
    fn write(&self, headers: &mut HeaderMap) {
        let total = self.arrived.elapsed().as_millis();
        let values = [
            ("x-compute-time", total),
            ("x-total-time", total),
            ("x-compute-characters", self.characters as u128),
            ("x-compute-tokens", self.tokens as u128),
            ("x-tokenization-time", self.tokenization.as_millis()),
            ("x-queue-time", self.queue.as_millis()),
            ("x-inference-time", self.inference.as_millis()),
        ];
        for (name, value) in values {
            headers.insert(name, HeaderValue::from(value as u64));
        }
        headers.insert("x-compute-type", HeaderValue::from_static(self.device));
    }
}

/// A text request's answer, and what serving it took.
pub(super) struct Served {
    pub(super) body: Vec<u8>,
    pub(super) meta: Metadata,
}

/// A request read whole, decoded from its content coding, with when it arrived.
pub(super) struct Received {
    pub(super) body: Bytes,
    pub(super) arrival: crate::infer::Arrival,
}

/// Reads the body (bounded in size and time) and decodes it. These APIs name the model in
/// the body, so admission comes after this read, before tokenizing: the expensive part.
pub(super) async fn receive(
    state: &AppState,
    req: Request<Limited<Incoming>>,
    clock: &ArrivalClock,
    started: Instant,
) -> Result<Received, ApiError> {
    let head = read_head(req.headers())?;
    let config = state.config();
    let limit = config.limits.max_body_bytes;
    let body = body::read_body(req.into_body(), limit, config.limits.body_read_timeout()).await?;
    let arrival = arrival_of(started, clock, &head);
    let body = content_coding::decode(body, head.coding, limit).await?;
    Ok(Received { body, arrival })
}

/// Admits, tokenizes and runs one text request on `version`: as one batch, or as several
/// where its inputs are more than one batch takes (`max_batch_size` inputs,
/// `max_batch_tokens` token-units), all queued at once.
pub(super) async fn run(
    state: &AppState,
    version: &ModelVersion,
    arrival: &crate::infer::Arrival,
    ask: Ask,
) -> Result<Outputs, ApiError> {
    check_task(version, ask.task)?;
    let width = version.info.output_width;
    let dimensions = (ask.dimensions).checked(version.settings().min_dimensions, width)?;
    version.core.admit_unparsed(arrival)?;
    let states = ask.task == Task::TokenStates;
    let normalize = !matches!(ask.task, Task::TokenStates | Task::Sparse)
        && ask
            .normalize
            .unwrap_or(text::text_model(version)?.input.normalize_by_default);
    let prompt_name = ask.prompt_name.as_deref();
    let characters = ask.inputs.iter().map(Input::chars).sum();
    let tokenizing = Instant::now();
    let batches = text::tokenize_in_batches(version, ask.inputs, ask.truncation, prompt_name);
    let mut batches = batches.await?;
    let tokenization = tokenizing.elapsed();
    let tokens = batches.iter().map(|b| b.count).sum();
    let settings = version.settings();
    let lengths = match states {
        true => keep_states(&mut batches, tokens, settings.max_batch_tokens)?,
        false => Vec::new(),
    };
    let timeout = (settings.default_timeout_us > 0)
        .then(|| std::time::Duration::from_micros(settings.default_timeout_us));
    // The first batch is admitted or refused; the rest follow it, so that a request is
    // judged once, as a whole, and not refused half-way for the batches of its own ahead.
    let submissions: Vec<_> = (batches.into_iter().enumerate())
        .map(|(i, b)| Submission {
            continues: i > 0,
            ..b.submission(settings.default_priority, timeout)
        })
        .collect();
    let rows = submissions.iter().map(|s| s.outputs).sum();
    let queued = std::time::Instant::now();
    let wait = state.config().limits.request_timeout();
    let answers = submissions
        .into_iter()
        .map(|s| version.core.submit(s, arrival, wait));
    super::trace::queued(arrival.arrived);
    let completed = joined(all(answers.collect()).await?);
    super::trace::answered(completed.queue_time, completed.compute_time);
    record(version, arrival, queued, rows, &completed);
    let (values, width) = matryoshka::cut(completed.output, width, dimensions);
    // The batcher's queue time counts from arrival; the time before submission is not
    // queueing.
    let before = queued.saturating_duration_since(arrival.arrived);
    let meta = Metadata {
        arrived: arrival.arrived,
        characters,
        tokens,
        tokenization,
        queue: completed.queue_time.saturating_sub(before),
        inference: completed.compute_time,
        device: match version.info.device.starts_with("cuda") {
            true => "gpu",
            false => "cpu",
        },
    };
    Ok(Outputs {
        values: text::normalized(values, width, normalize),
        width,
        lengths,
        meta,
    })
}

/// Marks every text of `batches` to be answered with its every token's state; each text's
/// tokens. Refused past `max_batch_tokens` tokens in all: the answer holds a vector a
/// token, and one batch's worth bounds it.
fn keep_states(
    batches: &mut [text::Tokenized],
    tokens: usize,
    max_batch_tokens: usize,
) -> Result<Vec<usize>, ApiError> {
    if tokens > max_batch_tokens {
        return Err(ApiError::too_large(format!(
            "the request's texts come to {tokens} tokens, and every token's state is asked \
             for: at most the model's max_batch_tokens of {max_batch_tokens} in one request; \
             send fewer or shorter texts"
        )));
    }
    let mut lengths = Vec::new();
    for b in batches {
        b.tokens.keep_all_states();
        lengths.extend(b.tokens.lengths());
    }
    Ok(lengths)
}

/// Refuses a request for what the model does not do: embeddings of a classifier, scores of
/// an encoder of embeddings, token states where they are not served.
fn check_task(version: &ModelVersion, task: Task) -> Result<(), ApiError> {
    let input = &text::text_model(version)?.input;
    let classifier = input.is_classifier();
    match (task, classifier) {
        (Task::Sparse, _) if !input.sparse => Err(ApiError::invalid(format!(
            "model {:?} is not a sparse encoder: /embed_sparse takes a SPLADE model \
             (BertForMaskedLM); /embed gives this model's embeddings",
            version.name
        ))),
        (Task::TokenStates, _) if !input.token_states => Err(ApiError::invalid(format!(
            "model {:?} does not answer with every token's state: /embed_all takes a text \
             encoder served on the CPU whose embeddings are its token states pooled (no \
             classifier head, no Dense module)",
            version.name
        ))),
        (Task::Embed | Task::TokenStates | Task::Sparse, true) => Err(ApiError::invalid(format!(
            "model {:?} is a classifier: it answers /predict, /rerank and v2 infer (logits), \
             not embeddings",
            version.name
        ))),
        (Task::Classify, false) => Err(ApiError::invalid(format!(
            "model {:?} gives embeddings, not scores: /predict and /rerank take a classifier \
             (BertForSequenceClassification)",
            version.name
        ))),
        _ => Ok(()),
    }
}

/// Every future's output in order, or the first error (the others are then dropped, which
/// withdraws what they queued).
async fn all<T, E, F>(futures: Vec<F>) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, slot) in futures.iter_mut().zip(done.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(Ok(value)) => *slot = Some(value),
                    std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
                    std::task::Poll::Pending => {}
                }
            }
        }
        match done.iter().all(Option::is_some) {
            true => std::task::Poll::Ready(Ok(done.drain(..).flatten().collect())),
            false => std::task::Poll::Pending,
        }
    })
    .await
}

/// The batches of one request as one answer: outputs in order, tokens and compute summed,
/// the longest wait in a queue.
fn joined(parts: Vec<Completed>) -> Completed {
    let mut whole = Completed {
        output: Vec::new(),
        tensors: Vec::new(),
        tokens: 0,
        queue_time: std::time::Duration::ZERO,
        compute_time: std::time::Duration::ZERO,
    };
    for part in parts {
        whole.output.extend(part.output);
        whole.tokens += part.tokens;
        whole.queue_time = whole.queue_time.max(part.queue_time);
        whole.compute_time += part.compute_time;
    }
    whole
}

/// Counts a text request as v2's infer does, whatever its outcome:
/// `tandem_requests_total{model, code}` and its duration, under `_unknown` when no model was
/// resolved (the label set stays bounded), and a failure in the version's statistics.
fn count(version: Option<&ModelVersion>, response: &Response<Full<Bytes>>, started: Instant) {
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

/// A request a text handler read (its body, what it asks, the version that answers it)
/// answered by `on`, and answered and counted as [`Answered::respond`] does: how every text
/// handler ends.
pub(super) async fn answer_read<T>(
    read: Result<(Received, T, Arc<ModelVersion>), ApiError>,
    on: impl AsyncFnOnce(Arc<ModelVersion>, Received, T) -> Result<Served, ApiError>,
    started: Instant,
    coding: content_coding::Coding,
    error: fn(&ApiError) -> Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    let (version, result) = match read {
        Err(e) => (None, Err(e)),
        Ok((received, request, version)) => {
            (Some(version.clone()), on(version, received, request).await)
        }
    };
    let answer = Answered {
        version,
        result,
        started,
    };
    answer.respond(coding, error).await
}

/// What a text handler came to, to be answered and counted.
pub(super) struct Answered {
    pub(super) version: Option<Arc<ModelVersion>>,
    pub(super) result: Result<Served, ApiError>,
    pub(super) started: Instant,
}

impl Answered {
    /// The body in the coding the client accepts, or the error in its API's shape; counted
    /// either way.
    pub(super) async fn respond(
        self,
        coding: content_coding::Coding,
        error: fn(&ApiError) -> Response<Full<Bytes>>,
    ) -> Response<Full<Bytes>> {
        let response = match self.result {
            Ok(Served { body, meta }) => {
                let mut response = content_coding::respond(body, "application/json", coding).await;
                meta.write(response.headers_mut());
                response
            }
            Err(e) => error(&e),
        };
        count(self.version.as_deref(), &response, self.started);
        response
    }
}
