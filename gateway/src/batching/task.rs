//! The batcher: one task per model version that owns its [`QueueState`] and policy, admits
//! requests from a bounded channel, expires overdue ones on a timer (even while a long batch
//! runs), and hands batches to the version's worker threads when one is free.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cpu_load::CpuLoad;
use super::feedback::ResponseLatencies;
use super::latency::LatencyWindow;
use super::policy::{BatchPolicy, Decision};
use super::state::QueueState;
use super::{Batch, Pending, ReleaseReason};
use crate::error::ApiError;
use crate::health::Health;
use crate::metrics as names;

/// A worker's report that it finished a batch and is free again.
#[derive(Debug)]
pub struct WorkerDone {
    pub rows: usize,
    pub compute: Duration,
    /// Arrival-to-completion time of each request in the batch.
    pub latencies: Vec<Duration>,
}

/// Where released batches go: the worker threads' channel, or a simulated device in tests.
pub trait BatchSink: Send {
    /// Hands a batch over without blocking, or gives it back if nobody can take it.
    fn send(&self, batch: Batch) -> Result<(), Batch>;
}

impl BatchSink for std::sync::mpsc::SyncSender<Batch> {
    fn send(&self, batch: Batch) -> Result<(), Batch> {
        self.try_send(batch).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(b)
            | std::sync::mpsc::TrySendError::Disconnected(b) => b,
        })
    }
}

impl BatchSink for mpsc::Sender<Batch> {
    fn send(&self, batch: Batch) -> Result<(), Batch> {
        self.try_send(batch).map_err(|e| match e {
            mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b) => b,
        })
    }
}

/// A new policy for a running batcher (the admin API's live budget changes).
pub struct PolicyUpdate {
    pub policy: Box<dyn BatchPolicy>,
    pub queue_capacity: usize,
    /// The p99 target the coordinator holds serving to.
    pub budget: Duration,
}

/// Handles to this model's metrics, made once.
struct BatcherMetrics {
    batches: [Counter; 4],
    batch_rows: Histogram,
    queue_depth: Gauge,
    queue_full: Counter,
    shed: Counter,
    expired: Counter,
    abandoned: Counter,
    budget: Gauge,
    effective_budget: Gauge,
    observed_p99: Gauge,
    completions: Gauge,
    predicted_batch: Gauge,
    prediction_spread: Gauge,
}

impl BatcherMetrics {
    fn new(model: &str) -> BatcherMetrics {
        let m = model.to_string();
        let reasons = [
            ReleaseReason::Full,
            ReleaseReason::Deadline,
            ReleaseReason::Timer,
            ReleaseReason::Idle,
        ];
        let rejected = |reason: &'static str| metrics::counter!(names::REQUESTS_REJECTED, "model" => m.clone(), "reason" => reason);
        BatcherMetrics {
            batches: reasons.map(
                |r| metrics::counter!(names::BATCHES, "model" => m.clone(), "reason" => r.as_str()),
            ),
            batch_rows: metrics::histogram!(names::BATCH_ROWS, "model" => m.clone()),
            queue_depth: metrics::gauge!(names::QUEUE_DEPTH, "model" => m.clone()),
            queue_full: rejected("queue_full"),
            shed: rejected("shed"),
            expired: rejected("expired"),
            abandoned: rejected("abandoned"),
            budget: metrics::gauge!(names::SLO_BUDGET, "model" => m.clone()),
            effective_budget: metrics::gauge!(names::SLO_EFFECTIVE_BUDGET, "model" => m.clone()),
            observed_p99: metrics::gauge!(names::OBSERVED_P99, "model" => m.clone()),
            completions: metrics::gauge!(names::OBSERVED_THROUGHPUT, "model" => m.clone()),
            predicted_batch: metrics::gauge!(names::PREDICTED_BATCH_DURATION, "model" => m.clone()),
            prediction_spread: metrics::gauge!(names::PREDICTION_SPREAD, "model" => m.clone()),
        }
    }

    /// What the policy believes, and what serving achieves against the budget: the budget,
    /// p99 and throughput hold for every policy (an operator on the static one compares
    /// them too, and the trainer coordinator holds serving to the budget whatever the
    /// policy).
    fn publish(
        &self,
        policy: super::policy::PolicyGauges,
        budget: Duration,
        observed_p99: Option<Duration>,
        completions_per_second: f64,
    ) {
        let set =
            |gauge: &Gauge, d: Option<Duration>| gauge.set(d.map_or(0.0, |d| d.as_secs_f64()));
        set(&self.effective_budget, policy.effective_budget);
        set(&self.predicted_batch, policy.predicted_batch);
        self.prediction_spread
            .set(policy.prediction_spread.unwrap_or(0.0));
        set(&self.budget, Some(budget));
        set(&self.observed_p99, observed_p99);
        self.completions.set(completions_per_second);
    }

