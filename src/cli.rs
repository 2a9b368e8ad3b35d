//! Command-line interface. Flags fall back to `TANDEM_*` environment variables.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// Benchmarks: in-process forward passes, or load against a running server.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Times `forward` of a model in this process, per batch size.
    Forward(ForwardArgs),
}

#[derive(Debug, Args)]
pub struct ForwardArgs {
    /// A safetensors MLP (`layers.{i}.weight` [out, in], `layers.{i}.bias` [out]).
    #[arg(long)]
    pub model: PathBuf,

    /// Batch sizes to time, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128,512")]
    pub batch: Vec<usize>,

    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto", env = "TANDEM_DEVICE")]
    pub device: String,

    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Seconds of timed runs per batch size, after a warm-up.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,

    /// Also write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
