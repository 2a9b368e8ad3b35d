//! A model's settings: how its requests are queued and batched, and what its layers compute
//! in. `[defaults]`, a `[models.NAME]` entry, a repository `config.toml` and the admin API
//! layer them ([`ModelOverrides`]).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, HOUR_US, Ranges};

/// Which batching policy a model runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Meets `p99_ms` at the highest throughput the device allows.
    #[default]
    Adaptive,
    /// Triton's: `max_batch_size` rows or `max_queue_delay_us`, whichever first.
    Static,
}

/// The precision of a model's dense layers' products on the CPU.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CpuPrecision {
    /// The checkpoint's arithmetic: f32, 16-bit weights widened exactly.
    #[default]
    F32,
    /// Operands rounded to bfloat16, products summed in f32: twice the multiply-add rate,
    /// on CPUs with AVX-512 BF16; elsewhere f32, with a warning at load.
    Bf16,
    /// f32 products emulated by three bf16 products, each operand split in two bf16 parts
    /// (16 significant bits of f32's 24): about twice f32's rate on large batches, on CPUs
    /// with AMX; elsewhere f32, with a warning at load.
    Bf16x3,
}

impl std::fmt::Display for CpuPrecision {
    /// As the configuration spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CpuPrecision::F32 => "f32",
            CpuPrecision::Bf16 => "bf16",
            CpuPrecision::Bf16x3 => "bf16x3",
        })
    }
}

impl From<CpuPrecision> for models::MatmulPrecision {
    fn from(p: CpuPrecision) -> Self {
        match p {
            CpuPrecision::F32 => models::MatmulPrecision::F32,
            CpuPrecision::Bf16 => models::MatmulPrecision::Bf16,
            CpuPrecision::Bf16x3 => models::MatmulPrecision::Bf16x3,
        }
    }
}

/// How a model's requests are queued and batched.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSettings {
    pub policy: PolicyKind,
    /// The p99 latency budget the adaptive policy meets, in milliseconds.
    pub p99_ms: f64,
    /// Rows per batch at most (a text model's texts); also the most one request may carry.
    pub max_batch_size: usize,
    /// A text model's batches hold at most this many token-units (tokens, plus attention
    /// for long sequences); so does one request.
    pub max_batch_tokens: usize,
    /// The static policy releases a batch when its oldest request has waited this long.
    pub max_queue_delay_us: u64,
    /// Requests waiting at most; beyond it requests are answered 429 at once.
    pub queue_capacity: usize,
    /// Worker threads (each with its own copy of the model).
    pub replicas: usize,
    /// The priority of requests that do not set one (1 is the highest).
    pub default_priority: u32,
    /// Lowest priority accepted (highest number).
    pub priority_levels: u32,
    /// The timeout of requests that do not set one, in microseconds (0: none).
    pub default_timeout_us: u64,
    /// A text encoder trained to be cut (Matryoshka representation learning): the fewest
    /// values a request may cut its embeddings to (`dimensions`). 0: they have one size, and
    /// asking for another is refused.
    pub min_dimensions: usize,
    /// A model's dense layers' products on the CPU; applies when a version loads.
    pub cpu_precision: CpuPrecision,
    /// Answers are kept in the response cache and repeated inputs answered from it (where
    /// `[cache] max_bytes` is set).
    pub cache: bool,
}

impl Default for ModelSettings {
    fn default() -> Self {
        ModelSettings {
            policy: PolicyKind::Adaptive,
            p99_ms: 50.0,
            max_batch_size: 64,
            max_batch_tokens: 16_384,
            max_queue_delay_us: 1000,
            queue_capacity: 1024,
            replicas: 1,
            default_priority: 1,
            priority_levels: 4,
            default_timeout_us: 0,
            min_dimensions: 0,
            cpu_precision: CpuPrecision::F32,
            cache: false,
        }
    }
}

/// Per-model entries of the config file, and `DIR/<model>/config.toml` in a repository.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOverrides {
    /// A single safetensors file served as version 1 (instead of a repository entry).
    pub path: Option<PathBuf>,
    pub policy: Option<PolicyKind>,
    pub p99_ms: Option<f64>,
    pub max_batch_size: Option<usize>,
    pub max_batch_tokens: Option<usize>,
    pub max_queue_delay_us: Option<u64>,
    pub queue_capacity: Option<usize>,
    pub replicas: Option<usize>,
    pub default_priority: Option<u32>,
    pub priority_levels: Option<u32>,
    pub default_timeout_us: Option<u64>,
    pub min_dimensions: Option<usize>,
    pub cpu_precision: Option<CpuPrecision>,
    pub cache: Option<bool>,
}

impl ModelOverrides {
    /// `self` where set, else `under`.
    pub fn layered_on(&self, under: &ModelOverrides) -> ModelOverrides {
        ModelOverrides {
            path: self.path.clone().or_else(|| under.path.clone()),
            policy: self.policy.or(under.policy),
            p99_ms: self.p99_ms.or(under.p99_ms),
            max_batch_size: self.max_batch_size.or(under.max_batch_size),
            max_batch_tokens: self.max_batch_tokens.or(under.max_batch_tokens),
            max_queue_delay_us: self.max_queue_delay_us.or(under.max_queue_delay_us),
            queue_capacity: self.queue_capacity.or(under.queue_capacity),
            replicas: self.replicas.or(under.replicas),
            default_priority: self.default_priority.or(under.default_priority),
            priority_levels: self.priority_levels.or(under.priority_levels),
            default_timeout_us: self.default_timeout_us.or(under.default_timeout_us),
            min_dimensions: self.min_dimensions.or(under.min_dimensions),
            cpu_precision: self.cpu_precision.or(under.cpu_precision),
            cache: self.cache.or(under.cache),
        }
    }

