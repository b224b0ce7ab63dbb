//! The composition root: `kura-agent run`, the one subcommand of the
//! product binary, and what every subcommand shares. Only `main.rs` and
//! the tools (`crate::tools`) import it; it imports everything below.
//!
//! - [`run`]: the agent in a cluster ([`run::RunArgs`]: the flags of each
//!   module it composes, each module's own `Args` flattened, and the
//!   composition);
//! - [`gate_file`]: `--gate-config FILE` of `run` (and of `check`);
//! - [`terminal`]: foreign text escaped and bounded before it is printed;
//! - [`allocator`]: the binaries' global allocator;
//! - [`fd_limit`]: [`raise_fd_limit`], the open-file limit of the tools,
//!   benches and tests that hold thousands of sockets;
//! - [`LogFormat`], [`init_logging`], [`multi_thread_runtime`]: the one
//!   logging and runtime set-up of every subcommand.

pub mod allocator;
pub mod fd_limit;
pub mod gate_file;
pub mod run;
pub mod terminal;

pub use fd_limit::raise_fd_limit;

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
///
/// A line that cannot be written is lost, and nothing else happens.
/// tracing-subscriber's default reports a failed write with `eprintln!`,
/// to the same standard error, and `eprintln!` panics when that write
/// fails too: a full disk under the log file (or a closed pipe) ended the
/// agent with a panic at its next log line from the main thread (a
/// 30,000-pod run on a full disk, 2026-12-07: a replica exited 101).
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
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
