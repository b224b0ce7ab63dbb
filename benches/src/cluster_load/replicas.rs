//! Figures per replica and how the run's top-level figures are made of
//! them. With one replica the top-level figures are that replica's. With
//! `--replicas N > 1` (sharding on):
//!
//! - **summed** over the replicas: CPU share, polls, failed polls, status
//!   writes, bytes written and Events per second, owned instances (the
//!   fleet's cost; the owned sum equals the instance count when each
//!   instance has exactly one owner); bytes per write are the summed bytes
//!   over the summed writes;
//! - **the largest replica's**: RSS median, RSS max and peak RSS of each
//!   phase, and the run's `peak_rss_mib` (what each replica's memory limit
//!   must hold); `total_peak_rss_mib` is the sum of the replicas' peaks;
//! - API requests stay the agents' user's, over every replica (the audit
//!   log cannot tell the replicas apart: they share one user), so each
//!   replica's own API figures are absent (`null`), not zero.

use crate::cluster_load::PhaseFigures;
use crate::cluster_load::agents::per_write;
use std::collections::BTreeMap;

/// The agent's gauge of the instances a replica owns (sharding on).
pub const OWNED_INSTANCES_METRIC: &str = "kura_agent_owned_instances";

/// One replica's figures over the run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReplicaFigures {
    /// `--agent-identity` (`None`: one agent, its default identity).
    pub identity: Option<String>,
    /// Process id.
    pub pid: u32,
    /// Its log file.
    pub log: String,
    /// `VmHWM` at the end of the run, MiB.
    pub peak_rss_mib: f64,
    /// Start-up: from the start until every instance had a status.
    pub startup: PhaseFigures,
    /// At rest.
    pub rest: PhaseFigures,
    /// With instances in a rollout.
    pub rollout: PhaseFigures,
    /// Lines of its log at level WARN.
    pub log_warnings: usize,
    /// Lines of its log at level ERROR.
    pub log_errors: usize,
}

impl ReplicaFigures {
    /// How the replica is named in tables and bound messages.
    pub fn name(&self) -> &str {
        self.identity.as_deref().unwrap_or("agent")
    }
}

/// One phase's top-level figures from the replicas' (module docs): rates
/// and CPU summed, memory the largest replica's, owned instances summed
/// when every replica reports them. API figures are left empty (they come
/// from the audit log, for every replica at once).
pub fn combine(replicas: &[PhaseFigures]) -> PhaseFigures {
    let max = |f: fn(&PhaseFigures) -> f64| replicas.iter().map(f).fold(0.0, f64::max);
    let sum = |f: fn(&PhaseFigures) -> f64| replicas.iter().map(f).sum::<f64>();
    let owned = if replicas.is_empty() {
        None
    } else {
        replicas
            .iter()
            .map(|p| p.owned_instances)
            .sum::<Option<f64>>()
    };
    PhaseFigures {
        seconds: max(|p| p.seconds),
        cpu_percent: sum(|p| p.cpu_percent),
        rss_median_mib: max(|p| p.rss_median_mib),
        rss_max_mib: max(|p| p.rss_max_mib),
        peak_rss_mib: max(|p| p.peak_rss_mib),
        polls_per_s: sum(|p| p.polls_per_s),
        failed_polls: sum(|p| p.failed_polls),
        status_writes_per_s: sum(|p| p.status_writes_per_s),
        status_write_bytes_per_s: sum(|p| p.status_write_bytes_per_s),
        status_write_bytes_per_write: per_write(
            sum(|p| p.status_write_bytes_per_s),
            sum(|p| p.status_writes_per_s),
        ),
        status_writes_per_instance_per_min: None,
        status_write_bytes_per_instance_per_min: None,
        events_per_s: sum(|p| p.events_per_s),
        owned_instances: owned,
        api_requests_per_s: None,
        api_by_kind: BTreeMap::new(),
        apiserver: BTreeMap::new(),
    }
}

