//! Lenient reading of a watched `KuraInstance`: the spec must parse (an
//! instance whose spec does not is skipped with a reason), while each of
//! `status.rolloutHealth`, `status.rolloutGate`, `status.conditions` and
//! the controller's fields is parsed on its own, so one unreadable status
//! field (say, written under an older CRD and partly pruned) neither hides
//! the instance nor breaks the watch for every other instance. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kura_schemas::{
    KuraInstanceSpec, KuraInstanceStatus, RolloutGate, RolloutHealth, UpdatePaused,
};
use serde::Deserialize;
use serde_json::value::RawValue;

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
    /// status is large inline, and the map holding the entries keeps room
    /// for about a seventh more entries than it holds, most of them
    /// without a status once their tasks hold it.
    pub status: Option<Box<KuraInstanceStatus>>,
    /// Instance mode: a manager other than the agent that owns a field
    /// under `status.rolloutHealth` (the agent stops writing the
    /// instance: `StatusContested`), with the instance's UID. Boxed, like
    /// the next: rare, and a pointer per instance when absent.
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
    key_of_meta(&obj.metadata)
}

/// The key of an object's metadata (`None` without a namespace or a name).
pub fn key_of_meta(meta: &ObjectMeta) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        meta.namespace.clone()?,
        meta.name.clone()?,
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
/// (instance mode): a task of this replica holds them for a released
/// instance, and every write of its own comes back through the watch, so
/// reading (and copying) them there was most of the cost of an echo.
pub fn entry_reading(
    obj: &InstanceObject,
    target: PublicationTarget,
    agent_fields: bool,
) -> InstanceEntry {
    let mut warnings = Vec::new();
    let parts = status_parts(obj.status.as_deref(), &mut warnings);
    let update_paused = parts
        .as_ref()
        .and_then(|p| p.rest.get("updatePaused"))
        .and_then(update_paused_of);
    let controller = ControllerFields {
        phase: parts
            .as_ref()
            .and_then(|p| p.rest.get("phase"))
            .and_then(serde_json::Value::as_str),
        update_paused: update_paused.clone(),
    };
    let mut shape = match shape_of(obj, controller) {
        Ok(shape) => shape,
        Err(reason) => {
            return InstanceEntry {
                shape: Err(reason),
                status: None,
                contest: None,
                companion: None,
            };
        }
    };
    let (status, contest, companion) = match target {
        PublicationTarget::Instance => {
            let status =
                parts.map(|p| lenient_status_of(p, agent_fields, update_paused, &mut warnings));
            let contest = obj.other_rollout_health_manager().map(|m| {
                Box::new(EntryContest {
                    manager: Box::from(m),
                    uid: obj.metadata.uid.as_deref().map(Box::from),
                })
            });
            (status, contest, None)
        }
        PublicationTarget::Companion => {
            let controller = parts
                .and_then(|p| p.rollout_health)
                .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
                .and_then(|v| ControllerHealth::of(&v));
            let facts = CompanionFacts {
                uid: obj.metadata.uid.as_deref().map(Box::from),
                controller,
            };
            (None, None, Some(Box::new(facts)))
        }
    };
    shape.status_warnings = warnings;
    InstanceEntry {
        shape: Ok(shape),
        status: status.map(Box::new),
        contest,
        companion,
    }
}

