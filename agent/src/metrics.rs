//! Every metric the agent exports: names as constants, their descriptions,
//! histogram buckets, and the recorder the debug server renders.
//!
//! Other modules record through the `metrics` macros with these constants
//! (`metrics::counter!(metrics::POLLS_TOTAL, "result" => "ok")`), so a name
//! is spelled in exactly one place.

use kura_schemas::{AgentVerdict, Signal};
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

/// Polls by `result` (`ok`, `timeout`, `refused`, `http_status`,
/// `invalid_report`, `too_large`, `identity_mismatch`, `no_address`, `error`).
pub const POLLS_TOTAL: &str = "kura_agent_polls_total";
/// Poll latency in seconds (histogram).
pub const POLL_DURATION_SECONDS: &str = "kura_agent_poll_duration_seconds";
/// Duration of a whole sweep in seconds (histogram).
pub const SWEEP_DURATION_SECONDS: &str = "kura_agent_sweep_duration_seconds";
/// Status writes by `result` (see [`WRITE_RESULTS`]).
pub const STATUS_WRITES_TOTAL: &str = "kura_agent_status_writes_total";
/// Writes whose fields the API server pruned (the CRD is too old).
pub const STATUS_WRITES_PRUNED_TOTAL: &str = "kura_agent_status_writes_pruned_total";
/// Instances with a desired status not yet written.
pub const PENDING_WRITES: &str = "kura_agent_pending_writes";
/// Instances tracked.
pub const INSTANCES_TRACKED: &str = "kura_agent_instances_tracked";
/// Pods tracked.
pub const PODS_TRACKED: &str = "kura_agent_pods_tracked";
/// Counter resets absorbed, by `counter` (`fd_timeout_count`,
/// `peer_connection_failure_count`).
pub const COUNTER_RESETS_TOTAL: &str = "kura_agent_counter_resets_total";
/// Instances by the signal of their current verdict (`signal` = a
/// [`Signal`] wire name, or `none` when healthy).
pub const INSTANCES_BY_SIGNAL: &str = "kura_agent_instances_by_signal";
/// Instances by verdict (`verdict` = `healthy`, `unhealthy`, `hard_stop`).
pub const INSTANCES_BY_VERDICT: &str = "kura_agent_instances_by_verdict";
/// Watch errors by `resource` (`kurainstances`, `pods`).
pub const WATCH_ERRORS_TOTAL: &str = "kura_agent_watch_errors_total";

/// Live members of the agent group (sharding on).
pub const AGENT_MEMBERS: &str = "kura_agent_members";
/// Instances this replica owns (sharding on).
pub const OWNED_INSTANCES: &str = "kura_agent_owned_instances";
/// Instances gained or lost by this replica, by `change` (`gained`,
/// `lost`).
pub const OWNERSHIP_CHANGES_TOTAL: &str = "kura_agent_ownership_changes_total";
/// Renewals of this replica's Lease by `result` (`ok`, `error`).
pub const LEASE_RENEWALS_TOTAL: &str = "kura_agent_lease_renewals_total";

/// The `result` label values of [`STATUS_WRITES_TOTAL`] (`fenced`: not sent,
/// this replica may not write the instance).
pub const WRITE_RESULTS: [&str; 7] = [
    "applied",
    "pruned",
    "conflict",
    "not_found",
    "forbidden",
    "error",
    "fenced",
];

/// The `signal` label of a healthy instance in [`INSTANCES_BY_SIGNAL`].
pub const NO_SIGNAL: &str = "none";

/// Latency buckets (seconds) for poll durations.
pub const POLL_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0];
/// Buckets (seconds) for sweep durations.
pub const SWEEP_BUCKETS: [f64; 9] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Registers the description and unit of every metric with the installed
/// recorder. Call once after installing it.
pub fn describe() {
    describe_counter!(POLLS_TOTAL, Unit::Count, "Pod polls by result.");
    describe_histogram!(
        POLL_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of one pod poll."
    );
    describe_histogram!(
        SWEEP_DURATION_SECONDS,
        Unit::Seconds,
        "Duration of one sweep over every instance."
    );
    describe_counter!(
        STATUS_WRITES_TOTAL,
        Unit::Count,
        "Status writes (server-side apply) by result."
    );
    describe_counter!(
        STATUS_WRITES_PRUNED_TOTAL,
        Unit::Count,
        "Status writes whose rolloutHealth/rolloutGate fields did not come back (CRD too old)."
    );
    describe_gauge!(
        PENDING_WRITES,
        Unit::Count,
        "Instances with a status waiting to be written."
    );
    describe_gauge!(INSTANCES_TRACKED, Unit::Count, "KuraInstances tracked.");
    describe_gauge!(PODS_TRACKED, Unit::Count, "Pods tracked.");
    describe_counter!(
        COUNTER_RESETS_TOTAL,
        Unit::Count,
        "Counter resets absorbed by clamping."
    );
    describe_gauge!(
        INSTANCES_BY_SIGNAL,
        Unit::Count,
        "Instances by the signal of their gate verdict."
    );
    describe_gauge!(
        INSTANCES_BY_VERDICT,
        Unit::Count,
        "Instances by gate verdict."
    );
    describe_counter!(
        WATCH_ERRORS_TOTAL,
        Unit::Count,
        "Errors of the Kubernetes watches."
    );
    describe_gauge!(
        AGENT_MEMBERS,
        Unit::Count,
        "Live members of the agent group (replicas with a current Lease)."
    );
    describe_gauge!(
        OWNED_INSTANCES,
        Unit::Count,
        "KuraInstances this replica owns."
    );
    describe_counter!(
        OWNERSHIP_CHANGES_TOTAL,
        Unit::Count,
        "KuraInstances gained or lost by this replica."
    );
    describe_counter!(
        LEASE_RENEWALS_TOTAL,
        Unit::Count,
        "Renewals of this replica's Lease by result."
    );
}

