//! `kura-agent`: the Kura rollout-health agent. `run` is the product;
//! every other subcommand is a tool, compiled in with the `tools` feature
//! (default; the container image is built without it).

use clap::{Parser, Subcommand};
use kura_agent::cli;
#[cfg(any(feature = "tools", feature = "fleet-load-side"))]
use kura_agent::tools;
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
    #[cfg(feature = "tools")]
    Aggregate(tools::aggregate::AggregateArgs),
    /// Serve a simulated Kura fleet from a scenario file.
    #[cfg(feature = "tools")]
    Simulate(tools::simulate::SimulateArgs),
    /// Gate a set of plain node URLs: baseline, soak, pass or hard stop.
    #[cfg(feature = "tools")]
    Check(tools::check::CheckArgs),
    /// Poll a set of plain node URLs once before an upgrade and write the
    /// baseline `check --baseline` judges against after it.
    #[cfg(feature = "tools")]
    Baseline(tools::baseline::BaselineArgs),
    /// Fetch every instance's timeline (the gate inputs it judged, a
    /// `kura-gate replay` document) from a running agent into one file each.
    #[cfg(feature = "tools")]
    Timelines(tools::timelines::TimelinesArgs),
    /// Play a progressive rollout on a simulated fleet through the real
    /// agent pipeline and gate, in about a minute.
    #[cfg(feature = "tools")]
    Demo(tools::demo::DemoArgs),
    /// The agent side of the `fleet-load` harness on stdin/stdout, so a
    /// built binary can be measured (internal).
    #[cfg(feature = "fleet-load-side")]
    #[command(hide = true)]
    FleetLoadSide(tools::fleet_load_side::FleetLoadSideArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => cli::run::run(*args),
        #[cfg(feature = "tools")]
        Command::Aggregate(args) => tools::aggregate::run(&args),
        #[cfg(feature = "tools")]
        Command::Simulate(args) => tools::simulate::run(args),
        #[cfg(feature = "tools")]
        Command::Check(args) => tools::check::run(args),
        #[cfg(feature = "tools")]
        Command::Baseline(args) => tools::baseline::run(args),
        #[cfg(feature = "tools")]
        Command::Demo(args) => tools::demo::run(args),
        #[cfg(feature = "tools")]
        Command::Timelines(args) => tools::timelines::run(&args),
        #[cfg(feature = "fleet-load-side")]
        Command::FleetLoadSide(args) => tools::fleet_load_side::run(&args),
    }
}
