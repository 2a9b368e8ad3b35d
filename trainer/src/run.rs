//! `tandem train`: the reference trainer. It trains an MLP classifier (digits, or a
//! synthetic workload for benchmarks), obeys the gateway's directives at every step
//! boundary — threads (streams), a memory limit (micro-batches with gradient accumulation
//! keep the effective batch), duty cycle, pause — acks them, reports its progress, and
//! writes checkpoints as new versions into a model repository, which the gateway hot-loads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kernels::{DType, Device};
use models::train::{self, Adam, StepOptions, Train};
use models::{Checkpoint, Mlp, WeightData};

use crate::affinity;
use crate::client::Coloc;
use crate::data::{DIGITS_SCALE, Dataset, Synthetic};
use crate::protocol::{Ack, Hello, Report, VERSION};

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

pub fn run(cfg: &TrainConfig, stop: &AtomicBool) -> Result<TrainSummary, String> {
    if cfg.idle_priority && matches!(cfg.device, Device::Cpu) {
        set_idle_priority();
    }
    let threads = cfg.threads.max(1);
    let pool = {
        let idle = cfg.idle_priority;
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("train-{i}"))
            .start_handler(move |_| {
                if idle {
                    set_idle_priority();
                }
            })
            .build()
            .map_err(|e| e.to_string())?
    };
    let (mut source, dims) = match &cfg.data {
        DataSource::Digits => {
            let all = Dataset::digits()?;
            let (train, test) = all.split(0.2, cfg.seed);
            let mut dims = vec![all.width];
            dims.extend(&cfg.hidden);
            dims.push(all.classes);
            let order: Vec<usize> = (0..train.len()).collect();
            (
                Source::Digits {
                    train,
                    test,
                    order,
                    pos: 0,
                    rng: models::rng::SplitMix64::new(cfg.seed ^ 0x5eed),
                },
                dims,
            )
        }
        DataSource::Synthetic(dims) => {
            let classes = *dims.last().ok_or("synthetic dims are empty")?;
            (
                Source::Synthetic(Synthetic::new(dims[0], classes, cfg.seed)),
                dims.clone(),
            )
        }
    };
    if let Source::Digits { order, rng, .. } = &mut source {
        rng.shuffle(order);
    }
    let init = Checkpoint::random(&dims, DType::F32, cfg.seed);
    let mut trainer: Box<dyn Train> =
        train::trainer(&init, &cfg.device, cfg.adam).map_err(|e| e.to_string())?;
    let bytes_per_row = trainer.bytes_per_row() as u64;
    let full_memory = bytes_per_row * cfg.batch as u64;

    let coloc = match &cfg.coloc_socket {
        Some(path) if !cfg.unmanaged => {
            let hello = Hello {
                version: VERSION,
                name: cfg.name.clone(),
                pid: std::process::id() as i64,
                device: cfg.device.label(),
                max_streams: threads as u32,
                memory_bytes: full_memory,
            };
            let c = Coloc::connect(path, hello)
                .map_err(|e| format!("cannot join the gateway at {}: {e}", path.display()))?;
            tracing::info!(trainer_id = %c.trainer_id, "joined the gateway");
            Some(c)
        }
        _ => None,
    };

    // A managed CPU trainer keeps its threads on the last cores when told to use fewer
    // than all (see `affinity`); `pinned` is the stream count its threads are placed for.
    let cores = match (&coloc, &cfg.device) {
        (Some(_), Device::Cpu) => affinity::allowed_cores(),
        _ => None,
    };
    let mut pinned = threads;

    let started = Instant::now();
    let mut summary = TrainSummary::default();
    let mut applied_seq = 0u64;
    let mut opts = StepOptions {
        threads,
        micro_batch: cfg.batch,
    };
    let mut duty = 1.0f64;
    let mut last_checkpoint = Instant::now();
    let mut last_report = Instant::now();
    let mut window = (Instant::now(), 0u64);
    let mut rate = 0.0;
    let mut loss = f64::NAN;
    while !stop.load(Ordering::Relaxed) {
        if cfg.max_steps.is_some_and(|m| summary.steps >= m)
            || cfg.max_time.is_some_and(|t| started.elapsed() >= t)
        {
            break;
        }
        // Directives are obeyed at step boundaries.
        if let Some(c) = &coloc {
            let mut d = c.directive();
            if d.pause {
                if d.seq > applied_seq {
                    applied_seq = d.seq;
                    summary.directives_applied += 1;
                    let _ = c.ack(Ack {
                        seq: d.seq,
                        streams: 0,
                        memory_bytes: 0,
                    });
                }
                // Paused: report (zero throughput) every heartbeat until told to resume.
                let paused = Instant::now();
                while d.pause && c.connected() && !stop.load(Ordering::Relaxed) {
                    let _ = c.report(Report {
                        step: summary.steps,
                        samples_per_second: 0.0,
                        loss,
                        accuracy: None,
                    });
                    d = c.wait_for_change(d.seq, c.heartbeat);
                    if d.pause && d.seq > applied_seq {
                        applied_seq = d.seq;
                        summary.directives_applied += 1;
                        let _ = c.ack(Ack {
                            seq: d.seq,
                            streams: 0,
                            memory_bytes: 0,
                        });
                    }
                }
                summary.paused_seconds += paused.elapsed().as_secs_f64();
                window = (Instant::now(), summary.samples);
            }
            if d.seq > applied_seq {
                applied_seq = d.seq;
                summary.directives_applied += 1;
                opts.threads = (d.max_streams as usize).clamp(1, threads);
                if let Some(all) = &cores
                    && opts.threads != pinned
                {
                    pinned = opts.threads;
                    let set = affinity::cores_for_streams(all, pinned);
                    if let Err(e) = pool
                        .broadcast(|_| affinity::pin_this_thread(set))
                        .into_iter()
                        .collect::<std::io::Result<Vec<()>>>()
                    {
                        tracing::warn!(error = %e, "cannot place the trainer's threads");
                    }
                }
                let rows = (d.memory_limit_bytes / bytes_per_row.max(1)) as usize;
                opts.micro_batch = rows.clamp(1, cfg.batch);
                duty = d.duty_cycle.clamp(0.01, 1.0);
                let _ = c.ack(Ack {
                    seq: d.seq,
                    streams: opts.threads as u32,
                    memory_bytes: opts.micro_batch as u64 * bytes_per_row,
                });
            }
        }
        let (x, y) = source.next(cfg.batch);
        let t = Instant::now();
        let stats = pool
            .install(|| trainer.step(&x, &y, opts))
            .map_err(|e| e.to_string())?;
        let took = t.elapsed();
        summary.steps += 1;
        summary.samples += stats.rows as u64;
        loss = stats.loss as f64;
        if duty < 1.0 {
            let idle = took.mul_f64((1.0 - duty) / duty);
            match &coloc {
                // A new directive cuts the idle short: a pause must be acknowledged within
                // its deadline, which a long idle after a long step would overrun.
                Some(c) => {
                    c.wait_for_change(applied_seq, idle);
                }
                None => std::thread::sleep(idle),
            }
        }
        let since = window.0.elapsed();
        if since >= Duration::from_millis(500) {
            rate = (summary.samples - window.1) as f64 / since.as_secs_f64();
            window = (Instant::now(), summary.samples);
        }
        if let Some(c) = &coloc
            && last_report.elapsed() >= c.heartbeat / 2
        {
            last_report = Instant::now();
            let _ = c.report(Report {
                step: summary.steps,
                samples_per_second: rate,
                loss,
                accuracy: Some(stats.correct as f64 / stats.rows as f64),
            });
        }
        if last_checkpoint.elapsed() >= cfg.checkpoint_every {
            last_checkpoint = Instant::now();
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
    summary.final_loss = loss;
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