/// The agent's status as a companion carries it (`rolloutHealth`,
/// `rolloutGate`, `conditions`, read field group by field group like an
/// instance's), with why a field could not be read.
pub fn companion_status(obj: &CompanionObject) -> (Option<KuraInstanceStatus>, Vec<String>) {
    let mut warnings = Vec::new();
    let status = status_parts(obj.status.as_deref(), &mut warnings).map(|p| {
        let s = lenient_status_of(p, true, None, &mut warnings);
        KuraInstanceStatus {
            rollout_health: s.rollout_health,
            rollout_gate: s.rollout_gate,
            conditions: s.conditions,
            ..KuraInstanceStatus::default()
        }
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

/// What the instance's traits read of the controller's status fields.
struct ControllerFields<'a> {
    /// `status.phase`.
    phase: Option<&'a str>,
    /// `status.updatePaused`, as read.
    update_paused: Option<Box<UpdatePaused>>,
}

/// The instance's shape, its status warnings left for the caller to fill.
fn shape_of(
    obj: &InstanceObject,
    controller: ControllerFields<'_>,
) -> Result<InstanceShape, String> {
    let namespace = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    if namespace.is_empty() || name.is_empty() {
        return Err("metadata.name or metadata.namespace missing".to_owned());
    }
    let generation = obj
        .metadata
        .generation
        .ok_or_else(|| "metadata.generation missing".to_owned())?;
    let spec_value = obj.spec.as_ref().ok_or_else(|| "spec missing".to_owned())?;
    let node_local_network = spec_value
        .get("nodeLocalNetwork")
        .is_some_and(|v| !v.is_null());
    let spec =
        KuraInstanceSpec::deserialize(spec_value).map_err(|e| format!("spec invalid: {e}"))?;
    let annotations = obj.metadata.annotations.as_ref();
    let traits = InstanceTraits {
        suspended: InstanceTraits::is_suspended(spec.suspended, controller.phase),
        update_paused: controller.update_paused,
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
        status_warnings: Vec::new(),
        traits,
    })
}

/// A status's field groups as sent: the agent's own fields as their text
/// (borrowed from the object's raw status, parsed only when wanted), every
/// other field (the controller's) as JSON.
#[derive(Deserialize)]
struct StatusParts<'a> {
    /// `rolloutHealth` (the agent's, or in companion mode the
    /// controller's).
    #[serde(rename = "rolloutHealth", borrow, default)]
    rollout_health: Option<&'a RawValue>,
    /// `rolloutGate`.
    #[serde(rename = "rolloutGate", borrow, default)]
    rollout_gate: Option<&'a RawValue>,
    /// `conditions`.
    #[serde(borrow, default)]
    conditions: Option<&'a RawValue>,
    /// Every other field.
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// The most of an unreadable status quoted in a warning.
const QUOTED_STATUS_BYTES: usize = 256;

/// `raw` split into its field groups, or `None` (with a warning when it
/// is not an object).
fn status_parts<'a>(
    raw: Option<&'a RawValue>,
    warnings: &mut Vec<String>,
) -> Option<StatusParts<'a>> {
    let text = raw?.get();
    serde_json::from_str::<StatusParts<'a>>(text)
        .map_err(|_| {
            let quoted: String = text.chars().take(QUOTED_STATUS_BYTES).collect();
            warnings.push(format!("status is not an object: {quoted}"));
        })
        .ok()
}

/// Parses a status's field groups one by one: `rolloutHealth`,
/// `rolloutGate`, `conditions` (read only when `agent_fields`; see
/// [`entry_reading`]) and the controller's fields, each on its own, with
/// `update_paused` as [`update_paused_of`] read it (leniently, on its own:
/// its shape is Kura's controller's to evolve, and an odd `heldPods` must
/// not make the other controller fields unreadable).
fn lenient_status_of(
    parts: StatusParts<'_>,
    agent_fields: bool,
    update_paused: Option<Box<UpdatePaused>>,
    warnings: &mut Vec<String>,
) -> KuraInstanceStatus {
    let mut rest = parts.rest;
    rest.remove("updatePaused");
    let (health, gate, conditions) = if agent_fields {
        let health = parts.rollout_health.and_then(|raw| {
            serde_json::from_str::<RolloutHealth>(raw.get())
                .map_err(|e| warnings.push(format!("status.rolloutHealth unreadable: {e}")))
                .ok()
        });
        let gate = parts.rollout_gate.and_then(|raw| {
            serde_json::from_str::<RolloutGate>(raw.get())
                .map_err(|e| warnings.push(format!("status.rolloutGate unreadable: {e}")))
                .ok()
        });
        let conditions = parts
            .conditions
            .map(|raw| lenient_conditions(raw, warnings))
            .unwrap_or_default();
        (health, gate, conditions)
    } else {
        (None, None, Vec::new())
    };
    let mut status = KuraInstanceStatus::deserialize(serde_json::Value::Object(rest))
        .unwrap_or_else(|e| {
            warnings.push(format!("status (controller fields) unreadable: {e}"));
            KuraInstanceStatus::default()
        });
    status.rollout_health = health;
    status.rollout_gate = gate;
    status.update_paused = update_paused;
    status.conditions = conditions;
    status
}

/// `status.conditions` entry by entry: one that does not read (another
/// writer's odd entry) is left out with a warning, the others are kept.
fn lenient_conditions(raw: &RawValue, warnings: &mut Vec<String>) -> Vec<Condition> {
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        warnings.push("status.conditions is not a list".to_owned());
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| {
            serde_json::from_str::<Condition>(item.get())
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
        InstanceObject::from_json(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": name, "namespace": ns, "generation": 3, "uid": format!("iu-{name}")},
            "spec": {"image": "ghcr.io/tuist/kura:0.6.0", "replicas": replicas, "region": "eu"},
            "status": status
        }))
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
        let inst = InstanceObject::from_json(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": "f", "namespace": "kura", "generation": 1,
                "annotations": {"kura.tuist.dev/serving-rollback-floor": "3", "other": "x"}},
            "spec": {"image": "img", "replicas": 1}
        }));
        assert!(
            entry_of(&inst)
                .shape
                .expect("shape")
                .traits
                .fence_configured
        );
    }
}
