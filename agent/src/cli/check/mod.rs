//! `kura-agent check`: the gate for a set of plain node URLs, for operators
//! of the standalone chart (no Kubernetes, no agent deployment).
//!
//! ```text
//! kura-agent check --node http://10.0.0.5:4000 --node http://10.0.0.6:4000 \
//!     [--expected-pods N] [--soak 120s] [--interval 5s] [--timeout 600s] [--json]
//! ```
//!
//! The nodes form one synthetic instance (`expectedPods` defaults to the
//! number of nodes). Every `--interval` each node's `/status/rollout` is
//! polled with the agent's poller (same limits: 2 s per attempt, 64 KiB,
//! no redirects), folded with the agent's aggregation (per-node reset
//! clamping, so a node restarted by the upgrade does not hide growth) and
//! judged by the gate's per-instance judge ([`kura_gate::judge_instance`]),
//! the same code that writes `status.rolloutGate` in a cluster:
//!
//! - The first poll is the baseline (`outboxMessages`, `fdTimeoutCount`,
//!   `peerConnectionFailures`); start the check just before upgrading.
//! - Every poll runs the fourteen server checks of contract/gate.md. A
//!   failing check resets the soak clock; critical memory pressure is a hard
//!   stop at once.
//! - **pass** (exit 0) after continuous health for `--soak`; **hard stop**
//!   (exit 1) at critical memory pressure, or at `--timeout` from the first
//!   poll (signal `wave_deadline_exceeded`, evidence: the elapsed time, then
//!   the last failing check). Usage or input errors exit 2.
//! - A set that is not healthy at start (a node down, not ready, not
//!   serving, ring skew, critical pressure) is not soak-eligible, as in the
//!   gate: its counters are no reference, so the counter checks are skipped
//!   and only the absolute checks (1 to 11) hold. The first line says so.
//!
//! Output: one line per poll naming the verdict and the signal; with
//! `--json` one JSON object per line ([`PollReport`]: verdict, signal,
//! soak and timeout left, baseline, evidence, implicated node URLs and the
//! whole aggregate).
//!
//! Durations are written like `8s`, `2m`, `1h` (also `1m30s`, `250ms`).

//!
//! Usage or input errors exit 2; [`run`] is the subcommand's entry point.

mod judge;
mod line;
mod run;
mod url;
pub(crate) mod words;

pub use judge::{CheckRun, CheckSettings, PollReport};
pub use run::{CheckNode, run_check};
use url::node_report_urls;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use kura_gate::{GateConfig, VerdictKind};

use super::LogFormat;

use crate::cli::parse::{parse_duration, parse_positive_duration};
use crate::poll::{PollConfig, Poller};

use line::readable;

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
    super::init_logging(LogFormat::Text, "warn");
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
