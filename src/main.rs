//! The `tandem` binary: `serve` and `train` (the benchmarks are `tandem-bench`, a crate of
//! their own under `benches/`).

mod cli;
mod serve;
mod train;

use clap::Parser;

/// mimalloc rather than glibc's malloc: each request's buffers come from per-thread free
/// lists that the previous request just warmed, which on a CPU leaves more of the model's
/// weights in the last-level cache, for some more resident memory (docs/performance.md,
/// "Goodput over HTTP").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == gateway::guardian::ARG)
    {
        gateway::guardian::main();
        return Ok(());
    }
    let cli = cli::Cli::parse();
    let format = match &cli.command {
        cli::Command::Serve(args) => args.edge.log_format,
        _ => cli::LogFormat::Text,
    };
    init_tracing(format);
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Train(args) => train::run(args),
    }
}

/// Logs to stderr, as text or as JSON objects one a line, filtered by `TANDEM_LOG` (`info`
/// by default); the filter can be changed while the process runs (`PUT /admin/log`).
fn init_tracing(format: cli::LogFormat) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let filter = std::env::var("TANDEM_LOG")
        .ok()
        .and_then(|d| log_filter(&d).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let json = format == cli::LogFormat::Json;
    let text = (!json).then(|| {
        fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
    });
    // Event fields at the top level beside time, level and target; the request's span
    // (its id, route, model) under "span".
    let json = json.then(|| {
        fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .init();
    gateway::log_control::register(Box::new(ReloadableFilter(handle)));
}

/// Log directives as `TANDEM_LOG` and `PUT /admin/log` give them. A span field's value is
/// matched as literal text, never compiled as a regular expression: compiling one can take
/// seconds (`/.{24}x/`, found by fuzzing), and the admin API takes directives from the
/// network.
fn log_filter(
    directives: &str,
) -> Result<tracing_subscriber::EnvFilter, tracing_subscriber::filter::ParseError> {
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(directives)
}

/// The subscriber's filter, swapped whole on a change.
struct ReloadableFilter(
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>,
);

impl gateway::log_control::LogFilter for ReloadableFilter {
    fn current(&self) -> String {
        self.0.with_current(|f| f.to_string()).unwrap_or_default()
    }

    fn set(&self, directives: &str) -> Result<(), String> {
        let filter = log_filter(directives).map_err(|e| e.to_string())?;
        self.0.reload(filter).map_err(|e| e.to_string())
    }
}
