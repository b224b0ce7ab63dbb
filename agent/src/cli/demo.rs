//! `kura-agent demo`: the README's first command (see [`crate::demo`]).
//!
//! ```text
//! kura-agent demo                      # about a minute
//! kura-agent demo --time-scale 120     # faster
//! kura-agent demo --listen 127.0.0.1:9090
//! ```
//!
//! Exit 0 when the story played as designed (the canary passed and the
//! regression was stopped), 1 otherwise, 2 on a usage error.

use std::net::SocketAddr;
use std::process::ExitCode;

use crate::demo::{DEFAULT_TIME_SCALE, Demo, DemoConfig};

/// Arguments of `kura-agent demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Simulated seconds per real second (≥ 1); the default plays the story
    /// in about a minute.
    #[arg(long, default_value_t = DEFAULT_TIME_SCALE, value_parser = parse_scale)]
    pub time_scale: f64,
    /// Where the debug endpoint and page listen (an ephemeral port when this
    /// one is busy).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}

fn parse_scale(input: &str) -> Result<f64, String> {
    let v: f64 = input
        .trim()
        .parse()
        .map_err(|e| format!("{input:?} is not a number: {e}"))?;
    if !v.is_finite() || v < 1.0 {
        return Err(format!("{input} must be a number ≥ 1"));
    }
    Ok(v)
}

/// Entry point of `kura-agent demo`.
pub fn run(args: DemoArgs) -> ExitCode {
    super::init_text_logging("warn");
    let runtime = match super::multi_thread_runtime("demo") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let config = DemoConfig {
        time_scale: args.time_scale,
        listen: args.listen,
        ..DemoConfig::default()
    };
    let result = runtime.block_on(async {
        let demo = Demo::start(config).await?;
        let mut out = std::io::stdout();
        tokio::select! {
            outcome = demo.play(&mut out) => outcome.map(Some),
            _ = tokio::signal::ctrl_c() => Ok(None),
        }
    });
    match result {
        Ok(Some(outcome)) if outcome.played_as_designed() => ExitCode::SUCCESS,
        Ok(Some(_)) => ExitCode::FAILURE,
        Ok(None) => {
            eprintln!("kura-agent demo: interrupted");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("kura-agent demo: {e}");
            ExitCode::FAILURE
        }
    }
}
