//! Model workers: one per replica, owning its copy of the model (and, on a GPU, its
//! high-priority stream), running on a thread of the replica's own compute pool. Compute
//! never runs on the async runtime; a worker takes whole batches from the batcher, skips
//! requests whose client has gone or whose deadline has passed, runs `forward` once, and
//! answers each request on its own channel.

mod tensor_batch;
mod warmup;

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Gauge, Histogram};
use models::{Batch, InputKind, Model, ModelMetadata, PackedTokens};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::batching::task::WorkerDone;
use crate::batching::{BusyMeter, Completed, Payload, Pending, Released, Reply};
use crate::infer::outcome::{InferError, Refusal};
use crate::metrics as names;

/// What a replica reports once its model is loaded and warmed up.
#[derive(Clone, Debug)]
pub struct ReplicaInfo {
    pub metadata: ModelMetadata,
    pub input: InputKind,
    pub output_width: usize,
    pub device: String,
    /// Warm-up time of one forward pass per batch size (in batch rows).
    pub warmup: Vec<(usize, Duration)>,
    /// How long loading the weights took, and then the warm-up: where a cold start goes.
    pub load_took: Duration,
    pub warmup_took: Duration,
}

pub struct WorkerSpec {
    pub model_label: String,
    pub replica: usize,
    pub batches: Arc<Mutex<Receiver<Released>>>,
    pub done: mpsc::Sender<WorkerDone>,
    pub busy: Arc<BusyMeter>,
    /// The version's settings, for the largest batch to warm up with.
    pub settings: crate::config::ModelSettings,
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
    let started = std::time::Instant::now();
    let mut model = match load() {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if model.splits_layers_over_threads() {
        // Before warm-up, so that the latency model learns the pinned pool's times.
        if let Err(e) = models::device::pin_pool_one_thread_per_core() {
            tracing::warn!(model = %spec.model_label, error = %e, "compute threads left floating: cannot pin them one per core");
        }
    }
    let load_took = started.elapsed();
    let (max_rows, max_outputs) = spec.settings.batch_limits(&model.input());
    let p99 = spec.settings.budget();
    let warmup = match warmup::warm_up(model.as_mut(), max_rows, max_outputs, p99) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(format!("warm-up failed: {e}")));
            return;
        }
    };
    let info = ReplicaInfo {
        metadata: model.metadata().clone(),
        input: model.input(),
        output_width: model.output_width(),
        device: model.device().label(),
        warmup,
        load_took,
        warmup_took: started.elapsed() - load_took,
    };
    if ready.send(Ok(info)).is_err() {
        return;
    }
    serve(spec, model.as_mut());
}

pub(crate) struct WorkerMetrics {
    compute: Histogram,
    queue: Histogram,
    batch_tokens: Histogram,
    padding: Gauge,
}

/// Where a batch's requests are copied to when there are several; kept between batches.
#[derive(Default)]
struct Buffers {
    values: Vec<f32>,
    tokens: PackedTokens,
    output: Vec<f32>,
}

fn serve(spec: WorkerSpec, model: &mut dyn Model) {
    let device = model.device().label();
    let label = spec.model_label.clone();
    names::register_request_series(&label);
    let m = WorkerMetrics {
        compute: metrics::histogram!(names::COMPUTE_DURATION, "model" => label.clone(), "device" => device),
        queue: metrics::histogram!(names::QUEUE_DURATION, "model" => label.clone()),
        batch_tokens: metrics::histogram!(names::BATCH_TOKENS, "model" => label.clone()),
        padding: metrics::gauge!(names::BATCH_PADDING_RATIO, "model" => label),
    };
    let width = model.output_width();
    let tensors = match model.input() {
        InputKind::Tensors(signature) => Some(signature),
        _ => None,
    };
    let mut buffers = Buffers::default();
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
        let live = live_requests(batch.requests, now, &m);
        let (done, replies) = match live.is_empty() {
            true => (
                WorkerDone {
                    rows: 0,
                    compute: Duration::ZERO,
                    latencies: Vec::new(),
                },
                Vec::new(),
            ),
            false => match &tensors {
                Some(signature) => {
                    tensor_batch::run(&spec, model, signature, live, now, &m.compute)
                }
                None => run_batch(&spec, model, live, &mut buffers, width, now, &m),
            },
        };
        // The batcher hears that the batch ended before its clients do: a client that sends
        // its next request on the answer then finds the device idle, where a request alone
        // is always admitted, instead of queued behind a batch that has already ended.
        let batcher_gone = spec.done.blocking_send(done).is_err();
        for (to, reply) in replies {
            let _ = to.send(reply);
        }
        if batcher_gone {
            return;
        }
    }
}

/// A batch's answers, each with the request it goes to.
pub(crate) type Replies = Vec<(tokio::sync::oneshot::Sender<Reply>, Reply)>;

