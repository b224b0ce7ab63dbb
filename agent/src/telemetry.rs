//! Every metric the agent records under `kura_agent_*`: names as constants,
//! one [`Metric`] entry each in [`METRICS`] (kind, help text, label and
//! every value it takes), histogram buckets, and the recorder the debug
//! server renders. A leaf: every layer may record through it, it imports
//! nothing of the crate. (The per-instance `kura_instance_*` series are
//! rendered from the fleet view by the debug server.)
//!
//! Other modules record through the `metrics` macros with these constants
//! (`metrics::counter!(telemetry::POLLS_TOTAL, "result" => "ok")`), so a
//! name is spelled in exactly one place; a test of the crate checks that
//! every name recorded is in [`METRICS`] exactly once and that every label
//! value documented here is one the code records.

use kura_schemas::{AgentVerdict, Signal};
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use label::*;

/// Polls by `result` ([`POLL_RESULTS`]).
pub const POLLS_TOTAL: &str = "kura_agent_polls_total";
/// `GET /status/cluster` reads of pull-sync pods by `result`
/// ([`CLUSTER_READ_RESULTS`]).
pub const CLUSTER_READS_TOTAL: &str = "kura_agent_cluster_reads_total";
/// Retries of a poll after a connection-level failure (counted apart from
/// the failures themselves).
pub const POLL_RETRIES_TOTAL: &str = "kura_agent_poll_retries_total";
/// TCP connections the poller opened (with keep-alive, about one per pod
/// over the agent's life: a kept connection is reused sweep after sweep).
pub const POLL_CONNECTIONS_OPENED_TOTAL: &str = "kura_agent_poll_connections_opened_total";
/// Poll latency in seconds (histogram, one observation per attempt).
pub const POLL_DURATION_SECONDS: &str = "kura_agent_poll_duration_seconds";
/// Duration of one instance's sweep in seconds (histogram).
pub const SWEEP_DURATION_SECONDS: &str = "kura_agent_sweep_duration_seconds";
/// Time between the starts of two consecutive sweeps of one instance, in
/// seconds (histogram), by `cadence` ([`CADENCES`]: the interval that was
/// due, or `image_change` when a `spec.image` change cut it short): the
/// interval the agent achieves.
pub const SWEEP_INTERVAL_SECONDS: &str = "kura_agent_sweep_interval_seconds";
/// Sweeps that took longer than their interval, by `cadence`
/// ([`CADENCES`]): the next sweep of that instance started late, at once
/// (the agent is not keeping up with the cadence).
pub const SWEEP_OVERRUNS_TOTAL: &str = "kura_agent_sweep_overruns_total";
/// Instances by the cadence they are swept at now (`cadence` = `rollout`
/// or `steady`).
pub const INSTANCES_BY_CADENCE: &str = "kura_agent_swept_instances";
/// Status writes by `result` ([`WRITE_RESULTS`]).
pub const STATUS_WRITES_TOTAL: &str = "kura_agent_status_writes_total";
/// Bytes of status write bodies sent (the JSON of each server-side apply,
/// the companion's creation included).
pub const STATUS_WRITE_BYTES_TOTAL: &str = "kura_agent_status_write_bytes_total";
/// Writes whose fields the API server pruned (the CRD is too old).
pub const STATUS_WRITES_PRUNED_TOTAL: &str = "kura_agent_status_writes_pruned_total";
/// The status heartbeat now, in seconds: an unchanged status is rewritten
/// this often (`--heartbeat` up to `--heartbeat-max`, by the fleet's
/// size).
pub const STATUS_HEARTBEAT_SECONDS: &str = "kura_agent_status_heartbeat_seconds";
/// Instances with a desired status not yet written.
pub const PENDING_WRITES: &str = "kura_agent_pending_writes";
/// Instances tracked.
pub const INSTANCES_TRACKED: &str = "kura_agent_instances_tracked";
/// Pods tracked.
pub const PODS_TRACKED: &str = "kura_agent_pods_tracked";
/// Counter resets absorbed by clamping, over every instance (no label).
pub const COUNTER_RESETS_TOTAL: &str = "kura_agent_counter_resets_total";
/// Instances by the signal of their current verdict (`signal` = a
/// [`Signal`] wire name, or [`NO_SIGNAL`] when healthy).
pub const INSTANCES_BY_SIGNAL: &str = "kura_agent_signalled_instances";
/// Instances by verdict (`verdict` = `healthy`, `unhealthy`, `hard_stop`,
/// `suspended`).
pub const INSTANCES_BY_VERDICT: &str = "kura_agent_judged_instances";
/// Watch errors by `resource` ([`WATCH_RESOURCES`]).
pub const WATCH_ERRORS_TOTAL: &str = "kura_agent_watch_errors_total";

