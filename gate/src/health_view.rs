//! A lenient view of a rollout-health aggregate: only the fields the gate
//! reads, each optional. A field the aggregate contract always carries
//! (`ready`, `sampledPods`, `fdTimeoutCount`, ...) that is missing here is
//! null, and a null such field fails its check: it never passes.

use jiff::Timestamp;
use kura_schemas::{RolloutHealth, ServingAuthorityHealth, UpdatePaused};
use serde::{Deserialize, Serialize};

/// The fields of `status.rolloutHealth` (camelCase) the server checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HealthView {
    /// Oldest receive time of the sweep's valid samples.
    pub sampled_at: Option<Timestamp>,
    /// `spec.replicas`.
    pub expected_pods: Option<u32>,
    /// Pods with a valid report.
    pub sampled_pods: Option<u32>,
    /// Conjunction of the pods' `ready`.
    pub ready: Option<bool>,
    /// Conjunction of `state == "serving"`.
    pub serving: Option<bool>,
    /// All sampled pods see the same ring.
    pub ring_consistent: Option<bool>,
    /// Sum of bootstrap in-flight peers; null when no pod reports it.
    pub bootstrap_inflight_peers: Option<u64>,
    /// Fold of the pods' `backfill_initial_cycle` ("" or null: not reported).
    pub backfill_initial_cycle: Option<String>,
    /// Any pod reports a degraded backfill.
    pub backfill_degraded: Option<bool>,
    /// Sum of budget-exhausted real peers; null when no pod reports it.
    pub backfill_budget_exhausted_peers: Option<u64>,
    /// Outbox backlog; null when no pod reports it.
    pub outbox_messages: Option<u64>,
    /// Replication lag of pull-sync pods; null when no pod reports it.
    pub replication_lag_entries: Option<u64>,
    /// Fence state of an instance that runs fenced serving; null otherwise.
    pub serving_authority: Option<ServingAuthorityHealth>,
    /// Reset-clamped fd timeouts.
    pub fd_timeout_count: Option<u64>,
    /// Reset-clamped peer connection failures; null when never reported.
    pub peer_connection_failures: Option<u64>,
    /// Maximum memory pressure over the sampled pods.
    pub memory_pressure_state: Option<u8>,
    /// The instance is suspended: no pods, nothing to judge (it leaves the
    /// wave's scope; the agent's verdict is `suspended`). Null: false.
    pub suspended: Option<bool>,
    /// An operator's update pause (Kura's controller's
    /// `status.updatePaused`): check 19, a hard stop. Null: none.
    pub update_paused: Option<Box<UpdatePaused>>,
}

impl From<&RolloutHealth> for HealthView {
    fn from(health: &RolloutHealth) -> Self {
        HealthView {
            sampled_at: health.sampled_at,
            expected_pods: Some(health.expected_pods),
            sampled_pods: Some(health.sampled_pods),
            ready: Some(health.ready),
            serving: Some(health.serving),
            ring_consistent: Some(health.ring_consistent),
            bootstrap_inflight_peers: health.bootstrap_inflight_peers,
            backfill_initial_cycle: Some(health.backfill_initial_cycle.clone()),
            backfill_degraded: Some(health.backfill_degraded),
            backfill_budget_exhausted_peers: health.backfill_budget_exhausted_peers,
            outbox_messages: health.outbox_messages,
            replication_lag_entries: health.replication_lag_entries,
            serving_authority: health.serving_authority.clone(),
            fd_timeout_count: Some(health.fd_timeout_count),
            peer_connection_failures: health.peer_connection_failures,
            memory_pressure_state: Some(health.memory_pressure_state),
            suspended: Some(health.suspended),
            update_paused: health.update_paused.clone(),
        }
    }
}

impl HealthView {
    /// Whether the aggregate says the instance is suspended.
    pub fn is_suspended(&self) -> bool {
        self.suspended == Some(true)
    }

    /// A view in which every check passes against an equal baseline: the
    /// fixture tests and benchmarks start from.
    pub fn healthy(sampled_at: Timestamp, pods: u32) -> Self {
        HealthView {
            sampled_at: Some(sampled_at),
            expected_pods: Some(pods),
            sampled_pods: Some(pods),
            ready: Some(true),
            serving: Some(true),
            ring_consistent: Some(true),
            bootstrap_inflight_peers: Some(0),
            backfill_initial_cycle: Some("complete".into()),
            backfill_degraded: Some(false),
            backfill_budget_exhausted_peers: Some(0),
            outbox_messages: Some(0),
            replication_lag_entries: Some(0),
            serving_authority: None,
            fd_timeout_count: Some(0),
            peer_connection_failures: Some(0),
            memory_pressure_state: Some(0),
            suspended: None,
            update_paused: None,
        }
    }
}
