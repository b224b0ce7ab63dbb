//! Where the agent publishes (rollout-health.md, "Where the agent
//! publishes: never beside a second writer"): the [`PublicationTarget`]
//! (`instance`: the `KuraInstance`'s own status; `companion`: a
//! `KuraInstanceHealth` per instance), how `auto` chooses it at start
//! ([`choose_target`], pure), and what the agent reads of another writer of
//! `status.rolloutHealth`: the other managers found in an instance's
//! `managedFields` (read by the cluster adapter's instance watch) and Kura's
//! controller's own numbers ([`ControllerHealth`]). Plain values.

use jiff::Timestamp;

/// The field manager of every write the agent makes.
pub const FIELD_MANAGER: &str = "kura-health-agent";

/// Where the agent writes an instance's `rolloutHealth`, `rolloutGate`
/// and conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PublicationTarget {
    /// The `KuraInstance`'s own status (server-side apply on its `status`
    /// subresource).
    #[default]
    Instance,
    /// A `KuraInstanceHealth` of the same namespace and name, owned by the
    /// instance; the `KuraInstance` is never written.
    Companion,
}

impl PublicationTarget {
    /// Both targets, for metrics that show one series per target.
    pub const ALL: [PublicationTarget; 2] =
        [PublicationTarget::Instance, PublicationTarget::Companion];

    /// `instance` or `companion`, as the flag, the metric and the pages
    /// name it.
    pub fn as_str(self) -> &'static str {
        match self {
            PublicationTarget::Instance => "instance",
            PublicationTarget::Companion => "companion",
        }
    }
}

impl std::fmt::Display for PublicationTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the operator asked for: a target, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetRequest {
    /// Choose at start ([`choose_target`]).
    #[default]
    Auto,
    /// Always this target.
    Fixed(PublicationTarget),
}

impl std::str::FromStr for TargetRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(TargetRequest::Auto),
            "instance" => Ok(TargetRequest::Fixed(PublicationTarget::Instance)),
            "companion" => Ok(TargetRequest::Fixed(PublicationTarget::Companion)),
            other => Err(format!(
                "unknown publication target {other:?} (auto, instance or companion)"
            )),
        }
    }
}

/// What `auto` found about the installed `KuraInstance` CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrdFinding {
    /// Its stored version's schema declares `status.rolloutGate`: this
    /// project's CRD (or one as new).
    DeclaresRolloutGate,
    /// It does not: Tuist's CRD (twelve-field `rolloutHealth`), or an old
    /// one of ours; fields the agent writes there would be pruned.
    LacksRolloutGate,
    /// It could not be read (the reason): the agent cannot tell whose it
    /// is.
    Unreadable(String),
}

/// The target in use and why it was chosen (shown in the log, on the
/// debug page and in the metric's `reason` label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetChoice {
    /// The target.
    pub target: PublicationTarget,
    /// `flag` (named by the operator) or `auto`.
    pub chosen_by: &'static str,
    /// One line: why.
    pub reason: String,
}

/// `auto`'s choice at start: `companion` when the installed `KuraInstance`
/// CRD does not declare `status.rolloutGate`, or when an instance's
/// `managedFields` show another manager on `status.rolloutHealth`
/// (`contested`: one such instance and its manager); `instance` otherwise.
/// A CRD that cannot be read chooses `companion`: the agent cannot rule
/// out a second writer, and the companion never fights one.
pub fn choose_target(
    request: TargetRequest,
    crd: &CrdFinding,
    contested: Option<(&str, &str)>,
) -> TargetChoice {
    if let TargetRequest::Fixed(target) = request {
        return TargetChoice {
            target,
            chosen_by: "flag",
            reason: format!("--publication-target {target}"),
        };
    }
    let companion = |reason: String| TargetChoice {
        target: PublicationTarget::Companion,
        chosen_by: "auto",
        reason,
    };
    match (crd, contested) {
        (CrdFinding::LacksRolloutGate, _) => companion(
            "the installed KuraInstance CRD does not declare status.rolloutGate (Kura's own CRD): \
             the API server would prune the agent's fields there"
                .to_owned(),
        ),
        (CrdFinding::Unreadable(why), _) => companion(format!(
            "the KuraInstance CRD could not be read ({why}): a second writer cannot be ruled out"
        )),
        (CrdFinding::DeclaresRolloutGate, Some((instance, manager))) => companion(format!(
            "{manager:?} also writes status.rolloutHealth (seen on {instance})"
        )),
        (CrdFinding::DeclaresRolloutGate, None) => TargetChoice {
            target: PublicationTarget::Instance,
            chosen_by: "auto",
            reason: "the KuraInstance CRD declares status.rolloutGate and no other manager \
                     writes status.rolloutHealth"
                .to_owned(),
        },
    }
}

