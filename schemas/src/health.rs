//! `status.rolloutHealth`: the per-instance aggregate the agent publishes
//! (contract/rollout-health.md). camelCase on the wire.
//!
//! Fields the contract defines as "integer or null" are `Option` and
//! serialize as `null` when absent: absent is never zero. Integers are
//! declared as the API server stores them (`format: int64`, see
//! [`crate::api_int`]): a count above 2^63−1 cannot be written, so totals
//! saturate there.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The `schemaVersion` this crate writes.
pub const ROLLOUT_HEALTH_SCHEMA_VERSION: u32 = 1;

/// At most this many entries in [`RolloutHealth::pods`].
pub const MAX_POD_ENTRIES: usize = 32;

/// The `error` of a [`PodHealth`] entry whose pod discovery no longer
/// lists: the entry stays (its counters still count) until the pod is
/// retired, but the pod is not part of the instance any more.
pub const GONE_POD_ERROR: &str = "gone: not listed by discovery";

/// The aggregate of one instance's pod reports for one sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct RolloutHealth {
    /// Always 1.
    pub schema_version: u32,
    /// When the sweep that produced this aggregate finished.
    pub observed_at: Timestamp,
    /// The oldest receive time among the sweep's valid samples; absent when
    /// no pod answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_at: Option<Timestamp>,
    /// The instance's `metadata.generation` the sweep ran against.
    pub observed_generation: i64,
    /// `spec.replicas`.
    pub expected_pods: u32,
    /// Pods with a valid report in this sweep.
    pub sampled_pods: u32,
    /// Conjunction of `ready`, false whenever `sampledPods < expectedPods`.
    pub ready: bool,
    /// Conjunction of `state == "serving"`, same pod-count rule.
    pub serving: bool,
    /// Conjunction of `writer_lock_owned`.
    pub writer_lock_owned: bool,
    /// Conjunction of `initial_discovery_completed` (a pod that does not
    /// report it makes this false).
    pub initial_discovery_completed: bool,
    /// All sampled pods report the same `generation`, and all pods sampled.
    pub generation_consistent: bool,
    /// All sampled pods see the same ring (fingerprints when every pod has
    /// one, else ring sizes), and all pods sampled.
    pub ring_consistent: bool,
    /// Smallest `ring_members` among sampled pods (0 when none was sampled).
    pub ring_members: u64,
    /// Sum of `bootstrap_inflight_peers`; null when no sampled pod reports it.
    pub bootstrap_inflight_peers: Option<u64>,
    /// Fold of `backfill_initial_cycle` by precedence; "" when absent.
    pub backfill_initial_cycle: String,
    /// Sum of `backfill_backfilling_peers`; null when no pod reports it.
    pub backfilling_peers: Option<u64>,
    /// Any sampled pod reports `degraded`.
    pub backfill_degraded: bool,
    /// Sum of `backfill_budget_exhausted_real_peers`; null when none reports it.
    pub backfill_budget_exhausted_peers: Option<u64>,
    /// Sum of `outbox_messages` over the pods that report it; null when none does.
    pub outbox_messages: Option<u64>,
    /// Sum of the sampled pods' replication lag from `/status/cluster` (the
    /// `lag_entries` of their `replica` links); null when no sampled pod
    /// reports one (push-era pods, or a build without the route).
    #[serde(default)]
    pub replication_lag_entries: Option<u64>,
    /// The fence state of an instance that runs fenced serving; null when no
    /// sampled pod reports `serving_authority.enabled == true`.
    #[serde(default)]
    pub serving_authority: Option<ServingAuthorityHealth>,
    /// Sum of per-pod reset-clamped `fd_timeout_count` plus retired totals.
    pub fd_timeout_count: u64,
    /// Sum of per-pod reset-clamped `peer_connection_failure_count` plus
    /// retired totals; null when no pod ever reported it.
    pub peer_connection_failures: Option<u64>,
    /// Maximum `memory_pressure_state` over sampled pods.
    pub memory_pressure_state: u8,
    /// Sum of http + grpc in-flight requests (diagnostic).
    pub inflight_requests: u64,
    /// Counter resets absorbed for this instance so far.
    pub counter_resets: u64,
    // Shared (`Arc`): the aggregator keeps each pod's entry as its own
    // state and publishes the same allocation, copying an entry only when
    // a sweep changes it while an earlier aggregate still holds it. Not in
    // the doc comment, which is the CRD's description.
    /// Per tracked pod, at most [`MAX_POD_ENTRIES`] entries.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub pods: Vec<Arc<PodHealth>>,
    /// Clamped totals folded in from pods gone for good.
    #[serde(default)]
    pub retired_counters: RetiredCounters,
    /// True while the instance is suspended (`spec.suspended`, or phase
    /// `Suspending`/`Suspended`): no pods, nothing sampled, the verdict is
    /// `suspended`. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Kura's controller's `status.updatePaused` as read (an operator's
    /// `OnDelete` or `Partition` pause); null when the instance has none.
    #[serde(default)]
    pub update_paused: Option<Box<UpdatePaused>>,
    /// The agent replica that wrote this (pod name).
    #[serde(default)]
    pub agent: String,
}

