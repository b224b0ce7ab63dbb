//! `kura-agent`: the Kura rollout-health agent.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The Kura rollout-health agent.
#[derive(Parser)]
#[command(name = "kura-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {}
}