/// A Prometheus builder with the agent's histogram buckets, without the
/// exporter's HTTP listener or push gateway: the debug server renders
/// `/metrics`.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(POLL_DURATION_SECONDS.to_owned()),
            &POLL_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(SWEEP_DURATION_SECONDS.to_owned()),
            &SWEEP_BUCKETS,
        )
}

/// Counts per label value.
pub type LabelCounts = Vec<(&'static str, u64)>;

/// How many instances carry each signal and each verdict, every label value
/// included (zeros too, so a signal that cleared drops to 0 instead of
/// keeping its last value). `None` verdicts (no gate yet) are not counted.
pub fn count_by_signal<'a>(
    verdicts: impl IntoIterator<Item = Option<(AgentVerdict, Option<Signal>)>> + 'a,
) -> (LabelCounts, LabelCounts) {
    let mut by_signal: LabelCounts = Signal::ALL
        .iter()
        .map(|s| (s.as_str(), 0))
        .chain([(NO_SIGNAL, 0)])
        .collect();
    let mut by_verdict: LabelCounts = [
        AgentVerdict::Healthy,
        AgentVerdict::Unhealthy,
        AgentVerdict::HardStop,
    ]
    .iter()
    .map(|v| (v.as_str(), 0))
    .collect();
    for (verdict, signal) in verdicts.into_iter().flatten() {
        let label = signal.map_or(NO_SIGNAL, Signal::as_str);
        if let Some(entry) = by_signal.iter_mut().find(|(l, _)| *l == label) {
            entry.1 += 1;
        }
        if let Some(entry) = by_verdict.iter_mut().find(|(l, _)| *l == verdict.as_str()) {
            entry.1 += 1;
        }
    }
    (by_signal, by_verdict)
}

/// Sets [`INSTANCES_BY_SIGNAL`] and [`INSTANCES_BY_VERDICT`] from
/// [`count_by_signal`].
pub fn publish_verdicts(
    verdicts: impl IntoIterator<Item = Option<(AgentVerdict, Option<Signal>)>>,
) {
    let (by_signal, by_verdict) = count_by_signal(verdicts);
    for (signal, n) in by_signal {
        gauge!(INSTANCES_BY_SIGNAL, "signal" => signal).set(n as f64);
    }
    for (verdict, n) in by_verdict {
        gauge!(INSTANCES_BY_VERDICT, "verdict" => verdict).set(n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_gets_a_gauge_value_even_zero() {
        let (by_signal, by_verdict) = count_by_signal([
            Some((AgentVerdict::Unhealthy, Some(Signal::NotReady))),
            Some((AgentVerdict::Unhealthy, Some(Signal::NotReady))),
            Some((AgentVerdict::Healthy, None)),
            None,
        ]);
        assert_eq!(by_signal.len(), Signal::ALL.len() + 1);
        let get = |l: &str| by_signal.iter().find(|(k, _)| *k == l).map(|(_, n)| *n);
        assert_eq!(get("not_ready"), Some(2));
        assert_eq!(get(NO_SIGNAL), Some(1));
        assert_eq!(get("ring_skew"), Some(0));
        assert_eq!(
            by_verdict,
            vec![("healthy", 1), ("unhealthy", 2), ("hard_stop", 0)]
        );
    }

    #[test]
    fn rendered_metrics_use_the_declared_names() {
        let recorder = prometheus_builder().expect("buckets").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe();
            metrics::counter!(STATUS_WRITES_TOTAL, "result" => "applied").increment(2);
            metrics::histogram!(POLL_DURATION_SECONDS).record(0.02);
            publish_verdicts([Some((
                AgentVerdict::HardStop,
                Some(Signal::MemoryPressureCritical),
            ))]);
        });
        let text = handle.render();
        assert!(
            text.contains("kura_agent_status_writes_total{result=\"applied\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kura_agent_poll_duration_seconds_bucket{le=\"0.025\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kura_agent_instances_by_signal{signal=\"memory_pressure_critical\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kura_agent_instances_by_signal{signal=\"not_ready\"} 0"),
            "{text}"
        );
    }
}
