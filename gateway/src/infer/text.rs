//! A text request on the core, whichever API or protocol it came through: the task checked
//! against the model, the texts tokenized and split into batches, the batches queued at
//! once and awaited, and the answer post-processed (token states kept, dimensions cut,
//! embeddings normalised).

use std::time::Duration;

use models::Truncation;

use super::cached::Part;
use super::input::Input;
use super::{Arrival, Submission, cached, dimensions, phases, record, tokenize};
use crate::batching::Completed;
use crate::cache::{Outcome, VersionCache};
use crate::error::ApiError;
use crate::lifecycle::registry::ModelVersion;

/// What a text request asks for, whichever API it came through.
pub struct TextRequest {
    pub inputs: Vec<Input>,
    pub truncation: Truncation,
    /// L2-normalise what comes back: an embedding model's default when `None`; never for a
    /// classifier's logits.
    pub normalize: Option<bool>,
    pub prompt_name: Option<String>,
    pub task: Task,
    /// The size to cut each embedding to ([`super::dimensions`]).
    pub dimensions: dimensions::Asked,
}

/// What an endpoint serves, which the model must do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Embed,
    Classify,
    /// Every token's state of each text, not normalised (TEI's `/embed_all`).
    TokenStates,
    /// A sparse encoder's weights, not normalised (TEI's `/embed_sparse`).
    Sparse,
}

/// What came back.
pub struct TextAnswer {
    /// Row-major `[texts, width]`, or for [`Task::TokenStates`] `[tokens, width]`.
    pub values: Vec<f32>,
    pub width: usize,
    /// For [`Task::TokenStates`], each text's tokens in order; empty otherwise.
    pub lengths: Vec<usize>,
    pub meta: Metadata,
}

/// What serving a text request took (TEI tells it in its `x-*` response headers).
#[derive(Clone, Copy, Debug)]
pub struct Metadata {
    /// When its first bytes arrived: the total runs from here.
    pub arrived: std::time::Instant,
    /// The characters of the texts sent (a prompt's not included).
    pub characters: usize,
    /// The tokens the model ran, special tokens included, after truncation.
    pub tokens: usize,
    pub tokenization: Duration,
    /// The longest wait in a queue of the request's batches, from its submission.
    pub queue: Duration,
    /// The compute of its batches, summed.
    pub inference: Duration,
    /// TEI's `x-compute-type`: `cpu` or `gpu`.
    pub device: &'static str,
    /// How the response cache answered it, where the model uses one.
    pub cache: Option<Outcome>,
}

/// Admits, tokenizes and runs one text request on `version`: as one batch, or as several
/// where its inputs are more than one batch takes (`max_batch_size` inputs,
/// `max_batch_tokens` token-units), all queued at once; `wait` is the longest it waits for
/// the answer. Where the model uses the response cache, inputs found there are not run,
/// and a request found whole is not admitted ([`super::cached`]).
pub async fn run(
    version: &ModelVersion,
    arrival: &Arrival,
    ask: TextRequest,
    wait: Duration,
) -> Result<TextAnswer, ApiError> {
    check_task(version, ask.task)?;
    let width = version.info.output_width;
    let dimensions = (ask.dimensions).checked(version.settings().min_dimensions, width)?;
    let states = ask.task == Task::TokenStates;
    let normalize = !matches!(ask.task, Task::TokenStates | Task::Sparse)
        && ask
            .normalize
            .unwrap_or(tokenize::text_model(version)?.input.normalize_by_default);
    let characters = ask.inputs.iter().map(Input::chars).sum();
    // Every token's state is as long as its text: not kept.
    let cache = version.cache_for(arrival.cache).filter(|_| !states);
    let texts = Texts {
        truncation: ask.truncation,
        prompt_name: ask.prompt_name.as_deref(),
        states,
        timeout: version.settings().default_timeout(),
        each_text_tokens: cache.is_some(),
    };
    let ran = match cache {
        Some(cache) => run_cached(version, cache, arrival, ask.inputs, &texts, wait).await?,
        None => {
            version.core.admit_unparsed(arrival)?;
            let ran = compute(version, arrival, ask.inputs, &texts, wait).await?;
            let completed = ran.part.completed(ran.tokens);
            record(version, arrival, ran.part.queued, ran.texts, &completed);
            ran
        }
    };
    let (values, width) = dimensions::cut(ran.values, width, dimensions);
    let part = ran.part;
    // The batcher's queue time counts from arrival; the time before submission is not
    // queueing.
    let before = part.queued.saturating_duration_since(arrival.arrived);
    let meta = Metadata {
        arrived: arrival.arrived,
        characters,
        tokens: ran.tokens,
        tokenization: part.tokenization,
        queue: part.queue_time.saturating_sub(before),
        inference: part.compute_time,
        device: match version.info.device.starts_with("cuda") {
            true => "gpu",
            false => "cpu",
        },
        cache: ran.cache,
    };
    Ok(TextAnswer {
        values: normalized(values, width, normalize),
        width,
        lengths: ran.lengths,
        meta,
    })
}

/// How a request's texts are run.
struct Texts<'a> {
    truncation: Truncation,
    prompt_name: Option<&'a str>,
    /// Every token's state is answered.
    states: bool,
    /// The model's `default_timeout_us`, if it has one.
    timeout: Option<Duration>,
    /// Each text's tokens are kept apart (for its cache entry).
    each_text_tokens: bool,
}

