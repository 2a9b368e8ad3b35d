//! `tandem-bench`'s command line.

use std::path::PathBuf;

use clap::{Args, Parser};

#[derive(Debug, Parser)]
#[command(
    name = "tandem-bench",
    version,
    about = "Benchmarks of tandem: in-process forward passes, and load against a server it starts or one running"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Times `forward` of a model in this process, per batch size.
    Forward(ForwardArgs),
    /// Open-loop HTTP load against a running server: send times fixed in advance.
    Load(LoadArgs),
    /// The highest offered rate whose p99 stays within the budget (binary search over
    /// `bench load` runs).
    Sweep(SweepArgs),
    /// Serving alone, beside an unmanaged trainer, and beside a managed one: starts the
    /// server and the trainers itself and compares latency and training throughput.
    Coloc(ColocArgs),
    /// A soak under faults: about 70% of the model's capacity for --duration while new
    /// versions are hot-swapped in, a co-located trainer is killed and restarted, the config
    /// is reloaded and slow and garbage clients connect. Fails on any 5xx, lost request,
    /// p99 over the budget, or growth of the server's resources after warm-up
    /// (docs/soak.md).
    Soak(SoakArgs),
}

#[derive(Clone, Debug, Args)]
pub struct SoakArgs {
    /// Seconds of load under faults, after the capacity is measured.
    #[arg(long, default_value_t = 1800.0)]
    pub duration: f64,

    /// The share of the run during which the server's resources may still grow; the rest
    /// must stay within the tolerances of their value at its end.
    #[arg(long, default_value_t = 0.2)]
    pub warmup_share: f64,

    /// Target this running server instead of starting one. Faults that need the process,
    /// its repository or its trainer socket run only with --pid, --model-repository and
    /// --coloc-socket.
    #[arg(long)]
    pub url: Option<String>,

    /// With --url: the server's process id, for SIGHUP reloads (of its own config file,
    /// unchanged) and its /proc figures.
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,

    /// With --url: the server's model repository, where new versions of --model go.
    #[arg(long, requires = "url")]
    pub model_repository: Option<PathBuf>,

    /// With --url: the server's co-location socket, for the trainer.
    #[arg(long, requires = "url")]
    pub coloc_socket: Option<PathBuf>,

    /// The model under load (a folder of the repository).
    #[arg(long, default_value = "soak")]
    pub model: String,

    /// Layer widths of the MLP versions written, input first.
    #[arg(long, value_delimiter = ',', default_value = "256,512,512,10")]
    pub dims: Vec<usize>,

    /// The model's p99 budget in ms: the server's setting and the load's.
    #[arg(long, default_value_t = 50.0)]
    pub budget_ms: f64,

    /// The most the p99 of the 200s may be, in ms (default: the budget).
    #[arg(long)]
    pub p99_limit_ms: Option<f64>,

    /// Requests per second to offer, instead of a share of the measured capacity.
    #[arg(long)]
    pub rate: Option<f64>,

    /// The share of the measured capacity offered.
    #[arg(long, default_value_t = 0.7)]
    pub load_fraction: f64,

    /// The largest share of the load the server may refuse with 429.
    #[arg(long, default_value_t = 0.01)]
    pub max_refused_share: f64,

    /// The capacity search's first rate (req/s).
    #[arg(long, default_value_t = 250.0)]
    pub min_rate: f64,

    /// The capacity search's highest rate (req/s).
    #[arg(long, default_value_t = 64_000.0)]
    pub max_rate: f64,

    /// Seconds between new versions of the model (0: none).
    #[arg(long, default_value_t = 3.0)]
    pub swap_every: f64,

    /// Versions kept on disk; older ones are deleted, and the server unloads them.
    #[arg(long, default_value_t = 3)]
    pub keep_versions: usize,

    /// Every Nth version written is a truncated file the server must refuse (0: none).
    #[arg(long, default_value_t = 10)]
    pub corrupt_every: u64,

    /// Seconds between SIGKILLs of the co-located trainer, restarted at once (0: no trainer).
    #[arg(long, default_value_t = 20.0)]
    pub trainer_kill_every: f64,

    /// Seconds between SIGHUP reloads of the config file (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub sighup_every: f64,

    /// Connections at once that trickle their request a byte at a time.
    #[arg(long, default_value_t = 16)]
    pub slow_clients: usize,

