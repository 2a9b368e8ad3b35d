//! The gateway's one typed configuration. It comes from a TOML file (the embedded
//! `config/tandem.toml` by default), then command-line flags and `TANDEM_*` variables
//! override it; defaults live on the types. `run` takes it whole.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The configuration `tandem serve` runs with when given no arguments.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/tandem.toml");

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address of the HTTP API (and of `/metrics`).
    pub listen: SocketAddr,
    /// A second address that serves only `/metrics`, if set.
    pub metrics_listen: Option<SocketAddr>,
    /// Address of the gRPC API (`inference.GRPCInferenceService`); `""` turns it off.
    #[serde(with = "listen::optional")]
    pub grpc_listen: Option<SocketAddr>,
    /// `auto`, `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// A Triton-style repository: `DIR/<model>/<version>/model.safetensors`.
    pub model_repository: Option<PathBuf>,
    /// How often the repository is scanned for new versions.
    pub repository_poll_ms: u64,
    /// How many of a model's newest versions stay loaded.
    pub keep_versions: usize,
    /// CPU threads one forward pass may use (0: every core). On a small machine, leaving
    /// cores to HTTP can serve more than computing on all of them.
    pub cpu_threads: usize,
    /// ONNX Runtime's shared library (`libonnxruntime.so`); unset, `ORT_DYLIB_PATH` names it.
    /// Without either, ONNX models are not ready and every other model serves.
    pub onnxruntime_lib: Option<PathBuf>,
    /// Settings every model starts from.
    pub defaults: ModelSettings,
    /// Per-model entries: a single-file model (`path`) and/or overrides of `defaults`.
    pub models: BTreeMap<String, ModelOverrides>,
    pub limits: Limits,
    pub admin: AdminConfig,
    pub coloc: ColocConfig,
    pub cost: CostConfig,
    /// The response cache (off unless `max_bytes` is set; each model opts in).
    pub cache: CacheConfig,
    /// Keys every inference route requires as `Authorization: Bearer KEY` (none: open),
    /// with those of `api_keys_file`, one a line, added at start and on SIGHUP.
    pub api_keys: Vec<ApiKey>,
    pub api_keys_file: Option<PathBuf>,
    /// Whether `/metrics` requires a key too (health and readiness never do).
    pub auth_metrics: bool,
    /// Origins a browser may call tandem from (`*`: any); none: no CORS headers.
    pub cors_allow_origins: Vec<String>,
    /// One log line per request (target `access`, level info).
    pub access_log: bool,
    /// TLS on every listener (none: plain text).
    pub tls: Option<TlsFiles>,
    /// An OpenTelemetry collector's base URL (`http://host:4318`): each request's spans
    /// are exported to it over OTLP/HTTP. None: no traces.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` the spans carry.
    pub otlp_service_name: String,
}

/// A certificate chain and its key, PEM; with `client_ca`, clients must present a
/// certificate it signed.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

/// The trainer coordinator (co-located training).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ColocConfig {
    pub enabled: bool,
    /// The Unix socket trainers connect to (default: `$XDG_RUNTIME_DIR/tandem/coloc.sock`,
    /// else `/tmp/tandem-<uid>/coloc.sock`).
    pub socket: Option<PathBuf>,
    /// A pause must be acknowledged within this long, or the trainer is stopped (SIGSTOP).
    pub ack_within_ms: u64,
    /// Trainers report at least this often.
    pub heartbeat_ms: u64,
    /// How often serving's headroom is read and directives revised.
    pub tick_ms: u64,
    pub max_trainers: usize,
    /// The most of its time a trainer may compute, however much serving leaves idle, in
    /// (0, 1]; by default `CPU_MAX_DUTY_CYCLE` on a CPU device and 1 on a GPU. Below 1 the
    /// trainer pauses briefly after every step: a core kept busy, even by the
    /// lowest-priority thread, delays serving's wake-ups (on a virtual machine each one
    /// becomes an inter-processor interrupt instead of a poll; docs/performance.md, "What
    /// a busy neighbour costs serving"), and only idle time lowers that.
    pub max_duty_cycle: Option<f64>,
}

/// The default duty-cycle cap of trainers that share the CPU with serving: the highest that
/// kept serving's p99 at that of serving alone at half load on two cores, where an uncapped
/// trainer raised it (docs/performance.md, "Co-located training on the CPU").
pub const CPU_MAX_DUTY_CYCLE: f64 = 0.9;

impl ColocConfig {
    /// The duty-cycle cap in force for trainers of a device.
    pub fn duty_cycle_cap(&self, cpu: bool) -> f64 {
        self.max_duty_cycle
            .unwrap_or(if cpu { CPU_MAX_DUTY_CYCLE } else { 1.0 })
    }
}