/// The per-replica table (printed when more than one replica ran).
pub fn replica_table(replicas: &[ReplicaFigures]) -> String {
    let mut out = format!(
        "per replica ({} replicas sharding; the rows above: CPU, polls, writes, events and owned summed, RSS the largest replica's)\n",
        replicas.len()
    );
    out.push_str(&format!(
        "{:<10} {:<22} {:>6} {:>6} {:>10} {:>9} {:>9} {:>8} {:>7} {:>9}\n",
        "phase",
        "replica",
        "owned",
        "CPU %",
        "RSS median",
        "RSS max",
        "peak RSS",
        "polls/s",
        "failed",
        "writes/s"
    ));
    for (phase, pick) in [
        (
            "start-up",
            (|r| &r.startup) as fn(&ReplicaFigures) -> &PhaseFigures,
        ),
        ("at rest", |r| &r.rest),
        ("rollout", |r| &r.rollout),
    ] {
        for r in replicas {
            let p = pick(r);
            out.push_str(&format!(
                "{:<10} {:<22} {:>6} {:>6.1} {:>6.1} MiB {:>5.1} MiB {:>5.1} MiB {:>8.1} {:>7} {:>9.2}\n",
                phase,
                r.name(),
                p.owned_instances
                    .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}")),
                p.cpu_percent,
                p.rss_median_mib,
                p.rss_max_mib,
                p.peak_rss_mib,
                p.polls_per_s,
                p.failed_polls,
                p.status_writes_per_s,
            ));
        }
    }
    let peaks: Vec<String> = replicas
        .iter()
        .map(|r| {
            format!(
                "{} {:.1} MiB ({} warnings, {} errors)",
                r.name(),
                r.peak_rss_mib,
                r.log_warnings,
                r.log_errors
            )
        })
        .collect();
    out.push_str(&format!(
        "peak RSS per replica over the run: {}\n",
        peaks.join("; ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(cpu: f64, rss: f64, polls: f64, owned: Option<f64>) -> PhaseFigures {
        PhaseFigures {
            seconds: 10.0,
            cpu_percent: cpu,
            rss_median_mib: rss,
            rss_max_mib: rss + 1.0,
            peak_rss_mib: rss + 2.0,
            polls_per_s: polls,
            failed_polls: 1.0,
            status_writes_per_s: polls / 10.0,
            events_per_s: 0.5,
            owned_instances: owned,
            ..PhaseFigures::default()
        }
    }

    #[test]
    fn combine_sums_rates_and_takes_the_largest_replicas_memory() {
        let c = combine(&[
            phase(10.0, 30.0, 3.0, Some(33.0)),
            phase(20.0, 50.0, 4.0, Some(34.0)),
            phase(5.0, 40.0, 3.0, Some(33.0)),
        ]);
        assert!((c.cpu_percent - 35.0).abs() < 1e-9);
        assert!((c.polls_per_s - 10.0).abs() < 1e-9);
        assert!((c.failed_polls - 3.0).abs() < 1e-9);
        assert!((c.status_writes_per_s - 1.0).abs() < 1e-9);
        assert!((c.events_per_s - 1.5).abs() < 1e-9);
        assert!((c.rss_median_mib - 50.0).abs() < 1e-9);
        assert!((c.rss_max_mib - 51.0).abs() < 1e-9);
        assert!((c.peak_rss_mib - 52.0).abs() < 1e-9);
        assert_eq!(c.owned_instances, Some(100.0));
        assert_eq!(c.api_requests_per_s, None);
    }

    #[test]
    fn combine_of_one_replica_is_that_replica() {
        let one = phase(12.5, 44.0, 7.0, None);
        let c = combine(std::slice::from_ref(&one));
        assert!((c.cpu_percent - one.cpu_percent).abs() < 1e-9);
        assert!((c.rss_median_mib - one.rss_median_mib).abs() < 1e-9);
        assert!((c.peak_rss_mib - one.peak_rss_mib).abs() < 1e-9);
        assert!((c.polls_per_s - one.polls_per_s).abs() < 1e-9);
        assert_eq!(c.owned_instances, None);
    }

    #[test]
    fn owned_is_absent_when_a_replica_does_not_report_it() {
        let c = combine(&[phase(1.0, 1.0, 1.0, Some(50.0)), phase(1.0, 1.0, 1.0, None)]);
        assert_eq!(c.owned_instances, None, "absent is never zero");
        assert_eq!(combine(&[]).owned_instances, None);
    }
}