/// Live members of the agent group (sharding on).
pub const AGENT_MEMBERS: &str = "kura_agent_members";
/// Instances this replica owns (sharding on).
pub const OWNED_INSTANCES: &str = "kura_agent_owned_instances";
/// Watch units this replica owns (sharding on).
pub const OWNED_UNITS: &str = "kura_agent_owned_units";
/// Instances gained or lost by this replica, by `change`
/// ([`OWNERSHIP_CHANGES`]).
pub const OWNERSHIP_CHANGES_TOTAL: &str = "kura_agent_ownership_changes_total";
/// Gauge: the watch units this replica watches (sharding by unit).
pub const WATCHED_UNITS: &str = "kura_agent_watched_units";
/// Gauge: instances and companions without the shard label seen by this
/// replica (in no unit until labelled; sharding by unit).
pub const UNLABELLED_OBJECTS: &str = "kura_agent_unlabelled_objects";
/// Counter: shard label stamps by `result` ([`STAMP_RESULTS`]).
pub const SHARD_LABEL_STAMPS_TOTAL: &str = "kura_agent_shard_label_stamps_total";
/// Counter: objects whose shard label does not match their bucket,
/// ignored, by `resource` ([`MISMATCH_RESOURCES`]).
pub const SHARD_LABEL_MISMATCHES_TOTAL: &str = "kura_agent_shard_label_mismatches_total";
/// Renewals of this replica's Lease by `result` ([`RENEWAL_RESULTS`]).
pub const LEASE_RENEWALS_TOTAL: &str = "kura_agent_lease_renewals_total";
/// Counter: `kura.tuist.dev/gate-config` annotations refused (once per
/// distinct text per instance).
pub const GATE_CONFIG_REFUSED_TOTAL: &str = "kura_agent_gate_config_refused_total";
/// Gauge: instances judged by the cluster's gate config because their own
/// annotation was refused.
pub const GATE_CONFIG_REFUSED_INSTANCES: &str = "kura_agent_gate_config_refused_instances";
/// Gauge: the publication target in use, by `target`
/// ([`PUBLICATION_TARGETS`]): 1 for the one chosen at start, 0 for the
/// other.
pub const PUBLICATION_TARGET: &str = "kura_agent_publication_target";
/// Gauge: instances whose `status.rolloutHealth` another manager also
/// writes (instance mode): the agent stopped writing them
/// (`StatusContested`).
pub const STATUS_CONTESTED_INSTANCES: &str = "kura_agent_status_contested_instances";
/// Gauge: instances whose Kura controller's own `rolloutHealth` has
/// disagreed with the agent's aggregate for longer than two of the
/// controller's cadences, by `field` ([`CONTROLLER_FIELDS`]; companion
/// mode).
pub const CONTROLLER_DISAGREEMENTS: &str = "kura_agent_controller_disagreements";
/// Kubernetes Events about instances by `result` ([`EVENT_RESULTS`]).
pub const EVENTS_TOTAL: &str = "kura_agent_events_total";

