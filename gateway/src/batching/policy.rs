//! When a batch leaves the queue, and how big it is: the seam between the queue and the
//! batching policy. A policy is consulted only while a worker is free; it may release a
//! batch now or name the time it wants to be asked again.

use std::time::Duration;

use tokio::time::Instant;

use super::ReleaseReason;
use super::state::QueueView;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Release the best-ranked requests that fit in `max_rows`.
    Release {
        max_rows: usize,
        reason: ReleaseReason,
    },
    /// Ask again at `until`, or when the queue changes if `None`.
    Wait { until: Option<Instant> },
}

/// A request asking to be queued.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// Rows (or token-units) ranked before it in the queue, and its own.
    pub ahead: usize,
    pub rows: usize,
    /// 1 is the highest.
    pub priority: u32,
    /// When it reached the server, and its own deadline, if it has one.
    pub arrived: Instant,
    pub deadline: Option<Instant>,
}

#[cfg(test)]
impl Candidate {
    /// A request of priority 1 and no deadline of its own.
    pub fn new(ahead: usize, rows: usize, arrived: Instant) -> Candidate {
        Candidate {
            ahead,
            rows,
            priority: 1,
            arrived,
            deadline: None,
        }
    }
}

/// How a request was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Predicted to finish within the budget.
    OnTime,
    /// Predicted to finish past the budget, admitted on the allowance a p99 leaves.
    Late,
}

/// Why a request is refused at the door, and when to come back.
#[derive(Clone, Debug, PartialEq)]
pub struct Shed {
    pub message: String,
    pub retry_after: Duration,
    /// For how long to refuse requests arriving next before they are parsed (the batcher
    /// caps it at a few milliseconds); zero when the next request would fit.
    pub door_closed_for: Duration,
    /// What the decision saw, for the refusal's log line.
    pub seen: Box<ShedView>,
}

/// The figures behind a refusal: the queue ahead, the predicted finish and the deadline it
/// was held against, and the latency model's estimate and spread.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShedView {
    /// How long ago the request arrived (read, parsed and queued since).
    pub waited: Duration,
    /// Rows (or token-units) ranked ahead of the request, and its own.
    pub ahead: usize,
    pub rows: usize,
    /// Time left on the running batch, and the predicted finish counted from now.
    pub busy: Duration,
    pub finish: Duration,
    /// Its deadline counted from now (past: zero), and the budget admission planned to.
    pub deadline: Duration,
    pub horizon: Duration,
    /// The predicted mean of a full batch, and the model's relative spread.
    pub full_batch: Duration,
    pub spread: f64,
}

pub trait BatchPolicy: Send {
    /// The largest batch, in rows.
    fn max_batch_rows(&self) -> usize;

    /// With a worker free and requests waiting: release now, or wait.
    fn decide(&mut self, queue: &QueueView, now: Instant) -> Decision;

    /// Whether to accept `request` into a queue in state `queue`. The static policy accepts
    /// everything the queue has room for.
    fn admit(
        &mut self,
        _queue: &QueueView,
        _request: &Candidate,
        _now: Instant,
    ) -> Result<Admitted, Shed> {
        Ok(Admitted::OnTime)
    }

    /// Whether a co-located trainer computes on this device: while it does, a policy
    /// admits requests it predicts late (and the batcher tells the coordinator, which takes
    /// the device back) rather than refuse them.
    fn observe_trainer(&mut self, _computing: bool) {}

    /// A request of `rows` rows and `priority` was admitted.
    fn observe_arrival(&mut self, _rows: usize, _priority: u32, _now: Instant) {}

    /// A batch of `rows` rows left for the device.
    fn on_release(&mut self, _rows: usize, _now: Instant) {}

    /// A batch of `rows` rows took `compute` on the device.
    fn observe_batch(&mut self, _rows: usize, _compute: Duration, _now: Instant) {}

    /// A request finished `latency` after it arrived (queue + compute).
    fn observe_latency(&mut self, _latency: Duration, _now: Instant) {}

    /// A request's response left `delay` after its batch finished (handler wake-up,
    /// encoding, writing): time the device's predictions do not cover.
    fn observe_response_delay(&mut self, _delay: Duration, _now: Instant) {}

    /// The share of its cores the server process used lately, in [0, 1].
    fn observe_cpu_load(&mut self, _share: f64) {}

