//! The status the agent publishes per instance ([`DesiredStatus`]) and what
//! became of writing it ([`LastWrite`]).

use std::sync::Arc;

use jiff::Timestamp;
use kura_schemas::{RolloutGate, RolloutHealth, ShadowConfigSource};

use super::GateLimits;
use serde::Serialize;

/// What the agent wants `status.rolloutHealth` and `status.rolloutGate` of
/// one instance to be. Both are shared, immutable values: the engine, the
/// fleet view and the write queue hold the same `Arc`s, so cloning a
/// desired status copies two pointers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredStatus {
    /// The aggregate.
    pub health: Arc<RolloutHealth>,
    /// The gate verdict.
    pub gate: Arc<RolloutGate>,
}

impl DesiredStatus {
    /// A desired status from owned values.
    pub fn new(health: RolloutHealth, gate: RolloutGate) -> Self {
        DesiredStatus {
            health: Arc::new(health),
            gate: Arc::new(gate),
        }
    }
}

/// The verdict of the shadow gate configuration (`--shadow-gate-config`)
/// on one sweep: judged on the same aggregate as the live verdict, kept
/// by the engine and the fleet view only. It is never part of a
/// [`DesiredStatus`], so it never reaches the status, a condition, an
/// Event or any other consumer of the write path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowJudgement {
    /// The shadow verdict (shared with the engine).
    pub gate: Arc<RolloutGate>,
    /// The limits it compared against, for the pages' bands.
    pub limits: GateLimits,
    /// Which configuration judged: the shadow file, or the instance's
    /// annotation merged over it.
    pub source: ShadowConfigSource,
}

impl ShadowJudgement {
    /// Whether the shadow's verdict and signal differ from `live`'s.
    pub fn disagrees_with(&self, live: Option<&RolloutGate>) -> bool {
        live.is_none_or(|g| g.verdict != self.gate.verdict || g.signal != self.gate.signal)
    }
}

/// What became of a status write, as the write driver reports it and the
/// fleet view keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum WriteRecord {
    /// Everything written came back.
    Applied,
    /// Accepted, but these fields were pruned (CRD too old).
    Pruned {
        /// The missing paths.
        missing: Vec<String>,
    },
    /// Not accepted.
    Failed {
        /// `conflict`, `not_found`, `forbidden`, `error` or `fenced` (the
        /// `result` label of `kura_agent_status_writes_total`).
        kind: String,
        /// The error.
        message: String,
    },
}

/// The last status write of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastWrite {
    /// When the result came back.
    pub at: Timestamp,
    /// 0 for a first attempt, then the retry number.
    pub attempt: u32,
    /// Whether the write jumped the queue.
    pub priority: bool,
    /// What happened.
    #[serde(flatten)]
    pub result: WriteRecord,
}

/// Values the unit tests of the status path build on: a healthy one-pod
/// aggregate and a healthy verdict without a baseline, to be changed with
/// struct update syntax.
#[cfg(test)]
pub(crate) mod fixtures {
    use jiff::Timestamp;
    use kura_schemas::{AgentVerdict, RetiredCounters, RolloutGate, RolloutHealth};

    /// A healthy aggregate of one sampled pod (none listed), generation 1,
    /// observed and sampled at `at`, counters at zero or absent.
    pub(crate) fn health(at: Timestamp) -> RolloutHealth {
        RolloutHealth {
            replication_lag_entries: None,
            serving_authority: None,
            schema_version: 1,
            observed_at: at,
            sampled_at: Some(at),
            observed_generation: 1,
            expected_pods: 1,
            sampled_pods: 1,
            ready: true,
            serving: true,
            writer_lock_owned: true,
            initial_discovery_completed: true,
            generation_consistent: true,
            ring_consistent: true,
            ring_members: 1,
            bootstrap_inflight_peers: None,
            backfill_initial_cycle: String::new(),
            backfilling_peers: None,
            backfill_degraded: false,
            backfill_budget_exhausted_peers: None,
            outbox_messages: None,
            fd_timeout_count: 0,
            peer_connection_failures: None,
            memory_pressure_state: 0,
            inflight_requests: 0,
            counter_resets: 0,
            pods: vec![],
            retired_counters: RetiredCounters::default(),
            agent: "a".into(),
            suspended: false,
            update_paused: None,
        }
    }

    /// A healthy verdict on `img` evaluated at `at`: no baseline, no signal,
    /// no evidence, not soak eligible.
    pub(crate) fn gate(at: Timestamp) -> RolloutGate {
        RolloutGate {
            target_image: "img".into(),
            baseline_image: None,
            baseline_captured_at: None,
            baseline: Default::default(),
            effective_baseline: Default::default(),
            soak_eligible: false,
            verdict: AgentVerdict::Healthy,
            signal: None,
            healthy_since: None,
            evaluated_at: at,
            evidence: vec![],
            config_error: None,
            backlog_runs: Default::default(),
        }
    }
}
