//! A request validated against its model's signature ([`crate::validate`]: v2's tensors, JSON
//! or binary, and BYTES for a text model) run on the core: rows as they are, texts
//! tokenized, submitted, awaited, and normalised where the request asks; with the response
//! cache where the model uses it ([`super::cached`]).

use std::time::Duration;

use super::cached::{Cached, Part};
use super::input::Input;
use super::text::normalized;
use super::{Arrival, Submission, cached, phases, tokenize};
use crate::batching::{Completed, Payload};
use crate::cache::{Answer, Outcome, VersionCache};
use crate::error::ApiError;
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::response::OutputRequest;
use crate::validate::{TextRequest, ValidInput, ValidRequest};

/// What a validated request came to.
pub struct Ran {
    pub completed: Completed,
    /// The rows (or texts) it ran.
    pub rows: usize,
    /// When it was submitted.
    pub queued: std::time::Instant,
    /// How the response cache answered it, where it was used; the request is then
    /// recorded already ([`cached::record`]), and the caller records nothing.
    pub cache: Option<Outcome>,
}

/// How a request is queued.
#[derive(Clone, Copy)]
pub struct Queueing {
    pub priority: u32,
    pub timeout: Option<Duration>,
    /// The longest the request waits for its answer.
    pub wait: Duration,
    /// It was admitted before it was parsed (a model without the response cache).
    pub admitted: bool,
}

/// How a v2 request (JSON, binary or gRPC) was let in before it was decoded.
#[derive(Clone, Copy)]
pub struct Admitted {
    /// The model may answer it from the response cache: it is admitted once it is found
    /// missing there, not before.
    caching: bool,
}

/// A v2 request before it is decoded: admitted now, unless the response cache may answer
/// it (a request found there is answered without admission). The body is read, so a
/// refusal leaves the connection usable.
pub fn admit(version: &ModelVersion, arrival: &Arrival) -> Result<Admitted, ApiError> {
    let caching = version.cache_for(arrival.cache).is_some();
    if !caching {
        version.core.admit_unparsed(arrival)?;
    }
    Ok(Admitted { caching })
}

/// A v2 request, run: what the response needs of it.
pub struct Served {
    pub id: Option<String>,
    pub outputs: Vec<OutputRequest>,
    pub ran: Ran,
    /// Its arrival, with what the request itself lets the response cache do.
    pub arrival: Arrival,
}

impl Served {
    /// Records the request once its response is ready (a cached request's computed parts
    /// were recorded as they ran); how the cache answered it, where it was used.
    pub fn record(&self, version: &ModelVersion) -> Option<Outcome> {
        let ran = &self.ran;
        if ran.cache.is_none() {
            super::record(version, &self.arrival, ran.queued, ran.rows, &ran.completed);
        }
        ran.cache
    }
}

/// Runs a decoded v2 request that [`admit`] let in; `wait` is the longest it waits for
/// its answer.
pub async fn serve(
    version: &ModelVersion,
    valid: ValidRequest,
    mut arrival: Arrival,
    admitted: Admitted,
    wait: Duration,
) -> Result<Served, ApiError> {
    arrival.cache = arrival.cache.and(valid.cache);
    let cache = version
        .cache_for(arrival.cache)
        .filter(|_| admitted.caching);
    let queueing = Queueing {
        priority: valid.priority,
        timeout: valid.timeout,
        wait,
        admitted: !admitted.caching,
    };
    let ran = run(version, valid.input, &arrival, queueing, cache).await?;
    Ok(Served {
        id: valid.id,
        outputs: valid.outputs,
        ran,
        arrival,
    })
}

