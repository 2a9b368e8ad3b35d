//! `tandem bench`: scenarios that print a table and write JSON.

mod coloc;
mod cores;
mod forward;
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

use crate::cli::{BenchCommand, LoadArgs};

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Forward(args) => forward::run(args),
        BenchCommand::Load(args) => run_load(args),
        BenchCommand::Sweep(args) => sweep::run(args),
        BenchCommand::Coloc(args) => coloc::run(args),
        BenchCommand::Soak(args) => soak::run(args),
    }
}

/// `tandem bench load`: one run, printed, and written as JSON with its timeline plotted
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
