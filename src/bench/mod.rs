//! `tandem bench`: scenarios that print a table and write JSON.

mod forward;
pub mod stats;

use crate::cli::BenchCommand;

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Forward(args) => forward::run(args),
    }
}