impl Default for ColocConfig {
    fn default() -> Self {
        ColocConfig {
            enabled: true,
            socket: None,
            ack_within_ms: 1000,
            heartbeat_ms: 500,
            tick_ms: 100,
            max_trainers: 4,
            max_duty_cycle: None,
        }
    }
}

/// What the device costs, for cost-per-inference figures (`crate::cost`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CostConfig {
    /// What the device costs an hour; 0 turns the ledger off.
    pub device_hour_usd: f64,
    /// `tandem_cost_per_inference_usd` covers this many seconds.
    pub window_s: u64,
}

impl Default for CostConfig {
    fn default() -> Self {
        CostConfig {
            device_hour_usd: 0.0,
            window_s: 60,
        }
    }
}

impl CostConfig {
    pub fn window(&self) -> Duration {
        Duration::from_secs(self.window_s)
    }
}

/// Who may use `/admin/`: loopback clients always; others only with this bearer token.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    pub token: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8000)),
            metrics_listen: None,
            grpc_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8001))),
            device: "auto".into(),
            model_repository: None,
            repository_poll_ms: 1000,
            keep_versions: 2,
            cpu_threads: 0,
            onnxruntime_lib: None,
            defaults: ModelSettings::default(),
            models: BTreeMap::new(),
            limits: Limits::default(),
            admin: AdminConfig::default(),
            coloc: ColocConfig::default(),
            cost: CostConfig::default(),
            cache: CacheConfig::default(),
            api_keys: Vec::new(),
            api_keys_file: None,
            auth_metrics: false,
            cors_allow_origins: Vec::new(),
            access_log: false,
            tls: None,
            otlp_endpoint: None,
            otlp_service_name: "tandem".into(),
        }
    }
}

const HOUR_US: u64 = 3_600_000_000;
const HOUR_MS: u64 = 3_600_000;

/// Range checks whose messages name `section.key`, the range and the value.
struct Ranges<'a>(&'a str);

impl Ranges<'_> {
    fn int(&self, key: &str, value: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
        if (lo..=hi).contains(&value) {
            return Ok(());
        }
        Err(ConfigError::Invalid(format!(
            "{}{key} must be {lo}..={hi}, got {value}",
            self.prefix()
        )))
    }

    fn float(&self, key: &str, value: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
        if value.is_finite() && (lo..=hi).contains(&value) {
            return Ok(());
        }
        Err(ConfigError::Invalid(format!(
            "{}{key} must be a number in {lo}..={hi}, got {value}",
            self.prefix()
        )))
    }

    fn prefix(&self) -> String {
        if self.0.is_empty() {
            String::new()
        } else {
            format!("{}.", self.0)
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Larger request bodies are answered 413.
    pub max_body_bytes: usize,
    /// Open connections at most; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Requests in flight at once on one HTTP/2 connection.
    pub max_concurrent_streams: u32,
    /// A client must send its request headers within this time.
    pub header_read_timeout_ms: u64,
    /// And then its whole body within this time (408 and the connection closed otherwise).
    pub body_read_timeout_ms: u64,
    /// A response that makes no progress for this long (the client reads none of it)
    /// closes the connection.
    pub response_write_timeout_ms: u64,
    /// A request must be answered within this time (504 otherwise).
    pub request_timeout_ms: u64,
    /// After SIGTERM, readiness answers 503 but requests are still accepted for this long,
    /// so that load balancers can stop sending before the listener closes.
    pub shutdown_drain_ms: u64,
    /// Then in-flight requests get this long to finish.
    pub shutdown_grace_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 16 << 20,
            max_connections: 1024,
            max_concurrent_streams: 100,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            response_write_timeout_ms: 30_000,
            request_timeout_ms: 60_000,
            shutdown_drain_ms: 0,
            shutdown_grace_ms: 30_000,
        }
    }
}