    /// Garbage requests per second: random bytes, malformed JSON, wrong shapes.
    #[arg(long, default_value_t = 10.0)]
    pub garbage_rate: f64,

    /// Seconds of load per run of the load generator; runs follow each other.
    #[arg(long, default_value_t = 10.0)]
    pub segment: f64,

    /// The load generator's keep-alive connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,

    /// A request unanswered this many seconds after it was sent counts as lost.
    #[arg(long, default_value_t = 10.0)]
    pub request_timeout_s: f64,

    /// Where the server and the trainer run: cpu, or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,

    /// Seed of the load, the versions' weights and the garbage.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Clone, Debug, Args)]
pub struct ColocArgs {
    /// The model repository to serve (the load goes to --model in it).
    #[arg(long)]
    pub model_repository: PathBuf,

    /// Requests per second: half the model's goodput is the usual choice.
    #[arg(long)]
    pub rate: f64,

    #[arg(long)]
    pub model: String,

    /// For a text model: a file of texts, one a line, sent one a request in turn (see
    /// `tandem-bench load --texts`).
    #[arg(long)]
    pub texts: Option<PathBuf>,

    #[arg(long, value_enum, default_value_t = LoadShape::Constant)]
    pub shape: LoadShape,

    /// Seconds of load per scenario and round.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,

    /// Rounds of the three scenarios; the report gives medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,

    /// The p99 budget of the model (ms).
    #[arg(long, default_value_t = 50.0)]
    pub budget_ms: f64,

    /// Widths of the trainer's synthetic task.
    #[arg(long, value_delimiter = ',', default_value = "784,1024,1024,10")]
    pub train_dims: Vec<usize>,

    /// The trainer's batch (rows per step).
    #[arg(long, default_value_t = 64)]
    pub train_batch: usize,

    #[arg(long, default_value_t = 128)]
    pub connections: usize,

    /// Run the load generator on the first core and the server and trainers on the rest
    /// (by default all share every core).
    #[arg(long)]
    pub pin: bool,

    /// The server's `[coloc] max_duty_cycle`: the most of its time the managed trainer
    /// may compute (default: the server's default for its device).
    #[arg(long)]
    pub max_duty_cycle: Option<f64>,

    /// Where the server and the trainers run: cpu, or cuda:N (both on the same GPU; the
    /// idle share is then the GPU time serving leaves, from `tandem_device_busy_ratio`).
    #[arg(long, default_value = "cpu")]
    pub device: String,

    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Clone, Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub load: LoadArgs,

    /// Lowest rate tried (must pass).
    #[arg(long, default_value_t = 100.0)]
    pub min_rate: f64,

    /// Highest rate tried.
    #[arg(long, default_value_t = 50_000.0)]
    pub max_rate: f64,

    /// Stop when the bracket is this narrow, relative to its lower end.
    #[arg(long, default_value_t = 0.05)]
    pub precision: f64,

    /// Seconds of idle between runs, so one run's backlog does not leak into the next.
    #[arg(long, default_value_t = 2.0)]
    pub cooldown: f64,

    /// A run passes only if at least this share of the requests sent was answered 200
    /// within the budget: 0.99 makes the budget the p99 of every request, a refusal (429)
    /// counted as a miss. 0: the p99 of the 200s alone, refusals allowed.
    #[arg(long, default_value_t = 0.0)]
    pub min_within_budget: f64,

    /// Run a failing rate again this many times; it fails only if every run fails. On a
    /// shared machine one stall of the host can fail a rate far below saturation, and the
    /// bisection would never come back above it.
    #[arg(long, default_value_t = 1)]
    pub confirm_failures: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadShape {
    /// Evenly spaced requests.
    Constant,
    /// Exponential gaps (a Poisson process) at the same mean rate.
    Poisson,
    /// Poisson at half the rate for the first half, 1.5x for the second.
    Step,
    /// Poisson with a burst every second: 2.5x the rate for 200 ms, 0.625x otherwise.
    Burst,
}

/// The API a text request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `POST /v2/models/M/infer`, a BYTES input `text`.
    V2,
    /// `POST /v1/embeddings`.
    Openai,
}

/// A number above 0.
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a share in [0, 1)")),
    }
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a number above 0, got {s}")),
    }
}