/// Runs `input` on `version`, with `cache` where the model uses the response cache and the
/// request lets it.
pub async fn run(
    version: &ModelVersion,
    input: ValidInput,
    arrival: &Arrival,
    queueing: Queueing,
    cache: Option<&VersionCache>,
) -> Result<Ran, ApiError> {
    if let Some(cache) = cache {
        return run_cached(version, cache, input, arrival, queueing).await;
    }
    if !queueing.admitted {
        version.core.admit_unparsed(arrival)?;
    }
    let (submission, normalize) = submission(version, input, queueing).await?;
    let queued = std::time::Instant::now();
    let rows = submission.outputs;
    phases::queued(arrival.arrived);
    let mut completed = version
        .core
        .submit(submission, arrival, queueing.wait)
        .await?;
    phases::answered(completed.queue_time, completed.compute_time);
    let width = version.info.output_width;
    completed.output = normalized(completed.output, width, normalize);
    Ok(Ran {
        completed,
        rows,
        queued,
        cache: None,
    })
}

/// What goes to the queue: rows as they are, texts tokenized; and whether the answer is to
/// be normalised.
async fn submission(
    version: &ModelVersion,
    input: ValidInput,
    queueing: Queueing,
) -> Result<(Submission, bool), ApiError> {
    match input {
        ValidInput::Dense { values, rows } => {
            Ok((rows_of(Payload::Dense(values), rows, queueing), false))
        }
        ValidInput::Tensors { tensors, rows } => {
            Ok((rows_of(Payload::Tensors(tensors), rows, queueing), false))
        }
        ValidInput::Text(t) => {
            let normalize = t.normalize;
            let (inputs, truncation, prompt) = text_inputs(t);
            let tokenized =
                tokenize::tokenize(version, inputs, truncation, prompt.as_deref()).await?;
            let submission = tokenized.submission(queueing.priority, queueing.timeout);
            Ok((submission, normalize))
        }
    }
}

fn rows_of(input: Payload, rows: usize, queueing: Queueing) -> Submission {
    Submission {
        input,
        rows,
        outputs: rows,
        priority: queueing.priority,
        timeout: queueing.timeout,
        continues: false,
    }
}

/// A text request's inputs (pairs where it has them), truncation and prompt name.
fn text_inputs(t: TextRequest) -> (Vec<Input>, models::Truncation, Option<String>) {
    let inputs = match t.pairs {
        None => t.texts.into_iter().map(Input::Text).collect(),
        Some(pairs) => (t.texts.into_iter().zip(pairs))
            .map(|(a, b)| Input::Pair(a.into(), b))
            .collect(),
    };
    (inputs, t.truncation, t.prompt_name)
}

/// Submits and awaits one part of a cached request.
async fn submit_part(on: On<'_>, submission: Submission) -> Result<(Completed, Part), ApiError> {
    let queued = std::time::Instant::now();
    phases::queued(on.arrival.arrived);
    let completed = (on.version.core)
        .submit(submission, on.arrival, on.queueing.wait)
        .await?;
    phases::answered(completed.queue_time, completed.compute_time);
    let part = Part {
        queued,
        queue_time: completed.queue_time,
        compute_time: completed.compute_time,
        tokenization: Duration::ZERO,
    };
    Ok((completed, part))
}

/// What a cached request's parts need to run.
#[derive(Clone, Copy)]
struct On<'a> {
    version: &'a ModelVersion,
    cache: &'a VersionCache,
    arrival: &'a Arrival,
    queueing: Queueing,
    /// The longest it waits for inputs others compute.
    deadline: tokio::time::Instant,
}

/// [`run`] with the response cache: an MLP's rows and a text model's texts each their own
/// entry, an ONNX model's request one entry.
async fn run_cached(
    version: &ModelVersion,
    cache: &VersionCache,
    input: ValidInput,
    arrival: &Arrival,
    queueing: Queueing,
) -> Result<Ran, ApiError> {
    let deadline = cached::deadline(arrival, queueing.timeout, queueing.wait);
    let on = On {
        version,
        cache,
        arrival,
        queueing,
        deadline,
    };
    let (answered, normalize, rows) = match input {
        ValidInput::Dense { values, rows } => (dense_cached(on, &values, rows).await?, false, rows),
        ValidInput::Text(t) => {
            let normalize = t.normalize;
            let answered = text_cached(on, t).await?;
            let texts = answered.entries.len();
            (answered, normalize, texts)
        }
        ValidInput::Tensors { tensors, rows } => {
            (tensors_cached(on, tensors, rows).await?, false, rows)
        }
    };
    cached::record(version, cache, &answered, rows, arrival);
    let joined = Part::joined(&answered.parts);
    let tokens = cached::tokens_of(&answered.entries);
    let mut completed = joined.map_or_else(|| empty(tokens), |p| p.completed(tokens));
    let width = version.info.output_width;
    completed.output = normalized(cached::values_of(&answered.entries), width, normalize);
    completed.tensors = cached::tensors_of(&answered.entries);
    Ok(Ran {
        rows,
        completed,
        queued: joined.map_or(arrival.read_from, |p| p.queued),
        cache: Some(answered.outcome),
    })
}

