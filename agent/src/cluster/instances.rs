//! Lenient reading of a watched `KuraInstance`: the spec must parse (an
//! instance whose spec does not is skipped with a reason), while each of
//! `status.rolloutHealth`, `status.rolloutGate`, `status.conditions` and
//! the controller's fields is parsed on its own, so one unreadable status
//! field (say, written under an older CRD and partly pruned) neither hides
//! the instance nor breaks the watch for every other instance. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kura_schemas::{KuraInstanceSpec, KuraInstanceStatus, RolloutGate, RolloutHealth};

use crate::model::{
    ControllerHealth, GATE_CONFIG_ANNOTATION, InstanceInfo, InstanceKey, InstanceTraits,
    PublicationTarget, SERVING_ROLLBACK_FLOOR_ANNOTATION, update_paused_of,
};

use super::wire::{CompanionObject, InstanceObject};

/// An instance discovery could not use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedInstance {
    /// The instance (name or namespace may be empty when missing).
    pub key: InstanceKey,
    /// Why.
    pub reason: String,
}

/// What an instance's targets are made of: a change here is a change of
/// its target; anything else (its status, labels, other annotations) is
/// not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceShape {
    /// Namespace, name, `spec.replicas`, `metadata.generation`.
    pub info: InstanceInfo,
    /// `spec.image`.
    pub spec_image: String,
    /// `spec.nodeLocalNetwork` is present (any value but `null`).
    pub node_local_network: bool,
    /// The text of the gate-config annotation, as found.
    pub gate_config: Option<String>,
    /// Why a status field could not be read, one line each.
    pub status_warnings: Vec<String>,
    /// Suspended, an operator's update pause, fenced serving configured:
    /// read from the spec, the controller's `status.phase` and
    /// `status.updatePaused`, and the annotations.
    pub traits: InstanceTraits,
}

/// What discovery keeps of one instance: its shape (or why it is skipped)
/// and its status as last seen, parsed (the agent's own writes move the
/// status; they never move the shape).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceEntry {
    /// The shape, or the reason the instance is skipped.
    pub shape: Result<InstanceShape, String>,
    /// The status as last seen, its unreadable fields `None`. Boxed: a
    /// status is 752 B inline, and the map holding the entries keeps room
    /// for about a seventh more entries than it holds, most of them
    /// without a status once their tasks hold it.
    pub status: Option<Box<KuraInstanceStatus>>,
    /// Instance mode: a manager other than the agent that owns a field
    /// under `status.rolloutHealth` (the agent stops writing the
    /// instance: `StatusContested`), with the instance's UID. Boxed, like
    /// the next: rare, and 8 B per instance when absent.
    pub contest: Option<Box<EntryContest>>,
    /// Companion mode: the instance's UID (the owner reference of the
    /// companion the writer creates) and Kura's controller's own `ready`,
    /// `serving` and `sampledAt`, compared with the agent's aggregate.
    pub companion: Option<Box<CompanionFacts>>,
}

/// What companion mode keeps of an instance beyond its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanionFacts {
    /// `metadata.uid`.
    pub uid: Option<Box<str>>,
    /// Kura's controller's own numbers, when it published them.
    pub controller: Option<ControllerHealth>,
}

/// Who contests an instance's `status.rolloutHealth`, and the instance's
/// UID (what the `StatusContested` Event points at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryContest {
    /// The other manager.
    pub manager: Box<str>,
    /// `metadata.uid` of the instance.
    pub uid: Option<Box<str>>,
}

/// The key of a watched instance, when it has a name and a namespace.
pub fn key_of(obj: &InstanceObject) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        obj.metadata.namespace.clone()?,
        obj.metadata.name.clone()?,
    ))
}

/// Reads one instance, the agent publishing on it (`instance` mode).
#[cfg(test)]
pub fn entry_of(obj: &InstanceObject) -> InstanceEntry {
    entry_reading(obj, PublicationTarget::Instance, true)
}

