//! The companion resource `KuraInstanceHealth`
//! (`health.kura.tuist.dev/v1alpha1`): the agent's publication target when
//! Kura's own controller publishes `status.rolloutHealth` on the
//! `KuraInstance` (rollout-health.md, "Where the agent publishes: never
//! beside a second writer"). One object per instance, same namespace and
//! name, owned by the instance (an owner reference: deleted with it); its
//! status carries exactly what `instance` mode writes on the
//! `KuraInstance` (`rolloutHealth`, `rolloutGate`, `conditions`) and the
//! companion's own `observedGeneration`. The agent is its only writer; the
//! CRD is the agent chart's own.

use crate::gate_status::RolloutGate;
use crate::health::RolloutHealth;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The companion's group.
pub const COMPANION_GROUP: &str = "health.kura.tuist.dev";
/// The companion's `apiVersion`.
pub const COMPANION_API_VERSION: &str = "health.kura.tuist.dev/v1alpha1";
/// The companion's kind.
pub const COMPANION_KIND: &str = "KuraInstanceHealth";
/// The companion CRD's name (`<plural>.<group>`).
pub const COMPANION_CRD_NAME: &str = "kurainstancehealths.health.kura.tuist.dev";

/// The spec of a `KuraInstanceHealth`: empty. Everything the object says
/// is in its status; the spec exists because a custom resource has one,
/// and stays empty so the object's `metadata.generation` stays 1.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "health.kura.tuist.dev",
    version = "v1alpha1",
    kind = "KuraInstanceHealth",
    plural = "kurainstancehealths",
    shortname = "kurahealth",
    category = "tuist",
    namespaced,
    status = "KuraInstanceHealthStatus",
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.rolloutHealth.ready"}"#,
    printcolumn = r#"{"name":"Serving","type":"boolean","jsonPath":".status.rolloutHealth.serving"}"#,
    printcolumn = r#"{"name":"Sampled","type":"integer","jsonPath":".status.rolloutHealth.sampledPods"}"#,
    printcolumn = r#"{"name":"Expected","type":"integer","jsonPath":".status.rolloutHealth.expectedPods"}"#,
    printcolumn = r#"{"name":"Pressure","type":"integer","jsonPath":".status.rolloutHealth.memoryPressureState"}"#,
    printcolumn = r#"{"name":"RolloutHealthy","type":"string","jsonPath":".status.conditions[?(@.type==\"RolloutHealthy\")].status"}"#,
    printcolumn = r#"{"name":"Verdict","type":"string","jsonPath":".status.rolloutGate.verdict"}"#,
    printcolumn = r#"{"name":"Signal","type":"string","jsonPath":".status.rolloutGate.signal"}"#,
    printcolumn = r#"{"name":"Sample-Age","type":"date","jsonPath":".status.rolloutHealth.sampledAt"}"#,
    printcolumn = r#"{"name":"Image","type":"string","priority":1,"jsonPath":".status.rolloutGate.targetImage"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KuraInstanceHealthSpec {}

/// The status of a `KuraInstanceHealth`: what `instance` mode writes on
/// the `KuraInstance`, plus the companion's own `observedGeneration`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KuraInstanceHealthStatus {
    /// The aggregate of the instance's pods' reports (rollout-health.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_health: Option<RolloutHealth>,
    /// The gate's verdict against the pre-upgrade baseline (gate.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_gate: Option<RolloutGate>,
    /// kstatus' `observedGeneration`: this object's own
    /// `metadata.generation` (the instance's generation the verdict is
    /// about is in `rolloutHealth.observedGeneration` and each condition's
    /// `observedGeneration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The agent's conditions (`RolloutHealthy`, `RolloutHardStopped`, and
    /// with `--kstatus-conditions` `Reconciling` and `Stalled`), a list map
    /// keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::{CustomResourceExt, Resource};

    #[test]
    fn the_companion_is_named_as_the_contract_says() {
        let crd = KuraInstanceHealth::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some(COMPANION_CRD_NAME));
        assert_eq!(crd.spec.group, COMPANION_GROUP);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["kurahealth".to_owned()][..])
        );
        assert_eq!(KuraInstanceHealth::kind(&()), COMPANION_KIND);
        assert_eq!(KuraInstanceHealth::api_version(&()), COMPANION_API_VERSION);
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some()),
            "a status subresource"
        );
        let status = serde_json::to_value(&version.schema).expect("schema");
        let props = &status["openAPIV3Schema"]["properties"]["status"]["properties"];
        for field in [
            "rolloutHealth",
            "rolloutGate",
            "conditions",
            "observedGeneration",
        ] {
            assert!(props.get(field).is_some(), "status.{field} declared");
        }
    }
}
