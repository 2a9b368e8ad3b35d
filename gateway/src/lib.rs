//! tandem's gateway: the Open Inference Protocol v2 over HTTP (JSON and Triton's binary
//! extension), per-model queues with a batching policy, model workers on OS threads, a
//! model repository that hot-loads new versions, and Prometheus metrics.
//!
//! [`run`] takes the whole [`Config`], a bound listener and a shutdown signal; the binary's
//! `serve` command is a thin wrapper around it.

pub mod batching;
pub mod coloc;
pub mod config;
pub mod cost;
pub mod error;
pub mod health;
pub mod http;
mod loader;
pub mod log_control;
pub mod metrics;
pub mod protocol;
pub mod registry;
pub mod repository;
pub mod repository_control;
pub mod shutdown;
pub mod stats;
pub mod usage;
pub mod validate;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kernels::{DeviceSpec, Selection};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::Config;
use http::AppState;
use loader::LoadSpec;
use registry::Registry;
use repository::Watcher;
use repository_control::RepositoryControl;
use worker::BusyMeter;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("device: {0}")]
    Device(#[from] kernels::KernelError),
    #[error("model {model:?} failed to load from {path}: {reason}")]
    Model {
        model: String,
        path: String,
        reason: String,
    },
    #[error("cannot listen for trainers on {path}: {source}")]
    Coloc {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind the metrics listener {addr}: {source}")]
    MetricsListen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Serves until `shutdown` turns true, then drains: readiness answers 503 at once, the
/// listener closes, in-flight requests finish (within `limits.shutdown_grace_ms`).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let (_keep, reload) = tokio::sync::mpsc::channel(1);
    run_with_reload(config, listener, shutdown, reload).await
}

/// [`run`], also taking whole new configurations (SIGHUP): model settings and the admin
/// token change at once, for loaded versions too; listeners and limits stay as they are.
pub async fn run_with_reload(
    config: Config,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    mut reload: tokio::sync::mpsc::Receiver<Config>,
) -> Result<(), StartError> {
    config.validate()?;
    let config = Arc::new(config);
    let spec: DeviceSpec = config.device.parse()?;
    let selection = Selection::select(spec)?;
    tracing::info!(device = %selection.device.label(), reason = %selection.reason, "device selected");
    let device = selection.device;

    // Load and unload through the HTTP API reach the repository watcher this way.
    let (control, mut pass_requests) = match config.model_repository {
        Some(_) => {
            let (control, requests) = RepositoryControl::new();
            (Some(Arc::new(control)), Some(requests))
        }
        None => (None, None),
    };
    let state = Arc::new(AppState {
        registry: Arc::new(Registry::default()),
        config: std::sync::RwLock::new(config.clone()),
        metrics: metrics::install(),
        ready: false.into(),
        draining: false.into(),
        repository: control.clone(),
    });
    let busy = Arc::new(BusyMeter::default());

    // The HTTP API answers from the start (liveness yes, readiness no) while models load.
    let (stop_http, http_shutdown) = watch::channel(false);
    let server = tokio::spawn(http::serve(
        listener,
        state.clone(),
        http_shutdown.clone(),
        false,
    ));
    let metrics_server = match config.metrics_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::MetricsListen { addr, source })?;
            tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "metrics listening");
            Some(tokio::spawn(http::serve(
                l,
                state.clone(),
                http_shutdown,
                true,
            )))
        }
        None => None,
    };
    let lent_time = Arc::new(cost::LentTime::default());
    let ledger = (config.cost.device_hour_usd > 0.0).then(|| {
        tokio::spawn(cost::run(
            cost::CostLedger::new(config.cost.device_hour_usd, config.cost.window()),
            state.registry.clone(),
            lent_time.clone(),
            shutdown::Shutdown::new(stop_http.subscribe()),
        ))
    });
    let sampler = tokio::spawn(sample_busy(busy.clone(), device.label()));
    let usage_sampler = tokio::spawn(sample_usage());
    let coordinator = match start_coordinator(&config) {
        Ok(Some((listener, path))) => {
            tracing::info!(socket = %path.display(), "trainer coordinator listening");
            let context = coloc::Context {
                config: config.coloc.clone(),
                max_duty_cycle: config
                    .coloc
                    .duty_cycle_cap(matches!(device, kernels::Device::Cpu)),
                lent_time: lent_time.clone(),
                registry: state.registry.clone(),
                serving_share: coloc::ServingShare::new(&device, busy.clone()),
            };
            Some(tokio::spawn(coloc::run(
                listener,
                context,
                shutdown::Shutdown::new(stop_http.subscribe()),
            )))
        }
        Ok(None) => None,
        Err(e) => return Err(e),
    };

    // Single-file models: version 1 each; failing to load one is fatal at start-up.
    for (name, entry) in &config.models {
        let Some(path) = &entry.path else { continue };
        let spec = LoadSpec {
            name: name.clone(),
            version: 1,
            path: path.clone(),
            settings: config.settings_for(name, None, None),
            repo_overrides: None,
            device: device.clone(),
            cpu_threads: config.cpu_threads,
            busy: busy.clone(),
        };
        let v = loader::load(spec)
            .await
            .map_err(|reason| StartError::Model {
                model: name.clone(),
                path: path.display().to_string(),
                reason,
            })?;
        state.registry.insert(v);
    }

    let mut watcher = config
        .model_repository
        .as_ref()
        .zip(control)
        .map(|(root, control)| {
            Watcher::new(
                root.clone(),
                config.clone(),
                state.registry.clone(),
                device.clone(),
                busy.clone(),
                control,
            )
        });
    let mut missing = Vec::new();
    if let Some(w) = &mut watcher {
        let (serving, m) = w.sync().await;
        tracing::info!(?serving, "model repository loaded");
        missing = m;
    }
    set_readiness(&state, &missing);
    tracing::info!(ready = state.is_ready(), "serving");

    let poll = Duration::from_millis(config.repository_poll_ms.max(10));
    let mut reload_open = true;
    loop {
        tokio::select! {
            _ = http::signalled(&mut shutdown) => break,
            new = reload.recv(), if reload_open => match new {
                Some(new) => {
                    if let (Some(new), Some(w)) = (apply_reload(&state, new), &mut watcher) {
                        w.config = new;
                    }
                }
                None => reload_open = false,
            },
            _ = tokio::time::sleep(poll), if watcher.is_some() => {
                if let Some(w) = &mut watcher {
                    let (_, missing) = w.sync().await;
                    set_readiness(&state, &missing);
                }
            }
            Some(first) = next_pass_request(&mut pass_requests) => {
                let waiting = match &mut pass_requests {
                    Some(r) => repository_control::with_waiting(first, r),
                    None => vec![first],
                };
                if let Some(w) = &mut watcher {
                    let (_, missing) = w.sync().await;
                    set_readiness(&state, &missing);
                }
                for done in waiting {
                    let _ = done.send(());
                }
            }
        }
    }

    // A load or unload asked for from now on is answered "shutting down", not left waiting.
    drop(pass_requests);
    state.draining.store(true, Ordering::Release);
    let drain = config.limits.shutdown_drain();
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "shutting down: readiness is now 503"
    );
    tokio::time::sleep(drain).await;
    tracing::info!("listener closed; finishing in-flight requests");
    let _ = stop_http.send(true);
    let _ = server.await;
    if let Some(m) = metrics_server {
        let _ = m.await;
    }
    sampler.abort();
    usage_sampler.abort();
    if let Some(c) = coordinator {
        let _ = c.await;
    }
    if let Some(l) = ledger {
        let _ = l.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The next pass a load or unload asked for; never, without a repository.
async fn next_pass_request(
    requests: &mut Option<tokio::sync::mpsc::Receiver<repository_control::PassRequest>>,
) -> Option<repository_control::PassRequest> {
    match requests {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Ready once every model has a loaded, warmed-up version (and there is at least one).
fn set_readiness(state: &AppState, missing: &[String]) {
    let ready = missing.is_empty() && !state.registry.all().is_empty();
    if !missing.is_empty() {
        tracing::warn!(?missing, "models without a loadable version: not ready");
    }
    state.ready.store(ready, Ordering::Release);
}

/// Publishes the process's context switches ten times a second (often enough that a
/// benchmark's before-and-after scrapes bound a run closely; a getrusage call is cheap).
async fn sample_usage() {
    let switches = ::metrics::counter!(metrics::PROCESS_CONTEXT_SWITCHES);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if let Some(u) = usage::process_usage() {
            switches.absolute(u.context_switches);
        }
    }
}

/// Samples the device's busy time into `tandem_device_busy_ratio` every second.
async fn sample_busy(busy: Arc<BusyMeter>, device: String) {
    let gauge = ::metrics::gauge!(metrics::DEVICE_BUSY_RATIO, "device" => device);
    let mut last = (tokio::time::Instant::now(), busy.total());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = (tokio::time::Instant::now(), busy.total());
        let wall = now.0.duration_since(last.0).as_secs_f64();
        if wall > 0.0 {
            let ratio = (now.1.saturating_sub(last.1).as_secs_f64() / wall).min(1.0);
            gauge.set(ratio);
        }
        last = now;
    }
}

/// Validates and installs a reloaded configuration; every loaded version switches to its new
/// settings. Returns the new configuration, or `None` (logged) if it is invalid.
fn apply_reload(state: &AppState, new: Config) -> Option<Arc<Config>> {
    if let Err(e) = new.validate() {
        tracing::error!(error = %e, "config reload rejected; keeping the running configuration");
        return None;
    }
    let new = Arc::new(new);
    state.set_config(new.clone());
    for v in state.registry.all() {
        let settings = new.settings_for(
            &v.name,
            v.repo_overrides().as_ref(),
            state.registry.runtime_overrides(&v.name).as_ref(),
        );
        if let Err(e) = settings
            .validate(&v.name)
            .map_err(|e| e.to_string())
            .and_then(|_| v.apply(settings).map_err(|e| e.to_string()))
        {
            tracing::error!(model = %v.name, version = v.version, error = %e, "cannot apply reloaded settings");
        }
    }
    tracing::info!("configuration reloaded");
    Some(new)
}

/// Binds the trainer socket. An explicit path that cannot be bound is an error; the default
/// one taken by another gateway on the same machine only disables co-location here.
fn start_coordinator(
    config: &Config,
) -> Result<Option<(tokio::net::UnixListener, std::path::PathBuf)>, StartError> {
    if !config.coloc.enabled {
        return Ok(None);
    }
    let explicit = config.coloc.socket.clone();
    let path = explicit.clone().unwrap_or_else(coloc::default_socket_path);
    match coloc::bind(&path) {
        Ok(l) => Ok(Some((l, path))),
        Err(e) if explicit.is_none() => {
            tracing::warn!(socket = %path.display(), error = %e, "co-location disabled: cannot listen on the default trainer socket (set [coloc] socket or --coloc-socket)");
            Ok(None)
        }
        Err(source) => Err(StartError::Coloc {
            path: path.display().to_string(),
            source,
        }),
    }
}
