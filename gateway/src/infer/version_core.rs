//! A loaded version's way into its batcher: admission before parsing, submission into the
//! bounded queue, the wait for the answer, and every refusal counted once under its reason.

use std::sync::Arc;
use std::time::Duration;

use metrics::Counter;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::admission::{Arrival, Door};
use super::outcome::{InferError, REASONS, Refusal};

use super::signals::Signals;
use crate::batching::feedback::{Answered, ResponseLatencies};
use crate::batching::{Completed, Payload, Pending};
use crate::metrics as names;

/// What the core needs to submit a validated request.
#[derive(Debug)]
pub struct Submission {
    pub input: Payload,
    /// Its cost in batch rows: rows, or a text model's token-units.
    pub rows: usize,
    /// Rows of output it gets back: rows, or texts.
    pub outputs: usize,
    /// 1 is the highest.
    pub priority: u32,
    /// The request's own timeout (`parameters.timeout`), counted from its arrival.
    pub timeout: Option<Duration>,
    /// A later batch of a request whose first batch was just submitted: admitted with it.
    pub continues: bool,
}

/// Handles to `tandem_requests_rejected_total{model, reason}`, and to the same counted
/// apart while a co-located trainer still computes (serving should have squeezed it first),
/// made once per version: under overload refusals come by the thousand a second, and a
/// counter looked up per refusal would allocate its labels each time.
#[derive(Clone)]
pub struct RefusalCounters {
    by_reason: [Counter; REASONS.len()],
    beside_trainer: [Counter; REASONS.len()],
}

impl RefusalCounters {
    pub fn new(model: &str) -> RefusalCounters {
        let family = |name: &'static str| {
            REASONS.map(
                |reason| metrics::counter!(name, "model" => model.to_string(), "reason" => reason),
            )
        };
        RefusalCounters {
            by_reason: family(names::REQUESTS_REJECTED),
            beside_trainer: family(names::REQUESTS_REJECTED_BESIDE_TRAINER),
        }
    }

    pub fn count(&self, reason: &str, trainer_computing: bool) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.by_reason[i].increment(1);
            if trainer_computing {
                self.beside_trainer[i].increment(1);
            }
        }
    }
}

pub struct Core {
    model: String,
    /// The batcher's request channel; bounded by the queue's capacity.
    requests: mpsc::Sender<Pending>,
    pub door: Arc<Door>,
    pub signals: Arc<Signals>,
    refusals: RefusalCounters,
    /// Where answered requests' latencies go back to the batcher's feedback loop.
    responses: Arc<ResponseLatencies>,
}

impl Core {
    pub fn new(
        model: &str,
        requests: mpsc::Sender<Pending>,
        door: Arc<Door>,
        signals: Arc<Signals>,
        responses: Arc<ResponseLatencies>,
    ) -> Core {
        Core {
            model: model.to_string(),
            requests,
            door,
            signals,
            refusals: RefusalCounters::new(model),
            responses,
        }
    }

    /// Counts a refusal under its reason (and for the coordinator), once, and passes it on.
    fn refuse(&self, refusal: Refusal) -> InferError {
        let training = self.signals.trainer_computing();
        self.refusals.count(refusal.reason(), training);
        self.signals.add_turned_away(1);
        InferError::Refused(refusal)
    }

    /// What can be decided before the body is parsed (see [`Door::check`]). Every request
    /// that reached this version counts as demand here, refused or not.
    pub fn admit_unparsed(&self, arrival: &Arrival) -> Result<(), InferError> {
        self.signals.add_offered();
        self.door
            .check(&self.model, arrival, std::time::Instant::now())
            .map_err(|r| self.refuse(r))
    }

    /// Queues a validated request and waits for its answer, at most `wait`.
    pub async fn submit(
        &self,
        request: Submission,
        arrival: &Arrival,
        wait: Duration,
    ) -> Result<Completed, InferError> {
        let arrived = Instant::from_std(arrival.arrived);
        let own = request.timeout.and_then(|t| arrival.arrived.checked_add(t));
        let deadline = own.into_iter().chain(arrival.deadline).min();
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            input: request.input,
            rows: request.rows,
            outputs: request.outputs,
            priority: request.priority,
            enqueued: arrived,
            deadline: deadline.map(Instant::from_std),
            continues: request.continues,
            reply,
        };
        self.requests.try_send(pending).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => self.refuse(Refusal::QueueFull {
                message: format!(
                    "model {:?} has {} requests waiting to be queued",
                    self.model,
                    self.requests.max_capacity()
                ),
                retry_after: Duration::from_secs(1),
            }),
            mpsc::error::TrySendError::Closed(_) => {
                InferError::Unavailable(format!("model {:?} is unloading", self.model))
            }
        })?;
        match tokio::time::timeout(wait, answer).await {
            Err(_) => Err(InferError::Timeout(wait)),
            Ok(Err(_)) => Err(InferError::Model(
                "the request was dropped by its worker".into(),
            )),
            Ok(Ok(Ok(completed))) => Ok(completed),
            Ok(Ok(Err(InferError::Refused(r)))) => Err(self.refuse(r)),
            Ok(Ok(Err(e))) => Err(e),
        }
    }

    /// A response is ready: its latency from arrival, and the part after its batch ended,
    /// go back to the batcher's feedback loop.
    pub fn answered(&self, answered: Answered) {
        self.responses.record(answered);
    }
}
