//! The one home of every signal the gate can name: [`SIGNALS`], one row
//! per signal with its wire name, its condition/Event reason, whether it is
//! a hard stop, its server-check number (and so the order the checks run
//! in), its words for people and the evidence fields a failure of it
//! fills. The gate (its wave judge, its restored-state validation, its
//! per-instance judge), the agent (its gate status, the debug pages'
//! check table, the metric labels `signal="…"`), the CLI and the C ABI's
//! vocabulary read these rows; none keeps a list of its own.
//!
//! A new signal is a variant of [`Signal`] and one row of [`SIGNALS`], in
//! the same position (a compile-time assertion holds the two in step).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Every signal the gate can name. The set is fixed so it can be a metric
/// label.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Converged and healthy, waiting for the soak to finish.
    Soaking,
    /// Not every server of the current wave runs the target yet.
    NotConverged,
    /// Server check 1 (hard stop): memory pressure 2.
    MemoryPressureCritical,
    /// Server check 2: no aggregate at all.
    SampleMissing,
    /// Server check 3: `sampledAt` absent or too old.
    SampleStale,
    /// Server check 4: `sampledAt` too far in the future.
    SampleInvalid,
    /// Server check 5: `sampledPods < expectedPods`.
    PodsUnsampled,
    /// Server check 6.
    NotReady,
    /// Server check 7.
    NotServing,
    /// Server check 8.
    RingSkew,
    /// Server check 9: old nodes' initial catch-up in flight.
    BootstrapInFlight,
    /// Server check 10: newer nodes' initial catch-up not settled
    /// (`backfillInitialCycle` pending, or a value this version does not know).
    BackfillPending,
    /// Server check 11.
    BackfillDegraded,
    /// Server check 12.
    BackfillBudgetExhausted,
    /// Server check 13.
    OutboxRegressed,
    /// Server check 14.
    FdTimeoutsRegressed,
    /// Server check 15.
    PeerConnectionFailuresRegressed,
    /// Hard stop: a server not converged whose deployment failed.
    DeploymentFailed,
    /// Hard stop: a converged server whose status is `failed`.
    ServerRegressedToFailed,
    /// Hard stop: the wave did not complete before its deadline.
    WaveDeadlineExceeded,
    /// Server check 16 (hard stop): the fenced-serving grant is in
    /// `Fencing`: no pod may write.
    ServingFenced,
    /// Server check 17: fenced serving with no pod holding a valid grant.
    NoValidWriter,
    /// Server check 18: replication lag (pull-sync nodes) above its band.
    ReplicationLagRegressed,
    /// Server check 19 (hard stop): an operator's update pause
    /// (`status.updatePaused`: `OnDelete` or a `partition`) holds pods on
    /// the old image and nothing will replace them.
    UpdatePaused,
    /// The agent's verdict `suspended`: the instance is suspended
    /// (`spec.suspended`, phase `Suspending`/`Suspended`), no pods to judge.
    InstanceSuspended,
}

/// A field of [`crate::Evidence`] that a signal's evidence may fill (its
/// camelCase key). `server` and `signal` are always there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvidenceField {
    /// `observed`: the value the check compared.
    Observed,
    /// `bandTop`: the top of the band, or the limit.
    BandTop,
    /// `baseline`: the (effective) baseline the band came from.
    Baseline,
    /// `detail`: the words of the failure.
    Detail,
    /// `fence`: the fence state (checks 16 and 17).
    Fence,
    /// `run`: the backlog's run (the drain rule of checks 13 and 18).
    Run,
    /// `updatePaused`: the operator's pause (check 19).
    UpdatePaused,
}

impl EvidenceField {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            EvidenceField::Observed => "observed",
            EvidenceField::BandTop => "bandTop",
            EvidenceField::Baseline => "baseline",
            EvidenceField::Detail => "detail",
            EvidenceField::Fence => "fence",
            EvidenceField::Run => "run",
            EvidenceField::UpdatePaused => "updatePaused",
        }
    }
}

/// Everything known about one signal, declared once in [`SIGNALS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalFacts {
    /// The signal.
    pub signal: Signal,
    /// The wire spelling (snake_case): JSON, the metric label `signal`,
    /// the CLI's `signal=`.
    pub name: &'static str,
    /// The CamelCase `reason` of a Kubernetes condition or Event naming it.
    pub reason: &'static str,
    /// Whether it stops a rollout at once (and is the only kind a wave
    /// verdict latches).
    pub hard_stop: bool,
    /// The contract's server-check number (gate.md, "Checking one
    /// server"); `None` for a signal of the wave or of the agent rather
    /// than of one server's checks.
    pub check: Option<u8>,
    /// What it reads, for people: the debug page's check table, and for a
    /// banded signal the quantity in the evidence's words
    /// (`fd timeouts 7, band top 5`).
    pub words: &'static str,
    /// Whether it compares a value with a band above a baseline (checks 13
    /// to 15 and 18).
    pub banded: bool,
    /// The evidence fields a failure of it may fill.
    pub evidence: &'static [EvidenceField],
}

