//! tandem's gateway: the Open Inference Protocol v2 over HTTP (JSON and Triton's binary
//! extension), an inference core that admits, queues and answers requests, per-model
//! batchers with a batching policy, model workers on OS threads, a model repository that
//! hot-loads new versions, a trainer coordinator, a cost ledger, and Prometheus metrics.
//!
//! [`run`] takes the whole [`Config`], a bound listener and a shutdown signal; the binary's
//! `serve` command is a thin wrapper around it. Everything else is private but for what
//! the binary, the benches and the fuzz targets reach: the configuration, the log filter,
//! the co-location guardian, and the v2 request decoder.

mod backends;
mod batching;
mod cache;
mod coloc;
pub mod config;
mod cost;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod grpc;
mod http;
mod infer;
mod lifecycle;
pub mod log_control;
mod metrics;
mod otlp;
pub mod protocol;
mod shutdown;
mod stats;
pub mod triton;
mod usage;
mod validate;
mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use http::tls::TlsError;
use models::{DeviceSpec, Selection};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use batching::BusyMeter;
pub use coloc::guardian;
pub use config::Config;
use http::AppState;
use lifecycle::loader::{self, LoadSpec};
use lifecycle::registry::Registry;
use lifecycle::repository::Watcher;
use lifecycle::repository_control::{self, PassRequest, RepositoryControl};
use shutdown::Shutdown;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("device: {0}")]
    Device(#[from] models::KernelError),
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
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Otlp(#[from] otlp::OtlpError),
    #[error(
        "cannot bind the gRPC listener {addr} (set grpc_listen or --grpc-listen; \"\" turns it off): {source}"
    )]
    GrpcListen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot build the gRPC services' reflection from the compiled descriptors: {0}")]
    GrpcServices(String),
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
    let (_keep, reload) = mpsc::channel(1);
    run_with_reload(config, listener, shutdown, reload).await
}

/// [`run`], also taking whole new configurations (SIGHUP): model settings and the admin
/// token change at once, for loaded versions too; listeners and limits stay as they are.
pub async fn run_with_reload(
    config: Config,
    listener: TcpListener,
    shutdown: watch::Receiver<bool>,
    reload: mpsc::Receiver<Config>,
) -> Result<(), StartError> {
    let mut gateway = Gateway::start(config, listener).await?;
    gateway.load_models().await?;
    gateway.serve(Shutdown::new(shutdown), reload).await;
    gateway.stop().await;
    Ok(())
}

/// The server's response cache, where `[cache] max_bytes` sets one.
fn response_cache(config: &Config) -> Option<Arc<cache::ResponseCache>> {
    let c = &config.cache;
    c.enabled().then(|| {
        tracing::info!(max_bytes = c.capacity(), ttl_s = ?c.ttl_s, "response cache on");
        Arc::new(cache::ResponseCache::new(
            c.capacity(),
            c.ttl(),
            config.cost.device_hour_usd,
        ))
    })
}

/// A running gateway: its shared state and the tasks to stop when it does.
struct Gateway {
    config: Arc<Config>,
    state: Arc<AppState>,
    device: models::Device,
    busy: Arc<BusyMeter>,
    /// Load and unload through the HTTP API reach the repository watcher this way.
    control: Option<Arc<RepositoryControl>>,
    pass_requests: Option<mpsc::Receiver<PassRequest>>,
    watcher: Option<Watcher>,
    /// Turning it true stops the HTTP servers, the coordinator and the ledger.
    stop: watch::Sender<bool>,
    /// Stopped with `stop`, awaited in order.
    servers: Vec<JoinHandle<()>>,
    /// Aborted at the end: they only sample.
    samplers: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Validates the configuration, picks the device and starts answering: liveness yes,
    /// readiness no, while models load.
    async fn start(config: Config, listener: TcpListener) -> Result<Gateway, StartError> {
        config.validate()?;
        let config = Arc::new(config);
        let selection = Selection::select(config.device.parse::<DeviceSpec>()?)?;
        tracing::info!(device = %selection.device.label(), reason = %selection.reason, "device selected");
        let (control, pass_requests) = match config.model_repository {
            Some(_) => {
                let (control, requests) = RepositoryControl::new();
                (Some(Arc::new(control)), Some(requests))
            }
            None => (None, None),
        };
        let tls = match &config.tls {
            Some(files) => Some(Arc::new(http::tls::Tls::load(files)?)),
            None => None,
        };
        let traces = match &config.otlp_endpoint {
            Some(endpoint) => Some(Arc::new(otlp::Traces::start(
                endpoint,
                &config.otlp_service_name,
            )?)),
            None => None,
        };
        let state = Arc::new(AppState {
            registry: Arc::new(Registry::with_cache(response_cache(&config))),
            config: std::sync::RwLock::new(config.clone()),
            metrics: metrics::install(),
            ready: false.into(),
            draining: false.into(),
            repository: control.clone(),
            tls,
            traces,
        });
        let (stop, _) = watch::channel(false);
        let mut gateway = Gateway {
            config,
            state,
            device: selection.device,
            busy: Arc::new(BusyMeter::default()),
            control,
            pass_requests,
            watcher: None,
            stop,
            servers: Vec::new(),
            samplers: Vec::new(),
        };
        gateway.start_http(listener).await?;
        gateway.start_background()?;
        Ok(gateway)
    }