/// Kura's controller's `status.updatePaused`: an operator's pause holds
/// pods on the old image while the StatefulSet's template carries the new
/// one, and nothing will replace them (gate check 19). Read leniently: a
/// value of an unexpected type is dropped, never the pause itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct UpdatePaused {
    /// `OnDelete` or `Partition` (kept verbatim, at most 64 characters).
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub strategy: String,
    /// The StatefulSet's partition (pods with a lower ordinal stay on the
    /// old image); absent when not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u64>,
    /// The image the StatefulSet's template carries; absent when not
    /// reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub template_image: Option<String>,
    /// The pods held on the old image, by name (at most 32 kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub held_pods: Vec<String>,
}

impl UpdatePaused {
    /// The pause in words: `OnDelete pause, partition 2, template image
    /// ghcr.io/tuist/kura:0.7.0, holding acme-0, acme-1`: the one phrasing
    /// of check 19's evidence.
    pub fn describe(&self) -> String {
        let strategy = if self.strategy.is_empty() {
            "update"
        } else {
            self.strategy.as_str()
        };
        let mut line = format!("{strategy} pause");
        if let Some(p) = self.partition {
            line.push_str(&format!(", partition {p}"));
        }
        if let Some(image) = &self.template_image {
            line.push_str(&format!(", template image {image}"));
        }
        if !self.held_pods.is_empty() {
            line.push_str(&format!(", holding {}", self.held_pods.join(", ")));
        }
        line
    }
}

/// One tracked pod in [`RolloutHealth::pods`]. It carries exactly the
/// per-pod counter state the agent needs to continue after a restart.
// Its text fields are shared (`Arc<str>`, the same JSON as a string): an
// entry is copied whenever a sweep changes it while an earlier aggregate
// still holds it, and a copy then shares every text that did not change
// instead of allocating each again. (Not a doc comment: the CRD's
// description comes from the doc comment.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct PodHealth {
    /// Pod name (the key of the counter state).
    pub name: Arc<str>,
    /// Pod UID.
    #[serde(default)]
    pub uid: Arc<str>,
    /// The Kura container's restart count.
    #[serde(default)]
    pub restart_count: u32,
    /// The pod's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Arc<str>>,
    /// The pod IP polled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Arc<str>>,
    /// The report's `serving_authority.identity.incarnation`, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<Arc<str>>,
    /// When the last valid sample was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_at: Option<Timestamp>,
    /// A short reason when the last sample failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Arc<str>>,
    /// The pod's own `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The pod's own `state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Arc<str>>,
    /// The pod's own `generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The pod's own `ring_members`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_members: Option<u64>,
    /// The pod's own `ring_fingerprint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_fingerprint: Option<Arc<str>>,
    /// The pod's own `memory_pressure_state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_pressure_state: Option<u8>,
    /// The pod's own `outbox_messages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox_messages: Option<u64>,
    /// The pod's own replication lag (`/status/cluster`, sum of its
    /// `replica` links' `lag_entries`); absent when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag_entries: Option<u64>,
    // Boxed: a pod entry is kept in several copies per pod (the
    // aggregation state, the published and the written aggregate), and
    // most pods run without fenced serving.
    /// The pod's fence state; absent when the pod reports no
    /// `serving_authority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Box<PodFence>>,
    /// Clamped fd timeouts: offset + last raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_timeout_count: Option<u64>,
    /// Last raw `fd_timeout_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_timeout_count_raw: Option<u64>,
    /// Clamped peer connection failures: offset + last raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_connection_failures: Option<u64>,
    /// Last raw `peer_connection_failure_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_connection_failures_raw: Option<u64>,
}

