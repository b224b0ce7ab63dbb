//! `kura-agent`: the Kura rollout-health agent.

mod cli;

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
enum Command {
    /// Serve a simulated Kura fleet from a scenario file.
    Simulate(cli::simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate(args) => cli::simulate::run(args),
    }
}