/// The batch's requests whose client still waits and whose deadline has not passed (those
/// are answered 504 now): they would cost compute for nobody.
fn live_requests(requests: Vec<Pending>, now: Instant, m: &WorkerMetrics) -> Vec<Pending> {
    let mut live = Vec::with_capacity(requests.len());
    for p in requests {
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
    live
}

/// The requests as one batch: a lone request's own buffer, or several copied into one.
fn assemble<'a>(live: &'a [Pending], buffers: &'a mut Buffers) -> Batch<'a> {
    let outputs = live.iter().map(|p| p.outputs).sum();
    if let [only] = live {
        return match &only.input {
            Payload::Dense(values) => Batch::Dense {
                values,
                rows: outputs,
            },
            Payload::Tokens(tokens) => Batch::Tokens(tokens),
            Payload::Tensors(_) => unreachable!("tensor batches run in tensor_batch"),
        };
    }
    if let Some(Payload::Tokens(_)) = live.first().map(|p| &p.input) {
        buffers.tokens.clear();
        for p in live {
            if let Payload::Tokens(t) = &p.input {
                for i in 0..t.sequences() {
                    buffers.tokens.push_sequence_of(t, i);
                }
            }
        }
        return Batch::Tokens(&buffers.tokens);
    }
    buffers.values.clear();
    for p in live {
        if let Payload::Dense(v) = &p.input {
            buffers.values.extend_from_slice(v);
        }
    }
    Batch::Dense {
        values: &buffers.values,
        rows: outputs,
    }
}

/// Runs one batch and answers each of its requests with its rows of the output.
fn run_batch(
    spec: &WorkerSpec,
    model: &mut dyn Model,
    live: Vec<Pending>,
    buffers: &mut Buffers,
    width: usize,
    started_at: Instant,
    m: &WorkerMetrics,
) -> (WorkerDone, Replies) {
    let rows: usize = live.iter().map(|p| p.rows).sum();
    let outputs: usize = live.iter().map(|p| p.outputs).sum();
    let rows_out: usize = live.iter().map(output_rows).sum();
    let mut output = std::mem::take(&mut buffers.output);
    output.clear();
    output.resize(rows_out * width, 0.0);
    let copying = std::time::Instant::now();
    let batch = assemble(&live, buffers);
    if let Batch::Tokens(t) = batch {
        // Packed end to end: every token computed is a real one.
        m.batch_tokens.record(t.tokens() as f64);
        m.padding.set(0.0);
    }
    let started = std::time::Instant::now();
    let copied_in = started - copying;
    let result = run(model, batch, &mut output);
    let forward = started.elapsed();
    // The batch's time on the worker, copy included: what the latency model learns.
    let compute = copied_in + forward;
    spec.busy.add(compute);
    m.compute.record(compute.as_secs_f64());
    let finished = Instant::now();
    let mut latencies = Vec::with_capacity(live.len());
    let mut replies = Vec::with_capacity(live.len());
    let mut offset = 0;
    for p in live {
        let n = output_rows(&p) * width;
        latencies.push(finished.saturating_duration_since(p.enqueued));
        let reply = match &result {
            Ok(()) => Ok(Completed {
                output: output[offset..offset + n].to_vec(),
                tensors: Vec::new(),
                tokens: match &p.input {
                    Payload::Tokens(t) => t.tokens(),
                    Payload::Dense(_) | Payload::Tensors(_) => 0,
                },
                queue_time: started_at.saturating_duration_since(p.enqueued),
                compute_time: compute,
            }),
            Err(e) => Err(InferError::Model(e.clone())),
        };
        offset += n;
        replies.push((p.reply, reply));
    }
    buffers.output = output;
    // Counted before anyone is answered, so that a client reading the statistics after its
    // answer finds its batch in them.
    spec.stats
        .executed(outputs, copied_in, forward, finished.elapsed());
    let done = WorkerDone {
        rows,
        compute,
        latencies,
    };
    (done, replies)
}

/// The rows of output a request gets back: one an output (a row, a text), or one a token
/// for a text that keeps its every state.
fn output_rows(p: &Pending) -> usize {
    match &p.input {
        Payload::Tokens(t) => t.output_rows(),
        Payload::Dense(_) | Payload::Tensors(_) => p.outputs,
    }
}

/// `forward`, with a panic inside the model turned into an error for this batch only.
fn run(model: &mut dyn Model, batch: Batch<'_>, output: &mut [f32]) -> Result<(), String> {
    catch(|| model.forward(batch, output))
}

/// `f`, with a panic inside the model turned into an error for this batch only.
fn catch<T>(f: impl FnOnce() -> Result<T, models::ModelError>) -> Result<T, String> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the model panicked".into()),
    }
}
