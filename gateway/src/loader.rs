//! Bringing a model version up: worker threads that load and warm the model, the batcher
//! in front of them, and the handle the registry keeps. A version that fails to load or
//! warm up leaves nothing running.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kernels::Device;
use models::{Mlp, Model};
use tokio::sync::mpsc;

use crate::batching::latency::LatencyModel;
use crate::batching::policy::for_settings;
use crate::batching::state::QueueState;
use crate::batching::task::Batcher;
use crate::config::ModelSettings;
use crate::infer::{Core, Door};
use crate::metrics as names;
use crate::registry::ModelVersion;
use crate::worker::{self, BusyMeter, WorkerSpec};

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
    let s = &spec.settings;
    let replicas = s.replicas.max(1);
    let (batch_tx, batch_rx) = std::sync::mpsc::sync_channel(replicas);
    let batch_rx = Arc::new(Mutex::new(batch_rx));
    let (done_tx, done_rx) = mpsc::channel(replicas * 2);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let stats = Arc::new(crate::stats::VersionStats::default());
    for replica in 0..replicas {
        let path = spec.path.clone();
        let device = spec.device.clone();
        let cpu_threads = spec.cpu_threads;
        let worker_spec = WorkerSpec {
            model_label: spec.name.clone(),
            replica,
            batches: batch_rx.clone(),
            done: done_tx.clone(),
            busy: spec.busy.clone(),
            max_batch_rows: s.max_batch_size,
            cpu_threads,
            stats: stats.clone(),
        };
        // Runs in the replica's compute pool: the model splits its layers over that pool's
        // `cpu_threads` threads.
        let load = move || -> Result<Box<dyn Model>, String> {
            let mlp = Mlp::load(&path, &device).map_err(|e| e.to_string())?;
            Ok(Box::new(mlp) as Box<dyn Model>)
        };
        worker::spawn(worker_spec, load, ready_tx.clone())
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
    }
    drop((ready_tx, done_tx));
    // Readiness arrives on a std channel from the worker threads: wait off the runtime.
    let reports = tokio::task::spawn_blocking(move || {
        (0..replicas)
            .map(|_| {
                ready_rx
                    .recv()
                    .unwrap_or_else(|_| Err("a worker thread died while loading".into()))
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| format!("load task failed: {e}"))?;
    let mut infos = Vec::with_capacity(replicas);
    for r in reports {
        match r {
            Ok(info) => infos.push(info),
            Err(e) => {
                metrics::counter!(names::MODEL_LOADS, "model" => spec.name.clone(), "outcome" => "error").increment(1);
                // Dropping batch_tx ends the replicas that did load.
                return Err(e);
            }
        }
    }
    let info = infos.swap_remove(0);
    if info.input_width == 0 || info.output_width == 0 {
        return Err("model has an empty input or output".into());
    }

    let signals = Arc::new(crate::signals::Signals::default());
    let door = Arc::new(Door::default());
    let responses = Arc::new(crate::batching::feedback::ResponseLatencies::default());
    let (req_tx, req_rx) = mpsc::channel(s.queue_capacity);
    let (upd_tx, upd_rx) = mpsc::channel(4);
    let batcher = Batcher {
        model: spec.name.clone(),
        requests: req_rx,
        done: done_rx,
        batches: Box::new(batch_tx),
        workers: replicas,
        policy: for_settings(s, &info.warmup),
        updates: upd_rx,
        state: QueueState::new(s.queue_capacity, s.max_batch_size),
        full_retry_after: Duration::from_secs(1),
        signals: signals.clone(),
        door: door.clone(),
        budget: s.budget(),
        cpu_load: Some(crate::batching::cpu_load::CpuLoad::new()),
        responses: Some(responses.clone()),
        device: LatencyModel::from_warmup(&info.warmup),
    };
    tokio::spawn(batcher.run());
    metrics::counter!(names::MODEL_LOADS, "model" => spec.name.clone(), "outcome" => "ok")
        .increment(1);
    tracing::info!(
        model = %spec.name,
        version = spec.version,
        device = %info.device,
        replicas,
        elapsed_ms = started.elapsed().as_millis() as u64,
        warmup_us = %info
            .warmup
            .iter()
            .map(|(rows, d)| format!("{rows}:{}", d.as_micros()))
            .collect::<Vec<_>>()
            .join(","),
        // The knee of cost per row that adaptive batches wait to grow towards.
        efficient_batch = LatencyModel::from_warmup(&info.warmup).efficient_batch(s.max_batch_size),
        "model version loaded and warmed up"
    );
    Ok(Arc::new(ModelVersion {
        core: Core::new(&spec.name, req_tx, door, signals, responses),
        name: spec.name,
        version: spec.version,
        info,
        repo_overrides: std::sync::Mutex::new(spec.repo_overrides),
        settings: std::sync::Mutex::new(spec.settings),
        updates: upd_tx,
        stats,
    }))
}