    pub fn apply(&self, base: &ModelSettings) -> ModelSettings {
        ModelSettings {
            policy: self.policy.unwrap_or(base.policy),
            p99_ms: self.p99_ms.unwrap_or(base.p99_ms),
            max_batch_size: self.max_batch_size.unwrap_or(base.max_batch_size),
            max_batch_tokens: self.max_batch_tokens.unwrap_or(base.max_batch_tokens),
            max_queue_delay_us: self.max_queue_delay_us.unwrap_or(base.max_queue_delay_us),
            queue_capacity: self.queue_capacity.unwrap_or(base.queue_capacity),
            replicas: self.replicas.unwrap_or(base.replicas),
            default_priority: self.default_priority.unwrap_or(base.default_priority),
            priority_levels: self.priority_levels.unwrap_or(base.priority_levels),
            default_timeout_us: self.default_timeout_us.unwrap_or(base.default_timeout_us),
            min_dimensions: self.min_dimensions.unwrap_or(base.min_dimensions),
            cpu_precision: self.cpu_precision.unwrap_or(base.cpu_precision),
            cache: self.cache.unwrap_or(base.cache),
        }
    }
}

impl ModelSettings {
    /// The p99 budget: the adaptive policy meets it, and the trainer coordinator holds
    /// serving to it whatever the policy.
    pub fn budget(&self) -> Duration {
        Duration::from_secs_f64(self.p99_ms / 1000.0)
    }

    /// The timeout of requests that set none, if there is one.
    pub fn default_timeout(&self) -> Option<Duration> {
        (self.default_timeout_us > 0).then(|| Duration::from_micros(self.default_timeout_us))
    }

    /// The largest batch a model of `input` runs, in batch rows (rows, or a text model's
    /// token-units) and in output rows (rows, or texts).
    pub fn batch_limits(&self, input: &models::InputKind) -> (usize, usize) {
        match input {
            // A model without a batch dimension runs each request alone.
            models::InputKind::Tensors(s) if !s.batched => (1, 1),
            models::InputKind::Dense { .. } | models::InputKind::Tensors(_) => {
                (self.max_batch_size, self.max_batch_size)
            }
            models::InputKind::Text(_) => (self.max_batch_tokens, self.max_batch_size),
        }
    }

    /// Checks ranges; `at` names the section for the message. Every number has an upper
    /// bound too: the same settings arrive from the admin API and from files, and a value
    /// no one means (a queue of 2^62 requests, a delay of u64::MAX) must be refused there,
    /// not crash or stall the server later.
    pub fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let r = Ranges(at);
        r.int(
            "max_batch_size",
            self.max_batch_size as u64,
            1,
            MAX_BATCH_SIZE,
        )?;
        r.int(
            "max_batch_tokens",
            self.max_batch_tokens as u64,
            1,
            MAX_BATCH_TOKENS,
        )?;
        r.float("p99_ms", self.p99_ms, MIN_P99_MS, MAX_P99_MS)?;
        r.int(
            "max_queue_delay_us",
            self.max_queue_delay_us,
            0,
            MAX_QUEUE_DELAY_US,
        )?;
        r.int(
            "queue_capacity",
            self.queue_capacity as u64,
            1,
            MAX_QUEUE_CAPACITY,
        )?;
        r.int("replicas", self.replicas as u64, 1, MAX_REPLICAS)?;
        r.int(
            "priority_levels",
            self.priority_levels as u64,
            1,
            MAX_PRIORITY_LEVELS,
        )?;
        r.int(
            "default_priority",
            self.default_priority as u64,
            1,
            self.priority_levels as u64,
        )?;
        r.int("default_timeout_us", self.default_timeout_us, 0, HOUR_US)?;
        r.int(
            "min_dimensions",
            self.min_dimensions as u64,
            0,
            MAX_MIN_DIMENSIONS,
        )
    }
}

/// The largest accepted model settings (see [`ModelSettings::validate`]).
pub const MAX_BATCH_SIZE: u64 = 65_536;
pub const MAX_BATCH_TOKENS: u64 = 1_048_576;
/// One microsecond: tighter than anything a server can meet, which is what the trainer
/// tests use to squeeze serving.
pub const MIN_P99_MS: f64 = 0.001;
pub const MAX_P99_MS: f64 = 3_600_000.0;
pub const MAX_QUEUE_DELAY_US: u64 = 10_000_000;
pub const MAX_QUEUE_CAPACITY: u64 = 1_000_000;
pub const MAX_REPLICAS: u64 = 64;
pub const MAX_PRIORITY_LEVELS: u64 = 1_000;
/// Wider than any text encoder's embeddings.
pub const MAX_MIN_DIMENSIONS: u64 = 65_536;
