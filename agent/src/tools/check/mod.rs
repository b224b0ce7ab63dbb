//! `kura-agent check`: the gate for a set of plain node URLs, for operators
//! of the standalone chart (no Kubernetes, no agent deployment).
//!
//! ```text
//! kura-agent check --node http://10.0.0.5:4000 --node http://10.0.0.6:4000 \
//!     [--expected-pods N] [--soak 120s] [--interval 5s] [--timeout 600s] [--json] \
//!     [--gate-config FILE] [--baseline FILE [--baseline-max-age 1h]]
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
//! - The baseline (`outboxMessages`, `fdTimeoutCount`,
//!   `peerConnectionFailures`) is the first poll, or with `--baseline FILE`
//!   the one `kura-agent baseline` took before the upgrade (below).
//! - Every poll runs the gate's server checks (contract/gate.md; the list
//!   is `kura_schemas::SIGNALS`). A failing check resets the soak clock; a
//!   hard-stop check (critical memory pressure among them) stops at once.
//! - **pass** (exit 0) after continuous health for `--soak`; **hard stop**
//!   (exit 1) at a hard-stop check, or at `--timeout` from the first
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
//! **Baseline before the upgrade.** A rollout script that upgrades a node
//! and only then starts the check bakes whatever the upgrade broke into the
//! baseline. `kura-agent baseline --node … --out FILE` polls once before
//! the upgrade and writes a [`BaselineDocument`]; `check --baseline FILE`
//! then judges against it instead of its first poll, and the per-node
//! counters in it seed the reset clamping: a node restarted by the upgrade
//! counts as a reset (never an improvement), and growth after it is still
//! caught. A baseline of another node set, or older than
//! `--baseline-max-age` (default 1 h), is a usage error.
//!
//! **Gate settings.** `--gate-config FILE` (`KURA_AGENT_GATE_CONFIG`;
//! JSON or YAML, the keys of `kura-gate replay`'s `config`) sets the bands
//! and sample-age limits; its `soakSeconds` (first value) and
//! `waveDeadlineSeconds` are the defaults of `--soak` and `--timeout`.
//!
//! Node URLs must have a port from 1 to 65535 (when they have one) and
//! name different nodes: two URLs reaching the same address, port and
//! path are one node (`:04100` is `:4100`, `localhost` is `127.0.0.1`),
//! refused before any poll.
//!
//! Usage or input errors exit 2; [`run`] is the subcommand's entry point.

mod baseline_document;
mod judge;
mod line;
mod run;
mod url;

pub use baseline_document::{BaselineDocument, BaselineError};
pub use judge::{BaselineSource, CheckRun, CheckSettings, PollReport};
pub use run::{CheckNode, poll_nodes, run_check};
pub use url::{NodeUrlError, http_url, node_report_urls, refuse_same_nodes};

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::VerdictKind;

use crate::cli::LogFormat;

use crate::cli::gate_file;
use crate::model::parse::{parse_duration, parse_positive_duration};
use crate::poll::{PollConfig, Poller};

use line::readable;

/// `--soak` when neither the flag nor the gate file sets it.
const DEFAULT_SOAK: Duration = Duration::from_secs(120);
/// `--timeout` when neither the flag nor the gate file sets it.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// Continuous health needed to pass, e.g. `120s`, `2m` [default: the
    /// gate file's first `soakSeconds` when it sets them, else 120s].
    #[arg(long, value_parser = parse_duration)]
    pub soak: Option<Duration>,
    /// Time between two polls.
    #[arg(long, default_value = "5s", value_parser = parse_positive_duration)]
    pub interval: Duration,
    /// Fail when not passed this long after the first poll [default: the
    /// gate file's `waveDeadlineSeconds` when it sets it, else 600s].
    #[arg(long, value_parser = parse_positive_duration)]
    pub timeout: Option<Duration>,
    /// One JSON object of evidence per poll instead of a readable line.
    #[arg(long)]
    pub json: bool,
    /// The gate's settings: a JSON (`.json`) or YAML file of `GateConfig`
    /// keys (bands, sample-age limits; `soakSeconds` and
    /// `waveDeadlineSeconds` give `--soak` and `--timeout` their defaults).
    #[arg(long, env = "KURA_AGENT_GATE_CONFIG", value_name = "FILE")]
    pub gate_config: Option<PathBuf>,
    /// Judge against this baseline (written by `kura-agent baseline` before
    /// the upgrade) instead of taking one at the first poll.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// A `--baseline` older than this is refused (usage error).
    #[arg(long, default_value = "1h", value_parser = parse_positive_duration)]
    pub baseline_max_age: Duration,
}

