//! `tandem-bench`: scenarios that print a table and write JSON. A crate of its own, so that
//! the `tandem` binary links none of the load generator, its histograms or its plots.

mod cli;
mod coloc;
mod cores;
mod forward;
mod grpc;
mod http1;
pub mod load;
mod plot;
mod schedule;
mod serve_process;
mod server;
mod soak;
pub mod stats;
mod sweep;

use anyhow::Context;

use clap::Parser;

use cli::{BenchCommand, LoadArgs};

fn main() -> anyhow::Result<()> {
    let filter = std::env::var("TANDEM_LOG").unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    match cli::Cli::parse().command {
        BenchCommand::Forward(args) => forward::run(args),
        BenchCommand::Load(args) => run_load(args),
        BenchCommand::Sweep(args) => sweep::run(args),
        BenchCommand::Coloc(args) => coloc::run(args),
        BenchCommand::Soak(args) => soak::run(args),
    }
}

/// `tandem-bench load`: one run, printed, and written as JSON with its timeline plotted
/// beside it.
fn run_load(args: LoadArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let report = runtime.block_on(load::measure(&args))?;
    load::print_report(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        plot::timeline(&report, &path.with_extension("svg"))?;
    }
    Ok(())
}