impl Limits {
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }
    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }
    pub fn response_write_timeout(&self) -> Duration {
        Duration::from_millis(self.response_write_timeout_ms)
    }
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
    pub fn shutdown_drain(&self) -> Duration {
        Duration::from_millis(self.shutdown_drain_ms)
    }
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses TOML; relative paths in it are taken relative to `base_dir`.
    pub fn from_toml(text: &str, origin: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        config.resolve_paths(base_dir);
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::from_toml(&text, &path.display().to_string(), base)
    }

    fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(p) = &mut self.model_repository {
            resolve(p);
        }
        if let Some(p) = &mut self.coloc.socket {
            resolve(p);
        }
        if let Some(p) = &mut self.api_keys_file {
            resolve(p);
        }
        if let Some(tls) = &mut self.tls {
            resolve(&mut tls.cert);
            resolve(&mut tls.key);
            if let Some(p) = &mut tls.client_ca {
                resolve(p);
            }
        }
        for m in self.models.values_mut() {
            if let Some(p) = &mut m.path {
                resolve(p);
            }
        }
    }

    /// The settings a model runs with: defaults, then its entry in this file, then the
    /// repository's `config.toml` for it, then changes made through the admin API.
    pub fn settings_for(
        &self,
        model: &str,
        repo_overrides: Option<&ModelOverrides>,
        runtime: Option<&ModelOverrides>,
    ) -> ModelSettings {
        let mut s = self.defaults.clone();
        for o in [self.models.get(model), repo_overrides, runtime]
            .into_iter()
            .flatten()
        {
            s = o.apply(&s);
        }
        s
    }

    /// Adds the keys of `api_keys_file`, read now (at start, and on SIGHUP).
    pub fn read_api_keys_file(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = &self.api_keys_file {
            let keys = api_keys::read_file(path)?;
            self.api_keys.extend(keys);
        }
        Ok(())
    }

    /// Checks what serde cannot: every number within its range, something to serve.
    pub fn validate(&self) -> Result<(), ConfigError> {
        cors::validate(&self.cors_allow_origins)?;
        self.defaults.validate("defaults")?;
        for (name, o) in &self.models {
            o.apply(&self.defaults)
                .validate(&format!("models.{name}"))?;
        }
        if self.model_repository.is_none() && self.models.values().all(|m| m.path.is_none()) {
            return Err(ConfigError::Invalid(
                "nothing to serve: set model_repository or a [models.NAME] path (or --model NAME=PATH)"
                    .into(),
            ));
        }
        let top = Ranges("");
        top.int("keep_versions", self.keep_versions as u64, 1, 100)?;
        top.int("repository_poll_ms", self.repository_poll_ms, 0, HOUR_MS)?;
        top.int("cpu_threads", self.cpu_threads as u64, 0, 1024)?;
        self.limits.validate()?;
        self.coloc.validate()?;
        self.cache.validate(cache::memory_limit())?;
        let cost = Ranges("cost");
        cost.float("device_hour_usd", self.cost.device_hour_usd, 0.0, 1e6)?;
        cost.int("window_s", self.cost.window_s, 1, 3600)
    }
}

impl Limits {
    fn validate(&self) -> Result<(), ConfigError> {
        let r = Ranges("limits");
        r.int("max_body_bytes", self.max_body_bytes as u64, 1024, 1 << 30)?;
        r.int("max_connections", self.max_connections as u64, 1, 100_000)?;
        r.int(
            "max_concurrent_streams",
            u64::from(self.max_concurrent_streams),
            1,
            10_000,
        )?;
        r.int(
            "header_read_timeout_ms",
            self.header_read_timeout_ms,
            1,
            HOUR_MS,
        )?;
        r.int(
            "body_read_timeout_ms",
            self.body_read_timeout_ms,
            1,
            HOUR_MS,
        )?;
        r.int(
            "response_write_timeout_ms",
            self.response_write_timeout_ms,
            1,
            HOUR_MS,
        )?;
        r.int("request_timeout_ms", self.request_timeout_ms, 1, HOUR_MS)?;
        r.int("shutdown_drain_ms", self.shutdown_drain_ms, 0, HOUR_MS)?;
        r.int("shutdown_grace_ms", self.shutdown_grace_ms, 0, HOUR_MS)
    }
}

impl ColocConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let r = Ranges("coloc");
        r.int("ack_within_ms", self.ack_within_ms, 1, 60_000)?;
        r.int("heartbeat_ms", self.heartbeat_ms, 1, 60_000)?;
        r.int("tick_ms", self.tick_ms, 10, 10_000)?;
        r.int("max_trainers", self.max_trainers as u64, 1, 64)?;
        match self.max_duty_cycle {
            Some(d) if !(d > 0.0 && d <= 1.0) => Err(ConfigError::Invalid(format!(
                "coloc.max_duty_cycle must be in (0, 1], got {d}"
            ))),
            _ => Ok(()),
        }
    }
}

mod api_keys;
mod cache;
mod cors;
pub mod listen;
mod model;
#[cfg(test)]
mod tests;

pub use api_keys::ApiKey;
pub use cache::CacheConfig;

pub use model::{
    CpuPrecision, MAX_BATCH_SIZE, MAX_BATCH_TOKENS, MAX_MIN_DIMENSIONS, MAX_P99_MS,
    MAX_PRIORITY_LEVELS, MAX_QUEUE_CAPACITY, MAX_QUEUE_DELAY_US, MAX_REPLICAS, MIN_P99_MS,
    ModelOverrides, ModelSettings, PolicyKind,
};