/// Texts run on the model.
struct Ran {
    /// Row-major `[texts, width]` (`[tokens, width]` for token states), as the model
    /// answered.
    values: Vec<f32>,
    /// Token states: each text's tokens.
    lengths: Vec<usize>,
    texts: usize,
    /// Each text's tokens, special tokens included, after truncation, where
    /// [`Texts::each_text_tokens`] asks for them.
    text_tokens: Vec<usize>,
    tokens: usize,
    part: Part,
    cache: Option<Outcome>,
}

/// Tokenizes and runs `inputs` on `version` (admitted already).
async fn compute(
    version: &ModelVersion,
    arrival: &Arrival,
    inputs: Vec<Input>,
    texts: &Texts<'_>,
    wait: Duration,
) -> Result<Ran, ApiError> {
    let tokenizing = std::time::Instant::now();
    let batches =
        tokenize::tokenize_in_batches(version, inputs, texts.truncation, texts.prompt_name);
    let mut batches = batches.await?;
    let tokenization = tokenizing.elapsed();
    let tokens = batches.iter().map(|b| b.count).sum();
    let text_tokens = match texts.each_text_tokens {
        true => batches.iter().flat_map(|b| b.tokens.lengths()).collect(),
        false => Vec::new(),
    };
    let settings = version.settings();
    let lengths = match texts.states {
        true => keep_states(&mut batches, tokens, settings.max_batch_tokens)?,
        false => Vec::new(),
    };
    // The first batch is admitted or refused; the rest follow it, so that a request is
    // judged once, as a whole, and not refused half-way for the batches of its own ahead.
    let submissions: Vec<_> = (batches.into_iter().enumerate())
        .map(|(i, b)| Submission {
            continues: i > 0,
            ..b.submission(settings.default_priority, texts.timeout)
        })
        .collect();
    let rows = submissions.iter().map(|s| s.outputs).sum();
    let queued = std::time::Instant::now();
    let answers = submissions
        .into_iter()
        .map(|s| version.core.submit(s, arrival, wait));
    phases::queued(arrival.arrived);
    let completed = joined(all(answers.collect()).await?);
    phases::answered(completed.queue_time, completed.compute_time);
    Ok(Ran {
        values: completed.output,
        lengths,
        texts: rows,
        text_tokens,
        tokens,
        part: Part {
            queued,
            queue_time: completed.queue_time,
            compute_time: completed.compute_time,
            tokenization,
        },
        cache: None,
    })
}

/// [`compute`] with the response cache: each input its own entry.
async fn run_cached(
    version: &ModelVersion,
    cache: &VersionCache,
    arrival: &Arrival,
    inputs: Vec<Input>,
    texts: &Texts<'_>,
    wait: Duration,
) -> Result<Ran, ApiError> {
    let keys = cached::text_keys(cache, &inputs, texts.truncation, texts.prompt_name);
    let width = version.info.output_width;
    let some = |todo: Vec<usize>| {
        let these = todo.iter().map(|&i| inputs[i].clone()).collect();
        async move {
            let ran = compute(version, arrival, these, texts, wait).await?;
            let rows = cached::rows_of(&ran.values, width, &ran.text_tokens);
            Ok((rows, ran.part))
        }
    };
    let deadline = cached::deadline(arrival, texts.timeout, wait);
    let answered = cached::answer(version, cache, keys, arrival, deadline, some).await?;
    let count = answered.entries.len();
    cached::record(version, cache, &answered, count, arrival);
    let part = Part::joined(&answered.parts).unwrap_or(Part {
        queued: arrival.arrived,
        queue_time: Duration::ZERO,
        compute_time: Duration::ZERO,
        tokenization: Duration::ZERO,
    });
    Ok(Ran {
        values: cached::values_of(&answered.entries),
        lengths: Vec::new(),
        texts: count,
        text_tokens: Vec::new(),
        tokens: cached::tokens_of(&answered.entries),
        part,
        cache: Some(answered.outcome),
    })
}

/// Admits, tokenizes and runs `inputs` on the classifier `version`: their logits.
pub async fn classify(
    version: &ModelVersion,
    arrival: &Arrival,
    inputs: Vec<Input>,
    truncation: Truncation,
    wait: Duration,
) -> Result<TextAnswer, ApiError> {
    let ask = TextRequest {
        inputs,
        truncation,
        normalize: Some(false),
        prompt_name: None,
        task: Task::Classify,
        dimensions: dimensions::Asked::NONE,
    };
    run(version, arrival, ask, wait).await
}

/// L2-normalises each embedding (rows of `width`), when asked to.
pub fn normalized(mut embeddings: Vec<f32>, width: usize, normalize: bool) -> Vec<f32> {
    if normalize {
        models::l2_normalize_rows(&mut embeddings, width);
    }
    embeddings
}

/// Marks every text of `batches` to be answered with its every token's state; each text's
/// tokens. Refused past `max_batch_tokens` tokens in all: the answer holds a vector a
/// token, and one batch's worth bounds it.
fn keep_states(
    batches: &mut [tokenize::Tokenized],
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
    let input = &tokenize::text_model(version)?.input;
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
