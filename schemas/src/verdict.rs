//! The agent's verdict on one instance as a small, stable JSON document for
//! machines (`GET /api/v1/instances/{namespace}/{name}/verdict`): what an
//! Argo Rollouts `web` metric, a script or a dashboard reads. Every replica
//! of a sharded agent answers it for every instance it watches, from its
//! own sweeps for the instances it owns and from the status stored in the
//! cluster for the others (`source`).

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::gate_status::{AgentVerdict, Evidence, Signal};

/// The `schemaVersion` of [`InstanceVerdict`] this crate writes.
pub const INSTANCE_VERDICT_SCHEMA_VERSION: u32 = 1;

/// Where a replica's answer about an instance comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictSource {
    /// This replica sweeps the instance: its own last verdict.
    Live,
    /// Another replica (or none yet) sweeps it: the status stored in the
    /// cluster, as this replica's watch last saw it.
    Cluster,
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// It cannot be said yet.
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// Parses `True`, `False` or `Unknown`.
    pub fn parse(text: &str) -> Option<ConditionStatus> {
        match text {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

/// One of the agent's conditions as the verdict document states it (the
/// instance's `status.conditions` entry without its times).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct VerdictCondition {
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason (for a failing check: the signal).
    pub reason: String,
    /// One line.
    pub message: String,
}

/// `GET /api/v1/instances/{namespace}/{name}/verdict`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct InstanceVerdict {
    /// Always 1.
    pub schema_version: u32,
    /// The instance's namespace.
    pub namespace: String,
    /// The instance's name.
    pub name: String,
    /// `healthy`, `unhealthy` or `hard_stop`; null until the instance's
    /// first sweep was judged.
    pub verdict: Option<AgentVerdict>,
    /// The first failing check; null when healthy or not judged.
    pub signal: Option<Signal>,
    /// Since when every check has passed continuously; null when not
    /// healthy.
    pub healthy_since: Option<Timestamp>,
    /// When the verdict was computed.
    pub evaluated_at: Option<Timestamp>,
    /// The instance's `metadata.generation` that the judged sweep ran
    /// against.
    pub observed_generation: Option<i64>,
    /// The instance's `metadata.generation` as this replica knows it (its
    /// watch, or the generation its last sweep ran against); a verdict
    /// with a lower `observedGeneration` is about an older spec.
    pub generation: Option<i64>,
    /// The `spec.image` being judged.
    pub target_image: Option<String>,
    /// The image the baseline was taken on.
    pub baseline_image: Option<String>,
    /// Evidence of the failing check (empty when healthy).
    pub evidence: Vec<Evidence>,
    /// The agent replica that writes this instance's status (with sharding
    /// the owner among the live replicas; null when no replica is live).
    pub owned_by: Option<String>,
    /// Whether this answer is this replica's own sweep or the stored status.
    pub source: VerdictSource,
    /// The `RolloutHealthy` condition: `True` only when the verdict on
    /// `generation` is healthy and every pod runs the target image.
    pub rollout_healthy: VerdictCondition,
    /// The `RolloutHardStopped` condition.
    pub rollout_hard_stopped: VerdictCondition,
    /// The verdict of the candidate gate configuration the agent judges
    /// beside the live one (`kura-agent run --shadow-gate-config`), on the
    /// same samples and aggregate. Never written to the status, never a
    /// condition or an Event: what the instance would be judged with that
    /// file. Absent when no shadow configuration runs or this replica does
    /// not sweep the instance (`source` = `cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowVerdict>,
}

/// Which gate configuration a shadow verdict was judged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShadowConfigSource {
    /// The shadow file alone (the instance has no valid gate-config
    /// annotation).
    File,
    /// The instance's own `kura.tuist.dev/gate-config` annotation merged
    /// over the shadow file, as the live verdict merges it over the
    /// cluster's file.
    FileAndAnnotation,
}

/// The shadow configuration's verdict on one instance ([`InstanceVerdict::shadow`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct ShadowVerdict {
    /// `healthy`, `unhealthy` or `hard_stop`.
    pub verdict: AgentVerdict,
    /// The first failing check under the shadow configuration; null when
    /// healthy.
    pub signal: Option<Signal>,
    /// Since when every check has passed continuously under the shadow
    /// configuration; null when not healthy.
    pub healthy_since: Option<Timestamp>,
    /// When the shadow verdict was computed (the same sweep as the live
    /// one).
    pub evaluated_at: Timestamp,
    /// Evidence of the failing check (empty when healthy).
    pub evidence: Vec<Evidence>,
    /// Whether the shadow's verdict and signal are the live verdict's.
    pub agrees: bool,
    /// Which configuration judged.
    pub config_source: ShadowConfigSource,
    /// Why the instance's annotation could not be merged over the shadow
    /// file (the shadow file alone judged); null when it could.
    pub config_error: Option<String>,
}
