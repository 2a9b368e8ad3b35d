//! `tandem train`: the reference trainer's command line (see `trainer::run`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use kernels::{DeviceSpec, Selection};
use models::train::Adam;
use trainer::run::{DataSource, TrainConfig};

use crate::cli::TrainArgs;

pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let spec: DeviceSpec = args.device.parse()?;
    let selection = Selection::select(spec)?;
    tracing::info!(device = %selection.device.label(), reason = %selection.reason, "device selected");
    let data = match args.data.as_str() {
        "digits" => DataSource::Digits,
        "synthetic" => {
            anyhow::ensure!(
                args.synthetic_dims.len() >= 2,
                "--synthetic-dims needs an input and a class count"
            );
            DataSource::Synthetic(args.synthetic_dims.clone())
        }
        other => anyhow::bail!("--data must be digits or synthetic, got {other:?}"),
    };
    let cfg = TrainConfig {
        data,
        hidden: args.hidden.clone(),
        device: selection.device,
        batch: args.batch.max(1),
        adam: Adam {
            lr: args.lr,
            ..Adam::default()
        },
        max_steps: args.steps,
        max_time: args.seconds.map(Duration::from_secs_f64),
        target_accuracy: args.target_accuracy,
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        seed: args.seed,
        repository: args.repository.clone(),
        model_name: args.model_name.clone(),
        checkpoint_every: Duration::from_secs_f64(args.checkpoint_every.max(0.1)),
        keep_versions: args.keep_versions,
        coloc_socket: args.coloc_socket.clone(),
        name: args.name.clone(),
        idle_priority: !args.unmanaged,
        unmanaged: args.unmanaged,
    };
    // SIGTERM or ctrl-c ends training after the current step, with a last checkpoint.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook_like::SIGTERM, signal_hook_like::SIGINT] {
        signal_hook_like::on(signal, stop.clone())?;
    }
    let summary = trainer::run::run(&cfg, &stop).map_err(anyhow::Error::msg)?;
    println!(
        "trained {} steps, {} samples in {:.1} s ({:.0} samples/s), loss {:.4}{}",
        summary.steps,
        summary.samples,
        summary.seconds,
        summary.samples_per_second,
        summary.final_loss,
        summary
            .test_accuracy
            .map(|a| format!(", held-out accuracy {:.2}%", a * 100.0))
            .unwrap_or_default()
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if stop.load(Ordering::Relaxed) {
        tracing::info!("stopped by a signal");
    }
    Ok(())
}

/// Sets a flag on a signal, with plain `sigaction`: the training loop checks it between steps.
mod signal_hook_like {
    use std::sync::Arc;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    pub const SIGTERM: i32 = libc::SIGTERM;
    pub const SIGINT: i32 = libc::SIGINT;

    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

    extern "C" fn handler(_: libc::c_int) {
        if let Some(f) = FLAG.get() {
            f.store(true, Ordering::Relaxed);
        }
    }

    pub fn on(signal: i32, flag: Arc<AtomicBool>) -> std::io::Result<()> {
        let _ = FLAG.set(flag);
        // SAFETY: installs an async-signal-safe handler (one atomic store) for `signal`.
        let rc = unsafe { libc::signal(signal, handler as *const () as libc::sighandler_t) };
        if rc == libc::SIG_ERR {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
