//! `tandem train`: the reference trainer. It trains an MLP classifier (digits, or a
//! synthetic workload for benchmarks), obeys the gateway's directives at every step
//! boundary ([`crate::steering`]: threads or streams, a memory limit — micro-batches with
//! gradient accumulation keep the effective batch —, duty cycle, pause), acks them, reports
//! its progress, and writes checkpoints as new versions into a model repository, which the
//! gateway hot-loads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kernels::{DType, Device};
use models::train::{self, Adam, StepStats, Train};
use models::{Checkpoint, Mlp, WeightData};

use crate::affinity;
use crate::client::Coloc;
use crate::data::{DIGITS_SCALE, Dataset, Synthetic};
use crate::protocol::{Hello, Report, VERSION};
use crate::steering::{Obeying, Standing, Steering};

#[derive(Clone, Debug)]
pub enum DataSource {
    Digits,
    /// Widths `[in, hidden..., classes]` of a synthetic task.
    Synthetic(Vec<usize>),
}

#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub data: DataSource,
    /// Hidden widths for digits (synthetic takes its own).
    pub hidden: Vec<usize>,
    pub device: Device,
    pub batch: usize,
    pub adam: Adam,
    /// Stop after this many steps, or this long, whichever first.
    pub max_steps: Option<u64>,
    pub max_time: Option<Duration>,
    /// Stop once held-out accuracy reaches this (checked at checkpoints).
    pub target_accuracy: Option<f64>,
    /// Threads (streams) used unconstrained.
    pub threads: usize,
    pub seed: u64,
    /// Write checkpoints as versions of `model_name` here.
    pub repository: Option<PathBuf>,
    pub model_name: String,
    pub checkpoint_every: Duration,
    /// Of the versions this run writes, keep the newest this many on disk (0: all). Older
    /// ones are deleted as new ones land, so a long run's checkpoints take bounded space;
    /// versions already in the repository when it started are never touched.
    pub keep_versions: usize,
    pub coloc_socket: Option<PathBuf>,
    pub name: String,
    /// Run compute threads at the lowest CPU priority (SCHED_IDLE), so that on a shared CPU
    /// they only take cycles nothing else wants.
    pub idle_priority: bool,
    /// Ignore directives (the "unmanaged trainer" of the benchmarks).
    pub unmanaged: bool,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TrainSummary {
    pub steps: u64,
    pub samples: u64,
    pub seconds: f64,
    /// Samples per second of wall time, paused time included.
    pub samples_per_second: f64,
    pub final_loss: f64,
    pub test_accuracy: Option<f64>,
    pub versions_written: Vec<u64>,
    pub directives_applied: u64,
    pub paused_seconds: f64,
    /// The step of the last checkpoint.
    pub checkpointed_at: Option<u64>,
}

/// Lowers the calling thread to SCHED_IDLE (Linux).
pub fn set_idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid param struct.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot lower this thread to SCHED_IDLE");
    }
}

/// The source of batches.
enum Source {
    Digits {
        train: Dataset,
        test: Dataset,
        order: Vec<usize>,
        pos: usize,
        rng: models::rng::SplitMix64,
    },
    Synthetic(Synthetic),
}

impl Source {
    fn next(&mut self, rows: usize) -> (Vec<f32>, Vec<u32>) {
        match self {
            Source::Digits {
                train,
                order,
                pos,
                rng,
                ..
            } => {
                let mut idx = Vec::with_capacity(rows);
                while idx.len() < rows {
                    if *pos == order.len() {
                        rng.shuffle(order);
                        *pos = 0;
                    }
                    idx.push(order[*pos]);
                    *pos += 1;
                }
                train.batch(&idx)
            }
            Source::Synthetic(s) => s.batch(rows),
        }
    }
}

/// The checkpoint to serve: for digits the input scaling is folded into the first layer,
/// so the served model takes raw 0..16 pixels.
fn servable(mut ckpt: Checkpoint, data: &DataSource) -> Checkpoint {
    if let DataSource::Digits = data
        && let WeightData::F32(w) = &mut ckpt.layers[0].weight
    {
        for v in w.iter_mut() {
            *v /= DIGITS_SCALE;
        }
    }
    ckpt
}

/// Accuracy of `ckpt` (as served: raw pixels) on `test`.
pub fn evaluate(ckpt: &Checkpoint, test: &Dataset) -> Result<f64, String> {
    let mut mlp = Mlp::new(ckpt, &Device::Cpu).map_err(|e| e.to_string())?;
    let raw: Vec<f32> = test.inputs.iter().map(|v| v * DIGITS_SCALE).collect();
    let mut out = vec![0f32; test.len() * mlp.output_width()];
    mlp.forward_rows(&raw, test.len(), &mut out)
        .map_err(|e| e.to_string())?;
    let correct = out
        .chunks_exact(test.classes)
        .zip(&test.labels)
        .filter(|(row, label)| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .is_some_and(|(i, _)| i as u32 == **label)
        })
        .count();
    Ok(correct as f64 / test.len() as f64)
}