/// An MLP's rows, each its own entry.
async fn dense_cached(on: On<'_>, values: &[f32], rows: usize) -> Result<Cached, ApiError> {
    let keys = cached::row_keys(on.cache, values, rows);
    let (in_width, width) = (values.len() / rows.max(1), on.version.info.output_width);
    let some = |todo: Vec<usize>| {
        let picked = (todo.iter())
            .flat_map(|&i| &values[i * in_width..(i + 1) * in_width])
            .copied()
            .collect();
        let submission = rows_of(Payload::Dense(picked), todo.len(), on.queueing);
        async move {
            let (c, part) = submit_part(on, submission).await?;
            Ok((cached::rows_of(&c.output, width, &[]), part))
        }
    };
    cached::answer(on.version, on.cache, keys, on.arrival, on.deadline, some).await
}

/// A text model's texts, each its own entry.
async fn text_cached(on: On<'_>, t: TextRequest) -> Result<Cached, ApiError> {
    let (inputs, truncation, prompt) = text_inputs(t);
    let prompt = prompt.as_deref();
    let keys = cached::text_keys(on.cache, &inputs, truncation, prompt);
    let width = on.version.info.output_width;
    let some = |todo: Vec<usize>| {
        let these = todo.iter().map(|&i| inputs[i].clone()).collect();
        async move {
            let tokenizing = std::time::Instant::now();
            let tokenized = tokenize::tokenize(on.version, these, truncation, prompt).await?;
            let tokenization = tokenizing.elapsed();
            let lengths: Vec<usize> = tokenized.tokens.lengths().collect();
            let submission = tokenized.submission(on.queueing.priority, on.queueing.timeout);
            let (c, part) = submit_part(on, submission).await?;
            let part = Part {
                tokenization,
                ..part
            };
            Ok((cached::rows_of(&c.output, width, &lengths), part))
        }
    };
    cached::answer(on.version, on.cache, keys, on.arrival, on.deadline, some).await
}

/// An ONNX model's request, one entry.
async fn tensors_cached(
    on: On<'_>,
    tensors: Vec<seam::Tensor>,
    rows: usize,
) -> Result<Cached, ApiError> {
    let key = cached::tensors_key(on.cache, &tensors);
    // One key: computed by one round at most.
    let mut tensors = Some(tensors);
    let some = |_: Vec<usize>| {
        let taken = tensors.take();
        async move {
            let tensors = taken.ok_or_else(|| {
                ApiError::Infer(super::InferError::Model(
                    "the request's tensors were computed twice by the cache".into(),
                ))
            })?;
            let submission = rows_of(Payload::Tensors(tensors), rows, on.queueing);
            let (mut c, part) = submit_part(on, submission).await?;
            Ok((vec![Answer::Tensors(std::mem::take(&mut c.tensors))], part))
        }
    };
    cached::answer(
        on.version,
        on.cache,
        vec![key],
        on.arrival,
        on.deadline,
        some,
    )
    .await
}

/// A request none of whose inputs ran.
fn empty(tokens: usize) -> Completed {
    Completed {
        output: Vec::new(),
        tensors: Vec::new(),
        tokens,
        queue_time: Duration::ZERO,
        compute_time: Duration::ZERO,
    }
}
