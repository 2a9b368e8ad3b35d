//! The batcher: one task per model version that owns its [`QueueState`] and policy, admits
//! requests from a bounded channel, expires overdue ones on a timer (even while a long batch
//! runs), and hands batches to the version's worker threads when one is free.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cpu_load::CpuLoad;
use super::feedback::ResponseLatencies;
use super::latency::LatencyModel;
use super::load::{self, CoresLoad, LoadMeter};
use super::policy::{Admitted, BatchPolicy, Candidate, Decision};
use super::refusal_log::RefusalLog;
use super::state::QueueState;
use super::window::LatencyWindow;
use super::{Pending, ReleaseReason, Released};
use crate::infer::admission::Door;
use crate::infer::outcome::{InferError, Refusal};
use crate::infer::signals::Signals;
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
    fn send(&self, batch: Released) -> Result<(), Released>;
}

impl BatchSink for std::sync::mpsc::SyncSender<Released> {
    fn send(&self, batch: Released) -> Result<(), Released> {
        self.try_send(batch).map_err(|e| match e {
            std::sync::mpsc::TrySendError::Full(b)
            | std::sync::mpsc::TrySendError::Disconnected(b) => b,
        })
    }
}

impl BatchSink for mpsc::Sender<Released> {
    fn send(&self, batch: Released) -> Result<(), Released> {
        self.try_send(batch).map_err(|e| match e {
            mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b) => b,
        })
    }
}

/// A new policy for a running batcher (the admin API's live budget changes).
pub struct PolicyUpdate {
    pub policy: Box<dyn BatchPolicy>,
    pub queue_capacity: usize,
    /// Output rows a batch holds at most (a text model's texts).
    pub max_outputs: usize,
    /// The p99 target the coordinator holds serving to.
    pub budget: Duration,
}

/// Handles to this model's metrics, made once.
struct BatcherMetrics {
    batches: [Counter; 4],
    batch_rows: Histogram,
    queue_depth: Gauge,
    /// The only refusal counted here: a client that left has no one to hand it to.
    abandoned: Counter,
    budget: Gauge,
    effective_budget: Gauge,
    observed_p99: Gauge,
    completions: Gauge,
    predicted_batch: Gauge,
    prediction_spread: Gauge,
    load_ratio: Gauge,
}

/// One refresh of the batcher's gauges.
struct Published {
    policy: super::policy::PolicyGauges,
    budget: Duration,
    observed_p99: Option<Duration>,
    completions_per_second: f64,
    load_ratio: f64,
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
        BatcherMetrics {
            batches: reasons.map(
                |r| metrics::counter!(names::BATCHES, "model" => m.clone(), "reason" => r.as_str()),
            ),
            batch_rows: metrics::histogram!(names::BATCH_ROWS, "model" => m.clone()),
            queue_depth: metrics::gauge!(names::QUEUE_DEPTH, "model" => m.clone()),
            abandoned: metrics::counter!(names::REQUESTS_REJECTED, "model" => m.clone(), "reason" => "abandoned"),
            budget: metrics::gauge!(names::SLO_BUDGET, "model" => m.clone()),
            effective_budget: metrics::gauge!(names::SLO_EFFECTIVE_BUDGET, "model" => m.clone()),
            observed_p99: metrics::gauge!(names::OBSERVED_P99, "model" => m.clone()),
            completions: metrics::gauge!(names::OBSERVED_THROUGHPUT, "model" => m.clone()),
            predicted_batch: metrics::gauge!(names::PREDICTED_BATCH_DURATION, "model" => m.clone()),
            prediction_spread: metrics::gauge!(names::PREDICTION_SPREAD, "model" => m.clone()),
            load_ratio: metrics::gauge!(names::LOAD_RATIO, "model" => m.clone()),
        }
    }

    /// What the policy believes, and what serving achieves against the budget: the budget,
    /// p99, throughput and load ratio hold for every policy (an operator on the static one
    /// compares them too, and the trainer coordinator holds serving to the budget whatever
    /// the policy).
    fn publish(&self, p: Published) {
        let set =
            |gauge: &Gauge, d: Option<Duration>| gauge.set(d.map_or(0.0, |d| d.as_secs_f64()));
        set(&self.effective_budget, p.policy.effective_budget);
        set(&self.predicted_batch, p.policy.predicted_batch);
        self.prediction_spread
            .set(p.policy.prediction_spread.unwrap_or(0.0));
        set(&self.budget, Some(p.budget));
        set(&self.observed_p99, p.observed_p99);
        self.completions.set(p.completions_per_second);
        self.load_ratio.set(p.load_ratio);
    }

    fn batch(&self, reason: ReleaseReason, outputs: usize) {
        let i = match reason {
            ReleaseReason::Full => 0,
            ReleaseReason::Deadline => 1,
            ReleaseReason::Timer => 2,
            ReleaseReason::Idle => 3,
        };
        self.batches[i].increment(1);
        self.batch_rows.record(outputs as f64);
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
    pub signals: std::sync::Arc<Signals>,
    /// What the inference core reads to refuse requests before parsing them.
    pub door: std::sync::Arc<Door>,
    pub budget: Duration,
    /// The process's CPU share, read by the policy as load; `None` where the device is
    /// simulated.
    pub cpu_load: Option<CpuLoad>,
    /// Where handlers record the latency of each answered request, the one the feedback
    /// loop reads; `None` (a simulated device) reads the workers' completion times.
    pub responses: Option<std::sync::Arc<ResponseLatencies>>,
    /// The device's batch times, whatever the policy: what `tandem_load_ratio` takes the
    /// device's capacity from.
    pub device: LatencyModel,
    /// Device time of every model sharing this device, for this model's share of it;
    /// `None` where the device is simulated.
    pub device_busy: Option<std::sync::Arc<super::BusyMeter>>,
    /// The share of the process's cores a running batch keeps busy: 0 on a GPU.
    pub cores_per_batch: f64,
}

