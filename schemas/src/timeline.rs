//! The gate inputs the agent judged for one instance, tick by tick
//! (`GET /api/v1/instances/{namespace}/{name}/timeline`): a `kura-gate
//! replay` document (`config`, `ticks`, each tick one server: the
//! instance) with the keys that say what it is a timeline of
//! (`instance`, `window`) and, on every server, what the agent published
//! (`published`). Replaying it with the agent's judge
//! (`kura_gate::instance::judge_instance`) reproduces every published
//! verdict and signal.
//!
//! Only what the gate reads is kept: [`TimelineHealth`] is the part of
//! `status.rolloutHealth` the checks read, and the baseline is the
//! effective one (lowered by counter resets) in force at the window's
//! first tick, so a window that starts after a reset still reproduces.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::gate_status::{AgentVerdict, BaselineCounters, Signal};
use crate::health::{RolloutHealth, ServingAuthorityHealth};

/// At most this many ticks in one [`InstanceTimeline`] document (the
/// schema's `maxItems`; a longer timeline is read a window at a time).
pub const MAX_TIMELINE_TICKS: usize = 10_000;

/// One instance's timeline: the gate inputs the agent judged since its
/// current baseline and configuration, tick by tick, with the verdict and
/// signal it published for each; a `kura-gate replay` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceTimeline {
    /// The gate configuration in force for every tick (the cluster's file
    /// with the instance's `kura.tuist.dev/gate-config` annotation merged
    /// over it): every key of `kura-gate replay`'s `config`.
    pub config: TimelineConfig,
    /// The instance and the images of its current baseline.
    pub instance: TimelineInstance,
    /// The span the ticks cover and whether any tick is missing.
    pub window: TimelineWindow,
    /// The ticks, oldest first; each has exactly one server, the instance.
    #[schemars(length(max = 10000))]
    pub ticks: Vec<TimelineTick>,
}

/// The gate configuration (`kura_gate::GateConfig`, every key written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct TimelineConfig {
    /// Soak per wave in seconds.
    pub soak_seconds: Vec<u64>,
    /// Seconds after which an incomplete wave is a hard stop.
    pub wave_deadline_seconds: u64,
    /// A sample older than this many seconds is stale.
    pub max_sample_age_seconds: u64,
    /// A sample further than this many seconds in the future is invalid.
    pub future_skew_seconds: u64,
    /// Outbox band: percentage of the baseline added on top.
    pub outbox_band_percent: u64,
    /// Outbox band: minimum headroom.
    pub outbox_band_minimum: u64,
    /// Replication-lag band: percentage of the baseline added on top.
    pub replication_lag_band_percent: u64,
    /// Replication-lag band: minimum headroom.
    pub replication_lag_band_minimum: u64,
    /// fd-timeout band: headroom above the baseline.
    pub fd_timeout_band: u64,
    /// Peer-failure band: percentage of the baseline added on top.
    pub peer_failure_band_percent: u64,
    /// Peer-failure band: minimum headroom.
    pub peer_failure_band_minimum: u64,
    /// Seconds a backlog above its band may go without falling before
    /// checks 13 and 18 fail (0: the band alone decides). An export of an
    /// agent older than the key reads as the default, 900.
    #[serde(default = "default_backlog_drain_window_seconds")]
    pub backlog_drain_window_seconds: u64,
}

fn default_backlog_drain_window_seconds() -> u64 {
    900
}

/// Which instance, judged against which images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimelineInstance {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The `spec.image` judged (`rolloutGate.targetImage`).
    pub target_image: String,
    /// The image the baseline was taken on; null when there is none.
    pub baseline_image: Option<String>,
}

/// The span of the ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct TimelineWindow {
    /// The first tick's `now` (the request's `since`, or the time of the
    /// answer, when there is no tick).
    pub from: Timestamp,
    /// The last tick's `now` (the request's `until`, or the time of the
    /// answer, when there is no tick).
    pub to: Timestamp,
    /// Ticks of this timeline the agent no longer holds (dropped, oldest
    /// first, to keep the fleet within its byte budget).
    pub dropped_ticks: u64,
    /// True when the ticks are every tick since the timeline started (its
    /// baseline or configuration): none dropped, none left out by the
    /// request's `since`, `until` or `limit`.
    pub complete: bool,
}

/// One sweep of the instance, as a `kura-gate replay` tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct TimelineTick {
    /// When the agent judged the sweep.
    pub now: Timestamp,
    /// Always 0: the agent judges one instance, not a wave.
    pub wave: u32,
    /// The baseline's capture time, or the window's first `now` when
    /// there is no baseline.
    pub wave_started_at: Timestamp,
    /// Always 0.
    pub attempt: u32,
    /// Exactly one server: the instance.
    #[schemars(length(min = 1, max = 1))]
    pub servers: Vec<TimelineServer>,
}