/// The next free version number of `model` in `repo`.
fn next_version(repo: &Path, model: &str) -> u64 {
    std::fs::read_dir(repo.join(model))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
        + 1
}

/// The compute threads: `cfg.threads` of them on a CPU (one on a GPU, where the kernels
/// are queued from the calling thread), at the lowest priority when asked.
fn compute_pool(cfg: &TrainConfig) -> Result<rayon::ThreadPool, String> {
    let idle = cfg.idle_priority;
    let threads = if cfg.device.is_cuda() {
        1
    } else {
        cfg.threads.max(1)
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("train-{i}"))
        .start_handler(move |_| {
            if idle {
                set_idle_priority();
            }
        })
        .build()
        .map_err(|e| e.to_string())
}

impl Source {
    /// The batches `cfg.data` names, and the network's widths `[in, hidden..., classes]`.
    fn open(cfg: &TrainConfig) -> Result<(Source, Vec<usize>), String> {
        match &cfg.data {
            DataSource::Digits => {
                let all = Dataset::digits()?;
                let (train, test) = all.split(0.2, cfg.seed);
                let mut dims = vec![all.width];
                dims.extend(&cfg.hidden);
                dims.push(all.classes);
                let mut order: Vec<usize> = (0..train.len()).collect();
                let mut rng = models::rng::SplitMix64::new(cfg.seed ^ 0x5eed);
                rng.shuffle(&mut order);
                let source = Source::Digits {
                    train,
                    test,
                    order,
                    pos: 0,
                    rng,
                };
                Ok((source, dims))
            }
            DataSource::Synthetic(dims) => {
                let classes = *dims.last().ok_or("synthetic dims are empty")?;
                let source = Source::Synthetic(Synthetic::new(dims[0], classes, cfg.seed));
                Ok((source, dims.clone()))
            }
        }
    }
}

/// Joins the gateway when managed: says what the trainer would use unconstrained — its
/// threads (one stream on a GPU), and the memory of its parameters, optimiser state and a
/// full batch's scratch, with the least it can run in.
fn join_gateway(cfg: &TrainConfig, trainer: &dyn Train) -> Result<Option<Coloc>, String> {
    let Some(path) = cfg.coloc_socket.as_ref().filter(|_| !cfg.unmanaged) else {
        return Ok(None);
    };
    let streams = if cfg.device.is_cuda() {
        1
    } else {
        cfg.threads.max(1)
    };
    let hello = Hello {
        version: VERSION,
        name: cfg.name.clone(),
        pid: std::process::id() as i64,
        device: cfg.device.label(),
        max_streams: streams as u32,
        memory_bytes: trainer.bytes_for_rows(cfg.batch) as u64,
        min_memory_bytes: trainer.bytes_for_rows(1) as u64,
    };
    let c = Coloc::connect(path, hello)
        .map_err(|e| format!("cannot join the gateway at {}: {e}", path.display()))?;
    tracing::info!(trainer_id = %c.trainer_id, "joined the gateway");
    Ok(Some(c))
}

/// The throughput reported to the gateway (over windows of about half a second), the last
/// loss, and when the last report and checkpoint were.
struct Progress {
    window: (Instant, u64),
    rate: f64,
    loss: f64,
    last_report: Instant,
    last_checkpoint: Instant,
}

impl Progress {
    fn new() -> Progress {
        let now = Instant::now();
        Progress {
            window: (now, 0),
            rate: 0.0,
            loss: f64::NAN,
            last_report: now,
            last_checkpoint: now,
        }
    }

    /// A pause is not throughput: the window starts again after one.
    fn restart_window(&mut self, samples: u64) {
        self.window = (Instant::now(), samples);
    }

    fn after_step(&mut self, samples: u64, loss: f32) {
        self.loss = loss as f64;
        let since = self.window.0.elapsed();
        if since >= Duration::from_millis(500) {
            self.rate = (samples - self.window.1) as f64 / since.as_secs_f64();
            self.restart_window(samples);
        }
    }

    /// Reports at twice the heartbeat.
    fn report(&mut self, c: &Coloc, step: u64, stats: &StepStats) {
        if self.last_report.elapsed() < c.heartbeat / 2 {
            return;
        }
        self.last_report = Instant::now();
        let _ = c.report(Report {
            step,
            samples_per_second: self.rate,
            loss: self.loss,
            accuracy: Some(stats.correct as f64 / stats.rows as f64),
        });
    }
}

/// Whether the run has done what it was asked to (steps or time).
fn finished(cfg: &TrainConfig, summary: &TrainSummary, started: Instant) -> bool {
    cfg.max_steps.is_some_and(|m| summary.steps >= m)
        || cfg.max_time.is_some_and(|t| started.elapsed() >= t)
}