/// Every label value the agent records, one constant each: the modules
/// that record a labelled series import these (and compute their labels
/// from them), so a value is spelled once, here, and the lists below are
/// made of the same constants.
pub mod label {
    /// The `config` label of the shadow verdict's per-instance series
    /// (`kura_instance_shadow_gate_*`, rendered by the debug server).
    pub const SHADOW: &str = "shadow";
    /// A poll, cluster read or Lease renewal that succeeded.
    pub const OK: &str = "ok";
    /// A cluster read of a pod that does not measure its lag.
    pub const NOT_MEASURED: &str = "not_measured";
    /// No answer in time.
    pub const TIMEOUT: &str = "timeout";
    /// The connection was refused.
    pub const REFUSED: &str = "refused";
    /// The connection failed otherwise (or the pod has no address).
    pub const CONNECT_ERROR: &str = "connect_error";
    /// An HTTP status other than 200.
    pub const HTTP_STATUS: &str = "http_status";
    /// A body over the limit.
    pub const TOO_LARGE: &str = "too_large";
    /// The body could not be read (framing, coding, transport).
    pub const BODY_ERROR: &str = "body_error";
    /// A body that is no valid node report.
    pub const INVALID_REPORT: &str = "invalid_report";
    /// A report of another pod than the one polled.
    pub const IDENTITY_MISMATCH: &str = "identity_mismatch";
    /// A `/status/cluster` body that does not parse.
    pub const INVALID_CLUSTER: &str = "invalid_cluster";
    /// The API server's port-forward to a node-local instance's pod failed.
    pub const PORT_FORWARD: &str = "port_forward";
    /// A status write applied.
    pub const APPLIED: &str = "applied";
    /// A status write the API server pruned fields of.
    pub const PRUNED: &str = "pruned";
    /// A status write refused on a conflict.
    pub const CONFLICT: &str = "conflict";
    /// A status write to an instance that is gone.
    pub const NOT_FOUND: &str = "not_found";
    /// A status write refused by RBAC.
    pub const FORBIDDEN: &str = "forbidden";
    /// Any other failure (status writes, Lease renewals).
    pub const ERROR: &str = "error";
    /// A status write not sent: this replica may not write the instance.
    pub const FENCED: &str = "fenced";
    /// A status write not sent: another manager writes the instance's
    /// `status.rolloutHealth` (instance mode).
    pub const CONTESTED: &str = "contested";
    /// The companion (`KuraInstanceHealth`) watch.
    pub const KURAINSTANCEHEALTHS: &str = "kurainstancehealths";
    /// The `instance` publication target.
    pub const INSTANCE: &str = "instance";
    /// The `companion` publication target.
    pub const COMPANION: &str = "companion";
    /// `rolloutHealth.ready`.
    pub const READY: &str = "ready";
    /// `rolloutHealth.serving`.
    pub const SERVING: &str = "serving";
    /// The rollout cadence.
    pub const ROLLOUT: &str = "rollout";
    /// The steady cadence.
    pub const STEADY: &str = "steady";
    /// A sweep woken by a `spec.image` change.
    pub const IMAGE_CHANGE: &str = "image_change";
    /// The `KuraInstance` watch.
    pub const KURAINSTANCES: &str = "kurainstances";
    /// The Pod watch.
    pub const PODS: &str = "pods";
    /// The sharding group's Lease watch.
    pub const LEASES: &str = "leases";
    /// An instance this replica now owns.
    pub const GAINED: &str = "gained";
    /// An instance this replica no longer owns.
    pub const LOST: &str = "lost";
    /// An Event created or patched.
    pub const PUBLISHED: &str = "published";
    /// An Event the API server refused.
    pub const FAILED: &str = "failed";
    /// A transition over the per-instance rate bound (coalesced).
    pub const SUPPRESSED: &str = "suppressed";
    /// A transition dropped: the publisher's queue was full.
    pub const DROPPED: &str = "dropped";
}

/// The `result` label values of [`POLLS_TOTAL`]: `ok`, or why the poll
/// failed.
pub const POLL_RESULTS: [&str; 11] = [
    OK,
    TIMEOUT,
    REFUSED,
    CONNECT_ERROR,
    HTTP_STATUS,
    TOO_LARGE,
    BODY_ERROR,
    INVALID_REPORT,
    IDENTITY_MISMATCH,
    INVALID_CLUSTER,
    PORT_FORWARD,
];

/// The `result` label values of [`CLUSTER_READS_TOTAL`]: `ok`,
/// `not_measured` (HTTP 404 or no `sync_links`: the lag is absent), or why
/// the read failed (the pod's sample then fails too).
pub const CLUSTER_READ_RESULTS: [&str; 11] = [
    OK,
    NOT_MEASURED,
    TIMEOUT,
    REFUSED,
    CONNECT_ERROR,
    HTTP_STATUS,
    TOO_LARGE,
    BODY_ERROR,
    INVALID_CLUSTER,
    IDENTITY_MISMATCH,
    PORT_FORWARD,
];

/// The `result` label values of [`STATUS_WRITES_TOTAL`] (`fenced`: not sent,
/// this replica may not write the instance).
pub const WRITE_RESULTS: [&str; 8] = [
    APPLIED, PRUNED, CONFLICT, NOT_FOUND, FORBIDDEN, ERROR, FENCED, CONTESTED,
];