/// The longest requests are refused at the door after a shed.
const EARLY_SHED_MAX: Duration = Duration::from_millis(10);

/// How often gauges and signals are refreshed (the windows behind them sort samples).
const GAUGE_EVERY: Duration = Duration::from_millis(100);

/// What the batcher measures between two refreshes of its gauges.
struct Observed {
    /// Latencies and completions of the last two seconds.
    window: LatencyWindow,
    load: LoadMeter,
    cpu_share: Option<f64>,
    /// This model's share of its device's busy time.
    device_share: DeviceShare,
    last_refresh: Instant,
    /// Reused for each drain of the handlers' latencies.
    answered: Vec<super::feedback::Answered>,
    refusals: RefusalLog,
    admitted_late: metrics::Counter,
}

/// The loop's own state besides the queue.
struct Progress {
    /// Workers free to take a batch.
    idle: usize,
    /// The request channel closed, or the workers are gone: finish what is queued.
    closed: bool,
    updates_closed: bool,
}

impl Batcher {
    /// Runs until every request sender is gone and the queue is empty.
    pub async fn run(mut self) {
        let metrics = BatcherMetrics::new(&self.model);
        let mut seen = Observed {
            window: LatencyWindow::sampled(Duration::from_secs(2), 4096),
            load: LoadMeter::default(),
            cpu_share: None,
            device_share: DeviceShare::default(),
            last_refresh: Instant::now(),
            answered: Vec::new(),
            refusals: RefusalLog::default(),
            admitted_late: metrics::counter!(names::REQUESTS_ADMITTED_LATE, "model" => self.model.clone()),
        };
        self.refresh(&metrics, &mut seen, Instant::now());
        let mut progress = Progress {
            idle: self.workers,
            closed: false,
            updates_closed: false,
        };
        loop {
            let now = Instant::now();
            self.take_feedback(&mut seen, now);
            self.expire(now);
            let wake = self.release(&metrics, &mut progress, now);
            self.publish_queue(&metrics, now);
            // With nothing completing the window ages out; keep the reading current.
            if now.saturating_duration_since(seen.last_refresh) >= GAUGE_EVERY * 10 {
                self.refresh(&metrics, &mut seen, now);
            }
            if progress.closed && self.state.is_empty() && progress.idle == self.workers {
                break;
            }
            // Idle, the gauges are still refreshed: their windows empty as time passes.
            let wake = earliest(wake, Some(seen.last_refresh + GAUGE_EVERY * 10));
            if !self.wait(&metrics, &mut seen, &mut progress, wake).await {
                break;
            }
        }
        metrics.queue_depth.set(0.0);
    }