    fn shutdown(&self) -> Shutdown {
        Shutdown::new(self.stop.subscribe())
    }

    /// The HTTP listener, and the gRPC one sharing its connection limit; the metrics
    /// listener with a limit of its own, so that scrapes get through a flood.
    async fn start_http(&mut self, listener: TcpListener) -> Result<(), StartError> {
        let (state, permits) = (self.state.clone(), http::connection_permits(&self.state));
        let main = http::serve(
            listener,
            state.clone(),
            self.shutdown(),
            http::Api::Http,
            permits.clone(),
        );
        self.servers.push(tokio::spawn(main));
        if let Some(addr) = self.config.grpc_listen {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::GrpcListen { addr, source })?;
            let bound = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            tracing::info!(grpc_addr = %bound, "gRPC listening");
            let max_message = self.config.limits.max_body_bytes;
            let services = grpc::Services::new(state.clone(), max_message)
                .map_err(|e| StartError::GrpcServices(e.to_string()))?;
            let services = Arc::new(services);
            let grpc = http::serve(
                l,
                state.clone(),
                self.shutdown(),
                http::Api::Grpc(services),
                permits,
            );
            self.servers.push(tokio::spawn(grpc));
        }
        if let Some(addr) = self.config.metrics_listen {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::MetricsListen { addr, source })?;
            tracing::info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "metrics listening");
            let permits = http::connection_permits(&state);
            let metrics_only =
                http::serve(l, state, self.shutdown(), http::Api::MetricsOnly, permits);
            self.servers.push(tokio::spawn(metrics_only));
        }
        Ok(())
    }

    /// The cost ledger, the samplers and the trainer coordinator.
    fn start_background(&mut self) -> Result<(), StartError> {
        let lent_time = Arc::new(cost::LentTime::default());
        let ledger =
            cost::CostLedger::new(self.config.cost.device_hour_usd, self.config.cost.window());
        let registry = self.state.registry.clone();
        let run = cost::run(ledger, registry, lent_time.clone(), self.shutdown());
        self.servers.push(tokio::spawn(run));
        let label = self.device.label();
        self.samplers
            .push(tokio::spawn(sample_busy(self.busy.clone(), label)));
        self.samplers.push(tokio::spawn(sample_usage()));
        if let Some((listener, path)) = start_coordinator(&self.config)? {
            tracing::info!(socket = %path.display(), "trainer coordinator listening");
            let context = coloc::Context {
                config: self.config.coloc.clone(),
                max_duty_cycle: self.config.coloc.duty_cycle_cap(!self.device.is_cuda()),
                lent_time,
                registry: self.state.registry.clone(),
                serving_share: coloc::ServingShare::new(&self.device, self.busy.clone()),
            };
            let run = coloc::run(listener, context, self.shutdown());
            self.servers.push(tokio::spawn(run));
        }
        Ok(())
    }

    /// Single-file models (version 1 each; failing to load one is fatal at start-up), then
    /// the repository's; readiness once every model serves.
    async fn load_models(&mut self) -> Result<(), StartError> {
        for (name, entry) in &self.config.models {
            let Some(path) = &entry.path else { continue };
            let spec = LoadSpec {
                name: name.clone(),
                version: 1,
                path: path.clone(),
                settings: self.config.settings_for(name, None, None),
                repo_overrides: None,
                device: self.device.clone(),
                cpu_threads: self.config.cpu_threads,
                busy: self.busy.clone(),
                triton: None,
                onnxruntime_lib: self.config.onnxruntime_lib.clone(),
                cache: self.state.registry.cache(),
            };
            let v = loader::load(spec)
                .await
                .map_err(|reason| StartError::Model {
                    model: name.clone(),
                    path: path.display().to_string(),
                    reason,
                })?;
            self.state.registry.insert(v);
        }
        self.watcher = self
            .config
            .model_repository
            .as_ref()
            .zip(self.control.clone())
            .map(|(root, control)| {
                Watcher::new(
                    root.clone(),
                    self.config.clone(),
                    self.state.registry.clone(),
                    self.device.clone(),
                    self.busy.clone(),
                    control,
                )
            });
        self.sync_repository().await;
        tracing::info!(ready = self.state.is_ready(), "serving");
        Ok(())
    }

    /// One pass of the repository watcher, and readiness after it.
    async fn sync_repository(&mut self) {
        let mut missing = Vec::new();
        if let Some(w) = &mut self.watcher {
            missing = w.sync().await.1;
        }
        set_readiness(&self.state, &missing);
    }

    /// Until shutdown: reloads, repository polls, and the passes loads and unloads ask for.
    async fn serve(&mut self, mut shutdown: Shutdown, mut reload: mpsc::Receiver<Config>) {
        let poll = Duration::from_millis(self.config.repository_poll_ms.max(10));
        let mut reload_open = true;
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                new = reload.recv(), if reload_open => match new {
                    Some(new) => self.reload(new),
                    None => reload_open = false,
                },
                _ = tokio::time::sleep(poll), if self.watcher.is_some() => {
                    self.sync_repository().await;
                }
                Some(first) = next_pass_request(&mut self.pass_requests) => {
                    let waiting = match &mut self.pass_requests {
                        Some(r) => repository_control::with_waiting(first, r),
                        None => vec![first],
                    };
                    self.sync_repository().await;
                    for done in waiting {
                        let _ = done.send(());
                    }
                }
            }
        }
    }

    fn reload(&mut self, new: Config) {
        if let (Some(new), Some(w)) = (apply_reload(&self.state, new), &mut self.watcher) {
            w.config = new;
        }
    }

    /// Readiness 503 for `shutdown_drain_ms`, then the listeners close and in-flight
    /// requests finish; stopped trainers are continued.
    async fn stop(mut self) {
        // A load or unload asked for from now on is answered "shutting down", not left
        // waiting.
        drop(self.pass_requests.take());
        self.state.draining.store(true, Ordering::Release);
        let drain = self.config.limits.shutdown_drain();
        tracing::info!(
            drain_ms = drain.as_millis() as u64,
            "shutting down: readiness is now 503"
        );
        tokio::time::sleep(drain).await;
        tracing::info!("listener closed; finishing in-flight requests");
        let _ = self.stop.send(true);
        for server in self.servers.drain(..) {
            let _ = server.await;
        }
        for sampler in &self.samplers {
            sampler.abort();
        }
        if let Some(traces) = self.state.traces.clone() {
            // The exporter's thread sends through this runtime: flush from off it.
            let _ = tokio::task::spawn_blocking(move || traces.flush()).await;
        }
        tracing::info!("stopped");
    }
}

