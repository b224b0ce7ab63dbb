//! `kura-agent baseline`: one poll of a set of plain node URLs, written
//! down before an upgrade so that `kura-agent check --baseline FILE` can
//! judge the nodes against how they were before it.
//!
//! ```text
//! kura-agent baseline --node http://kura-0.kura:4000 --node http://kura-1.kura:4000 \
//!     [--expected-pods N] [--out FILE | --configmap NAME [--configmap-namespace NS]]
//! ```
//!
//! The poll, the aggregation, the node URLs and their rules are `check`'s
//! (same poller and limits, same duplicate and port rules); the document is
//! [`BaselineDocument`]: per node URL its raw counters and incarnation (or
//! why it was not sampled), the set's counters and soak eligibility, when
//! it was taken and by which agent version. Without `--out` it goes to
//! standard output; with it, to FILE and a summary line per node to
//! standard output. FILE keeps what it is ([`out_file`]): a regular file or
//! a new path is written whole or not at all, a FIFO or character device is
//! written through, a link's target is written; anything else is refused.
//! With `--configmap`, into that ConfigMap's `baseline.json`
//! ([`store`]), for a hook Job before an upgrade.
//!
//! Exit 0 when every node was sampled; 1 when not (the document is still
//! written, each unsampled node named on standard error with why; such a
//! set is no reference: a check against it compares no counters); 2 on a
//! usage error (nothing is written).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use jiff::Timestamp;

use crate::cli::{LogFormat, terminal};
use crate::poll::{PollConfig, Poller};
use crate::tools::check::{
    BaselineDocument, CheckNode, CheckRun, CheckSettings, EXIT_FAIL, EXIT_PASS, EXIT_USAGE,
    check_runtime, nodes_of, poll_nodes,
};

pub mod out_file;
pub mod store;

/// Arguments of `kura-agent baseline`.
#[derive(Debug, clap::Args)]
pub struct BaselineArgs {
    /// A node's URL: `http://host:port` or its full report URL
    /// (`…/status/rollout`). Repeat for every node of the set, exactly as
    /// `check` will be given them.
    #[arg(long = "node", value_name = "URL", required = true)]
    pub nodes: Vec<String>,
    /// Pods the set must have sampled (default: the number of nodes).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub expected_pods: Option<u32>,
    /// Write the document to FILE instead of standard output.
    #[arg(long, value_name = "FILE", conflicts_with = "configmap")]
    pub out: Option<PathBuf>,
    /// Store the document in this ConfigMap (key `baseline.json`, server-side
    /// apply) instead: for a hook Job before an upgrade whose `check` Job
    /// mounts it (in-cluster or KUBECONFIG credentials).
    #[arg(long, value_name = "NAME")]
    pub configmap: Option<String>,
    /// The ConfigMap's namespace (default: the credentials' namespace, in a
    /// pod its own).
    #[arg(long, value_name = "NAMESPACE", requires = "configmap")]
    pub configmap_namespace: Option<String>,
}

/// Entry point of `kura-agent baseline`; returns exit code 0, 1 or 2.
pub fn run(args: BaselineArgs) -> ExitCode {
    crate::cli::init_logging(LogFormat::Text, "warn");
    let runtime = match check_runtime("baseline") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let urls = match nodes_of(&args.nodes, &runtime) {
        Ok(urls) => urls,
        Err(e) => return usage(&e),
    };
    let expected_pods = match args.expected_pods {
        Some(n) => n,
        None => match u32::try_from(urls.len()) {
            Ok(n) => n,
            Err(_) => return usage("too many nodes"),
        },
    };
    let nodes: Vec<CheckNode> = urls.into_iter().map(CheckNode::new).collect();
    let samples = runtime.block_on(async {
        let poller = Poller::new(PollConfig::default());
        poll_nodes(&poller, &nodes).await
    });
    // The baseline is what a check's first poll would capture: the same
    // aggregation and soak eligibility (no soak or timeout involved).
    let mut run = CheckRun::new(CheckSettings {
        expected_pods,
        soak: std::time::Duration::ZERO,
        timeout: std::time::Duration::MAX,
        gate: kura_gate::GateConfig::default(),
    });
    let report = run.observe(&samples, Timestamp::now());
    let doc = BaselineDocument::from_poll(
        &samples,
        report.at,
        &report.health,
        &report.baseline,
        report.baseline_eligible,
    );
    // Where the document went, when not to standard output.
    let mut destination: Option<String> = None;
    let text = match serde_json::to_string_pretty(&doc) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "{}",
                terminal::line(&format!(
                    "kura-agent baseline: cannot encode the document: {e}"
                ))
            );
            return ExitCode::from(EXIT_FAIL);
        }
    };
    let written = match (&args.out, &args.configmap) {
        (Some(path), _) => out_file::write(path, &text)
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        (None, Some(name)) => runtime
            .block_on(store::store(
                name,
                args.configmap_namespace.as_deref(),
                &text,
            ))
            .map(|namespace| {
                destination = Some(format!("ConfigMap {namespace}/{name}"));
            })
            .map_err(|e| e.to_string()),
        (None, None) => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot write the document: {e}"))
        }
    };
    if let Err(e) = written {
        eprintln!("{}", terminal::line(&format!("kura-agent baseline: {e}")));
        return ExitCode::from(EXIT_FAIL);
    }
    if let Some(path) = &args.out {
        destination = Some(path.display().to_string());
    }
    if let Some(destination) = &destination {
        let mut out = std::io::stdout().lock();
        for node in doc.nodes.iter().filter(|n| n.sampled) {
            let summary = format!(
                "{}: sampled, fdTimeoutCount {}, peerConnectionFailures {}, outboxMessages {}{}",
                node.url,
                count(node.fd_timeout_count),
                count(node.peer_connection_failures),
                count(node.outbox_messages),
                node.incarnation
                    .as_deref()
                    .map_or_else(String::new, |i| format!(", incarnation {i}"))
            );
            let _ = writeln!(out, "{}", terminal::line(&summary));
        }
        let written = format!(
            "baseline of {}/{} nodes written to {} ({})",
            doc.aggregate.sampled_pods,
            doc.expected_pods,
            destination,
            if doc.aggregate.soak_eligible {
                "soak-eligible"
            } else {
                "not soak-eligible: a check against it compares no counters"
            }
        );
        let _ = writeln!(out, "{}", terminal::line(&written));
    }
    let mut failed = false;
    for (url, why) in doc.unsampled() {
        eprintln!(
            "{}",
            terminal::line(&format!("kura-agent baseline: {url}: not sampled: {why}"))
        );
        failed = true;
    }
    if failed {
        ExitCode::from(EXIT_FAIL)
    } else {
        ExitCode::from(EXIT_PASS)
    }
}

fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "absent".to_owned(), |v| v.to_string())
}

fn usage(message: &str) -> ExitCode {
    eprintln!(
        "{}",
        terminal::line(&format!("kura-agent baseline: {message}"))
    );
    ExitCode::from(EXIT_USAGE)
}
