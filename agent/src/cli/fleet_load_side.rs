//! `kura-agent fleet-load-side` (hidden): the agent side of the
//! `fleet-load` harness on stdin/stdout (see [`crate::fleet_load`]), so
//! that the binary in the image can be measured beside the harness's own
//! build: `fleet-load --agent-bin image=PATH`.

use crate::fleet_load::protocol::{SideConfig, serve_agent};
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