    /// How long after its arrival a request must be answered to be admitted (before its
    /// own timeout, which only shortens it); `None` where the policy refuses nothing for
    /// lateness.
    fn admission_horizon(&self) -> Option<Duration> {
        None
    }

    /// The earliest a one-row request of the most urgent priority, `ahead` rows ranked
    /// before it, could be answered if it arrived at `now`; `None` where the policy cannot
    /// tell in advance (the adaptive policy: nothing waiting). With the horizon, what the
    /// HTTP front end refuses before it parses a body: a request whose earliest answer is
    /// more than the horizon after its arrival is refused by `admit` whatever its body.
    fn earliest_answer(&self, _queue: &QueueView, _ahead: usize, _now: Instant) -> Option<Instant> {
        None
    }

    /// What the policy believes now, for the metrics that explain its decisions.
    fn gauges(&self) -> PolicyGauges {
        PolicyGauges::default()
    }
}

/// Figures only a policy knows, exported as metrics; `None` where it has no such notion.
/// (The budget, the observed p99 and throughput are the batcher's, whatever the policy.)
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PolicyGauges {
    pub predicted_batch: Option<Duration>,
    /// The latency model's relative spread around its prediction.
    pub prediction_spread: Option<f64>,
    pub effective_budget: Option<Duration>,
}

/// Triton's dynamic batcher and its peers: release at `max_batch_size` rows, or when the
/// oldest request has waited `max_queue_delay`. The baseline the adaptive policy must beat.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    pub max_batch_rows: usize,
    pub max_queue_delay: Duration,
}

impl BatchPolicy for StaticPolicy {
    fn max_batch_rows(&self) -> usize {
        self.max_batch_rows
    }

    fn decide(&mut self, queue: &QueueView, now: Instant) -> Decision {
        let Some(oldest) = queue.oldest else {
            return Decision::Wait { until: None };
        };
        if queue.head_is_full(self.max_batch_rows) {
            return Decision::Release {
                max_rows: self.max_batch_rows,
                reason: ReleaseReason::Full,
            };
        }
        let due = oldest + self.max_queue_delay;
        if now >= due {
            let reason = if self.max_queue_delay.is_zero() {
                ReleaseReason::Idle
            } else {
                ReleaseReason::Timer
            };
            Decision::Release {
                max_rows: self.max_batch_rows,
                reason,
            }
        } else {
            Decision::Wait { until: Some(due) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(rows: usize, head_rows: usize, oldest: Instant) -> QueueView {
        QueueView {
            requests: rows,
            rows,
            oldest: Some(oldest),
            earliest_deadline: None,
            head_rows,
            head_at_output_limit: false,
        }
    }

    #[test]
    fn static_releases_when_full_or_when_the_oldest_waited_long_enough() {
        let t = Instant::now();
        let mut p = StaticPolicy {
            max_batch_rows: 8,
            max_queue_delay: Duration::from_millis(2),
        };
        assert_eq!(
            p.decide(&QueueView::default(), t),
            Decision::Wait { until: None }
        );
        assert_eq!(
            p.decide(&view(3, 3, t), t + Duration::from_millis(1)),
            Decision::Wait {
                until: Some(t + Duration::from_millis(2))
            }
        );
        assert_eq!(
            p.decide(&view(3, 3, t), t + Duration::from_millis(2)),
            Decision::Release {
                max_rows: 8,
                reason: ReleaseReason::Timer
            }
        );
        assert_eq!(
            p.decide(&view(8, 8, t), t),
            Decision::Release {
                max_rows: 8,
                reason: ReleaseReason::Full
            }
        );
        // 6 rows fit, the next request does not: nothing more can join this batch.
        assert_eq!(
            p.decide(&view(9, 6, t), t),
            Decision::Release {
                max_rows: 8,
                reason: ReleaseReason::Full
            }
        );
    }

    #[test]
    fn zero_delay_releases_at_once_as_idle() {
        let t = Instant::now();
        let mut p = StaticPolicy {
            max_batch_rows: 8,
            max_queue_delay: Duration::ZERO,
        };
        assert_eq!(
            p.decide(&view(1, 1, t), t),
            Decision::Release {
                max_rows: 8,
                reason: ReleaseReason::Idle
            }
        );
    }
}