/// Whether a CRD (as JSON) declares `status.rolloutGate` in the schema of
/// its storage version (or of its only version).
pub fn crd_declares_rollout_gate(crd: &serde_json::Value) -> bool {
    let Some(versions) = crd.pointer("/spec/versions").and_then(|v| v.as_array()) else {
        return false;
    };
    let storage = versions
        .iter()
        .find(|v| v.get("storage").and_then(serde_json::Value::as_bool) == Some(true))
        .or_else(|| versions.first());
    storage.is_some_and(|v| {
        v.pointer("/schema/openAPIV3Schema/properties/status/properties/rolloutGate")
            .is_some()
    })
}

/// An instance whose `status.rolloutHealth` another manager writes
/// (instance mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contest {
    /// The instance.
    pub key: crate::model::InstanceKey,
    /// The other manager.
    pub manager: Box<str>,
    /// The instance's UID (what an Event points at).
    pub uid: Option<Box<str>>,
}

/// Kura's controller's own `status.rolloutHealth`, as far as the agent
/// compares it with its aggregate (companion mode): `ready`, `serving`
/// and when it sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerHealth {
    /// Its `ready`.
    pub ready: Option<bool>,
    /// Its `serving`.
    pub serving: Option<bool>,
    /// Its `sampledAt`.
    pub sampled_at: Option<Timestamp>,
}

impl ControllerHealth {
    /// Reads it from a `status.rolloutHealth` value (`None` when that is
    /// not an object or says neither `ready` nor `serving`).
    pub fn of(value: &serde_json::Value) -> Option<ControllerHealth> {
        let obj = value.as_object()?;
        let ready = obj.get("ready").and_then(serde_json::Value::as_bool);
        let serving = obj.get("serving").and_then(serde_json::Value::as_bool);
        if ready.is_none() && serving.is_none() {
            return None;
        }
        let sampled_at = obj
            .get("sampledAt")
            .and_then(serde_json::Value::as_str)
            .and_then(|s| s.parse().ok());
        Some(ControllerHealth {
            ready,
            serving,
            sampled_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn auto_chooses_the_companion_beside_kuras_crd_or_a_second_writer() {
        let auto = TargetRequest::Auto;
        let ours = CrdFinding::DeclaresRolloutGate;
        assert_eq!(
            choose_target(auto, &ours, None).target,
            PublicationTarget::Instance
        );
        let contested = choose_target(auto, &ours, Some(("kura/acme", "manager")));
        assert_eq!(contested.target, PublicationTarget::Companion);
        assert!(
            contested.reason.contains("\"manager\""),
            "{}",
            contested.reason
        );
        assert_eq!(
            choose_target(auto, &CrdFinding::LacksRolloutGate, None).target,
            PublicationTarget::Companion
        );
        assert_eq!(
            choose_target(auto, &CrdFinding::Unreadable("403".into()), None).target,
            PublicationTarget::Companion
        );
        let fixed = choose_target(
            TargetRequest::Fixed(PublicationTarget::Instance),
            &CrdFinding::LacksRolloutGate,
            Some(("kura/acme", "manager")),
        );
        assert_eq!(fixed.target, PublicationTarget::Instance);
        assert_eq!(fixed.chosen_by, "flag");
    }

    #[test]
    fn requests_parse_from_the_three_words_only() {
        assert_eq!("auto".parse::<TargetRequest>(), Ok(TargetRequest::Auto));
        assert_eq!(
            "companion".parse::<TargetRequest>(),
            Ok(TargetRequest::Fixed(PublicationTarget::Companion))
        );
        assert!("Instance".parse::<TargetRequest>().is_err());
    }

    #[test]
    fn the_crd_is_read_at_its_storage_version() {
        let crd = |v1: serde_json::Value, v2: serde_json::Value| {
            json!({"spec": {"versions": [
                {"name": "v1alpha1", "storage": false, "schema": {"openAPIV3Schema": {"properties": {"status": {"properties": v1}}}}},
                {"name": "v1beta1", "storage": true, "schema": {"openAPIV3Schema": {"properties": {"status": {"properties": v2}}}}}
            ]}})
        };
        assert!(crd_declares_rollout_gate(&crd(
            json!({}),
            json!({"rolloutGate": {"type": "object"}})
        )));
        assert!(!crd_declares_rollout_gate(&crd(
            json!({"rolloutGate": {}}),
            json!({"rolloutHealth": {}})
        )));
        assert!(!crd_declares_rollout_gate(&json!({"spec": {}})));
    }

    #[test]
    fn the_controllers_numbers_are_read_when_it_says_ready_or_serving() {
        let h = ControllerHealth::of(&json!({"ready": true, "serving": false,
            "sampledAt": "2026-12-06T10:00:00Z", "sampledPods": 3}))
        .expect("read");
        assert_eq!(h.ready, Some(true));
        assert_eq!(h.serving, Some(false));
        assert!(h.sampled_at.is_some());
        assert_eq!(ControllerHealth::of(&json!({"sampledPods": 3})), None);
        assert_eq!(ControllerHealth::of(&json!(null)), None);
    }
}