pub fn run(cfg: &TrainConfig, stop: &AtomicBool) -> Result<TrainSummary, String> {
    if cfg.idle_priority && matches!(cfg.device, Device::Cpu) {
        set_idle_priority();
    }
    let pool = compute_pool(cfg)?;
    let (mut source, dims) = Source::open(cfg)?;
    let init = Checkpoint::random(&dims, DType::F32, cfg.seed);
    let mut trainer: Box<dyn Train> =
        train::trainer(&init, &cfg.device, cfg.adam).map_err(|e| e.to_string())?;
    let coloc = join_gateway(cfg, &*trainer)?;
    // A managed CPU trainer keeps its threads on the last cores when told to use fewer
    // than all (see `affinity`).
    let cores = match (&coloc, &cfg.device) {
        (Some(_), Device::Cpu) => affinity::allowed_cores(),
        _ => None,
    };
    let mut steering = Steering::new(cfg.batch, cfg.threads.max(1), cfg.device.is_cuda(), cores);
    let started = Instant::now();
    let mut summary = TrainSummary::default();
    let mut progress = Progress::new();
    while !stop.load(Ordering::Relaxed) && !finished(cfg, &summary, started) {
        // Directives are obeyed at step boundaries.
        if let Some(c) = &coloc {
            let mut obeying = Obeying {
                trainer: &mut *trainer,
                pool: &pool,
                stop,
                applied_count: &mut summary.directives_applied,
                paused_seconds: &mut summary.paused_seconds,
            };
            let standing = Standing {
                step: summary.steps,
                loss: progress.loss,
            };
            if steering.obey(c, &mut obeying, standing)? {
                progress.restart_window(summary.samples);
            }
        }
        let (x, y) = source.next(cfg.batch);
        let t = Instant::now();
        // A GPU trainer's device may be a green context, which may be current on one
        // thread only: its steps run on this thread.
        let stats = if cfg.device.is_cuda() {
            trainer.step(&x, &y, steering.opts)
        } else {
            pool.install(|| trainer.step(&x, &y, steering.opts))
        }
        .map_err(|e| e.to_string())?;
        steering.idle_after(t.elapsed(), coloc.as_ref());
        summary.steps += 1;
        summary.samples += stats.rows as u64;
        progress.after_step(summary.samples, stats.loss);
        if let Some(c) = &coloc {
            progress.report(c, summary.steps, &stats);
        }
        if progress.last_checkpoint.elapsed() >= cfg.checkpoint_every {
            progress.last_checkpoint = Instant::now();
            checkpoint(cfg, &mut *trainer, &source, &mut summary)?;
            if let (Some(target), Some(acc)) = (cfg.target_accuracy, summary.test_accuracy)
                && acc >= target
            {
                break;
            }
        }
    }
    if summary.checkpointed_at != Some(summary.steps) {
        checkpoint(cfg, &mut *trainer, &source, &mut summary)?;
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.samples_per_second = summary.samples as f64 / summary.seconds.max(1e-9);
    summary.final_loss = progress.loss;
    Ok(summary)
}

/// Evaluates (digits) and writes a new version into the repository, if there is one.
fn checkpoint(
    cfg: &TrainConfig,
    trainer: &mut dyn Train,
    source: &Source,
    summary: &mut TrainSummary,
) -> Result<(), String> {
    summary.checkpointed_at = Some(summary.steps);
    let ckpt = servable(trainer.checkpoint().map_err(|e| e.to_string())?, &cfg.data);
    if let Source::Digits { test, .. } = source {
        let acc = evaluate(&ckpt, test)?;
        summary.test_accuracy = Some(acc);
        tracing::info!(
            step = summary.steps,
            test_accuracy = format!("{acc:.4}"),
            "checkpoint"
        );
    }
    if let Some(repo) = &cfg.repository {
        let version = next_version(repo, &cfg.model_name);
        let path = repo
            .join(&cfg.model_name)
            .join(version.to_string())
            .join("model.safetensors");
        ckpt.write_atomic(&path)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        summary.versions_written.push(version);
        tracing::info!(path = %path.display(), version, "wrote a new model version");
        // One version in, one out: the newest `keep_versions` of this run's stay. The
        // gateway serves the newest and unloads a version whose folder has gone only once
        // a newer one serves, so nothing it answers from is taken away.
        let written = &summary.versions_written;
        if cfg.keep_versions > 0 && written.len() > cfg.keep_versions {
            let stale = written[written.len() - cfg.keep_versions - 1];
            let dir = repo.join(&cfg.model_name).join(stale.to_string());
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!(version = stale, "removed an old model version"),
                // Not worth stopping training for: the space is only not reclaimed.
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an old model version")
                }
            }
        }
    }
    Ok(())
}
