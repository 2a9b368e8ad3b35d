//! A simulated device for testing the batcher and its policies under tokio's paused
//! clock: the real [`Batcher`] task, queue and policy, fed by scripted arrivals, with a
//! device whose batch latency follows a scripted curve. Deterministic and fast: time only
//! advances when every task waits.
//!
//! Tokio's timer ticks in milliseconds, so scripted latencies and budgets are whole
//! milliseconds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::policy::BatchPolicy;
use super::state::QueueState;
use super::task::{Batcher, WorkerDone};
use super::{Completed, Pending, ReleaseReason, Released};
use crate::infer::outcome::{InferError, Refusal};

/// One scripted request.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at: Duration,
    pub rows: usize,
    pub priority: u32,
    pub timeout: Option<Duration>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Done(Duration),
    Shed,
    Expired(Duration),
    Failed,
}

#[derive(Debug, Default)]
pub struct SimResult {
    /// Per arrival, in order: its priority and what happened.
    pub outcomes: Vec<(Duration, u32, Outcome)>,
    pub batches: Vec<(Duration, ReleaseReason, usize)>,
    /// Requests admitted though predicted to finish past the budget.
    pub admitted_late: u64,
}

impl SimResult {
    pub fn latencies(&self, priority: Option<u32>) -> Vec<Duration> {
        let mut v: Vec<Duration> = self
            .outcomes
            .iter()
            .filter(|(_, p, _)| priority.is_none_or(|q| q == *p))
            .filter_map(|(_, _, o)| match o {
                Outcome::Done(d) => Some(*d),
                _ => None,
            })
            .collect();
        v.sort();
        v
    }

    pub fn p99(&self, priority: Option<u32>) -> Duration {
        let v = self.latencies(priority);
        v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1]
    }

    pub fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|(_, _, o)| f(o)).count()
    }
}

/// Runs `arrivals` through a batcher with `policy` in front of a device whose batch of `b`
/// rows, started at time `t` after the start, takes `latency(b, t)`.
pub async fn simulate(
    policy: Box<dyn BatchPolicy>,
    capacity: usize,
    arrivals: Vec<Arrival>,
    latency: impl Fn(usize, Duration) -> Duration + Send + 'static,
) -> SimResult {
    let sim = Sim::start(policy, capacity, latency);
    // Each request at its time, each awaiting its reply in its own task.
    let mut waiters = Vec::new();
    for a in arrivals {
        tokio::time::sleep_until(sim.t0 + a.at).await;
        match sim.send(&a) {
            Some(answer) => waiters.push(tokio::spawn(answer)),
            None => sim.record((a.at, a.priority, Outcome::Shed)),
        }
    }
    for w in waiters {
        sim.record(w.await.expect("waiter"));
    }
    sim.finish().await
}

/// Runs `n` requests of `rows` rows through a batcher with `policy`, as one client that
/// sends each request the moment the one before is answered.
pub async fn simulate_closed_loop(
    policy: Box<dyn BatchPolicy>,
    n: usize,
    rows: usize,
    latency: impl Fn(usize, Duration) -> Duration + Send + 'static,
) -> SimResult {
    let sim = Arc::new(Sim::start(policy, 1, latency));
    // A task of its own, as a handler is: woken by its answer in the runtime's queue,
    // beside the batcher.
    let client = sim.clone();
    let requests = tokio::spawn(async move {
        for _ in 0..n {
            let a = Arrival {
                at: Instant::now() - client.t0,
                rows,
                priority: 1,
                timeout: None,
            };
            let outcome = match client.send(&a) {
                Some(answer) => answer.await,
                None => (a.at, a.priority, Outcome::Shed),
            };
            client.record(outcome);
        }
    });
    requests.await.expect("client");
    let Ok(sim) = Arc::try_unwrap(sim) else {
        unreachable!("the client is done")
    };
    sim.finish().await
}

/// A batcher and its simulated device, running.
struct Sim {
    t0: Instant,
    requests: mpsc::Sender<Pending>,
    result: Arc<Mutex<SimResult>>,
    signals: Arc<crate::infer::signals::Signals>,
    batcher: JoinHandle<()>,
    device: JoinHandle<()>,
}

