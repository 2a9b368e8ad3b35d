//! Per-model queueing and batching.
//!
//! - [`state::QueueState`] is the queue: a pure structure ordered by priority, then
//!   deadline, then arrival, with expiry — tested directly.
//! - [`policy`] decides when a batch leaves and how big it is; the static policy (Triton's
//!   "max batch size + max queue delay") is the baseline behind the [`policy::BatchPolicy`]
//!   seam.
//! - [`task`] is the thin async loop that feeds the state from the request channel, asks
//!   the policy, and hands batches to the model's worker threads.
//!
//! The batcher counts a request's cost in *rows*: a dense model's rows, or a text model's
//! token-units (each sequence's tokens plus its attention, [`models::TextInput::units`]), so
//! that a batch's size is what it costs to run, whatever its shape. A request's output
//! rows (one per text) are counted apart, against the largest batch in sequences.

pub mod adaptive;
mod admission_budget;
mod busy;
pub mod choice;
pub mod cpu_load;
pub mod feedback;
pub mod latency;
pub mod load;
pub mod policy;
mod refusal_log;
pub mod state;
pub mod task;
pub mod tuning;
pub mod window;

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::infer::outcome::InferError;

pub use busy::BusyMeter;

/// What a request brings to its batch.
#[derive(Debug)]
pub enum Payload {
    /// Row-major `[rows, input width]`, already in the model's f32.
    Dense(Vec<f32>),
    /// Its texts, tokenized: one sequence each.
    Tokens(Box<models::PackedTokens>),
    /// Named tensors (an ONNX model's), batched with requests of the same non-batch shapes.
    Tensors(Vec<seam::Tensor>),
}

/// A validated request waiting for its batch.
#[derive(Debug)]
pub struct Pending {
    pub input: Payload,
    /// Its cost in batch rows (see the module docs).
    pub rows: usize,
    /// The rows of output it gets back: its rows, or its texts.
    pub outputs: usize,
    /// 1 is the highest.
    pub priority: u32,
    pub enqueued: Instant,
    /// When the client stops waiting; the request is answered 504 then.
    pub deadline: Option<Instant>,
    /// A later batch of a request, queued right behind its first: a request is admitted or
    /// refused as a whole, so this one is not judged again.
    pub continues: bool,
    pub reply: oneshot::Sender<Reply>,
}

pub type Reply = Result<Completed, InferError>;

/// What the worker sends back for one request.
#[derive(Debug)]
pub struct Completed {
    /// Row-major `[outputs, output width]`.
    pub output: Vec<f32>,
    /// A tensor model's outputs: its own rows of each.
    pub tensors: Vec<seam::Tensor>,
    /// The tokens it brought (a text model's), for cost per token.
    pub tokens: usize,
    pub queue_time: Duration,
    pub compute_time: Duration,
}

/// Why the batcher let a batch go: the `reason` label of `tandem_batches_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReason {
    /// It reached the largest batch allowed.
    Full,
    /// Waiting longer would make a request miss its deadline or budget.
    Deadline,
    /// The oldest request waited the configured delay.
    Timer,
    /// The device was idle and the policy saw no gain in waiting.
    Idle,
}

impl ReleaseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::Full => "full",
            ReleaseReason::Deadline => "deadline",
            ReleaseReason::Timer => "timer",
            ReleaseReason::Idle => "idle",
        }
    }
}

/// Requests released together, in the order the queue ranked them.
#[derive(Debug)]
pub struct Released {
    pub requests: Vec<Pending>,
    // Read by the simulated device of the batcher's tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub rows: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    pub reason: ReleaseReason,
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
