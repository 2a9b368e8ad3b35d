//! Model workers: one per replica, owning its copy of the model (and, on a GPU, its
//! high-priority stream), running on a thread of the replica's own compute pool. Compute
//! never runs on the async runtime; a worker takes whole batches from the batcher, skips
//! requests whose client has gone or whose deadline has passed, runs `forward` once, and
//! answers each request on its own channel.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::Histogram;
use models::{Model, ModelMetadata};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::batching::task::WorkerDone;
use crate::batching::{Batch, Completed};
use crate::infer::{InferError, Refusal};
use crate::metrics as names;

/// Device time spent computing, shared by every worker on a device; sampled into
/// `tandem_device_busy_ratio` and read by the trainer coordinator.
#[derive(Debug, Default)]
pub struct BusyMeter {
    busy_ns: AtomicU64,
}

impl BusyMeter {
    pub fn add(&self, d: Duration) {
        self.busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed))
    }
}

/// What a replica reports once its model is loaded and warmed up.
#[derive(Clone, Debug)]
pub struct ReplicaInfo {
    pub metadata: ModelMetadata,
    pub input_width: usize,
    pub output_width: usize,
    pub device: String,
    /// Warm-up time of one forward pass per batch size bucket.
    pub warmup: Vec<(usize, Duration)>,
}

/// Batch sizes run at warm-up: powers of two up to the largest batch, and the largest.
pub fn warmup_buckets(max_batch_rows: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(1usize), |s| s.checked_mul(2))
        .take_while(|s| *s < max_batch_rows)
        .collect();
    sizes.push(max_batch_rows);
    sizes
}

pub struct WorkerSpec {
    pub model_label: String,
    pub replica: usize,
    pub batches: Arc<Mutex<Receiver<Batch>>>,
    pub done: mpsc::Sender<WorkerDone>,
    pub busy: Arc<BusyMeter>,
    pub max_batch_rows: usize,
    /// Threads of this replica's compute pool (0: one per core the process may use).
    pub cpu_threads: usize,
    /// The version's statistics (Triton's extension): one entry per batch run.
    pub stats: Arc<crate::stats::VersionStats>,
}

/// Starts a replica thread: it loads the model with `load`, warms it up, reports on
/// `ready`, then serves batches until the batcher drops its end of the channel.
pub fn spawn<L>(
    spec: WorkerSpec,
    load: L,
    ready: std::sync::mpsc::Sender<Result<ReplicaInfo, String>>,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    L: FnOnce() -> Result<Box<dyn Model>, String> + Send + 'static,
{
    std::thread::Builder::new()
        .name(format!("worker-{}-{}", spec.model_label, spec.replica))
        .spawn(move || {
            // The replica runs inside its own compute pool, so the thread that takes a batch
            // is the one that runs its layers and a forward pass wakes at most its helpers.
            // Entered from outside (the global pool), every parallel layer cost two more
            // wake-ups, into the pool and back: on a VM each is an inter-processor
            // interrupt, tens of microseconds when a co-located trainer keeps the core busy.
            // (Not rayon::current_num_threads(): asked from outside any pool, it would start
            // the global pool, whose threads nothing here uses.)
            let threads = match spec.cpu_threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                n => n,
            };
            let name = format!("worker-{}-{}", spec.model_label, spec.replica);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("{name}/{i}"))
                .build();
            match pool {
                Ok(pool) => pool.install(move || load_and_serve(spec, load, ready)),
                Err(e) => {
                    let _ = ready.send(Err(format!("cannot start compute threads: {e}")));
                }
            }
        })
}

fn load_and_serve<L>(
    spec: WorkerSpec,
    load: L,
    ready: std::sync::mpsc::Sender<Result<ReplicaInfo, String>>,
) where
    L: FnOnce() -> Result<Box<dyn Model>, String>,
{
    let mut model = match load() {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let warmup = match warm_up(model.as_mut(), spec.max_batch_rows) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(format!("warm-up failed: {e}")));
            return;
        }
    };
    let info = ReplicaInfo {
        metadata: model.metadata().clone(),
        input_width: model.input_width(),
        output_width: model.output_width(),
        device: model.device().label(),
        warmup,
    };
    if ready.send(Ok(info)).is_err() {
        return;
    }
    serve(spec, model.as_mut());
}