/// A server's deployment, as replay reads it: the agent's instance is
/// always deployed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimelineDeployment {
    /// Deployed.
    Succeeded,
}

/// A server's status, as replay reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimelineServerStatus {
    /// Serving.
    Active,
}

/// The instance at one tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct TimelineServer {
    /// `namespace/name` (the name the agent's judge gives the instance in
    /// its evidence).
    pub id: String,
    /// Always 0.
    pub wave: u32,
    /// Every current pod runs `spec.image` and there are `spec.replicas`
    /// of them (the agent's judge does not read it).
    pub converged: bool,
    /// Always `succeeded`.
    pub deployment: TimelineDeployment,
    /// Always `active`.
    pub status: TimelineServerStatus,
    /// The effective baseline in force at this tick, when there is one
    /// (the same on every tick of a timeline but for counter resets).
    pub baseline: Option<TimelineBaseline>,
    /// The gate-read fields of the aggregate the agent judged.
    pub health: Option<TimelineHealth>,
    /// What the agent published for this tick.
    pub published: TimelinePublished,
}

/// A captured baseline (replay's counters form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimelineBaseline {
    /// When the baseline was captured.
    pub captured_at: Timestamp,
    /// The effective baseline counters (null: not compared).
    pub counters: BaselineCounters,
    /// Whether the counters are compared at all.
    pub soak_eligible: bool,
}

/// What the agent published: `rolloutGate.verdict` and `.signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimelinePublished {
    /// The verdict.
    pub verdict: AgentVerdict,
    /// Its signal; null when healthy.
    pub signal: Option<Signal>,
}

/// The fields of `status.rolloutHealth` the gate's checks read (the same
/// names and types).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct TimelineHealth {
    /// The oldest receive time among the sweep's valid samples; null when
    /// no pod answered.
    pub sampled_at: Option<Timestamp>,
    /// `spec.replicas`.
    pub expected_pods: u32,
    /// Pods with a valid report.
    pub sampled_pods: u32,
    /// Conjunction of `ready`.
    pub ready: bool,
    /// Conjunction of `state == "serving"`.
    pub serving: bool,
    /// All sampled pods see the same ring.
    pub ring_consistent: bool,
    /// Sum of bootstrap in-flight peers; null when no pod reports it.
    pub bootstrap_inflight_peers: Option<u64>,
    /// Fold of `backfill_initial_cycle`; "" when absent.
    #[schemars(length(max = 128))]
    pub backfill_initial_cycle: String,
    /// Any pod reports a degraded backfill.
    pub backfill_degraded: bool,
    /// Sum of budget-exhausted real peers; null when none reports it.
    pub backfill_budget_exhausted_peers: Option<u64>,
    /// Outbox backlog; null when no pod reports it.
    pub outbox_messages: Option<u64>,
    /// Replication lag; null when no pod reports it.
    pub replication_lag_entries: Option<u64>,
    /// The fence state; null unless the instance runs fenced serving.
    pub serving_authority: Option<ServingAuthorityHealth>,
    /// Reset-clamped fd timeouts.
    pub fd_timeout_count: u64,
    /// Reset-clamped peer connection failures; null when never reported.
    pub peer_connection_failures: Option<u64>,
    /// Maximum memory pressure over the sampled pods.
    pub memory_pressure_state: u8,
}

impl From<&RolloutHealth> for TimelineHealth {
    fn from(h: &RolloutHealth) -> Self {
        TimelineHealth {
            sampled_at: h.sampled_at,
            expected_pods: h.expected_pods,
            sampled_pods: h.sampled_pods,
            ready: h.ready,
            serving: h.serving,
            ring_consistent: h.ring_consistent,
            bootstrap_inflight_peers: h.bootstrap_inflight_peers,
            backfill_initial_cycle: h.backfill_initial_cycle.clone(),
            backfill_degraded: h.backfill_degraded,
            backfill_budget_exhausted_peers: h.backfill_budget_exhausted_peers,
            outbox_messages: h.outbox_messages,
            replication_lag_entries: h.replication_lag_entries,
            serving_authority: h.serving_authority.clone(),
            fd_timeout_count: h.fd_timeout_count,
            peer_connection_failures: h.peer_connection_failures,
            memory_pressure_state: h.memory_pressure_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_bounds_the_ticks_by_the_constant() {
        let schema = serde_json::to_value(schemars::schema_for!(InstanceTimeline)).unwrap();
        assert_eq!(
            schema["properties"]["ticks"]["maxItems"],
            serde_json::json!(MAX_TIMELINE_TICKS)
        );
    }
}
