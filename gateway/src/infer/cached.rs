//! The response cache in the core ([`crate::cache`]): a request's inputs keyed, looked up
//! before admission (a request answered wholly from the cache takes no queue slot and no
//! batch), the rest computed, stored, and answered in order with the rest.
//!
//! What a key holds: the loaded version, then everything that changes the model's output
//! for the input — a text model's truncation and prompt name and the text, pair or token
//! ids; an MLP's row, as the f32 values it runs; an ONNX model's every tensor's name,
//! datatype, shape and bytes (the whole request is one entry: its rows may not be
//! independent). What is applied to the output afterwards (normalising, a cut to fewer
//! dimensions, the requested outputs, the answer's encoding) is not in the key: it is
//! applied to the cached output as to a computed one.

use std::sync::Arc;
use std::time::Duration;

use models::Truncation;

use tokio::time::Instant;

use super::input::Input;
use super::{Arrival, InferError};
use crate::batching::Completed;
use crate::cache::{Answer, Entry, Key, Outcome, VersionCache};
use crate::error::ApiError;
use crate::lifecycle::registry::ModelVersion;

/// A request's inputs answered: each one's entry in order, how, what computing some of
/// them took, and the time spent in the store.
pub struct Cached {
    pub entries: Vec<Arc<Entry>>,
    pub outcome: Outcome,
    /// One a round that computed something: one, or more where requests it waited for gave
    /// up; none for a hit.
    pub parts: Vec<Part>,
    /// Inputs this request computed.
    pub computed: usize,
    pub spent: Duration,
}

/// What computing some of a request's inputs took.
#[derive(Clone, Copy, Debug)]
pub struct Part {
    /// When they were submitted.
    pub queued: std::time::Instant,
    /// From the request's arrival to their batch starting, as the batcher counts it.
    pub queue_time: Duration,
    pub compute_time: Duration,
    pub tokenization: Duration,
}

impl Part {
    /// Parts of one request as one: submitted at the first, the longest queue wait, compute
    /// and tokenization summed.
    pub fn joined(parts: &[Part]) -> Option<Part> {
        let first = *parts.first()?;
        Some(parts[1..].iter().fold(first, |sum, p| Part {
            queued: sum.queued.min(p.queued),
            queue_time: sum.queue_time.max(p.queue_time),
            compute_time: sum.compute_time + p.compute_time,
            tokenization: sum.tokenization + p.tokenization,
        }))
    }

    /// As the batcher answers, without outputs: what [`super::record`] reads.
    pub fn completed(&self, tokens: usize) -> Completed {
        Completed {
            output: Vec::new(),
            tensors: Vec::new(),
            tokens,
            queue_time: self.queue_time,
            compute_time: self.compute_time,
        }
    }
}

/// When a request stops waiting for inputs other requests compute: its own deadline (the
/// propagated one, or its `timeout` from arrival), or `wait` from now, whichever is first.
pub fn deadline(arrival: &Arrival, timeout: Option<Duration>, wait: Duration) -> Instant {
    let latest = std::time::Instant::now() + wait;
    let own = timeout.and_then(|t| arrival.arrived.checked_add(t));
    let first = own
        .into_iter()
        .chain(arrival.deadline)
        .fold(latest, Ord::min);
    Instant::from_std(first)
}

/// Answers inputs by their `keys`: found ones from the cache, the rest by `compute` (given
/// their indices in order, it answers them in that order; the request is admitted before
/// it first computes, and only then). Waits for inputs other requests compute until
/// `deadline`, then answers 504.
pub async fn answer<F, Fut>(
    version: &ModelVersion,
    cache: &VersionCache,
    keys: Vec<Key>,
    arrival: &Arrival,
    deadline: Instant,
    mut compute: F,
) -> Result<Cached, ApiError>
where
    F: FnMut(Vec<usize>) -> Fut,
    Fut: Future<Output = Result<(Vec<Answer>, Part), ApiError>>,
{
    let mut found = cache.find(keys, arrival.cache);
    let mut parts = Vec::new();
    let mut admitted = false;
    // Each round computes what is this request's, then waits for what others compute; an
    // input whose computing request gave up comes back as this request's, or as another's
    // to wait for.
    loop {
        let todo = found.missing();
        if !todo.is_empty() {
            if !admitted {
                version.core.admit_unparsed(arrival)?;
                admitted = true;
            }
            let (answers, part) = compute(todo.clone()).await?;
            found.fill(todo.into_iter().zip(answers));
            parts.push(part);
        }
        if !found.waits() {
            break;
        }
        let waited = found.wait(deadline).await;
        waited.map_err(|_| InferError::Timeout(arrival.arrived.elapsed()))?;
    }
    let (spent, computed) = (found.spent(), found.computed());
    let (entries, outcome) = found.finish().ok_or_else(|| {
        ApiError::Infer(InferError::Model(
            "an input of the request was left unanswered by the response cache".into(),
        ))
    })?;
    Ok(Cached {
        entries,
        outcome,
        parts,
        computed,
        spent,
    })
}

