//! `kura-agent check --node URL [--node URL ...]`: the gate for a set of
//! plain node URLs (see [`crate::check`] for the rules).
//!
//! Usage, for operators of the standalone chart (instead of a shell script
//! with curl): start it just before upgrading, with every node of the set:
//!
//! ```text
//! kura-agent check --node http://kura-0:4000 --node http://kura-1:4000 \
//!     --node http://kura-2:4000 --soak 2m --timeout 10m
//! ```
//!
//! It takes the baseline from the first poll, polls every `--interval`
//! (default 5 s), and exits 0 once the set has been healthy without a break
//! for `--soak` (default 120 s), 1 at a hard stop (critical memory pressure
//! at once, or `--timeout`, default 600 s, naming the last failing signal),
//! 2 on a usage or input error. Each poll prints one line naming the verdict
//! and the signal, or one JSON object with `--json`.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use kura_gate::{GateConfig, VerdictKind};

use crate::check::line::readable;
use crate::check::{CheckNode, CheckRun, CheckSettings, node_report_urls, run_check};
use crate::config::{parse_duration, parse_positive_duration};
use crate::poll::{PollConfig, Poller};

/// Exit code: passed.
pub const EXIT_PASS: u8 = 0;
/// Exit code: failed (hard stop or timeout).
pub const EXIT_FAIL: u8 = 1;
/// Exit code: usage or input error (or the check could not run).
pub const EXIT_USAGE: u8 = 2;

/// Arguments of `kura-agent check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// A node's URL: `http://host:port` or its full report URL
    /// (`…/status/rollout`). Repeat for every node of the set.
    #[arg(long = "node", value_name = "URL", required = true)]
    pub nodes: Vec<String>,
    /// Pods the set must have sampled (default: the number of nodes).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub expected_pods: Option<u32>,
    /// Continuous health needed to pass, e.g. `120s`, `2m`.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub soak: Duration,
    /// Time between two polls.
    #[arg(long, default_value = "5s", value_parser = parse_positive_duration)]
    pub interval: Duration,
    /// Fail when not passed this long after the first poll.
    #[arg(long, default_value = "600s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// One JSON object of evidence per poll instead of a readable line.
    #[arg(long)]
    pub json: bool,
}

/// Entry point of `kura-agent check`; returns exit code 0, 1 or 2.
pub fn run(args: CheckArgs) -> ExitCode {
    super::init_text_logging("warn");
    let urls = match node_report_urls(&args.nodes) {
        Ok(urls) => urls,
        Err(e) => return usage(&e.to_string()),
    };
    if args.soak > args.timeout {
        return usage(&format!(
            "--soak ({}s) is longer than --timeout ({}s): the check could never pass",
            args.soak.as_secs_f64(),
            args.timeout.as_secs_f64()
        ));
    }
    let expected_pods = match args.expected_pods {
        Some(n) => n,
        None => match u32::try_from(urls.len()) {
            Ok(n) => n,
            Err(_) => return usage("too many nodes"),
        },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kura-agent check: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let settings = CheckSettings {
        expected_pods,
        soak: args.soak,
        timeout: args.timeout,
        gate: GateConfig::default(),
    };
    let nodes: Vec<CheckNode> = urls.into_iter().map(CheckNode::new).collect();
    let json = args.json;
    let last = runtime.block_on(async {
        let poller = Poller::new(PollConfig::default());
        run_check(
            &poller,
            &nodes,
            CheckRun::new(settings),
            args.interval,
            |report| {
                let mut out = std::io::stdout().lock();
                let line = if json {
                    serde_json::to_string(report).unwrap_or_else(|e| {
                        format!("{{\"error\":\"cannot encode the report: {e}\"}}")
                    })
                } else {
                    readable(report)
                };
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            },
        )
        .await
    });
    if last.verdict == VerdictKind::Pass {
        ExitCode::from(EXIT_PASS)
    } else {
        ExitCode::from(EXIT_FAIL)
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("kura-agent check: {message}");
    ExitCode::from(EXIT_USAGE)
}
