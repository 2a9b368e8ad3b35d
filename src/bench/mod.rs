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

use crate::cli::BenchCommand;

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Forward(args) => forward::run(args),
        BenchCommand::Load(args) => load::run(args),
        BenchCommand::Sweep(args) => sweep::run(args),
        BenchCommand::Coloc(args) => coloc::run(args),
        BenchCommand::Soak(args) => soak::run(args),
    }
}
