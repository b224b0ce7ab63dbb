//! `kura-agent fleet-load-side` (hidden): the agent's side of the
//! `fleet-load` harness (`benches/`) on stdin/stdout: the run loop's
//! per-sweep path over a fleet of pods ([`fleet::AgentFleet`]), the line
//! protocol through which a parent `fleet-load` drives it in a child
//! process ([`protocol`]) and what that child measures of itself
//! ([`proc_stats`]).
//!
//! It lives in the agent crate so that a shipped binary can be measured
//! exactly as the harness measures its own build: `fleet-load --agent-bin
//! NAME=PATH` runs `PATH fleet-load-side`, the same code as `fleet-load`'s
//! own agent side (`fleet-load run-side --side agent`), e.g. the binary
//! taken out of the container image.

pub mod fleet;
pub mod proc_stats;
pub mod protocol;

use protocol::{SideConfig, serve_agent};
use std::process::ExitCode;

/// Arguments of `kura-agent fleet-load-side` (set by `fleet-load`).
#[derive(Debug, clap::Args)]
pub struct FleetLoadSideArgs {
    /// Requests in flight at most.
    #[arg(long)]
    pub concurrency: usize,
    /// Pods per instance.
    #[arg(long)]
    pub pods_per_instance: usize,
    /// Tokio worker threads (default: one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// A new connection for every poll.
    #[arg(long)]
    pub no_keep_alive: bool,
}

/// Entry point of `kura-agent fleet-load-side`.
pub fn run(args: &FleetLoadSideArgs) -> ExitCode {
    match serve_agent(SideConfig {
        concurrency: args.concurrency,
        pods_per_instance: args.pods_per_instance,
        workers: args.workers,
        keep_alive: !args.no_keep_alive,
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura-agent fleet-load-side: {e}");
            ExitCode::FAILURE
        }
    }
}
