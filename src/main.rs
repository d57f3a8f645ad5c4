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
    /// Operator CLI over the admin API.
    Ctl(backfill::ctl::CtlArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("backfill {}", env!("CARGO_PKG_VERSION")),
        Command::Ctl(args) => std::process::exit(backfill::ctl::run(args)),
    }
    Ok(())
}