/// The `target` label values of [`PUBLICATION_TARGET`].
pub const PUBLICATION_TARGETS: [&str; 2] = [INSTANCE, COMPANION];

/// The `field` label values of [`CONTROLLER_DISAGREEMENTS`].
pub const CONTROLLER_FIELDS: [&str; 2] = [READY, SERVING];

/// The `cadence` label values of [`SWEEP_INTERVAL_SECONDS`] and
/// [`SWEEP_OVERRUNS_TOTAL`] (the runner's `cadence` module records them);
/// [`INSTANCES_BY_CADENCE`] takes the first two.
pub const CADENCES: [&str; 3] = [ROLLOUT, STEADY, IMAGE_CHANGE];

/// The `resource` label values of [`WATCH_ERRORS_TOTAL`] (`leases`: the
/// sharding group's Lease watch).
pub const WATCH_RESOURCES: [&str; 4] = [KURAINSTANCES, PODS, LEASES, KURAINSTANCEHEALTHS];

/// The `change` label values of [`OWNERSHIP_CHANGES_TOTAL`].
pub const OWNERSHIP_CHANGES: [&str; 2] = [GAINED, LOST];

/// The `result` label values of [`LEASE_RENEWALS_TOTAL`].
pub const RENEWAL_RESULTS: [&str; 2] = [OK, ERROR];

/// The `result` label values of [`EVENTS_TOTAL`]: `published` and
/// `failed` are API calls (a create, or a patch of an Event series);
/// `suppressed`: a transition over the per-instance rate bound (coalesced,
/// the latest published later); `dropped`: the publisher's queue was full.
pub const EVENT_RESULTS: [&str; 4] = [PUBLISHED, FAILED, SUPPRESSED, DROPPED];
/// The `result` values of [`SHARD_LABEL_STAMPS_TOTAL`].
pub const STAMP_RESULTS: [&str; 3] = [OK, ERROR, DROPPED];
/// The `resource` values of [`SHARD_LABEL_MISMATCHES_TOTAL`].
pub const MISMATCH_RESOURCES: [&str; 2] = [KURAINSTANCES, KURAINSTANCEHEALTHS];

/// The `signal` label of a healthy instance in [`INSTANCES_BY_SIGNAL`].
pub const NO_SIGNAL: &str = "none";

/// Latency buckets (seconds) for poll durations.
pub const POLL_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0];
/// Buckets (seconds) for sweep durations.
pub const SWEEP_BUCKETS: [f64; 9] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Buckets (seconds) for the achieved sweep interval: around the default
/// 2 s rollout and 30 s steady intervals (±10 % jitter), and well past them.
pub const INTERVAL_BUCKETS: [f64; 14] = [
    0.5, 1.0, 1.8, 2.2, 2.5, 3.0, 5.0, 10.0, 27.0, 33.0, 40.0, 60.0, 120.0, 180.0,
];

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets, in seconds.
    Histogram,
}

/// One metric's documentation: its name, kind, help text and, when it has
/// one, its label and every value that label takes.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// The series name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// The label, if the metric has one.
    pub label: Option<Label>,
}

/// A metric's label: its name and every value the agent records for it.
#[derive(Debug, Clone, Copy)]
pub struct Label {
    /// The label name.
    pub name: &'static str,
    /// Every value it takes.
    pub values: fn() -> Vec<&'static str>,
}

const fn plain(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        help,
        label: None,
    }
}

