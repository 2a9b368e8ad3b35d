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
use tokio::time::Instant;

use super::policy::BatchPolicy;
use super::state::QueueState;
use super::task::{Batcher, WorkerDone};
use super::{Batch, Completed, Pending, ReleaseReason};
use crate::infer::{InferError, Refusal};

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
    let t0 = Instant::now();
    let (req_tx, req_rx) = mpsc::channel(capacity.max(1));
    let (done_tx, done_rx) = mpsc::channel(4);
    let (batch_tx, mut batch_rx) = mpsc::channel::<Batch>(1);
    let (_upd_tx, upd_rx) = mpsc::channel(1);
    let max_rows = policy.max_batch_rows();
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
        signals: Default::default(),
        door: Default::default(),
        budget: Duration::from_millis(100),
        cpu_load: None,
        responses: None,
        device: super::latency::LatencyModel::from_warmup(&[(1, Duration::from_millis(1))]),
        device_busy: None,
        cores_per_batch: 0.0,
    };
    let batcher = tokio::spawn(batcher.run());
    let result = Arc::new(Mutex::new(SimResult::default()));

    // The device: what a worker thread does, with scripted compute time.
    let device_log = result.clone();
    let device = tokio::spawn(async move {
        while let Some(batch) = batch_rx.recv().await {
            let now = Instant::now();
            device_log
                .lock()
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
            for p in live {
                let _ = p.reply.send(Ok(Completed {
                    tokens: 0,
                    output: Vec::new(),
                    queue_time: now - p.enqueued,
                    compute_time: took,
                }));
            }
            if done_tx
                .send(WorkerDone {
                    rows,
                    compute: took,
                    latencies,
                })
                .await
                .is_err()
            {
                return;
            }
        }
    });

    // The clients: each request at its time, each awaiting its reply in its own task.
    let mut waiters = Vec::new();
    for (i, a) in arrivals.iter().enumerate() {
        tokio::time::sleep_until(t0 + a.at).await;
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
        if req_tx.try_send(pending).is_err() {
            result
                .lock()
                .unwrap()
                .outcomes
                .push((a.at, a.priority, Outcome::Shed));
            continue;
        }
        let (at, priority) = (a.at, a.priority);
        waiters.push((
            i,
            tokio::spawn(async move {
                let outcome = match rx.await {
                    Ok(Ok(_)) => Outcome::Done(Instant::now() - now),
                    Ok(Err(InferError::Refused(
                        Refusal::Shed { .. } | Refusal::QueueFull { .. },
                    ))) => Outcome::Shed,
                    Ok(Err(InferError::Refused(Refusal::Expired { .. }))) => {
                        Outcome::Expired(Instant::now() - now)
                    }
                    _ => Outcome::Failed,
                };
                (at, priority, outcome)
            }),
        ));
    }
    for (_, w) in waiters {
        let o = w.await.expect("waiter");
        result.lock().unwrap().outcomes.push(o);
    }
    drop(req_tx);
    let _ = batcher.await;
    let _ = device.await;
    let mut r = std::mem::take(&mut *result.lock().unwrap());
    r.outcomes.sort_by_key(|(at, _, _)| *at);
    r
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