fn warm_up(model: &mut dyn Model, max_rows: usize) -> Result<Vec<(usize, Duration)>, String> {
    // Every bucket once untimed (buffers grow, kernels compile), then timed rounds; the
    // median of each bucket seeds the latency model, so one preempted run cannot skew it.
    const ROUNDS: usize = 5;
    let buckets = warmup_buckets(max_rows);
    let mut times = vec![Vec::with_capacity(ROUNDS); buckets.len()];
    for round in 0..=ROUNDS {
        for (i, &rows) in buckets.iter().enumerate() {
            let input = vec![0f32; rows * model.input_width()];
            let mut output = vec![0f32; rows * model.output_width()];
            let t = std::time::Instant::now();
            model
                .forward(&input, rows, &mut output)
                .map_err(|e| e.to_string())?;
            if round > 0 {
                times[i].push(t.elapsed());
            }
        }
    }
    Ok(buckets
        .into_iter()
        .zip(times)
        .map(|(rows, mut t)| {
            t.sort();
            (rows, t[t.len() / 2])
        })
        .collect())
}

struct WorkerMetrics {
    compute: Histogram,
    queue: Histogram,
}

fn serve(spec: WorkerSpec, model: &mut dyn Model) {
    let device = model.device().label();
    let m = WorkerMetrics {
        compute: metrics::histogram!(names::COMPUTE_DURATION, "model" => spec.model_label.clone(), "device" => device.clone()),
        queue: metrics::histogram!(names::QUEUE_DURATION, "model" => spec.model_label.clone()),
    };
    let (in_w, out_w) = (model.input_width(), model.output_width());
    let mut input = Vec::new();
    let mut output = Vec::new();
    loop {
        // The lock is held only while waiting for the next batch, never across compute.
        let batch = {
            let rx = spec.batches.lock().unwrap_or_else(|p| p.into_inner());
            match rx.recv() {
                Ok(b) => b,
                Err(_) => return,
            }
        };
        let now = Instant::now();
        let mut live = Vec::with_capacity(batch.requests.len());
        for p in batch.requests {
            if p.reply.is_closed() {
                continue;
            }
            if p.deadline.is_some_and(|d| d <= now) {
                let waited_ms = now.saturating_duration_since(p.enqueued).as_millis() as u64;
                let _ = p.reply.send(Err(Refusal::Expired { waited_ms }.into()));
                continue;
            }
            m.queue
                .record(now.saturating_duration_since(p.enqueued).as_secs_f64());
            live.push(p);
        }
        let rows: usize = live.iter().map(|p| p.rows).sum();
        if rows == 0 {
            let _ = spec.done.blocking_send(WorkerDone {
                rows: 0,
                compute: Duration::ZERO,
                latencies: Vec::new(),
            });
            continue;
        }
        output.clear();
        output.resize(rows * out_w, 0.0);
        let copying = std::time::Instant::now();
        // One request: its buffer is the batch. Several: one copy into the batch buffer.
        let batch_input = if live.len() == 1 {
            &live[0].input
        } else {
            input.clear();
            input.reserve(rows * in_w);
            for p in &live {
                input.extend_from_slice(&p.input);
            }
            &input
        };
        let started = std::time::Instant::now();
        let copied_in = started - copying;
        let result = run(model, batch_input, rows, &mut output);
        let forward = started.elapsed();
        // The batch's time on the worker, copy included: what the latency model learns.
        let compute = copied_in + forward;
        spec.busy.add(compute);
        m.compute.record(compute.as_secs_f64());
        let finished = Instant::now();
        let mut latencies = Vec::with_capacity(live.len());
        let mut offset = 0;
        for p in live {
            let n = p.rows * out_w;
            latencies.push(finished.saturating_duration_since(p.enqueued));
            let reply = match &result {
                Ok(()) => Ok(Completed {
                    output: output[offset..offset + n].to_vec(),
                    queue_time: now.saturating_duration_since(p.enqueued),
                    compute_time: compute,
                }),
                Err(e) => Err(InferError::Model(e.clone())),
            };
            offset += n;
            let _ = p.reply.send(reply);
        }
        spec.stats
            .executed(rows, copied_in, forward, finished.elapsed());
        if spec
            .done
            .blocking_send(WorkerDone {
                rows,
                compute,
                latencies,
            })
            .is_err()
        {
            return;
        }
    }
}

/// `forward`, with a panic inside the model turned into an error for this batch only.
fn run(
    model: &mut dyn Model,
    input: &[f32],
    rows: usize,
    output: &mut [f32],
) -> Result<(), String> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| model.forward(input, rows, output))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the model panicked".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::warmup_buckets;

    #[test]
    fn buckets_cover_every_power_of_two_and_the_maximum() {
        assert_eq!(warmup_buckets(1), vec![1]);
        assert_eq!(warmup_buckets(8), vec![1, 2, 4, 8]);
        assert_eq!(warmup_buckets(100), vec![1, 2, 4, 8, 16, 32, 64, 100]);
    }
}