use EvidenceField::{BandTop, Baseline, Detail, Fence, Observed, Run, UpdatePaused as Paused};

/// A row of [`SIGNALS`]: not banded unless said.
const fn facts(
    signal: Signal,
    name: &'static str,
    reason: &'static str,
    hard_stop: bool,
    check: Option<u8>,
    words: &'static str,
    evidence: &'static [EvidenceField],
) -> SignalFacts {
    SignalFacts {
        signal,
        name,
        reason,
        hard_stop,
        check,
        words,
        banded: false,
        evidence,
    }
}

/// A banded row of [`SIGNALS`] (checks 13 to 15 and 18).
const fn banded(
    signal: Signal,
    name: &'static str,
    reason: &'static str,
    check: u8,
    words: &'static str,
    evidence: &'static [EvidenceField],
) -> SignalFacts {
    SignalFacts {
        banded: true,
        ..facts(signal, name, reason, false, Some(check), words, evidence)
    }
}

const HARD: bool = true;
const HOLD: bool = false;

/// Every signal, one row each, in the order of [`Signal`]'s variants (the
/// fixed order of [`Signal::ALL`] and of the metric labels; new signals
/// are appended).
#[rustfmt::skip]
pub const SIGNALS: &[SignalFacts] = &[
    facts(Signal::Soaking, "soaking", "Soaking", HOLD, None, "soak in progress", &[]),
    facts(Signal::NotConverged, "not_converged", "NotConverged", HOLD, None, "pods on the target image", &[Detail]),
    facts(Signal::MemoryPressureCritical, "memory_pressure_critical", "MemoryPressureCritical", HARD, Some(1), "memory pressure (hard stop at 2)", &[Observed, BandTop]),
    facts(Signal::SampleMissing, "sample_missing", "SampleMissing", HOLD, Some(2), "aggregate present", &[Detail]),
    facts(Signal::SampleStale, "sample_stale", "SampleStale", HOLD, Some(3), "sample age", &[Observed, BandTop, Detail]),
    facts(Signal::SampleInvalid, "sample_invalid", "SampleInvalid", HOLD, Some(4), "sample time", &[Observed, BandTop, Detail]),
    facts(Signal::PodsUnsampled, "pods_unsampled", "PodsUnsampled", HOLD, Some(5), "pods sampled", &[Observed, BandTop, Detail]),
    facts(Signal::NotReady, "not_ready", "NotReady", HOLD, Some(6), "ready", &[Observed, Detail]),
    facts(Signal::NotServing, "not_serving", "NotServing", HOLD, Some(7), "serving", &[Observed, Detail]),
    facts(Signal::RingSkew, "ring_skew", "RingSkew", HOLD, Some(8), "ring consistent", &[Observed, Detail]),
    facts(Signal::BootstrapInFlight, "bootstrap_in_flight", "BootstrapInFlight", HOLD, Some(9), "bootstrap in-flight peers", &[Observed, BandTop]),
    facts(Signal::BackfillPending, "backfill_pending", "BackfillPending", HOLD, Some(10), "initial backfill cycle", &[Detail]),
    facts(Signal::BackfillDegraded, "backfill_degraded", "BackfillDegraded", HOLD, Some(11), "backfill degraded", &[Observed, Detail]),
    facts(Signal::BackfillBudgetExhausted, "backfill_budget_exhausted", "BackfillBudgetExhausted", HOLD, Some(12), "peers out of backfill budget", &[Observed, BandTop]),
    banded(Signal::OutboxRegressed, "outbox_regressed", "OutboxRegressed", 13, "outbox messages", &[Observed, BandTop, Baseline, Run]),
    banded(Signal::FdTimeoutsRegressed, "fd_timeouts_regressed", "FdTimeoutsRegressed", 14, "fd timeouts", &[Observed, BandTop, Baseline, Detail]),
    banded(Signal::PeerConnectionFailuresRegressed, "peer_connection_failures_regressed", "PeerConnectionFailuresRegressed", 15, "peer connection failures", &[Observed, BandTop, Baseline]),
    facts(Signal::DeploymentFailed, "deployment_failed", "DeploymentFailed", HARD, None, "deployment", &[Detail]),
    facts(Signal::ServerRegressedToFailed, "server_regressed_to_failed", "ServerRegressedToFailed", HARD, None, "server status", &[Detail]),
    facts(Signal::WaveDeadlineExceeded, "wave_deadline_exceeded", "WaveDeadlineExceeded", HARD, None, "wave deadline", &[Observed, BandTop, Detail]),
    facts(Signal::ServingFenced, "serving_fenced", "ServingFenced", HARD, Some(16), "fenced-serving grant (hard stop in Fencing)", &[Observed, Detail, Fence]),
    facts(Signal::NoValidWriter, "no_valid_writer", "NoValidWriter", HOLD, Some(17), "valid writers (fenced serving)", &[Observed, Detail, Fence]),
    banded(Signal::ReplicationLagRegressed, "replication_lag_regressed", "ReplicationLagRegressed", 18, "replication lag entries", &[Observed, BandTop, Baseline, Run]),
    facts(Signal::UpdatePaused, "update_paused", "UpdatePaused", HARD, Some(19), "an operator's update pause (hard stop)", &[Detail, Paused]),
    facts(Signal::InstanceSuspended, "instance_suspended", "InstanceSuspended", HOLD, None, "instance suspended", &[Detail]),
];

