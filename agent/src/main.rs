//! `kura-agent`: the Kura rollout-health agent.

use clap::{Parser, Subcommand};
use kura_agent::cli;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: cli::allocator::Allocator = cli::allocator::Allocator;

/// The Kura rollout-health agent.
#[derive(Parser)]
#[command(name = "kura-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent in a cluster: watch, poll, aggregate, judge, write status.
    Run(Box<cli::run::RunArgs>),
    /// Aggregate recorded pod reports from a file, one JSON line per sweep.
    Aggregate(cli::aggregate::AggregateArgs),
    /// Serve a simulated Kura fleet from a scenario file.
    Simulate(cli::simulate::SimulateArgs),
    /// Gate a set of plain node URLs: baseline, soak, pass or hard stop.
    Check(cli::check::CheckArgs),
    /// Poll a set of plain node URLs once before an upgrade and write the
    /// baseline `check --baseline` judges against after it.
    Baseline(cli::baseline::BaselineArgs),
    /// Fetch every instance's timeline (the gate inputs it judged, a
    /// `kura-gate replay` document) from a running agent into one file each.
    Timelines(cli::timelines::TimelinesArgs),
    /// Play a progressive rollout on a simulated fleet through the real
    /// agent pipeline and gate, in about a minute.
    Demo(cli::demo::DemoArgs),
    /// The agent side of the `fleet-load` harness on stdin/stdout, so the
    /// shipped binary can be measured (internal).
    #[command(hide = true)]
    FleetLoadSide(cli::fleet_load_side::FleetLoadSideArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => cli::run::run(*args),
        Command::Aggregate(args) => cli::aggregate::run(&args),
        Command::Simulate(args) => cli::simulate::run(args),
        Command::Check(args) => cli::check::run(args),
        Command::Baseline(args) => cli::baseline::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Timelines(args) => cli::timelines::run(&args),
        Command::FleetLoadSide(args) => cli::fleet_load_side::run(&args),
    }
}
