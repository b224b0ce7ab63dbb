//! `kura-agent aggregate FILE`: the agent's aggregation fed from a file
//! (contract/rollout-health.md, "Offline aggregation"). One aggregate per
//! sweep on standard output as a JSON line; exit 0. Invalid input exits 2
//! with one line on standard error naming the sweep, pod and field.

use crate::aggregate::{AggregateConfig, input};
use crate::model::parse::parse_positive_signed;
use clap::Args;
use jiff::SignedDuration;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The `agent` written into every aggregate unless `--agent` says otherwise.
pub const DEFAULT_AGENT: &str = "kura-agent aggregate";

/// Arguments of `kura-agent aggregate`.
#[derive(Debug, Clone, Args)]
pub struct AggregateArgs {
    /// The aggregate document, or `-` for standard input.
    pub file: PathBuf,
    /// The `agent` field of the aggregates (an agent writes its pod name).
    #[arg(long, default_value = DEFAULT_AGENT)]
    pub agent: String,
    /// How long a gone pod keeps its counter state before it folds into
    /// `retiredCounters` (e.g. `1h`, `90m`); positive, as `run`'s.
    #[arg(long, default_value = "1h", value_parser = parse_positive_signed)]
    pub retention: SignedDuration,
}

/// Exit code for input that cannot be used (unreadable or invalid).
pub const EXIT_INVALID_INPUT: u8 = 2;

/// Run the subcommand: read, aggregate, print.
pub fn run(args: &AggregateArgs) -> ExitCode {
    let bytes = match read(&args.file) {
        Ok(b) => b,
        Err(e) => return fail(&format!("cannot read {}: {e}", args.file.display())),
    };
    let doc = match input::parse_input(&bytes) {
        Ok(d) => d,
        Err(e) => return fail(&e.to_string()),
    };
    let config = AggregateConfig {
        retention: args.retention,
        ..AggregateConfig::default()
    };
    let mut out = std::io::stdout().lock();
    for health in input::run(&doc, config, &args.agent) {
        let written = serde_json::to_writer(&mut out, &health)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"));
        if let Err(e) = written {
            eprintln!("kura-agent aggregate: cannot write output: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn read(path: &PathBuf) -> std::io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path)
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!(
        "{}",
        crate::cli::terminal::line(&format!("kura-agent aggregate: {message}"))
    );
    ExitCode::from(EXIT_INVALID_INPUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: AggregateArgs,
    }

    #[test]
    fn retention_must_be_a_positive_duration_as_for_run() {
        for bad in ["--retention=-1h", "--retention=0s", "--retention=60"] {
            let e = Wrapper::try_parse_from(["x", "doc.json", bad])
                .err()
                .unwrap_or_else(|| panic!("{bad} was accepted"));
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
        }
        let ok = Wrapper::try_parse_from(["x", "doc.json", "--retention=90m"]).expect("90m");
        assert_eq!(ok.args.retention, SignedDuration::from_mins(90));
        let default = Wrapper::try_parse_from(["x", "doc.json"]).expect("default");
        assert_eq!(default.args.retention, SignedDuration::from_hours(1));
    }
}
