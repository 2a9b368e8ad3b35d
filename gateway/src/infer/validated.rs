//! A request validated against its model's signature ([`crate::validate`]: v2's tensors, JSON
//! or binary, and BYTES for a text model) run on the core: rows as they are, texts
//! tokenized, submitted, awaited, and normalised where the request asks.

use std::time::Duration;

use super::input::Input;
use super::text::normalized;
use super::{Arrival, Submission, phases, tokenize};
use crate::batching::{Completed, Payload};
use crate::error::ApiError;
use crate::lifecycle::registry::ModelVersion;
use crate::validate::ValidInput;

/// What a validated request came to.
pub struct Ran {
    pub completed: Completed,
    /// The rows (or texts) it ran.
    pub rows: usize,
    /// When it was submitted.
    pub queued: std::time::Instant,
}

/// Runs `input` on `version`, waiting at most `wait` for its answer.
pub async fn run(
    version: &ModelVersion,
    input: ValidInput,
    priority: u32,
    timeout: Option<Duration>,
    arrival: &Arrival,
    wait: Duration,
) -> Result<Ran, ApiError> {
    let (submission, normalize) = submission(version, input, priority, timeout).await?;
    let queued = std::time::Instant::now();
    let rows = submission.outputs;
    phases::queued(arrival.arrived);
    let mut completed = version.core.submit(submission, arrival, wait).await?;
    phases::answered(completed.queue_time, completed.compute_time);
    let width = version.info.output_width;
    completed.output = normalized(completed.output, width, normalize);
    Ok(Ran {
        completed,
        rows,
        queued,
    })
}

/// What goes to the queue: rows as they are, texts tokenized; and whether the answer is to
/// be normalised.
async fn submission(
    version: &ModelVersion,
    input: ValidInput,
    priority: u32,
    timeout: Option<Duration>,
) -> Result<(Submission, bool), ApiError> {
    let rows_of = |input: Payload, rows: usize| Submission {
        input,
        rows,
        outputs: rows,
        priority,
        timeout,
        continues: false,
    };
    match input {
        ValidInput::Dense { values, rows } => Ok((rows_of(Payload::Dense(values), rows), false)),
        ValidInput::Tensors { tensors, rows } => {
            Ok((rows_of(Payload::Tensors(tensors), rows), false))
        }
        ValidInput::Text(t) => {
            let inputs = match t.pairs {
                None => t.texts.into_iter().map(Input::Text).collect(),
                Some(pairs) => (t.texts.into_iter().zip(pairs))
                    .map(|(a, b)| Input::Pair(a.into(), b))
                    .collect(),
            };
            let tokenized =
                tokenize::tokenize(version, inputs, t.truncation, t.prompt_name.as_deref()).await?;
            Ok((tokenized.submission(priority, timeout), t.normalize))
        }
    }
}