/// Every `kura_agent_*` metric, once each.
pub const METRICS: [Metric; 35] = [
    Metric {
        name: POLLS_TOTAL,
        kind: Kind::Counter,
        help: "Pod polls by result.",
        label: Some(Label {
            name: "result",
            values: || POLL_RESULTS.to_vec(),
        }),
    },
    Metric {
        name: CLUSTER_READS_TOTAL,
        kind: Kind::Counter,
        help: "GET /status/cluster reads of pull-sync pods by result.",
        label: Some(Label {
            name: "result",
            values: || CLUSTER_READ_RESULTS.to_vec(),
        }),
    },
    plain(
        POLL_RETRIES_TOTAL,
        Kind::Counter,
        "Poll retries after a connection-level failure.",
    ),
    plain(
        POLL_CONNECTIONS_OPENED_TOTAL,
        Kind::Counter,
        "TCP connections opened to pods (kept-alive ones are reused).",
    ),
    plain(
        POLL_DURATION_SECONDS,
        Kind::Histogram,
        "Latency of one pod poll attempt.",
    ),
    plain(
        SWEEP_DURATION_SECONDS,
        Kind::Histogram,
        "Duration of one instance's sweep: poll, fold, judge.",
    ),
    Metric {
        name: SWEEP_INTERVAL_SECONDS,
        kind: Kind::Histogram,
        help: "Time between the starts of two sweeps of one instance, by the cadence that was due.",
        label: Some(Label {
            name: "cadence",
            values: || CADENCES.to_vec(),
        }),
    },
    Metric {
        name: SWEEP_OVERRUNS_TOTAL,
        kind: Kind::Counter,
        help: "Sweeps that took longer than their interval (the next started late).",
        label: Some(Label {
            name: "cadence",
            values: || CADENCES[..2].to_vec(),
        }),
    },
    Metric {
        name: INSTANCES_BY_CADENCE,
        kind: Kind::Gauge,
        help: "KuraInstances by the cadence they are swept at (rollout or steady).",
        label: Some(Label {
            name: "cadence",
            values: || CADENCES[..2].to_vec(),
        }),
    },
    Metric {
        name: STATUS_WRITES_TOTAL,
        kind: Kind::Counter,
        help: "Status writes (server-side apply) by result.",
        label: Some(Label {
            name: "result",
            values: || WRITE_RESULTS.to_vec(),
        }),
    },
    plain(
        STATUS_WRITE_BYTES_TOTAL,
        Kind::Counter,
        "Bytes of status write bodies sent to the API server (server-side apply JSON).",
    ),
    plain(
        STATUS_HEARTBEAT_SECONDS,
        Kind::Gauge,
        "The status heartbeat now (seconds): an unchanged status is rewritten this often; it grows with the fleet between --heartbeat and --heartbeat-max.",
    ),
    plain(
        STATUS_WRITES_PRUNED_TOTAL,
        Kind::Counter,
        "Status writes whose rolloutHealth/rolloutGate fields did not come back (CRD too old).",
    ),
    Metric {
        name: PUBLICATION_TARGET,
        kind: Kind::Gauge,
        help: "The publication target chosen at start (1), by target: instance (the KuraInstance's status) or companion (KuraInstanceHealth).",
        label: Some(Label {
            name: "target",
            values: || PUBLICATION_TARGETS.to_vec(),
        }),
    },
    plain(
        STATUS_CONTESTED_INSTANCES,
        Kind::Gauge,
        "KuraInstances whose status.rolloutHealth another manager also writes: the agent stopped writing them (use the companion target).",
    ),
    Metric {
        name: CONTROLLER_DISAGREEMENTS,
        kind: Kind::Gauge,
        help: "KuraInstances whose Kura controller's own rolloutHealth field has disagreed with the agent's aggregate for longer than two of its cadences, by field.",
        label: Some(Label {
            name: "field",
            values: || CONTROLLER_FIELDS.to_vec(),
        }),
    },
    plain(
        PENDING_WRITES,
        Kind::Gauge,
        "Instances with a status waiting to be written.",
    ),
    plain(INSTANCES_TRACKED, Kind::Gauge, "KuraInstances tracked."),
    plain(PODS_TRACKED, Kind::Gauge, "Pods tracked."),
    plain(
        COUNTER_RESETS_TOTAL,
        Kind::Counter,
        "Counter resets absorbed by clamping.",
    ),
    Metric {
        name: INSTANCES_BY_SIGNAL,
        kind: Kind::Gauge,
        help: "Instances by the signal of their gate verdict.",
        label: Some(Label {
            name: "signal",
            values: || {
                Signal::ALL
                    .iter()
                    .map(|s| s.as_str())
                    .chain([NO_SIGNAL])
                    .collect()
            },
        }),
    },
    Metric {
        name: INSTANCES_BY_VERDICT,
        kind: Kind::Gauge,
        help: "Instances by gate verdict.",
        label: Some(Label {
            name: "verdict",
            values: || VERDICTS.iter().map(|v| v.as_str()).collect(),
        }),
    },
    Metric {
        name: WATCH_ERRORS_TOTAL,
        kind: Kind::Counter,
        help: "Errors of the Kubernetes watches.",
        label: Some(Label {
            name: "resource",
            values: || WATCH_RESOURCES.to_vec(),
        }),
    },
    plain(
        AGENT_MEMBERS,
        Kind::Gauge,
        "Live members of the agent group (replicas with a current Lease).",
    ),
    plain(
        OWNED_INSTANCES,
        Kind::Gauge,
        "KuraInstances this replica owns.",
    ),
    plain(
        OWNED_UNITS,
        Kind::Gauge,
        "Watch units (groups of shard buckets) this replica owns.",
    ),
    plain(
        WATCHED_UNITS,
        Kind::Gauge,
        "Watch units this replica watches (sharding by unit).",
    ),
    plain(
        UNLABELLED_OBJECTS,
        Kind::Gauge,
        "KuraInstances and companions without the kura.tuist.dev/shard label (in no watch unit until labelled).",
    ),
    Metric {
        name: SHARD_LABEL_STAMPS_TOTAL,
        kind: Kind::Counter,
        help: "Shard labels stamped on instances and companions that lacked it, by result.",
        label: Some(Label {
            name: "result",
            values: || STAMP_RESULTS.to_vec(),
        }),
    },
    Metric {
        name: SHARD_LABEL_MISMATCHES_TOTAL,
        kind: Kind::Counter,
        help: "Objects whose kura.tuist.dev/shard label does not match their bucket (ignored), by resource.",
        label: Some(Label {
            name: "resource",
            values: || MISMATCH_RESOURCES.to_vec(),
        }),
    },
    Metric {
        name: OWNERSHIP_CHANGES_TOTAL,
        kind: Kind::Counter,
        help: "KuraInstances gained or lost by this replica.",
        label: Some(Label {
            name: "change",
            values: || OWNERSHIP_CHANGES.to_vec(),
        }),
    },
    plain(
        GATE_CONFIG_REFUSED_TOTAL,
        Kind::Counter,
        "Invalid kura.tuist.dev/gate-config annotations refused (once per distinct value per instance).",
    ),
    plain(
        GATE_CONFIG_REFUSED_INSTANCES,
        Kind::Gauge,
        "Instances judged by the cluster's gate config because their own annotation was refused.",
    ),
    Metric {
        name: LEASE_RENEWALS_TOTAL,
        kind: Kind::Counter,
        help: "Renewals of this replica's Lease by result.",
        label: Some(Label {
            name: "result",
            values: || RENEWAL_RESULTS.to_vec(),
        }),
    },
    Metric {
        name: EVENTS_TOTAL,
        kind: Kind::Counter,
        help: "Kubernetes Events about instances by result (published and failed are API calls).",
        label: Some(Label {
            name: "result",
            values: || EVENT_RESULTS.to_vec(),
        }),
    },
];

