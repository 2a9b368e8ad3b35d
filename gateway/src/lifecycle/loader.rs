//! Bringing a model version up: worker threads that load and warm the model, the batcher
//! in front of them, and the handle the registry keeps. A version that fails to load or
//! warm up leaves nothing running.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use models::Device;
use models::encoder::Prompts;
use models::{InputKind, TextInput, TextTokenizer};
use tokio::sync::mpsc;

use crate::batching::BusyMeter;
use crate::batching::choice::for_settings;
use crate::batching::latency::LatencyModel;
use crate::batching::state::QueueState;
use crate::batching::task::{Batcher, WorkerDone};
use crate::config::ModelSettings;
use crate::infer::{Core, Door};
use crate::lifecycle::registry::{ModelVersion, TextModel};
use crate::metrics as names;
use crate::worker::{self, ReplicaInfo, WorkerSpec};

pub struct LoadSpec {
    pub name: String,
    pub version: u64,
    pub path: PathBuf,
    pub settings: ModelSettings,
    pub repo_overrides: Option<crate::config::ModelOverrides>,
    pub device: Device,
    /// CPU threads per forward pass (0: all).
    pub cpu_threads: usize,
    pub busy: Arc<BusyMeter>,
    /// An ONNX model's config.pbtxt, if its repository entry has one.
    pub triton: Option<Arc<crate::triton::TritonConfig>>,
    /// ONNX Runtime's library, if the configuration names one.
    pub onnxruntime_lib: Option<PathBuf>,
    /// The server's response cache, if it has one.
    pub cache: Option<Arc<crate::cache::ResponseCache>>,
}

/// Loads, warms up and starts serving a version; returns its handle once every replica is
/// ready.
pub async fn load(spec: LoadSpec) -> Result<Arc<ModelVersion>, String> {
    let started = std::time::Instant::now();
    // Every path here (a repository version, a single file) runs settings past their
    // bounds first: a value out of range must fail this load, not the process.
    spec.settings
        .validate(&spec.name)
        .map_err(|e| e.to_string())?;
    let result = load_validated(&spec, started).await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!(names::MODEL_LOADS, "model" => spec.name.clone(), "outcome" => outcome)
        .increment(1);
    result
}

async fn load_validated(
    spec: &LoadSpec,
    started: std::time::Instant,
) -> Result<Arc<ModelVersion>, String> {
    let stats = Arc::new(crate::stats::VersionStats::default());
    let replicas = start_replicas(spec, &stats).await?;
    let info = replicas.info.clone();
    let text = match &info.input {
        InputKind::Text(input) => Some(text_model(&spec.path, input).await?),
        InputKind::Dense { .. } | InputKind::Tensors(_) => None,
    };
    if info.output_width == 0 {
        return Err("model has an empty output".into());
    }
    let (max_rows, max_outputs) = spec.settings.batch_limits(&info.input);
    let channels = start_batcher(spec, replicas, max_rows, max_outputs);
    log_loaded(spec, &info, max_rows, started);
    Ok(Arc::new(ModelVersion {
        core: channels.core,
        name: spec.name.clone(),
        version: spec.version,
        info,
        text,
        repo_overrides: std::sync::Mutex::new(spec.repo_overrides.clone()),
        settings: std::sync::Mutex::new(spec.settings.clone()),
        updates: channels.updates,
        stats,
        loaded_at: std::time::SystemTime::now(),
        triton: spec.triton.clone(),
        cache: (spec.cache.clone()).map(|c| crate::cache::VersionCache::new(c, &spec.name)),
    }))
}

/// The replicas' side, once all are warmed up: their batch channel and what they report.
struct Replicas {
    count: usize,
    batches: std::sync::mpsc::SyncSender<crate::batching::Released>,
    done: mpsc::Receiver<WorkerDone>,
    info: ReplicaInfo,
}