impl Sim {
    fn start(
        policy: Box<dyn BatchPolicy>,
        capacity: usize,
        latency: impl Fn(usize, Duration) -> Duration + Send + 'static,
    ) -> Sim {
        let t0 = Instant::now();
        let (req_tx, req_rx) = mpsc::channel(capacity.max(1));
        let (done_tx, done_rx) = mpsc::channel(4);
        let (batch_tx, batch_rx) = mpsc::channel::<Released>(1);
        let (_upd_tx, upd_rx) = mpsc::channel(1);
        let max_rows = policy.max_batch_rows();
        let signals = Arc::new(crate::infer::signals::Signals::default());
        let batcher = Batcher {
            model: "sim".into(),
            requests: req_rx,
            done: done_rx,
            batches: Box::new(batch_tx),
            workers: 1,
            policy,
            updates: upd_rx,
            state: QueueState::new(capacity, max_rows),
            full_retry_after: Duration::from_secs(1),
            signals: signals.clone(),
            door: Default::default(),
            budget: Duration::from_millis(100),
            cpu_load: None,
            responses: None,
            device: super::latency::LatencyModel::from_warmup(&[(1, Duration::from_millis(1))]),
            device_busy: None,
            cores_per_batch: 0.0,
        };
        let result = Arc::new(Mutex::new(SimResult::default()));
        Sim {
            t0,
            requests: req_tx,
            batcher: tokio::spawn(batcher.run()),
            device: tokio::spawn(device(batch_rx, done_tx, result.clone(), t0, latency)),
            result,
            signals,
        }
    }

    /// Enqueues one request, or None when the channel is full; the answer's outcome.
    fn send(
        &self,
        a: &Arrival,
    ) -> Option<impl Future<Output = (Duration, u32, Outcome)> + Send + 'static> {
        let now = Instant::now();
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            input: super::Payload::Dense(Vec::new()),
            rows: a.rows,
            outputs: a.rows,
            priority: a.priority,
            enqueued: now,
            deadline: a.timeout.map(|t| now + t),
            continues: false,
            reply: tx,
        };
        self.requests.try_send(pending).ok()?;
        let (at, priority) = (a.at, a.priority);
        Some(async move {
            let outcome = match rx.await {
                Ok(Ok(_)) => Outcome::Done(Instant::now() - now),
                Ok(Err(InferError::Refused(Refusal::Shed { .. } | Refusal::QueueFull { .. }))) => {
                    Outcome::Shed
                }
                Ok(Err(InferError::Refused(Refusal::Expired { .. }))) => {
                    Outcome::Expired(Instant::now() - now)
                }
                _ => Outcome::Failed,
            };
            (at, priority, outcome)
        })
    }

    fn record(&self, outcome: (Duration, u32, Outcome)) {
        self.result.lock().unwrap().outcomes.push(outcome);
    }

    async fn finish(self) -> SimResult {
        drop(self.requests);
        let _ = self.batcher.await;
        let _ = self.device.await;
        let mut r = std::mem::take(&mut *self.result.lock().unwrap());
        r.outcomes.sort_by_key(|(at, _, _)| *at);
        r.admitted_late = self.signals.read().admitted_late;
        r
    }
}

/// What a worker thread does, with scripted compute time.
async fn device(
    mut batches: mpsc::Receiver<Released>,
    done_tx: mpsc::Sender<WorkerDone>,
    log: Arc<Mutex<SimResult>>,
    t0: Instant,
    latency: impl Fn(usize, Duration) -> Duration,
) {
    while let Some(batch) = batches.recv().await {
        let now = Instant::now();
        log.lock()
            .unwrap()
            .batches
            .push((now - t0, batch.reason, batch.rows));
        let mut live = Vec::new();
        for p in batch.requests {
            if p.deadline.is_some_and(|d| d <= now) {
                let _ = p.reply.send(Err(Refusal::Expired { waited_ms: 0 }.into()));
            } else if !p.reply.is_closed() {
                live.push(p);
            }
        }
        let rows: usize = live.iter().map(|p| p.rows).sum();
        let took = if rows == 0 {
            Duration::ZERO
        } else {
            latency(rows, now - t0)
        };
        tokio::time::sleep(took).await;
        let end = Instant::now();
        let latencies = live.iter().map(|p| end - p.enqueued).collect();
        // As from the worker: the batcher hears that the batch ended first.
        let done = WorkerDone {
            rows,
            compute: took,
            latencies,
        };
        if done_tx.send(done).await.is_err() {
            return;
        }
        for p in live {
            let _ = p.reply.send(Ok(Completed {
                tensors: Vec::new(),
                tokens: 0,
                output: Vec::new(),
                queue_time: now - p.enqueued,
                compute_time: took,
            }));
        }
    }
}

/// Poisson arrivals of single rows at `rate` per second for `span`, on whole milliseconds.
pub fn poisson(rate: f64, span: Duration, seed: u64, priorities: u32) -> Vec<Arrival> {
    let mut rng = models::rng::SplitMix64::new(seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        t += -(1.0 - rng.next_f64()).ln() / rate;
        if t >= span.as_secs_f64() {
            return out;
        }
        out.push(Arrival {
            at: Duration::from_millis((t * 1000.0).round() as u64),
            rows: 1,
            priority: 1 + (rng.next_u64() % priorities as u64) as u32,
            timeout: None,
        });
    }
}