/// The verdicts counted in [`INSTANCES_BY_VERDICT`], in label order.
const VERDICTS: [AgentVerdict; 4] = AgentVerdict::ALL;

/// Registers the description and unit of every metric in [`METRICS`] with
/// the installed recorder. Call once after installing it.
pub fn describe() {
    for m in METRICS {
        match m.kind {
            Kind::Counter => describe_counter!(m.name, Unit::Count, m.help),
            Kind::Gauge => describe_gauge!(m.name, Unit::Count, m.help),
            Kind::Histogram => describe_histogram!(m.name, Unit::Seconds, m.help),
        }
    }
}

/// How often the recorder's histogram samples are drained into their
/// buckets ([`upkeep`]).
pub const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Drains the recorder's histogram samples into their buckets every
/// [`UPKEEP_EVERY`], forever (spawn it beside the recorder). The exporter
/// keeps each histogram sample until an upkeep or a scrape folds it in,
/// and `install_recorder` runs no upkeep of its own: an agent scraped
/// seldom or never kept every poll's and sweep's duration, growing
/// without bound.
pub async fn upkeep(handle: metrics_exporter_prometheus::PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
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
        )?
        .set_buckets_for_metric(
            Matcher::Full(SWEEP_INTERVAL_SECONDS.to_owned()),
            &INTERVAL_BUCKETS,
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
    let mut by_verdict: LabelCounts = VERDICTS.iter().map(|v| (v.as_str(), 0)).collect();
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
            vec![
                ("healthy", 1),
                ("unhealthy", 2),
                ("hard_stop", 0),
                ("suspended", 0)
            ]
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
            text.contains("kura_agent_signalled_instances{signal=\"memory_pressure_critical\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kura_agent_signalled_instances{signal=\"not_ready\"} 0"),
            "{text}"
        );
    }
}