    fn batch(&self, reason: ReleaseReason, rows: usize) {
        let i = match reason {
            ReleaseReason::Full => 0,
            ReleaseReason::Deadline => 1,
            ReleaseReason::Timer => 2,
            ReleaseReason::Idle => 3,
        };
        self.batches[i].increment(1);
        self.batch_rows.record(rows as f64);
    }
}

pub struct Batcher {
    pub model: String,
    pub requests: mpsc::Receiver<Pending>,
    pub done: mpsc::Receiver<WorkerDone>,
    pub batches: Box<dyn BatchSink>,
    pub workers: usize,
    pub policy: Box<dyn BatchPolicy>,
    /// Live changes from the admin API; the sender lives in the version's handle.
    pub updates: mpsc::Receiver<PolicyUpdate>,
    pub state: QueueState,
    /// Retry-After for requests refused because the queue is full.
    pub full_retry_after: Duration,
    /// Where the coordinator reads this version's latency; `budget` is its p99 target.
    pub health: std::sync::Arc<Health>,
    pub budget: Duration,
    /// The process's CPU share, read by the policy as load; `None` where the device is
    /// simulated.
    pub cpu_load: Option<CpuLoad>,
    /// Where handlers record the latency of each answered request, the one the feedback
    /// loop reads; `None` (a simulated device) reads the workers' completion times.
    pub responses: Option<std::sync::Arc<ResponseLatencies>>,
}

/// The longest requests are refused at the door after a shed.
const EARLY_SHED_MAX: Duration = Duration::from_millis(10);

/// How often gauges and health are refreshed (the windows behind them sort samples).
const GAUGE_EVERY: Duration = Duration::from_millis(100);

impl Batcher {
    /// Runs until every request sender is gone and the queue is empty.
    pub async fn run(mut self) {
        let metrics = BatcherMetrics::new(&self.model);
        let mut window = LatencyWindow::sampled(Duration::from_secs(2), 4096);
        self.refresh(&metrics, &mut window, Instant::now());
        let mut last_gauges = Instant::now();
        let mut idle = self.workers;
        let mut closed = false;
        let mut updates_closed = false;
        let mut answered = Vec::new();
        loop {
            let now = Instant::now();
            if let Some(responses) = &self.responses {
                responses.drain_into(&mut answered);
                for a in answered.drain(..) {
                    self.policy.observe_latency(a.latency, now);
                    self.policy.observe_response_delay(a.after_compute, now);
                    window.record(a.latency, now);
                }
            }
            for p in self.state.expire(now) {
                metrics.expired.increment(1);
                self.health.add_turned_away(1);
                let waited_ms = now.saturating_duration_since(p.enqueued).as_millis() as u64;
                let _ = p.reply.send(Err(ApiError::DeadlineExceeded { waited_ms }));
            }
            let mut wake = self.state.next_expiry();
            while idle > 0 && !self.state.is_empty() {
                let gone = self.state.drop_abandoned();
                metrics.abandoned.increment(gone as u64);
                if self.state.is_empty() {
                    break;
                }
                match self.policy.decide(&self.state.view(), now) {
                    Decision::Release { max_rows, reason } => {
                        let requests = self.state.take_batch(max_rows);
                        if requests.is_empty() {
                            break;
                        }
                        let rows = requests.iter().map(|p| p.rows).sum();
                        metrics.batch(reason, rows);
                        let batch = Batch {
                            requests,
                            rows,
                            reason,
                            released: now,
                        };
                        // Capacity equals the worker count and we send only while one is
                        // idle, so this never blocks; a closed channel means every worker
                        // thread has died.
                        if let Err(batch) = self.batches.send(batch) {
                            for p in batch.requests {
                                let _ = p.reply.send(Err(ApiError::ModelFailure(
                                    "the model's workers are gone".into(),
                                )));
                            }
                            closed = true;
                            break;
                        }
                        idle -= 1;
                        self.policy.on_release(rows, now);
                    }
                    Decision::Wait { until } => {
                        wake = earliest(wake, until);
                        break;
                    }
                }
            }
            metrics.queue_depth.set(self.state.len() as f64);
            self.health
                .set_queue(self.state.len(), self.state.capacity());
            let most_urgent = self.state.rows_ahead(1);
            let answer = self
                .policy
                .earliest_answer(&self.state.view(), most_urgent, now);
            self.health
                .set_earliest_answer(answer.map(Instant::into_std));
            // With nothing completing the window ages out; keep the reading current.
            if now.saturating_duration_since(last_gauges) >= GAUGE_EVERY * 10 {
                last_gauges = now;
                self.refresh(&metrics, &mut window, now);
            }
            if closed && self.state.is_empty() && idle == self.workers {
                break;
            }
            tokio::select! {
                done = self.done.recv() => match done {
                    Some(d) => {
                        idle += 1;
                        let now = Instant::now();
                        self.policy.observe_batch(d.rows, d.compute, now);
                        self.health.add_completed(d.latencies.len() as u64);
                        if self.responses.is_none() {
                            for l in d.latencies {
                                self.policy.observe_latency(l, now);
                                window.record(l, now);
                            }
                        }
                        if now.saturating_duration_since(last_gauges) >= GAUGE_EVERY {
                            last_gauges = now;
                            self.refresh(&metrics, &mut window, now);
                        }
                    }
                    None => {
                        for p in self.state.drain() {
                            let _ = p.reply.send(Err(ApiError::ModelFailure("the model's workers are gone".into())));
                        }
                        break;
                    }
                },
                request = self.requests.recv(), if !closed => match request {
                    Some(p) => {
                        self.admit(p, &metrics);
                        // Take whatever else is already waiting before deciding, so a burst
                        // is seen whole.
                        while let Ok(p) = self.requests.try_recv() {
                            self.admit(p, &metrics);
                        }
                    }
                    None => closed = true,
                },
                update = self.updates.recv(), if !updates_closed => match update {
                    Some(u) => {
                        self.state.set_limits(u.queue_capacity, u.policy.max_batch_rows());
                        self.policy = u.policy;
                        self.budget = u.budget;
                        self.refresh(&metrics, &mut window, Instant::now());
                    }
                    None => updates_closed = true,
                },
                _ = sleep_until(wake), if wake.is_some() => {}
            }
        }
        metrics.queue_depth.set(0.0);
    }

