//! Command-line interface. Flags fall back to `TANDEM_*` environment variables.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod edge;
pub use edge::{EdgeArgs, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "tandem",
    version,
    about = "An inference gateway that meets p99 budgets and lends idle device capacity to training"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serves models over the Open Inference Protocol v2 (HTTP/REST).
    Serve(ServeArgs),
    /// Trains an MLP classifier beside the gateway, obeying its directives, and writes
    /// checkpoints into a model repository as new versions.
    Train(TrainArgs),
}

#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// A TOML config file (default: the built-in config/tandem.toml, which serves the
    /// bundled example model when no model is given on the command line).
    #[arg(long, env = "TANDEM_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to listen on; port 0 picks a free port (the bound address is logged).
    #[arg(long, env = "TANDEM_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,

    /// Serve one model as NAME: an MLP's safetensors file, or a text encoder's folder
    /// (config.json, tokenizer.json, model.safetensors). Repeatable.
    #[arg(long = "model", value_name = "NAME=PATH", value_parser = parse_model)]
    pub models: Vec<(String, PathBuf)>,

    /// API keys, TLS, CORS, traces and the log's form.
    #[command(flatten)]
    pub edge: EdgeArgs,

    /// A model repository: DIR/<model>/<version>/model.safetensors.
    #[arg(long, env = "TANDEM_MODEL_REPOSITORY")]
    pub model_repository: Option<PathBuf>,

    /// auto, cpu, cuda or cuda:N.
    #[arg(long, env = "TANDEM_DEVICE")]
    pub device: Option<String>,

    /// The Unix socket co-located trainers connect to (default: in the user's runtime dir).
    #[arg(long, env = "TANDEM_COLOC_SOCKET")]
    pub coloc_socket: Option<PathBuf>,

    /// Serve /metrics on this address too.
    #[arg(long, env = "TANDEM_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// Serve the gRPC API on this address ("" turns it off; default 127.0.0.1:8001).
    #[arg(long, env = "TANDEM_GRPC_LISTEN", value_parser = grpc_listen)]
    pub grpc_listen: Option<GrpcListen>,

    /// Default p99 latency budget for every model, in milliseconds (adaptive policy).
    #[arg(long, env = "TANDEM_P99_MS")]
    pub p99_ms: Option<f64>,

    /// Default batching policy for every model.
    #[arg(long, value_enum)]
    pub policy: Option<PolicyArg>,

    /// Default max batch size (rows) for every model.
    #[arg(long)]
    pub max_batch_size: Option<usize>,

    /// Default max queue delay of the static batching policy, in microseconds.
    #[arg(long)]
    pub max_queue_delay_us: Option<u64>,

    /// Default precision of models' dense layers on the CPU: `bf16` doubles their
    /// multiply-add rate on CPUs with AVX-512 BF16; `bf16x3` keeps 16 of f32's 24 bits at
    /// about twice its rate on CPUs with AMX (default: f32).
    #[arg(long, value_enum, env = "TANDEM_CPU_PRECISION")]
    pub cpu_precision: Option<CpuPrecisionArg>,

    /// CPU threads one forward pass may use (default: every core).
    #[arg(long, env = "TANDEM_CPU_THREADS")]
    pub cpu_threads: Option<usize>,

    /// Tokio worker threads for HTTP (default: one per core).
    #[arg(long, env = "TANDEM_HTTP_THREADS")]
    pub http_threads: Option<usize>,

    /// ONNX Runtime's shared library, for ONNX models (default: ORT_DYLIB_PATH;
    /// scripts/setup-python.sh installs one into .venv).
    #[arg(long, env = "TANDEM_ONNXRUNTIME_LIB")]
    pub onnxruntime_lib: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuPrecisionArg {
    F32,
    Bf16,
    #[value(name = "bf16x3")]
    Bf16x3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    Adaptive,
    Static,
}

/// `--grpc-listen`: an address, or none for `""`.
#[derive(Clone, Debug)]
pub struct GrpcListen(pub Option<std::net::SocketAddr>);

fn grpc_listen(s: &str) -> Result<GrpcListen, String> {
    gateway::config::listen::optional::parse(s).map(GrpcListen)
}

fn parse_model(s: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, got {s:?}"))?;
    if name.is_empty() || name.contains('/') {
        return Err(format!("invalid model name {name:?}"));
    }
    Ok((name.to_string(), PathBuf::from(path)))
}

#[derive(Clone, Debug, Args)]
pub struct TrainArgs {
    /// `digits` (the bundled UCI hand-written digits) or `synthetic` (see --synthetic-dims).
    #[arg(long, default_value = "digits")]
    pub data: String,

    /// Widths of the synthetic task, input to classes.
    #[arg(long, value_delimiter = ',', default_value = "784,1024,1024,10")]
    pub synthetic_dims: Vec<usize>,

    /// Hidden layer widths for digits.
    #[arg(long, value_delimiter = ',', default_value = "128,64")]
    pub hidden: Vec<usize>,

    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto", env = "TANDEM_DEVICE")]
    pub device: String,

    #[arg(long, default_value_t = 64)]
    pub batch: usize,

    #[arg(long, default_value_t = 1e-3)]
    pub lr: f32,

    /// Stop after this many steps.
    #[arg(long)]
    pub steps: Option<u64>,

    /// Stop after this many seconds.
    #[arg(long)]
    pub seconds: Option<f64>,

    /// Stop once held-out accuracy reaches this (digits).
    #[arg(long)]
    pub target_accuracy: Option<f64>,

    /// Threads (streams) when unconstrained (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,

    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Write checkpoints as new versions of --model-name in this model repository.
    #[arg(long)]
    pub repository: Option<PathBuf>,

    #[arg(long, default_value = "digits")]
    pub model_name: String,

    /// Seconds between checkpoints.
    #[arg(long, default_value_t = 5.0)]
    pub checkpoint_every: f64,

    /// Keep the newest this many of the versions this run writes; older ones are deleted
    /// (0: keep all). Versions that were there before are never touched.
    #[arg(long, default_value_t = 3)]
    pub keep_versions: usize,

    /// The gateway's co-location socket; without it the trainer runs on its own.
    #[arg(long, env = "TANDEM_COLOC_SOCKET")]
    pub coloc_socket: Option<PathBuf>,

    /// Connect to no gateway and ignore directives, at normal CPU priority: the
    /// "unmanaged trainer" of the benchmarks.
    #[arg(long)]
    pub unmanaged: bool,

    /// Name shown in the gateway's logs.
    #[arg(long, default_value = "tandem-train")]
    pub name: String,

    /// Write a JSON summary here at the end.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