impl PodHealth {
    /// Whether the entry is for a pod discovery no longer lists
    /// ([`GONE_POD_ERROR`]).
    pub fn is_gone(&self) -> bool {
        self.error.as_deref() == Some(GONE_POD_ERROR)
    }
}

/// The order of `servingAuthority.phase` values, most urgent first, for the
/// fold over pods: `Fencing` > any unknown value > `Revoking` > `Quiescing`
/// > `Preparing` > `Serving` > none reported (`""`). A higher rank wins.
pub fn fence_phase_rank(phase: &str) -> u8 {
    match phase {
        "" => 0,
        "Serving" => 1,
        "Preparing" => 2,
        "Quiescing" => 3,
        "Revoking" => 4,
        "Fencing" => 6,
        _ => 5,
    }
}

/// The phase Kura's controller moves a grant to when its holder restarted,
/// vanished or reported its grant invalid: no pod may write.
pub const FENCING_PHASE: &str = "Fencing";

/// `status.rolloutHealth.servingAuthority`: the fold of the sampled pods'
/// `serving_authority` on an instance that runs fenced serving.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct ServingAuthorityHealth {
    /// Sampled pods that report `enabled: true`.
    pub enabled_pods: u32,
    /// Of those, pods that report `valid: true` (a missing `valid` is not
    /// a writer).
    pub valid_writers: u32,
    /// Fold of the enabled pods' `observed.phase` by
    /// [`fence_phase_rank`]; `""` when none reports one.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub phase: String,
    /// The highest `epoch` among valid writers; 0 when none.
    #[serde(default)]
    pub epoch: u64,
}

impl From<&crate::report::ServingAuthority> for PodFence {
    fn from(a: &crate::report::ServingAuthority) -> Self {
        PodFence {
            enabled: a.enabled,
            valid: a.valid,
            epoch: a.epoch,
            phase: a.observed.as_ref().map(|o| o.phase.clone()),
        }
    }
}

impl ServingAuthorityHealth {
    /// Whether the grant is in `Fencing` (check 16).
    pub fn is_fencing(&self) -> bool {
        self.phase == FENCING_PHASE
    }
}

/// One pod's fence state in [`PodHealth::fence`], as it reported it
/// (each value absent when the pod did not report it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct PodFence {
    /// `enabled`: the pod runs fenced serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `valid`: the pod holds a valid grant (it is the writer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    /// `epoch` of the grant it holds (0 when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// `observed.phase`: the phase of the grant it last saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub phase: Option<String>,
}

/// Clamped counter totals of pods that are gone for good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct RetiredCounters {
    /// Retired fd timeouts.
    #[serde(default)]
    pub fd_timeout_count: u64,
    /// Retired peer connection failures; null while no retired pod ever
    /// reported the counter.
    #[serde(default)]
    pub peer_connection_failures: Option<u64>,
}
