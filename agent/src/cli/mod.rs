//! The `kura-agent` subcommands, one module each; `main.rs` only
//! dispatches to them. This is the top of the crate: it composes the
//! parts below and nothing below imports it.
//!
//! - [`run`]: the agent in a cluster (flags in [`run::RunArgs`]);
//! - [`check`]: the gate for plain node URLs (standalone chart);
//! - [`baseline`]: one poll of plain node URLs written down before an
//!   upgrade, for `check --baseline` after it ([`baseline_store`]: into a
//!   ConfigMap);
//! - [`demo`]: a rollout on a simulated fleet (`kura-sim`);
//! - [`aggregate`]: the aggregation over recorded reports;
//! - [`simulate`]: serve a simulated fleet (`kura-sim`);
//! - [`gate_file`]: `--gate-config FILE` of `run` and `check`;
//! - [`out_file`]: `--out FILE` of `baseline` (FILE keeps what it is);
//! - [`timelines`]: fetch every instance's timeline from a running agent;
//! - [`terminal`]: foreign text escaped and bounded before it is printed;
//! - [`fleet_load_side`] (hidden): the agent's side of the `fleet-load`
//!   harness, so a shipped binary can be measured.

pub mod aggregate;
pub mod allocator;
pub mod baseline;
pub mod baseline_store;
pub mod check;
pub mod demo;
pub mod fleet_load_side;
pub mod gate_file;
pub mod out_file;
pub mod parse;
pub mod run;
pub mod simulate;
pub mod terminal;
pub mod timelines;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Human-readable text.
    Text,
}

/// The one logging set-up of every subcommand: to standard error, as JSON
/// lines or text, filtered by `RUST_LOG` (else `default_filter`).
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A multi-threaded tokio runtime for subcommand `command`; on failure
/// prints why and returns the exit code to end with.
pub fn multi_thread_runtime(
    command: &str,
) -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("kura-agent {command}: cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        })
}