/// Reads one instance for publication `target`: in `instance` mode its
/// status is what the agent continues from and another manager of
/// `status.rolloutHealth` contests it; in `companion` mode its
/// `status.rolloutHealth` is Kura's controller's (read for
/// [`ControllerHealth`] only) and the agent's status comes from the
/// companion ([`companion_status`]).
///
/// The agent's own status fields are read only when `agent_fields`
/// (instance mode; see [`lenient_status_of`]).
pub fn entry_reading(
    obj: &InstanceObject,
    target: PublicationTarget,
    agent_fields: bool,
) -> InstanceEntry {
    let (status, status_warnings, contest, companion) = match target {
        PublicationTarget::Instance => {
            let (status, warnings) = lenient_status_of(obj.status.as_ref(), agent_fields);
            let contest = obj.other_rollout_health_manager().map(|m| {
                Box::new(EntryContest {
                    manager: Box::from(m),
                    uid: obj.metadata.uid.as_deref().map(Box::from),
                })
            });
            (status, warnings, contest, None)
        }
        PublicationTarget::Companion => {
            let controller = obj
                .status
                .as_ref()
                .and_then(|s| s.get("rolloutHealth"))
                .and_then(ControllerHealth::of);
            let facts = CompanionFacts {
                uid: obj.metadata.uid.as_deref().map(Box::from),
                controller,
            };
            (None, Vec::new(), None, Some(Box::new(facts)))
        }
    };
    match shape_of(obj, status_warnings) {
        Ok(shape) => InstanceEntry {
            shape: Ok(shape),
            status: status.map(Box::new),
            contest,
            companion,
        },
        Err(reason) => InstanceEntry {
            shape: Err(reason),
            status: None,
            contest: None,
            companion: None,
        },
    }
}

/// The agent's status as a companion carries it (`rolloutHealth`,
/// `rolloutGate`, `conditions`, read field group by field group like an
/// instance's), with why a field could not be read.
pub fn companion_status(obj: &CompanionObject) -> (Option<KuraInstanceStatus>, Vec<String>) {
    let (status, warnings) = lenient_status(obj.status.as_ref());
    let status = status.map(|s| KuraInstanceStatus {
        rollout_health: s.rollout_health,
        rollout_gate: s.rollout_gate,
        conditions: s.conditions,
        ..KuraInstanceStatus::default()
    });
    (status, warnings)
}

/// The key of a watched companion (its instance's), when it has a name and
/// a namespace.
pub fn companion_key_of(obj: &CompanionObject) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        obj.metadata.namespace.clone()?,
        obj.metadata.name.clone()?,
    ))
}

fn shape_of(obj: &InstanceObject, status_warnings: Vec<String>) -> Result<InstanceShape, String> {
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    if namespace.is_empty() || name.is_empty() {
        return Err("metadata.name or metadata.namespace missing".to_owned());
    }
    let generation = obj
        .metadata
        .generation
        .ok_or_else(|| "metadata.generation missing".to_owned())?;
    let spec_value = obj.spec.clone().ok_or_else(|| "spec missing".to_owned())?;
    let node_local_network = spec_value
        .get("nodeLocalNetwork")
        .is_some_and(|v| !v.is_null());
    let spec: KuraInstanceSpec =
        serde_json::from_value(spec_value).map_err(|e| format!("spec invalid: {e}"))?;
    let phase = obj
        .status
        .as_ref()
        .and_then(|s| s.get("phase"))
        .and_then(serde_json::Value::as_str);
    let annotations = obj.metadata.annotations.as_ref();
    let traits = InstanceTraits {
        suspended: InstanceTraits::is_suspended(spec.suspended, phase),
        update_paused: obj
            .status
            .as_ref()
            .and_then(|s| s.get("updatePaused"))
            .and_then(update_paused_of),
        fence_configured: InstanceTraits::is_fence_configured(
            spec.serving_mode.as_deref(),
            annotations.is_some_and(|a| a.contains_key(SERVING_ROLLBACK_FLOOR_ANNOTATION)),
        ),
    };
    let expected_pods = u32::try_from(spec.replicas)
        .ok()
        .filter(|r| *r >= 1)
        .ok_or_else(|| format!("spec.replicas {} is below 1", spec.replicas))?;
    Ok(InstanceShape {
        info: InstanceInfo {
            namespace,
            name,
            expected_pods,
            generation,
        },
        spec_image: spec.image,
        node_local_network,
        gate_config: obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(GATE_CONFIG_ANNOTATION))
            .cloned(),
        status_warnings,
        traits,
    })
}

/// Parses `status` field group by field group: `rolloutHealth`,
/// `rolloutGate`, `conditions` and the controller's fields, each on its
/// own.
fn lenient_status(value: Option<&serde_json::Value>) -> (Option<KuraInstanceStatus>, Vec<String>) {
    lenient_status_of(value, true)
}

