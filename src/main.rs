//! The `tandem` binary: `serve`, `train` and `bench`.

mod bench;
mod cli;
mod serve;
mod train;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    init_tracing();
    match cli.command {
        cli::Command::Serve(args) => serve::run(args),
        cli::Command::Train(args) => train::run(args),
        cli::Command::Bench(args) => bench::run(args),
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("TANDEM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}