    /// Waits for the next thing to happen: a worker done, requests, a settings change, or
    /// `wake`. False when the workers are gone and the queue has been answered.
    async fn wait(
        &mut self,
        metrics: &BatcherMetrics,
        seen: &mut Observed,
        progress: &mut Progress,
        wake: Option<Instant>,
    ) -> bool {
        tokio::select! {
            // A batch's end first: its worker reports it before answering, so a request sent
            // on an answer is judged with that batch over.
            biased;
            done = self.done.recv() => match done {
                Some(d) => {
                    progress.idle += 1;
                    self.finished(d, metrics, seen);
                }
                None => {
                    for p in self.state.drain() {
                        let _ = p.reply.send(Err(InferError::Model("the model's workers are gone".into())));
                    }
                    return false;
                }
            },
            request = self.requests.recv(), if !progress.closed => match request {
                Some(p) => {
                    self.admit(p, seen);
                    // Take whatever else is already waiting before deciding, so a burst is
                    // seen whole.
                    while let Ok(p) = self.requests.try_recv() {
                        self.admit(p, seen);
                    }
                }
                None => progress.closed = true,
            },
            update = self.updates.recv(), if !progress.updates_closed => match update {
                Some(u) => {
                    self.state.set_limits(u.queue_capacity, u.policy.max_batch_rows());
                    self.state.set_max_outputs(u.max_outputs);
                    self.policy = u.policy;
                    self.budget = u.budget;
                    self.refresh(metrics, seen, Instant::now());
                }
                None => progress.updates_closed = true,
            },
            _ = sleep_until(wake), if wake.is_some() => {}
        }
        true
    }

    /// Latencies the handlers recorded since the last look, for the policy and the window.
    fn take_feedback(&mut self, seen: &mut Observed, now: Instant) {
        let Some(responses) = &self.responses else {
            return;
        };
        responses.drain_into(&mut seen.answered);
        for a in seen.answered.drain(..) {
            self.policy.observe_latency(a.latency, now);
            self.policy.observe_response_delay(a.after_compute, now);
            seen.window.record(a.latency, now);
        }
    }

    /// Answers requests whose deadline passed in the queue.
    fn expire(&mut self, now: Instant) {
        for p in self.state.expire(now) {
            let waited_ms = now.saturating_duration_since(p.enqueued).as_millis() as u64;
            let _ = p.reply.send(Err(Refusal::Expired { waited_ms }.into()));
        }
    }

    /// Releases batches while a worker is free and the policy says so; when to look again.
    fn release(
        &mut self,
        metrics: &BatcherMetrics,
        progress: &mut Progress,
        now: Instant,
    ) -> Option<Instant> {
        let mut wake = self.state.next_expiry();
        while progress.idle > 0 && !self.state.is_empty() {
            let gone = self.state.drop_abandoned();
            metrics.abandoned.increment(gone as u64);
            if self.state.is_empty() {
                break;
            }
            let (max_rows, reason) = match self.policy.decide(&self.state.view(), now) {
                Decision::Release { max_rows, reason } => (max_rows, reason),
                Decision::Wait { until } => {
                    wake = earliest(wake, until);
                    break;
                }
            };
            let requests = self.state.take_batch(max_rows);
            if requests.is_empty() {
                break;
            }
            let rows = requests.iter().map(|p| p.rows).sum();
            // The histogram counts what users count: rows, or a text model's texts (its
            // token-units have their own histogram in tokens).
            metrics.batch(reason, requests.iter().map(|p| p.outputs).sum());
            let batch = Released {
                requests,
                rows,
                reason,
            };
            // Capacity equals the worker count and we send only while one is idle, so
            // this never blocks; a closed channel means every worker thread has died.
            if let Err(batch) = self.batches.send(batch) {
                for p in batch.requests {
                    let _ = p.reply.send(Err(InferError::Model(
                        "the model's workers are gone".into(),
                    )));
                }
                progress.closed = true;
                break;
            }
            progress.idle -= 1;
            self.policy.on_release(rows, now);
        }
        wake
    }

    /// The queue's depth, and the earliest a newcomer could be answered (for the door).
    fn publish_queue(&self, metrics: &BatcherMetrics, now: Instant) {
        metrics.queue_depth.set(self.state.len() as f64);
        self.signals
            .set_queue(self.state.len(), self.state.capacity());
        let most_urgent = self.state.rows_ahead(1);
        let answer = self
            .policy
            .earliest_answer(&self.state.view(), most_urgent, now);
        self.door.set_earliest_answer(answer.map(Instant::into_std));
    }

    /// A worker finished a batch.
    fn finished(&mut self, d: WorkerDone, metrics: &BatcherMetrics, seen: &mut Observed) {
        let now = Instant::now();
        self.policy.observe_batch(d.rows, d.compute, now);
        self.device.observe(d.rows, d.compute);
        seen.device_share.own += d.compute;
        self.signals.add_completed(d.latencies.len() as u64);
        if self.responses.is_none() {
            for l in d.latencies {
                self.policy.observe_latency(l, now);
                seen.window.record(l, now);
            }
        }
        if now.saturating_duration_since(seen.last_refresh) >= GAUGE_EVERY {
            self.refresh(metrics, seen, now);
        }
    }