    /// Reads the cores' load into the policy, then publishes the gauges and this version's
    /// health (what the trainer coordinator reads).
    fn refresh(&mut self, metrics: &BatcherMetrics, window: &mut LatencyWindow, now: Instant) {
        if let Some(share) = self.cpu_load.as_mut().and_then(CpuLoad::sample) {
            self.policy.observe_cpu_load(share);
        }
        let p99 = window.quantile(0.99, now).map(|(d, _)| d);
        metrics.publish(
            self.policy.gauges(),
            self.budget,
            p99,
            window.throughput(now),
        );
        self.health.set_budget(self.budget);
        self.health.set_observed_p99(p99);
        self.health
            .set_admission_horizon(self.policy.admission_horizon());
    }

    fn admit(&mut self, p: Pending, metrics: &BatcherMetrics) {
        let now = Instant::now();
        let ahead = self.state.rows_ahead(p.priority);
        if let Err(shed) = self.policy.admit(
            &self.state.view(),
            ahead,
            p.rows,
            p.enqueued,
            p.deadline,
            now,
        ) {
            metrics.shed.increment(1);
            self.health.add_turned_away(1);
            // Under overload, turn the next requests away before they are parsed (for at
            // most a few milliseconds): parsing requests only to refuse them would take the
            // CPU the admitted ones need.
            self.health
                .shed_for(shed.door_closed_for.min(EARLY_SHED_MAX), shed.retry_after);
            let _ = p.reply.send(Err(ApiError::Overloaded {
                message: shed.message,
                retry_after: shed.retry_after,
                reason: shed.reason,
            }));
            return;
        }
        let rows = p.rows;
        match self.state.push(p) {
            Ok(()) => self.policy.observe_arrival(rows, now),
            Err(p) => {
                metrics.queue_full.increment(1);
                self.health.add_turned_away(1);
                let _ = p.reply.send(Err(ApiError::Overloaded {
                    message: format!(
                        "the queue is full ({} requests waiting)",
                        self.state.capacity()
                    ),
                    retry_after: self.full_retry_after,
                    reason: "queue_full",
                }));
            }
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