/// The soak and timeout of a check: the flags, else the gate file's
/// `soakSeconds[0]` and `waveDeadlineSeconds` when it sets them, else 120 s
/// and 600 s.
fn soak_and_timeout(args: &CheckArgs, gate: Option<&gate_file::GateFile>) -> (Duration, Duration) {
    let from_file = |key: &str, secs: u64| {
        gate.filter(|g| g.sets(key))
            .map(|_| Duration::from_secs(secs))
    };
    let config = gate.map(|g| &g.config);
    let soak = args
        .soak
        .or_else(|| from_file("soakSeconds", config.map_or(0, |c| c.soak_for(0))))
        .unwrap_or(DEFAULT_SOAK);
    let timeout = args
        .timeout
        .or_else(|| {
            from_file(
                "waveDeadlineSeconds",
                config.map_or(0, |c| c.wave_deadline_seconds),
            )
        })
        .unwrap_or(DEFAULT_TIMEOUT);
    (soak, timeout)
}

/// The nodes of `check` and `baseline` in normal form, refused (as a
/// usage error's message) when one is invalid or two are one node.
pub(crate) fn nodes_of(
    inputs: &[String],
    runtime: &tokio::runtime::Runtime,
) -> Result<Vec<http::Uri>, String> {
    let urls = node_report_urls(inputs).map_err(|e| e.to_string())?;
    runtime
        .block_on(refuse_same_nodes(&urls))
        .map_err(|e| e.to_string())?;
    Ok(urls)
}

/// A current-thread runtime for `check` and `baseline`.
pub(crate) fn check_runtime(command: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("kura-agent {command}: cannot start the runtime: {e}");
            ExitCode::from(EXIT_USAGE)
        })
}

/// Entry point of `kura-agent check`; returns exit code 0, 1 or 2.
pub fn run(args: CheckArgs) -> ExitCode {
    crate::cli::init_logging(LogFormat::Text, "warn");
    let runtime = match check_runtime("check") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let urls = match nodes_of(&args.nodes, &runtime) {
        Ok(urls) => urls,
        Err(e) => return usage(&e),
    };
    let gate = match args.gate_config.as_deref().map(gate_file::load).transpose() {
        Ok(gate) => gate,
        Err(e) => return usage(&e.to_string()),
    };
    let (soak, timeout) = soak_and_timeout(&args, gate.as_ref());
    if soak > timeout {
        return usage(&format!(
            "--soak ({}s) is longer than --timeout ({}s): the check could never pass",
            soak.as_secs_f64(),
            timeout.as_secs_f64()
        ));
    }
    let expected_pods = match args.expected_pods {
        Some(n) => n,
        None => match u32::try_from(urls.len()) {
            Ok(n) => n,
            Err(_) => return usage("too many nodes"),
        },
    };
    let settings = CheckSettings {
        expected_pods,
        soak,
        timeout,
        gate: gate.map(|g| g.config).unwrap_or_default(),
    };
    let check_run = match &args.baseline {
        None => CheckRun::new(settings),
        Some(path) => {
            let doc = match BaselineDocument::load(path) {
                Ok(doc) => doc,
                Err(e) => return usage(&e.to_string()),
            };
            let skew = SignedDuration::from_secs(
                i64::try_from(settings.gate.future_skew_seconds).unwrap_or(i64::MAX),
            );
            let max_age =
                SignedDuration::try_from(args.baseline_max_age).unwrap_or(SignedDuration::MAX);
            if let Err(e) = doc.check_usable(
                &path.display().to_string(),
                &urls,
                Timestamp::now(),
                max_age,
                skew,
            ) {
                return usage(&e.to_string());
            }
            CheckRun::from_baseline(settings, &doc)
        }
    };
    let nodes: Vec<CheckNode> = urls.into_iter().map(CheckNode::new).collect();
    let json = args.json;
    let last = runtime.block_on(async {
        let poller = Poller::new(PollConfig::default());
        run_check(&poller, &nodes, check_run, args.interval, |report| {
            let mut out = std::io::stdout().lock();
            let line = if json {
                serde_json::to_string(report)
                    .unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the report: {e}\"}}"))
            } else {
                crate::cli::terminal::line(&readable(report))
            };
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        })
        .await
    });
    if last.verdict == VerdictKind::Pass {
        ExitCode::from(EXIT_PASS)
    } else {
        ExitCode::from(EXIT_FAIL)
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!(
        "{}",
        crate::cli::terminal::line(&format!("kura-agent check: {message}"))
    );
    ExitCode::from(EXIT_USAGE)
}
