//! How admission and inference fail: a [`Refusal`] (the request was turned away, and is
//! counted once under its reason) or another [`InferError`]. The batcher and the workers
//! produce them, the inference core (`infer`, which re-exports them) counts and returns
//! them.

use std::time::Duration;

use thiserror::Error;

/// A request turned away. Each is counted exactly once, under [`Refusal::reason`], in
/// `tandem_requests_rejected_total` and in the figure the trainer coordinator reads.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Refusal {
    /// The policy predicts it would finish past its deadline behind the queue.
    #[error("{message}")]
    Shed {
        message: String,
        retry_after: Duration,
    },
    /// Refused before parsing while the door is closed after a shed.
    #[error("{message}")]
    DoorClosed {
        message: String,
        retry_after: Duration,
    },
    /// Refused before parsing: the queue ahead of it ends past its budget.
    #[error("{message}")]
    Late {
        message: String,
        retry_after: Duration,
    },
    /// Refused before parsing: it sat unread in its socket past its budget (the front end
    /// is behind).
    #[error("{message}")]
    Unread {
        message: String,
        retry_after: Duration,
    },
    /// The queue, or the channel in front of it, is full.
    #[error("{message}")]
    QueueFull {
        message: String,
        retry_after: Duration,
    },
    /// Its deadline passed in the queue, before its batch started.
    #[error("request deadline passed after {waited_ms} ms")]
    Expired { waited_ms: u64 },
    /// The caller's own deadline had passed before the request was read.
    #[error("request deadline passed after {waited_ms} ms")]
    DeadlinePassed { waited_ms: u64 },
}

/// The reasons of `tandem_requests_rejected_total`; `abandoned` (the client left) is
/// counted where it is seen, since no client is left to answer.
pub const REASONS: [&str; 8] = [
    "shed",
    "door_closed",
    "late",
    "unread",
    "queue_full",
    "expired",
    "deadline_passed",
    "abandoned",
];

impl Refusal {
    /// The bounded `reason` label of the metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Shed { .. } => "shed",
            Refusal::DoorClosed { .. } => "door_closed",
            Refusal::Late { .. } => "late",
            Refusal::Unread { .. } => "unread",
            Refusal::QueueFull { .. } => "queue_full",
            Refusal::Expired { .. } => "expired",
            Refusal::DeadlinePassed { .. } => "deadline_passed",
        }
    }

    /// Whether the request's own deadline passed: a 504, not a 429.
    pub fn timed_out(&self) -> bool {
        matches!(
            self,
            Refusal::Expired { .. } | Refusal::DeadlinePassed { .. }
        )
    }

    /// When to come back; `None` for an expired request (its caller has given up).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Refusal::Shed { retry_after, .. }
            | Refusal::DoorClosed { retry_after, .. }
            | Refusal::Late { retry_after, .. }
            | Refusal::Unread { retry_after, .. }
            | Refusal::QueueFull { retry_after, .. } => Some(*retry_after),
            Refusal::Expired { .. } | Refusal::DeadlinePassed { .. } => None,
        }
    }
}

#[derive(Debug, Error)]
pub enum InferError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// No answer within `limits.request_timeout_ms`.
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    /// The version is going away (unloaded, its workers stopping).
    #[error("{0}")]
    Unavailable(String),
    #[error("model failed: {0}")]
    Model(String),
}