/// Starts every replica's thread and waits (off the runtime) until each has loaded and
/// warmed up its copy of the model; dropping the batch channel on an error ends those
/// that did.
async fn start_replicas(
    spec: &LoadSpec,
    stats: &Arc<crate::stats::VersionStats>,
) -> Result<Replicas, String> {
    let count = spec.settings.replicas.max(1);
    let options = load_options(spec);
    let onnx_options = crate::backends::OnnxOptions {
        config: spec.triton.as_ref().map(|t| t.config.clone()),
        runtime_lib: spec.onnxruntime_lib.clone(),
        cpu_threads: spec.cpu_threads,
        max_batch_size: spec.settings.max_batch_size,
    };
    let (batch_tx, batch_rx) = std::sync::mpsc::sync_channel(count);
    let batch_rx = Arc::new(Mutex::new(batch_rx));
    let (done_tx, done_rx) = mpsc::channel(count * 2);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    for replica in 0..count {
        let (path, device) = (spec.path.clone(), spec.device.clone());
        let onnx_options = onnx_options.clone();
        let worker_spec = WorkerSpec {
            model_label: spec.name.clone(),
            replica,
            batches: batch_rx.clone(),
            done: done_tx.clone(),
            busy: spec.busy.clone(),
            settings: spec.settings.clone(),
            cpu_threads: spec.cpu_threads,
            stats: stats.clone(),
        };
        // Runs in the replica's compute pool: the model splits its work over that pool's
        // `cpu_threads` threads.
        let load = move || crate::backends::load(&path, &device, options, &onnx_options);
        worker::spawn(worker_spec, load, ready_tx.clone())
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
    }
    drop((ready_tx, done_tx));
    let reports = tokio::task::spawn_blocking(move || {
        (0..count)
            .map(|_| {
                ready_rx
                    .recv()
                    .unwrap_or_else(|_| Err("a worker thread died while loading".into()))
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| format!("load task failed: {e}"))??;
    Ok(Replicas {
        count,
        batches: batch_tx,
        done: done_rx,
        info: reports.into_iter().next().ok_or("no replica reported")?,
    })
}

/// What the replicas load with: the settings' CPU precision, or f32 with a warning where a
/// model on this CPU has no kernel for it (a fleet's older machines keep serving the same
/// config).
fn load_options(spec: &LoadSpec) -> models::LoadOptions {
    let wanted = models::MatmulPrecision::from(spec.settings.cpu_precision);
    // On a GPU the setting does nothing, and there is nothing to warn about.
    let cpu_precision = match wanted.available() || spec.device.is_cuda() {
        true => wanted,
        false => {
            tracing::warn!(
                model = %spec.name,
                version = spec.version,
                "cpu_precision = \"{}\" needs a CPU with {}; this version runs f32",
                spec.settings.cpu_precision,
                wanted.requires(),
            );
            models::MatmulPrecision::F32
        }
    };
    models::LoadOptions { cpu_precision }
}

/// A text model's tokenizer, read from its folder off the runtime.
async fn text_model(path: &std::path::Path, input: &TextInput) -> Result<TextModel, String> {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().unwrap_or(path).to_path_buf()
    };
    let max = input.max_seq_len;
    let read = move || {
        Ok::<_, models::LoadError>((TextTokenizer::from_dir(&dir, max)?, Prompts::read(&dir)?))
    };
    let (tokenizer, prompts) = tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| format!("load task failed: {e}"))?
        .map_err(|e| e.to_string())?;
    // An id past the embeddings would fail, with a 500, every batch a text holding it joins.
    let ids_below = tokenizer.ids_below();
    if ids_below > input.vocab_size {
        return Err(format!(
            "tokenizer.json gives ids up to {}, past the model's vocab_size of {} in config.json",
            ids_below - 1,
            input.vocab_size
        ));
    }
    // So would a pair's type id past the token type table (a RoBERTa model has one row; a
    // model with none reads no type ids).
    let types_below = tokenizer.pair_type_ids_below();
    if input.type_vocab_size > 0 && types_below > input.type_vocab_size {
        return Err(format!(
            "tokenizer.json gives a pair's second text type id {}, past the model's \
             type_vocab_size of {} in config.json",
            types_below - 1,
            input.type_vocab_size
        ));
    }
    Ok(TextModel {
        tokenizer: Arc::new(tokenizer),
        input: input.clone(),
        prompts,
    })
}

/// What the version's handle keeps of its batcher.
struct Channels {
    core: Core,
    updates: mpsc::Sender<crate::batching::task::PolicyUpdate>,
}

/// The share of the process's cores a forward pass keeps busy: its threads' on the CPU,
/// none on a GPU.
fn cores_per_batch(spec: &LoadSpec) -> f64 {
    if spec.device.is_cuda() {
        return 0.0;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match spec.cpu_threads {
        0 => cores,
        n => n.min(cores),
    };
    threads as f64 / cores as f64
}

fn start_batcher(
    spec: &LoadSpec,
    replicas: Replicas,
    max_rows: usize,
    max_outputs: usize,
) -> Channels {
    let s = &spec.settings;
    let signals = Arc::new(crate::infer::signals::Signals::default());
    let door = Arc::new(Door::default());
    let responses = Arc::new(crate::batching::feedback::ResponseLatencies::default());
    let (req_tx, req_rx) = mpsc::channel(s.queue_capacity);
    let (upd_tx, upd_rx) = mpsc::channel(4);
    let warmup = &replicas.info.warmup;
    let batcher = Batcher {
        model: spec.name.clone(),
        requests: req_rx,
        done: replicas.done,
        batches: Box::new(replicas.batches),
        workers: replicas.count,
        policy: for_settings(s, max_rows, warmup, &replicas.info.input),
        updates: upd_rx,
        state: QueueState::new(s.queue_capacity, max_rows).with_max_outputs(max_outputs),
        full_retry_after: Duration::from_secs(1),
        signals: signals.clone(),
        door: door.clone(),
        budget: s.budget(),
        cpu_load: Some(crate::batching::cpu_load::CpuLoad::new()),
        responses: Some(responses.clone()),
        device: LatencyModel::from_warmup(warmup),
        device_busy: Some(spec.busy.clone()),
        cores_per_batch: cores_per_batch(spec),
    };
    tokio::spawn(batcher.run());
    Channels {
        core: Core::new(&spec.name, req_tx, door, signals, responses),
        updates: upd_tx,
    }
}

fn log_loaded(spec: &LoadSpec, info: &ReplicaInfo, max_rows: usize, started: std::time::Instant) {
    let warmup = &info.warmup;
    tracing::info!(
        model = %spec.name,
        version = spec.version,
        device = %info.device,
        replicas = spec.settings.replicas.max(1),
        elapsed_ms = started.elapsed().as_millis() as u64,
        load_ms = info.load_took.as_millis() as u64,
        warmup_ms = info.warmup_took.as_millis() as u64,
        warmup_us = %warmup
            .iter()
            .map(|(rows, d)| format!("{rows}:{}", d.as_micros()))
            .collect::<Vec<_>>()
            .join(","),
        // The knee of cost per row that adaptive batches wait to grow towards.
        efficient_batch = LatencyModel::from_warmup(warmup).efficient_batch(max_rows),
        "model version loaded and warmed up"
    );
}
