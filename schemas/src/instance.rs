//! The `KuraInstance` custom resource (kura.tuist.dev/v1alpha1): the spec
//! fields the agent reads and the status fields, ours and the fleet
//! controller's.

use crate::gate_status::RolloutGate;
use crate::health::RolloutHealth;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
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
    category = "tuist",
    namespaced,
    status = "KuraInstanceStatus",
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.rolloutHealth.ready"}"#,
    printcolumn = r#"{"name":"Serving","type":"boolean","jsonPath":".status.rolloutHealth.serving"}"#,
    printcolumn = r#"{"name":"Sampled","type":"integer","jsonPath":".status.rolloutHealth.sampledPods"}"#,
    printcolumn = r#"{"name":"Expected","type":"integer","jsonPath":".status.rolloutHealth.expectedPods"}"#,
    printcolumn = r#"{"name":"Pressure","type":"integer","jsonPath":".status.rolloutHealth.memoryPressureState"}"#,
    printcolumn = r#"{"name":"RolloutHealthy","type":"string","jsonPath":".status.conditions[?(@.type==\"RolloutHealthy\")].status"}"#,
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
    /// Kura's controller scales a suspended instance to zero pods and
    /// wipes its volumes; the agent's verdict is then `suspended`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Present on instances whose pods run on a node-local network (pod
    /// IPs nobody can route to): the agent polls them through the API
    /// server's pod port-forward. Its content belongs to Kura's
    /// controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub node_local_network: Option<serde_json::Map<String, serde_json::Value>>,
    /// `PositiveFenceV1` for fenced serving; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_mode: Option<String>,
}

fn default_replicas() -> i32 {
    1
}

/// The status of a `KuraInstance`. The agent owns `rolloutHealth`,
/// `rolloutGate` and the `conditions` of type `RolloutHealthy` and
/// `RolloutHardStopped` (with `--kstatus-conditions` also `Reconciling`,
/// `Stalled` and `observedGeneration`); the rest belongs to the fleet
/// controller and is declared so that neither side's fields are pruned.
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
    /// Controller-owned: an operator's update pause (`OnDelete` or
    /// `Partition`) holding pods on the old image; the agent copies it
    /// into `rolloutHealth.updatePaused` (gate check 19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_paused: Option<Box<crate::health::UpdatePaused>>,
    /// Agent-owned: the aggregate of the pods' reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_health: Option<RolloutHealth>,
    /// Agent-owned: the gate verdict against the pre-upgrade baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_gate: Option<RolloutGate>,
    /// kstatus' `observedGeneration`: the `metadata.generation` the status
    /// was computed for. The fleet controller's, unless the agent is run
    /// with `--kstatus-conditions`: then the agent writes the generation its
    /// verdict is about, so that kstatus reads the instance as in progress
    /// until the agent has judged a new spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions in the standard Kubernetes shape, a list map keyed by
    /// `type`: under server-side apply every writer owns the entries of the
    /// types it writes, so the agent's (`RolloutHealthy`,
    /// `RolloutHardStopped`) and the fleet controller's (e.g. `Ready`)
    /// live side by side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The condition type the agent sets from its verdict: `True` when the
/// verdict on the current image is healthy and every pod runs that image,
/// `False` (reason: the signal in CamelCase) when a check fails, `Unknown`
/// before that can be said.
pub const ROLLOUT_HEALTHY: &str = "RolloutHealthy";

/// The condition type the agent sets while a hard-stop check fails
/// (`True`, reason: the hard-stop signal), `False` otherwise.
pub const ROLLOUT_HARD_STOPPED: &str = "RolloutHardStopped";

/// Every condition type the agent writes (and owns under server-side
/// apply); other types belong to other writers.
pub const AGENT_CONDITION_TYPES: [&str; 2] = [ROLLOUT_HEALTHY, ROLLOUT_HARD_STOPPED];

/// kstatus' `Reconciling` condition, which the agent writes only when asked
/// to (`kura-agent run --kstatus-conditions`): `True` while
/// `RolloutHealthy` is not `True`.
pub const RECONCILING: &str = "Reconciling";

/// kstatus' `Stalled` condition (written only with
/// `--kstatus-conditions`): `True` while `RolloutHardStopped` is.
pub const STALLED: &str = "Stalled";

/// The condition types the agent writes with `--kstatus-conditions`, on
/// top of [`AGENT_CONDITION_TYPES`].
pub const KSTATUS_CONDITION_TYPES: [&str; 2] = [RECONCILING, STALLED];