/// The next pass a load or unload asked for; never, without a repository.
async fn next_pass_request(
    requests: &mut Option<mpsc::Receiver<PassRequest>>,
) -> Option<PassRequest> {
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

/// Reads the TLS files again; the listeners keep the mode they started in.
fn reload_tls(state: &AppState, files: Option<&config::TlsFiles>) {
    match (&state.tls, files) {
        (Some(tls), Some(files)) => match tls.reload(files) {
            Ok(()) => tracing::info!("TLS certificate and key read again"),
            Err(e) => {
                tracing::error!(error = %e, "TLS reload failed; keeping the certificate in force")
            }
        },
        (None, None) => {}
        _ => tracing::warn!("turning TLS on or off takes a restart; the listeners keep their mode"),
    }
}

/// Validates and installs a reloaded configuration; every loaded version switches to its new
/// settings. Returns the new configuration, or `None` (logged) if it is invalid.
fn apply_reload(state: &AppState, new: Config) -> Option<Arc<Config>> {
    if let Err(e) = new.validate() {
        tracing::error!(error = %e, "config reload rejected; keeping the running configuration");
        return None;
    }
    reload_tls(state, new.tls.as_ref());
    if new.cache != state.config().cache {
        tracing::warn!(
            "changing [cache] takes a restart; the response cache keeps its size and expiry (each model's cache setting applies now)"
        );
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
