//! The adaptive policy: meet a p99 latency budget at the highest throughput the device
//! allows, instead of hand-tuned "max batch size + max queue delay".
//!
//! When a worker is free it releases at once unless waiting is worth it:
//! - a batch leaves by the time its most urgent request must start to finish in time
//!   (`deadline`: its own timeout, or arrival + the effective budget, minus the predicted
//!   high-quantile batch time);
//! - up to that point it waits only while a batch of efficient size (the knee of cost per
//!   row, from the latency model) is expected within a quarter of the budget at the current
//!   arrival rate (`timer` when that wait ends); otherwise it goes now (`idle`) — at low load
//!   nobody waits for a batch that will not come;
//! - a full batch goes at once (`full`).
//!
//! Admission: a request whose predicted completion — behind the running batch and every
//! row ranked ahead of it, drained in full batches — misses its deadline is refused at the
//! door with the queue's drain time as Retry-After, so the queue never holds more than the
//! budget can serve.
//!
//! Feedback: the effective budget (the share of the p99 budget the queue and the device
//! may use; the rest is HTTP and transport) shrinks by 10% whenever the observed p99 of the
//! last two seconds exceeds 90% of the budget, and grows back by 2% while it stays under
//! 60%.

use std::time::Duration;

use tokio::time::Instant;

use super::ReleaseReason;
use super::latency::{LatencyModel, LatencyWindow, RateEstimator};
use super::policy::{BatchPolicy, Decision, PolicyGauges, Shed};
use super::state::QueueView;

/// The longest a batch waits to grow, as a share of the budget.
const MAX_WAIT_SHARE: f64 = 0.25;
const HEADROOM_START: f64 = 0.8;
const HEADROOM_MIN: f64 = 0.3;
const HEADROOM_MAX: f64 = 0.85;
/// How often the feedback loop looks at the observed p99.
const FEEDBACK_EVERY: Duration = Duration::from_millis(250);

pub struct AdaptivePolicy {
    budget: Duration,
    max_rows: usize,
    model: LatencyModel,
    arrivals: RateEstimator,
    window: LatencyWindow,
    headroom: f64,
    last_feedback: Option<Instant>,
    /// When the running batch is expected to end (none running: in the past).
    busy_until: Option<Instant>,
}

impl AdaptivePolicy {
    pub fn new(budget: Duration, max_rows: usize, model: LatencyModel) -> AdaptivePolicy {
        AdaptivePolicy {
            budget,
            max_rows: max_rows.max(1),
            model,
            arrivals: RateEstimator::new(Duration::from_millis(500)),
            window: LatencyWindow::new(Duration::from_secs(2), 4096),
            headroom: HEADROOM_START,
            last_feedback: None,
            busy_until: None,
        }
    }

    /// The share of the budget the queue and the device may use.
    pub fn effective_budget(&self) -> Duration {
        self.budget.mul_f64(self.headroom)
    }

    pub fn model(&self) -> &LatencyModel {
        &self.model
    }

    /// Time to serve `rows` rows in full batches, the last one at its high quantile.
    fn drain_time(&self, rows: usize) -> Duration {
        if rows == 0 {
            return Duration::ZERO;
        }
        let full = (rows - 1) / self.max_rows;
        let last = rows - full * self.max_rows;
        self.model.predict_mean(self.max_rows) * full as u32 + self.model.predict_high(last)
    }

    fn remaining_busy(&self, now: Instant) -> Duration {
        self.busy_until
            .map(|t| t.saturating_duration_since(now))
            .unwrap_or_default()
    }

    fn feedback(&mut self, now: Instant) {
        if self
            .last_feedback
            .is_some_and(|t| now.saturating_duration_since(t) < FEEDBACK_EVERY)
        {
            return;
        }
        self.last_feedback = Some(now);
        let Some((p99, n)) = self.window.quantile(0.99, now) else {
            return;
        };
        if n < 50 {
            return;
        }
        if p99 > self.budget.mul_f64(0.9) {
            self.headroom = (self.headroom * 0.9).max(HEADROOM_MIN);
        } else if p99 < self.budget.mul_f64(0.6) {
            self.headroom = (self.headroom * 1.02).min(HEADROOM_MAX);
        }
    }
}