/// Records a cached request, once: found whole, a hit in the statistics (no batch ran,
/// so no latency goes back to the batcher, and Triton counts no inferences); else what it
/// computed as one answered request (the inputs it computed; every input's tokens) and a
/// miss (where it looked anything up). The device time the found inputs would have taken is counted as saved. `rows` are
/// the rows (or texts) the request answers.
pub fn record(
    version: &ModelVersion,
    cache: &VersionCache,
    cached: &Cached,
    rows: usize,
    arrival: &Arrival,
) {
    let tokens = tokens_of(&cached.entries);
    match Part::joined(&cached.parts) {
        None => {
            let total = arrival.arrived.elapsed();
            (version.stats).answered_from_cache(tokens, total, cached.spent);
        }
        Some(part) => {
            let completed = part.completed(tokens);
            super::record(version, arrival, part.queued, cached.computed, &completed);
            if arrival.cache.lookup {
                version.stats.cache_missed(cached.spent);
            }
        }
    }
    let found = rows.saturating_sub(cached.computed) as u32;
    cache.saved(version.stats.device_time_per_row() * found);
}

/// A text model's inputs' keys: the truncation, the prompt named, and each input.
pub fn text_keys(
    cache: &VersionCache,
    inputs: &[Input],
    truncation: Truncation,
    prompt_name: Option<&str>,
) -> Vec<Key> {
    let mut prefix = cache.key();
    let truncation: &[u8] = match truncation {
        Truncation::Refuse => b"refuse",
        Truncation::Right => b"right",
        Truncation::Left => b"left",
    };
    prefix.field(truncation);
    match prompt_name {
        None => prefix.field(b"no prompt"),
        Some(name) => prefix.field(b"prompt").field(name.as_bytes()),
    };
    let key = |input: &Input| {
        let mut k = prefix.clone();
        match input {
            Input::Text(t) => k.field(b"text").field(t.as_bytes()),
            Input::Pair(a, b) => k.field(b"pair").field(a.as_bytes()).field(b.as_bytes()),
            Input::Ids(ids) => k
                .field(b"ids")
                .field(bytemuck::cast_slice(&ids.ids))
                .field(&(ids.count as u64).to_le_bytes())
                // Past the ids kept, the last one decides whether the input is taken.
                .field(&ids.last.map(u32::to_le_bytes).unwrap_or_default()),
        };
        k.into_key()
    };
    inputs.iter().map(key).collect()
}

/// An MLP's rows' keys: each row's values as it runs them.
pub fn row_keys(cache: &VersionCache, values: &[f32], rows: usize) -> Vec<Key> {
    let width = values.len() / rows.max(1);
    (values.chunks_exact(width.max(1)))
        .map(|row| cache.key().field(bytemuck::cast_slice(row)).key())
        .collect()
}

/// An ONNX model's request's key: every tensor's name, datatype, shape and bytes.
pub fn tensors_key(cache: &VersionCache, tensors: &[seam::Tensor]) -> Key {
    let mut k = cache.key();
    for t in tensors {
        k.field(t.name.as_bytes())
            .field(t.dtype.to_string().as_bytes());
        let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
        k.field(bytemuck::cast_slice(&shape));
        match &t.data {
            seam::TensorData::Fixed(b) => k.field(b.as_bytes()),
            seam::TensorData::Bytes(items) => {
                k.field(&(items.len() as u64).to_le_bytes());
                items.iter().fold(&mut k, |k, item| k.field(item))
            }
        };
    }
    k.key()
}

/// Row-major outputs of `width` as one answer a row, with each row's tokens (none for an
/// MLP).
pub fn rows_of(values: &[f32], width: usize, tokens: &[usize]) -> Vec<Answer> {
    (values.chunks_exact(width.max(1)).enumerate())
        .map(|(i, row)| Answer::Row {
            values: row.into(),
            tokens: tokens.get(i).map_or(0, |&t| t as u32),
        })
        .collect()
}

/// The rows of `entries`, in order, row-major.
pub fn values_of(entries: &[Arc<Entry>]) -> Vec<f32> {
    let mut values = Vec::new();
    for e in entries {
        if let Answer::Row { values: row, .. } = &e.answer {
            values.extend_from_slice(row);
        }
    }
    values
}

/// The tensors of a request's one entry (an ONNX model's), if it is one.
pub fn tensors_of(entries: &[Arc<Entry>]) -> Vec<seam::Tensor> {
    match entries {
        [only] => match &only.answer {
            Answer::Tensors(tensors) => tensors.clone(),
            Answer::Row { .. } => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The tokens the rows of `entries` ran.
pub fn tokens_of(entries: &[Arc<Entry>]) -> usize {
    (entries.iter())
        .map(|e| match &e.answer {
            Answer::Row { tokens, .. } => *tokens as usize,
            Answer::Tensors(_) => 0,
        })
        .sum()
}