/// The agent's own fields of a status.
const AGENT_FIELDS: [&str; 3] = ["rolloutHealth", "rolloutGate", "conditions"];

/// [`lenient_status`], the agent's own fields (`rolloutHealth`,
/// `rolloutGate`, `conditions`) read only when `agent_fields`: a task of
/// this replica holds them for a released instance, and every write of
/// its own comes back through the watch, so reading (and copying) them
/// there was most of the cost of an echo.
fn lenient_status_of(
    value: Option<&serde_json::Value>,
    agent_fields: bool,
) -> (Option<KuraInstanceStatus>, Vec<String>) {
    let mut warnings = Vec::new();
    let Some(serde_json::Value::Object(map)) = value else {
        if let Some(v) = value.filter(|v| !v.is_null()) {
            warnings.push(format!("status is not an object: {v}"));
        }
        return (None, warnings);
    };
    let mut rest: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .filter(|(k, _)| agent_fields || !AGENT_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Read on its own and leniently (its shape is Kura's controller's to
    // evolve): an odd `heldPods` must not make the other controller
    // fields unreadable.
    let update_paused = rest
        .remove("updatePaused")
        .and_then(|v| update_paused_of(&v));
    let health = rest
        .remove("rolloutHealth")
        .filter(|v| !v.is_null())
        .and_then(|v| {
            serde_json::from_value::<RolloutHealth>(v)
                .map_err(|e| warnings.push(format!("status.rolloutHealth unreadable: {e}")))
                .ok()
        });
    let conditions = rest
        .remove("conditions")
        .filter(|v| !v.is_null())
        .map(|v| lenient_conditions(v, &mut warnings))
        .unwrap_or_default();
    let gate = rest
        .remove("rolloutGate")
        .filter(|v| !v.is_null())
        .and_then(|v| {
            serde_json::from_value::<RolloutGate>(v)
                .map_err(|e| warnings.push(format!("status.rolloutGate unreadable: {e}")))
                .ok()
        });
    let mut status = serde_json::from_value::<KuraInstanceStatus>(serde_json::Value::Object(rest))
        .unwrap_or_else(|e| {
            warnings.push(format!("status (controller fields) unreadable: {e}"));
            KuraInstanceStatus::default()
        });
    status.rollout_health = health;
    status.rollout_gate = gate;
    status.update_paused = update_paused;
    status.conditions = conditions;
    (Some(status), warnings)
}

/// `status.conditions` entry by entry: one that does not read (another
/// writer's odd entry) is left out with a warning, the others are kept.
fn lenient_conditions(value: serde_json::Value, warnings: &mut Vec<String>) -> Vec<Condition> {
    let serde_json::Value::Array(items) = value else {
        warnings.push("status.conditions is not a list".to_owned());
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| {
            serde_json::from_value::<Condition>(item)
                .map_err(|e| warnings.push(format!("status.conditions[{i}] unreadable: {e}")))
                .ok()
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// An instance of `replicas` pods with `status`.
    pub(crate) fn instance(
        ns: &str,
        name: &str,
        replicas: i64,
        status: serde_json::Value,
    ) -> InstanceObject {
        serde_json::from_value(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": name, "namespace": ns, "generation": 3, "uid": format!("iu-{name}")},
            "spec": {"image": "ghcr.io/tuist/kura:0.6.0", "replicas": replicas, "region": "eu"},
            "status": status
        }))
        .expect("instance")
    }

    #[test]
    fn invalid_instances_are_skipped_with_a_reason() {
        let mut no_gen = instance("kura", "nogen", 1, json!(null));
        no_gen.metadata.generation = None;
        let mut bad_spec = instance("kura", "badspec", 1, json!(null));
        bad_spec.spec = Some(json!({"replicas": 1}));
        let reason = |o: &InstanceObject| entry_of(o).shape.err().unwrap_or_default();
        assert!(reason(&bad_spec).starts_with("spec invalid"));
        assert_eq!(reason(&no_gen), "metadata.generation missing");
        assert_eq!(
            reason(&instance("kura", "zero", 0, json!(null))),
            "spec.replicas 0 is below 1"
        );
    }

    #[test]
    fn node_local_network_is_its_presence_in_the_spec() {
        let with = |extra: serde_json::Value| {
            let mut inst = instance("kura", "acme", 1, json!(null));
            if let Some(spec) = inst.spec.as_mut().and_then(|s| s.as_object_mut()) {
                spec.extend(extra.as_object().cloned().unwrap_or_default());
            }
            entry_of(&inst).shape.expect("shape").node_local_network
        };
        assert!(!with(json!({})));
        assert!(!with(json!({"nodeLocalNetwork": null})));
        assert!(with(json!({"nodeLocalNetwork": {}})));
        assert!(with(json!({"nodeLocalNetwork": {"interface": "eth1"}})));
    }

    #[test]
    fn previous_status_is_read_field_group_by_field_group() {
        let gate = json!({"targetImage": "img:2", "verdict": "healthy", "evaluatedAt": "2026-07-21T10:00:00Z"});
        // rolloutHealth lost its required fields (an older CRD pruned them):
        // the gate and the controller's fields must survive.
        let inst = instance(
            "kura",
            "acme",
            1,
            json!({"phase": "Running", "rolloutHealth": {"ready": true}, "rolloutGate": gate}),
        );
        let entry = entry_of(&inst);
        let status = entry.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.rollout_health, None);
        assert_eq!(
            status
                .rollout_gate
                .as_ref()
                .map(|g| g.target_image.as_str()),
            Some("img:2")
        );
        let shape = entry.shape.expect("shape");
        assert_eq!(shape.status_warnings.len(), 1);
        assert!(shape.status_warnings[0].starts_with("status.rolloutHealth unreadable"));

        // A released instance (a task of this replica holds its state):
        // the agent's own fields are not read, the controller's are.
        let light = entry_reading(&inst, PublicationTarget::Instance, false);
        let status = light.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.rollout_gate.is_none() && status.rollout_health.is_none());
        assert!(light.shape.expect("shape").status_warnings.is_empty());
    }

    #[test]
    fn suspension_update_pauses_and_fenced_serving_are_read_into_the_traits() {
        let traits = |spec_extra: serde_json::Value, status: serde_json::Value| {
            let mut inst = instance("kura", "acme", 2, status);
            if let (Some(serde_json::Value::Object(spec)), serde_json::Value::Object(extra)) =
                (inst.spec.as_mut(), spec_extra)
            {
                spec.extend(extra);
            }
            entry_of(&inst).shape.expect("shape").traits
        };
        assert_eq!(traits(json!({}), json!(null)), InstanceTraits::default());
        assert!(traits(json!({"suspended": true}), json!(null)).suspended);
        assert!(traits(json!({}), json!({"phase": "Suspending"})).suspended);
        assert!(traits(json!({}), json!({"phase": "Suspended"})).suspended);
        assert!(!traits(json!({"suspended": false}), json!({"phase": "Running"})).suspended);
        assert!(traits(json!({"servingMode": "PositiveFenceV1"}), json!(null)).fence_configured);

        let paused = traits(
            json!({}),
            json!({"phase": "Running", "updatePaused": {"strategy": "Partition", "partition": 1,
                "templateImage": "ghcr.io/tuist/kura:0.7.0", "heldPods": ["acme-0", 7]}}),
        );
        let pause = paused.update_paused.expect("a pause");
        assert_eq!(pause.strategy, "Partition");
        assert_eq!(pause.partition, Some(1));
        assert_eq!(
            pause.template_image.as_deref(),
            Some("ghcr.io/tuist/kura:0.7.0")
        );
        assert_eq!(pause.held_pods, ["acme-0"]);

        // Odd values are dropped, the pause is kept, and the controller's
        // other fields still read.
        let inst = instance(
            "kura",
            "odd",
            1,
            json!({"phase": "Running", "updatePaused": {"strategy": 3, "heldPods": 2}}),
        );
        let entry = entry_of(&inst);
        let status = entry.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(
            status.update_paused.as_ref().map(|p| p.strategy.as_str()),
            Some("")
        );
        let shape = entry.shape.expect("shape");
        assert!(
            shape.status_warnings.is_empty(),
            "{:?}",
            shape.status_warnings
        );
        assert!(shape.traits.update_paused.is_some());
        assert_eq!(update_paused_of(&json!(null)), None);
    }

    #[test]
    fn the_serving_rollback_floor_annotation_means_fenced_serving() {
        let inst: InstanceObject = serde_json::from_value(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": "f", "namespace": "kura", "generation": 1,
                "annotations": {"kura.tuist.dev/serving-rollback-floor": "3", "other": "x"}},
            "spec": {"image": "img", "replicas": 1}
        }))
        .expect("instance");
        assert!(
            entry_of(&inst)
                .shape
                .expect("shape")
                .traits
                .fence_configured
        );
    }
}