// The rows stand in the order of the variants: `Signal::facts` indexes
// them by the variant's position.
const _: () = {
    let mut i = 0;
    while i < SIGNALS.len() {
        assert!(
            SIGNALS[i].signal as usize == i,
            "SIGNALS must follow the order of Signal's variants"
        );
        i += 1;
    }
};

impl Signal {
    /// Every signal, in the fixed order of [`SIGNALS`].
    pub const ALL: [Signal; SIGNALS.len()] = {
        let mut all = [Signal::Soaking; SIGNALS.len()];
        let mut i = 0;
        while i < SIGNALS.len() {
            all[i] = SIGNALS[i].signal;
            i += 1;
        }
        all
    };

    /// The signal's row of [`SIGNALS`].
    pub fn facts(self) -> &'static SignalFacts {
        &SIGNALS[self as usize]
    }

    /// The wire spelling (snake_case).
    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// The signal in CamelCase: the `reason` of a Kubernetes condition or
    /// Event that names it (`fd_timeouts_regressed` → `FdTimeoutsRegressed`).
    pub fn reason(self) -> &'static str {
        self.facts().reason
    }

    /// Whether this signal stops a rollout at once.
    pub fn is_hard_stop(self) -> bool {
        self.facts().hard_stop
    }

    /// The contract's server-check number; `None` for a signal of the wave
    /// or of the agent.
    pub fn check(self) -> Option<u8> {
        self.facts().check
    }

    /// What the signal reads, for people (the debug page's check table).
    pub fn words(self) -> &'static str {
        self.facts().words
    }

    /// What a banded signal's quantity reads, for people (`fd timeouts`,
    /// `replication lag entries`); `None` for the others.
    pub fn quantity_label(self) -> Option<&'static str> {
        self.is_banded().then(|| self.words())
    }

    /// Whether the signal compares a value with a band above a baseline
    /// (checks 13 to 15 and 18).
    pub fn is_banded(self) -> bool {
        self.facts().banded
    }

    /// The signal with this wire spelling, if the home has one.
    pub fn from_name(name: &str) -> Option<Signal> {
        SIGNALS.iter().find(|f| f.name == name).map(|f| f.signal)
    }

    /// The server checks in the order they run (gate.md, "Checking one
    /// server"): the hard stops first, then the others, each group by
    /// check number. The first failing one names a server's signal.
    pub fn server_checks() -> Vec<Signal> {
        let mut checks: Vec<&SignalFacts> = SIGNALS.iter().filter(|f| f.check.is_some()).collect();
        checks.sort_by_key(|f| (!f.hard_stop, f.check));
        checks.into_iter().map(|f| f.signal).collect()
    }

    /// Where the signal stands in [`Signal::server_checks`]; `None` for a
    /// signal that is no server check.
    pub fn run_order(self) -> Option<usize> {
        Signal::server_checks().iter().position(|s| *s == self)
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::{SIGNALS, Signal};

    #[test]
    fn each_row_names_its_signal_as_serde_spells_it() {
        for f in SIGNALS {
            let wire = serde_json::to_value(f.signal).expect("serialize");
            assert_eq!(wire, serde_json::Value::from(f.name), "{f:?}");
            assert_eq!(Signal::from_name(f.name), Some(f.signal));
        }
    }

    #[test]
    fn the_server_checks_run_hard_stops_first_then_by_number() {
        let order: Vec<u8> = Signal::server_checks()
            .iter()
            .filter_map(|s| s.check())
            .collect();
        assert_eq!(
            order,
            [
                1, 16, 19, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18
            ]
        );
        let mut numbers: Vec<u8> = SIGNALS.iter().filter_map(|f| f.check).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(
            numbers.len(),
            SIGNALS.iter().filter(|f| f.check.is_some()).count(),
            "one signal per check number"
        );
    }
}
