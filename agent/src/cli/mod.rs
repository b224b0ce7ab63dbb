//! The `kura-agent` subcommands; `main.rs` only dispatches to them.

pub mod aggregate;
pub mod check;
pub mod demo;
pub mod fleet_load_side;
pub mod run;
pub mod simulate;

/// Logs to standard error, filtered by `RUST_LOG` (else `default_filter`),
/// as human-readable text.
pub fn init_text_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
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