#[derive(Clone, Debug, Args)]
pub struct LoadArgs {
    /// The server, e.g. http://127.0.0.1:8000.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,

    /// The model to call.
    #[arg(long)]
    pub model: String,

    /// Requests per second offered.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,

    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,

    #[arg(long, value_enum, default_value_t = LoadShape::Constant)]
    pub shape: LoadShape,

    /// Rows per request.
    #[arg(long, default_value_t = 1)]
    pub rows: usize,

    /// Send texts to a text model instead of random FP32 rows: `--rows` of this file's
    /// lines a request, each of the `--bodies` bodies the next lines (body i, of one row,
    /// is line i). A `.json` file gives its `texts` array instead
    /// (`benches/compare_text_peers.py`'s corpus).
    #[arg(long)]
    pub texts: Option<PathBuf>,

    /// How texts are sent: v2 infer with a BYTES input, or OpenAI's `POST /v1/embeddings`
    /// (`{"model", "input"}`, `input` a list with `--rows` above 1). Only with `--texts`.
    #[arg(long, value_enum, default_value_t = Api::V2)]
    pub api: Api,

    /// Send tensors in Triton's binary extension instead of JSON.
    #[arg(long)]
    pub binary: bool,

    /// Send each request over gRPC instead, to the server's gRPC listener at this
    /// HOST:PORT (`tandem serve --grpc-listen`): `ModelInfer` of
    /// `inference.GRPCInferenceService` with the rows in `raw_input_contents`, one call at a
    /// time on each of `--connections` HTTP/2 connections. `--url` still gives the model's
    /// metadata and `/metrics`. A gRPC status counts as the HTTP status it stands for
    /// (RESOURCE_EXHAUSTED as 429, DEADLINE_EXCEEDED as 504).
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["binary", "texts"])]
    pub grpc: Option<String>,

    /// A latency budget: goodput counts 200s answered within it.
    #[arg(long, default_value_t = 50.0)]
    pub budget_ms: f64,

    /// Keep-alive connections to the server; requests wait for a free one.
    #[arg(long, default_value_t = 128)]
    pub connections: usize,

    /// Send each request with what is left of the budget (`tandem-timeout-us`), as a
    /// caller that propagates its deadline does; the server answers 504 or 429 at once
    /// for requests that can no longer make it.
    #[arg(long)]
    pub propagate_deadline: bool,

    /// Requests waiting for a connection at most; beyond it a send is counted as
    /// `client_overload` rather than delayed (the schedule never waits for the server).
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: usize,

    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,

    /// Seed for Poisson gaps and the request payload.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Distinct request bodies, each with rows drawn afresh, sent in turn (or drawn with
    /// `--zipf`); all of them together may take 256 MiB at most. Clients send new values
    /// every time; one body sent over and over lets the server's branch predictors learn
    /// its numbers, which flatters JSON decoding.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub bodies: u32,

    /// Each request's body drawn from a Zipf(S) law over the bodies instead (body 0 the
    /// most popular), in advance from `--seed`: repeated inputs, as a response cache sees
    /// them. The report gives the share of requests that repeat a body sent before.
    #[arg(long, value_name = "S", value_parser = positive)]
    pub zipf: Option<f64>,

    /// With `--zipf`: each request repeats a body sent earlier with this probability (the
    /// earlier bodies ranked by when they were first sent, the first the most popular, and
    /// drawn by the Zipf law over them), and otherwise sends the next body not yet sent: a
    /// share of repeats that holds from the run's first second to its last, where a Zipf law
    /// over a fixed set repeats little at first and more and more after.
    #[arg(long, value_name = "P", requires = "zipf", value_parser = share)]
    pub repeat_share: Option<f64>,

    /// Before the run, empty the model's response cache (`DELETE /admin/models/M/cache`),
    /// so that only repeats within the run can be hits, whatever ran before.
    #[arg(long)]
    pub clear_cache: bool,

    /// Also write the results as JSON here, and an SVG plot beside it (same name, .svg).
    #[arg(long)]
    pub json: Option<PathBuf>,
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

    /// Before each timed call, write this many MiB of other memory (untimed), so the
    /// weights come from wherever that leaves them — as in a server, whose HTTP work runs
    /// between batches. 0: the weights stay as hot as the caches keep them.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub evict_mib: u32,

    /// Also write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}
