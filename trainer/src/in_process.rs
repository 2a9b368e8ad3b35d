//! The reference trainer inside the gateway's process, as a library: `tandem serve` starts
//! it on a thread of its own beside serving.
//!
//! Why inside: between processes a GPU time-slices, so a trainer in another process delays
//! serving's kernels whatever its stream priority, and pause and duty cycle are the only
//! levers left. Inside the gateway's process the trainer's kernels share serving's CUDA
//! context (the device's primary context), where stream priorities order serving's work
//! ahead of training's, and a green context can confine the trainer to a share of the SMs.
//!
//! The coordinator steers it like any trainer, through the gateway's socket and the same
//! protocol, so every directive maps to an in-process lever: `pause` and `duty_cycle` at
//! step boundaries; `memory_limit_bytes` to the micro-batch and scratch memory given back
//! before the ack; streams — one low-priority stream on a GPU, which is what it acks; and
//! the SM share, fixed when it starts ([`InProcessConfig::sm_share`]). It is never sent a
//! signal (the coordinator does not stop its own process): a pause waits for the step in
//! flight, which the micro-batch bounds.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kernels::Device;

use crate::run::{TrainConfig, TrainSummary, run};

/// How an in-process trainer runs.
#[derive(Clone, Debug)]
pub struct InProcessConfig {
    /// The run itself; its `coloc_socket` is replaced by `socket`, and it is managed.
    pub train: TrainConfig,
    /// The gateway's co-location socket.
    pub socket: PathBuf,
    /// The share (0..1] of the GPU's SMs its kernels may use, through a green context;
    /// `None` for all of them. Ignored on a CPU.
    pub sm_share: Option<f64>,
    /// How long to wait for the gateway's socket to appear before giving up.
    pub join_within: Duration,
}

/// A trainer running on its own thread. Dropping it stops it at the next step boundary
/// (with a last checkpoint) and waits for that.
pub struct InProcessTrainer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<TrainSummary, String>>>,
}

impl InProcessTrainer {
    /// Starts the trainer's thread. It waits for the socket, joins the gateway, and trains
    /// until stopped or done.
    pub fn spawn(cfg: InProcessConfig) -> std::io::Result<InProcessTrainer> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("train-in-process".into())
            .spawn(move || train(cfg, &flag))?;
        Ok(InProcessTrainer {
            stop,
            thread: Some(thread),
        })
    }

    /// Whether the trainer's thread has ended (done, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops it at the next step boundary and returns its summary.
    pub fn stop(mut self) -> Result<TrainSummary, String> {
        self.finish()
    }

    fn finish(&mut self) -> Result<TrainSummary, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the in-process trainer panicked".into())),
            None => Err("the in-process trainer was already stopped".into()),
        }
    }
}

impl Drop for InProcessTrainer {
    fn drop(&mut self) {
        if self.thread.is_some()
            && let Err(e) = self.finish()
        {
            tracing::warn!(error = %e, "the in-process trainer ended with an error");
        }
    }
}

/// The trainer's thread: its device, the wait for the gateway, the run.
fn train(cfg: InProcessConfig, stop: &AtomicBool) -> Result<TrainSummary, String> {
    let mut train = cfg.train;
    train.device = placed(&train.device, cfg.sm_share)?;
    train.coloc_socket = Some(cfg.socket.clone());
    train.unmanaged = false;
    wait_for_socket(&cfg.socket, cfg.join_within, stop)?;
    tracing::info!(device = ?train.device, name = %train.name, "in-process trainer starting");
    let summary = run(&train, stop);
    match &summary {
        Ok(s) => tracing::info!(
            steps = s.steps,
            samples = s.samples,
            "in-process trainer done"
        ),
        Err(e) => tracing::error!(error = %e, "in-process trainer failed"),
    }
    summary
}

/// The device the trainer's kernels run on: the gateway's, or a share of its SMs. A driver
/// without green contexts runs it on the whole device, saying so.
pub fn placed(device: &Device, sm_share: Option<f64>) -> Result<Device, String> {
    match (device, sm_share) {
        (Device::Cuda(d), Some(share)) if share < 1.0 => match d.sm_partition(share) {
            Ok(part) => {
                tracing::info!(device = %part.describe(), "in-process trainer confined to an SM partition");
                Ok(Device::Cuda(part))
            }
            Err(e) => {
                tracing::warn!(error = %e, "no SM partition for the in-process trainer; it shares every SM");
                Ok(device.clone())
            }
        },
        _ => Ok(device.clone()),
    }
}

/// Waits until the gateway's socket exists, or says why not.
fn wait_for_socket(
    path: &std::path::Path,
    within: Duration,
    stop: &AtomicBool,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while !path.exists() {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            return Err(format!(
                "the gateway's co-location socket {} did not appear within {within:?}",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
