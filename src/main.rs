//! The `backfill` binary.

use clap::{Parser, Subcommand};

/// Crash-proof, operator-controlled data repairs on PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "backfill", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the version and exit.
    Version,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("backfill {}", env!("CARGO_PKG_VERSION")),
    }
    Ok(())
}
