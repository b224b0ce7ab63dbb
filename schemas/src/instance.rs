//! The `KuraInstance` custom resource (kura.tuist.dev/v1alpha1): the spec
//! fields the agent reads and the status fields, ours and the fleet
//! controller's.

use crate::gate_status::RolloutGate;
use crate::health::RolloutHealth;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The spec of a `KuraInstance`. Only the fields the agent reads are typed;
/// the fleet controller owns the resource and may carry more, which the CRD
/// preserves.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kura.tuist.dev",
    version = "v1alpha1",
    kind = "KuraInstance",
    plural = "kurainstances",
    shortname = "kura",
    namespaced,
    status = "KuraInstanceStatus",
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.rolloutHealth.ready"}"#,
    printcolumn = r#"{"name":"Serving","type":"boolean","jsonPath":".status.rolloutHealth.serving"}"#,
    printcolumn = r#"{"name":"Sampled","type":"integer","jsonPath":".status.rolloutHealth.sampledPods"}"#,
    printcolumn = r#"{"name":"Expected","type":"integer","jsonPath":".status.rolloutHealth.expectedPods"}"#,
    printcolumn = r#"{"name":"Pressure","type":"integer","jsonPath":".status.rolloutHealth.memoryPressureState"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","jsonPath":".status.rolloutGate.verdict"}"#,
    printcolumn = r#"{"name":"Signal","type":"string","jsonPath":".status.rolloutGate.signal"}"#,
    printcolumn = r#"{"name":"Sample-Age","type":"date","jsonPath":".status.rolloutHealth.sampledAt"}"#,
    printcolumn = r#"{"name":"Image","type":"string","priority":1,"jsonPath":".spec.image"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KuraInstanceSpec {
    /// The Kura image this instance should run.
    pub image: String,
    /// Number of pods (StatefulSet replicas), at least 1.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// The account this instance serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_handle: Option<String>,
    /// The tenant.
    #[serde(default, rename = "tenantID", skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

fn default_replicas() -> i32 {
    1
}

/// The status of a `KuraInstance`. The agent owns `rolloutHealth` and
/// `rolloutGate` only; the rest belongs to the fleet controller and is
/// declared so that neither side's fields are pruned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KuraInstanceStatus {
    /// Controller-owned lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Controller-owned: the image the StatefulSet runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_image: Option<String>,
    /// Controller-owned: ready replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Controller-owned: its own view of the initial backfill cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_initial_cycle: Option<String>,
    /// Agent-owned: the aggregate of the pods' reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_health: Option<RolloutHealth>,
    /// Agent-owned: the gate verdict against the pre-upgrade baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_gate: Option<RolloutGate>,
}