    /// Reads the cores' load into the policy, then publishes the gauges and this version's
    /// signals (what the trainer coordinator reads).
    fn refresh(&mut self, metrics: &BatcherMetrics, seen: &mut Observed, now: Instant) {
        seen.last_refresh = now;
        if let Some(share) = self.cpu_load.as_mut().and_then(CpuLoad::sample) {
            self.policy.observe_cpu_load(share);
            seen.cpu_share = Some(share);
        }
        let p99 = seen.window.quantile(0.99, now).map(|(d, _)| d);
        let totals = self.signals.read();
        seen.load.observe(totals.offered, totals.completed, now);
        let max_rows = self.policy.max_batch_rows();
        let capacity = load::device_capacity(&self.device, self.budget, max_rows);
        let total = self.device_busy.as_ref().map(|b| b.total());
        let (share, busy) = seen.device_share.update(total, std::time::Instant::now());
        // The front end's share of the cores is the process's less what batches took on
        // them; each model counts its share of the device's time.
        let cores = CoresLoad {
            front_share: seen
                .cpu_share
                .map(|c| (c - busy * self.cores_per_batch).max(0.0) * share),
            computes_on_cores: self.cores_per_batch > 0.0,
        };
        metrics.publish(Published {
            policy: self.policy.gauges(),
            budget: self.budget,
            observed_p99: p99,
            completions_per_second: seen.window.throughput(now),
            load_ratio: seen.load.ratio(capacity, cores, now),
        });
        self.signals.set_budget(self.budget);
        self.signals.set_observed_p99(p99);
        self.door.set_horizon(self.policy.admission_horizon());
    }

    fn admit(&mut self, p: Pending, seen: &mut Observed) {
        let now = Instant::now();
        let ahead = self.state.rows_ahead(p.priority);
        self.policy
            .observe_trainer(self.signals.trainer_computing());
        let judged = match p.continues {
            true => Ok(Admitted::OnTime),
            false => {
                let request = Candidate {
                    ahead,
                    rows: p.rows,
                    priority: p.priority,
                    arrived: p.enqueued,
                    deadline: p.deadline,
                };
                (self.policy).admit(&self.state.view(), &request, now)
            }
        };
        if judged == Ok(Admitted::Late) {
            self.signals.add_admitted_late();
            seen.admitted_late.increment(1);
        }
        if let Err(shed) = judged {
            seen.refusals.refused(&self.model, &shed.seen, now);
            // Under overload, turn the next requests away before they are parsed (for at
            // most a few milliseconds): parsing requests only to refuse them would take the
            // CPU the admitted ones need.
            self.door.shed_for(
                shed.door_closed_for.min(EARLY_SHED_MAX),
                shed.retry_after,
                now.into_std(),
            );
            let _ = p.reply.send(Err(Refusal::Shed {
                message: shed.message,
                retry_after: shed.retry_after,
            }
            .into()));
            return;
        }
        let (rows, priority) = (p.rows, p.priority);
        match self.state.push(p) {
            Ok(()) => {
                self.policy.observe_arrival(rows, priority, now);
                seen.load.admitted(rows);
            }
            Err(p) => {
                let _ = p.reply.send(Err(Refusal::QueueFull {
                    message: format!(
                        "the queue is full ({} requests waiting)",
                        self.state.capacity()
                    ),
                    retry_after: self.full_retry_after,
                }
                .into()));
            }
        }
    }
}

/// A model's share of the busy time of the device it shares with others, and the share of
/// the wall time that device was busy, both smoothed.
#[derive(Default)]
struct DeviceShare {
    /// This model's batches' time so far, and both totals and the time at the last update.
    own: Duration,
    last: Option<(Duration, Duration, std::time::Instant)>,
    share: Option<f64>,
    busy: f64,
}

impl DeviceShare {
    /// (the model's share, the device's busy share) since the last update, given the
    /// device's total busy time now (`None`: a simulated device, all of it this model's and
    /// none on the cores). With nothing run since, the last share.
    fn update(&mut self, total: Option<Duration>, now: std::time::Instant) -> (f64, f64) {
        let Some(total) = total else {
            return (1.0, 0.0);
        };
        if let Some((own, all, at)) = self.last {
            let ran = total.saturating_sub(all);
            let wall = now.saturating_duration_since(at).as_secs_f64();
            if wall > 0.0 {
                let busy = ran.as_secs_f64() / wall;
                self.busy += 0.5 * (busy - self.busy);
            }
            if !ran.is_zero() {
                let mine = self.own.saturating_sub(own).as_secs_f64() / ran.as_secs_f64();
                let prev = self.share.unwrap_or(mine);
                self.share = Some((prev + 0.5 * (mine.min(1.0) - prev)).clamp(0.0, 1.0));
            }
        }
        self.last = Some((self.own, total, now));
        (self.share.unwrap_or(1.0), self.busy)
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