impl BatchPolicy for AdaptivePolicy {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn max_batch_rows(&self) -> usize {
        self.max_rows
    }

    fn decide(&mut self, queue: &QueueView, now: Instant) -> Decision {
        let Some(oldest) = queue.oldest else {
            return Decision::Wait { until: None };
        };
        let n = queue.head_rows.max(1);
        if queue.rows >= self.max_rows || queue.head_rows < queue.rows {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Full,
            };
        }
        // The most urgent request: the earliest explicit deadline, or the oldest request's
        // share of the budget running out.
        let slo = oldest + self.effective_budget();
        let urgent = queue.earliest_deadline.map_or(slo, |d| d.min(slo));
        let rate = self.arrivals.rate(now);
        // Latest start that still finishes in time, for the batch it would be by then.
        let first_guess = urgent
            .checked_sub(self.model.predict_high(n))
            .unwrap_or(now);
        let grown = n + (rate * first_guess.saturating_duration_since(now).as_secs_f64()) as usize;
        let start_by = urgent
            .checked_sub(self.model.predict_high(grown.min(self.max_rows)))
            .unwrap_or(now);
        if now >= start_by {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Deadline,
            };
        }
        let efficient = self.model.efficient_batch(self.max_rows);
        if n >= efficient {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Idle,
            };
        }
        let cap = start_by.min(oldest + self.budget.mul_f64(MAX_WAIT_SHARE));
        if now >= cap {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Timer,
            };
        }
        // Wait only if an efficient batch is expected before the cap.
        if rate <= 0.0 {
            return Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Idle,
            };
        }
        let fill = Duration::from_secs_f64((efficient - n) as f64 / rate);
        match now.checked_add(fill) {
            Some(full_at) if full_at <= cap => Decision::Wait {
                until: Some(full_at),
            },
            _ => Decision::Release {
                max_rows: self.max_rows,
                reason: ReleaseReason::Idle,
            },
        }
    }

    fn admit(
        &mut self,
        queue: &QueueView,
        rows: usize,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Result<(), Shed> {
        let slo = now + self.effective_budget();
        let deadline = deadline.map_or(slo, |d| d.min(slo));
        // Conservative: every queued row is ahead of this request.
        let ahead = queue.rows + rows;
        let finish = now + self.remaining_busy(now) + self.drain_time(ahead);
        if finish <= deadline {
            return Ok(());
        }
        let drain = self.remaining_busy(now) + self.drain_time(queue.rows);
        Err(Shed {
            reason: "shed",
            message: format!(
                "over capacity: {} rows are queued ahead, predicted to finish in {:.1} ms, past the {:.1} ms budget; retry after the queue drains (~{:.0} ms)",
                queue.rows,
                finish.saturating_duration_since(now).as_secs_f64() * 1e3,
                deadline.saturating_duration_since(now).as_secs_f64() * 1e3,
                drain.as_secs_f64() * 1e3
            ),
            retry_after: drain,
        })
    }

    fn observe_arrival(&mut self, rows: usize, now: Instant) {
        self.arrivals.record(rows, now);
    }

    fn on_release(&mut self, rows: usize, now: Instant) {
        self.busy_until = Some(now + self.model.predict_mean(rows));
    }

    fn observe_batch(&mut self, rows: usize, compute: Duration, _now: Instant) {
        self.model.observe(rows, compute);
        self.busy_until = None;
    }

    fn observe_latency(&mut self, latency: Duration, now: Instant) {
        self.window.record(latency, now);
        self.feedback(now);
    }

    fn gauges(&mut self, now: Instant) -> PolicyGauges {
        let efficient = self.model.efficient_batch(self.max_rows);
        PolicyGauges {
            budget: Some(self.budget),
            observed_p99: self.window.quantile(0.99, now).map(|(d, _)| d),
            completions_per_second: Some(self.window.throughput(now)),
            predicted_batch: Some(self.model.predict_mean(efficient)),
            effective_budget: Some(self.effective_budget()),
        }
    }
}
