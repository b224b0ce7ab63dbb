//! The readable line `kura-agent check` prints per poll without `--json`.

use std::fmt::Write as _;

use kura_gate::VerdictKind;
use kura_schemas::Signal;

use super::judge::{BaselineSource, PollReport};
use crate::tools::count;

/// One poll as one line: elapsed time, poll number, `verdict=… signal=…`,
/// then why, the nodes behind it, the sampled count and the time left.
pub fn readable(report: &PollReport) -> String {
    let signal = report.signal.map_or("none", Signal::as_str);
    let mut line = format!(
        "+{:.1}s poll {} verdict={} signal={signal}:",
        report.elapsed_seconds,
        report.poll,
        report.verdict.as_str()
    );
    let h = &report.health;
    let sampled = format!("{}/{} nodes sampled", h.sampled_pods, h.expected_pods);
    if report.poll == 0 {
        let b = &report.baseline;
        if report.baseline_source == BaselineSource::File {
            let _ = write!(
                line,
                " baseline from the file, taken {};",
                report.baseline_taken_at
            );
        }
        let _ = write!(
            line,
            " baseline fdTimeoutCount {}, peerConnectionFailures {}, outboxMessages {} ({});",
            count(b.fd_timeout_count),
            count(b.peer_connection_failures),
            count(b.outbox_messages),
            if report.baseline_eligible {
                "soak-eligible"
            } else {
                "not soak-eligible: counters will not be compared"
            }
        );
    }
    match (report.verdict, report.signal) {
        (VerdictKind::Pass, _) => {
            let _ = write!(
                line,
                " healthy without a break since the soak started; {sampled}"
            );
        }
        (_, Some(Signal::Soaking)) => {
            let _ = write!(
                line,
                " healthy, {}s of soak left; {sampled}",
                report.soak_remaining_seconds.unwrap_or(0)
            );
        }
        (_, Some(Signal::WaveDeadlineExceeded)) => {
            let _ = write!(line, " timed out after {:.0}s", report.elapsed_seconds);
            match report.evidence.get(1) {
                Some(cause) => {
                    let _ = write!(
                        line,
                        "; last failing: {}: {}",
                        cause.signal,
                        cause.figures()
                    );
                }
                None => {
                    if let Some(detail) = report.evidence.first().and_then(|e| e.detail.as_ref()) {
                        let _ = write!(line, "; {detail}");
                    }
                }
            }
            if !report.nodes.is_empty() {
                let _ = write!(line, "; nodes: {}", nodes_with_reasons(report));
            }
            let _ = write!(line, "; {sampled}");
        }
        _ => {
            if let Some(e) = report.evidence.first() {
                line.push(' ');
                line.push_str(&e.figures());
            }
            if !report.nodes.is_empty() {
                let _ = write!(line, "; nodes: {}", nodes_with_reasons(report));
            }
            let _ = write!(line, "; {sampled}");
        }
    }
    if !report.is_final {
        let _ = write!(line, "; timeout in {}s", report.timeout_remaining_seconds);
    }
    line
}

/// The implicated nodes, each with its poll error when it has one.
fn nodes_with_reasons(report: &PollReport) -> String {
    report
        .nodes
        .iter()
        .map(|n| {
            match report
                .health
                .pods
                .iter()
                .find(|p| *p.name == **n)
                .and_then(|p| p.error.as_deref())
            {
                Some(error) => format!("{n} ({error})"),
                None => n.clone(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
