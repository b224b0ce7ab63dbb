//! The watched objects as the agent reads them off the wire: typed partial
//! objects (kube's `#[resource(inherit = …)]`) that declare only the
//! fields discovery reads, so a Pod's volumes, env, probes and managed
//! fields, or an instance's other annotations, are skipped while the
//! JSON is parsed instead of being built and dropped. Nothing here is
//! kept: discovery turns each object into its facts ([`super::pods`],
//! [`super::instances`]) as the event arrives.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use kube::Resource;
use kura_schemas::{KuraInstance, KuraInstanceHealth};
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::model::{FIELD_MANAGER, GATE_CONFIG_ANNOTATION, SERVING_ROLLBACK_FLOOR_ANNOTATION};

/// The metadata fields discovery and the watcher read; the rest (labels,
/// other annotations, and of `managedFields` everything but which manager
/// owns `status.rolloutHealth`) is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaRead<M> {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default, deserialize_with = "gate_annotation_only")]
    annotations: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
    /// A Pod's are skipped ([`Skipped`]); an instance's are read for
    /// their managers of `status.rolloutHealth`.
    #[serde(default)]
    managed_fields: M,
}

/// A value skipped while parsing.
#[derive(Default)]
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d)?;
        Ok(Skipped)
    }
}

/// One `managedFields` entry, read for one thing only: whether it owns
/// something under `status.rolloutHealth` (every other field set is
/// skipped while parsing).
#[derive(Deserialize)]
struct ManagedRead {
    manager: Option<String>,
    #[serde(rename = "fieldsV1")]
    fields_v1: Option<FieldsRead>,
}

/// `fieldsV1`, its `f:status` only.
#[derive(Deserialize)]
struct FieldsRead {
    #[serde(rename = "f:status")]
    status: Option<StatusFieldsRead>,
}

/// `f:status`, its `f:rolloutHealth` only.
#[derive(Deserialize)]
struct StatusFieldsRead {
    #[serde(rename = "f:rolloutHealth")]
    rollout_health: Option<IgnoredAny>,
}

/// The first manager other than the agent that owns a field under
/// `status.rolloutHealth`, as a one-entry `managedFields` (its manager
/// only): what [`InstanceObject::other_rollout_health_manager`] reads.
fn other_manager(entries: Option<Vec<ManagedRead>>) -> Option<Vec<ManagedFieldsEntry>> {
    let manager = entries?.into_iter().find_map(|e| {
        let owns = e
            .fields_v1
            .and_then(|f| f.status)
            .is_some_and(|s| s.rollout_health.is_some());
        e.manager.filter(|m| owns && m != FIELD_MANAGER)
    })?;
    Some(vec![ManagedFieldsEntry {
        manager: Some(manager),
        ..ManagedFieldsEntry::default()
    }])
}

/// The first manager other than the agent that owns a field under
/// `status.rolloutHealth` in full `managedFields` (a metadata-only list's:
/// the same rule as [`other_manager`], over the typed entries).
pub fn other_rollout_health_manager_in(meta: &ObjectMeta) -> Option<&str> {
    meta.managed_fields.as_ref()?.iter().find_map(|e| {
        let owns = e
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.get("f:status"))
            .and_then(|s| s.get("f:rolloutHealth"))
            .is_some();
        e.manager.as_deref().filter(|m| owns && *m != FIELD_MANAGER)
    })
}

/// Reads a Pod's `metadata` keeping only what discovery uses (its
/// `managedFields` skipped).
fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = MetaRead::<Skipped>::deserialize(d)?;
    Ok(kept_meta(m, None))
}

/// Reads an instance's (or a companion's) `metadata` like a Pod's, also
/// keeping another manager of `status.rolloutHealth` ([`other_manager`]).
fn instance_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let mut m = MetaRead::<Option<Vec<ManagedRead>>>::deserialize(d)?;
    let managed = other_manager(m.managed_fields.take());
    Ok(kept_meta(m, managed))
}

fn kept_meta<M>(m: MetaRead<M>, managed_fields: Option<Vec<ManagedFieldsEntry>>) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        owner_references: m.owner_references.map(|refs| {
            refs.into_iter()
                .filter(|o| o.kind == "StatefulSet")
                .collect()
        }),
        annotations: m.annotations,
        deletion_timestamp: m.deletion_timestamp,
        managed_fields,
        ..ObjectMeta::default()
    }
}

/// Reads `metadata.annotations` keeping only the gate-config annotation
/// and the serving rollback floor's (a `last-applied-configuration` can be
/// larger than the whole object otherwise kept).
fn gate_annotation_only<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Only;
    impl<'de> Visitor<'de> for Only {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == GATE_CONFIG_ANNOTATION || key == SERVING_ROLLBACK_FLOOR_ANNOTATION {
                    kept.insert(key.into_owned(), map.next_value::<String>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(kept)
        }
    }
    struct MaybeOnly;
    impl<'de> Visitor<'de> for MaybeOnly {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations or null")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(Only).map(Some)
        }
    }
    d.deserialize_option(MaybeOnly)
}

/// A Pod as discovery reads it: metadata (name, namespace, UID, the
/// StatefulSet owner), each container's name, image and ports, and the
/// phase, pod IP and each container's restart count.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[resource(inherit = "Pod")]
pub struct PodObject {
    /// The metadata kept (see the module documentation).
    #[serde(deserialize_with = "slim_meta", default)]
    pub metadata: ObjectMeta,
    /// `spec`, its containers only.
    #[serde(default)]
    pub spec: Option<PodSpecRead>,
    /// `status`, its phase, IP and container statuses only.
    #[serde(default)]
    pub status: Option<PodStatusRead>,
}

/// `spec` of a Pod, as read.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
pub struct PodSpecRead {
    /// `spec.containers`.
    #[serde(default)]
    pub containers: Vec<ContainerRead>,
}

/// One container of a Pod's spec, as read.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
pub struct ContainerRead {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its image.
    pub image: Option<String>,
    /// Its ports.
    pub ports: Option<Vec<PortRead>>,
}

/// One container port, as read.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "camelCase")]
pub struct PortRead {
    /// Its name.
    pub name: Option<String>,
    /// Its number.
    #[serde(default)]
    pub container_port: i32,
}

/// `status` of a Pod, as read.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "camelCase")]
pub struct PodStatusRead {
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.podIP`.
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// `status.containerStatuses`.
    pub container_statuses: Option<Vec<ContainerStatusRead>>,
}

/// One container status, as read.
#[derive(Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatusRead {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// Its restart count.
    #[serde(default)]
    pub restart_count: i32,
}

/// A `KuraInstance` as discovery reads it: the metadata kept, `spec` as
/// JSON, `status` as its raw JSON text (read leniently, field group by
/// field group, by [`super::instances`], which reads the agent's own
/// fields only when it needs them), nothing else.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[resource(inherit = "KuraInstance")]
pub struct InstanceObject {
    /// The metadata kept (see the module documentation).
    #[serde(deserialize_with = "instance_meta", default)]
    pub metadata: ObjectMeta,
    /// `spec`, as sent.
    #[serde(default)]
    pub spec: Option<serde_json::Value>,
    /// `status`, its JSON text as sent: one copy of the bytes, where a
    /// `serde_json::Value` was a tree of a few hundred allocations for
    /// each echo of the agent's own write (its per-pod entries), mostly
    /// never read.
    #[serde(default)]
    pub status: Option<Box<RawValue>>,
}

impl InstanceObject {
    /// An instance read from `value` as the watch reads it (its text: a
    /// raw `status` cannot be read from a `serde_json::Value`).
    #[cfg(test)]
    pub(crate) fn from_json(value: serde_json::Value) -> InstanceObject {
        serde_json::from_str(&value.to_string()).expect("an instance")
    }

    /// A manager other than the agent that owns a field under
    /// `status.rolloutHealth` (Kura's controller publishing its own), if
    /// the object's `managedFields` name one.
    pub fn other_rollout_health_manager(&self) -> Option<&str> {
        self.metadata
            .managed_fields
            .as_ref()?
            .first()?
            .manager
            .as_deref()
    }
}

/// A `KuraInstanceHealth` (the companion) as discovery reads it: its
/// metadata kept like an instance's, its `status` as JSON (read like an
/// instance's status), nothing else.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
#[resource(inherit = "KuraInstanceHealth")]
pub struct CompanionObject {
    /// The metadata kept.
    #[serde(deserialize_with = "instance_meta", default)]
    pub metadata: ObjectMeta,
    /// `status`, its JSON text as sent (see [`InstanceObject::status`]).
    #[serde(default)]
    pub status: Option<Box<RawValue>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_keeps_only_what_is_read() {
        let pod: PodObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "acme-0", "namespace": "kura", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "kura"},
                "annotations": {"a": "b", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "acme", "uid": "s"}
                ]
            },
            "spec": {"containers": [{"name": "kura", "image": "k:1",
                                     "env": [{"name": "A", "value": "B"}],
                                     "ports": [{"name": "http", "containerPort": 4000}]}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "containerStatuses": [{"name": "kura", "restartCount": 2, "ready": true}]}
        }))
        .expect("pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("acme-0"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        assert!(pod.metadata.managed_fields.is_none());
        assert!(pod.metadata.labels.is_none());
        assert_eq!(pod.metadata.annotations, Some(BTreeMap::new()));
        let owners = pod.metadata.owner_references.as_ref().expect("owners");
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].name, "acme");
        let status = pod.status.as_ref().expect("status");
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            status.container_statuses.as_ref().expect("statuses")[0].restart_count,
            2
        );
    }

    #[test]
    fn an_instance_keeps_only_the_gate_annotation() {
        let obj: InstanceObject = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "n", "generation": 2,
                         "annotations": {GATE_CONFIG_ANNOTATION: "{}", "other": "x"}},
            "spec": {"image": "i", "replicas": 1}
        }))
        .expect("instance");
        let annotations = obj.metadata.annotations.expect("annotations");
        assert_eq!(annotations.len(), 1);
        assert_eq!(
            annotations.get(GATE_CONFIG_ANNOTATION).map(String::as_str),
            Some("{}")
        );
        let null: InstanceObject =
            serde_json::from_value(json!({"metadata": {"name": "a", "annotations": null}}))
                .expect("null annotations");
        assert_eq!(null.metadata.annotations, None);
    }

    #[test]
    fn an_instance_keeps_its_status_as_the_text_sent() {
        let text = r#"{"metadata": {"name": "a"}, "status": {"phase": "Running", "rolloutHealth": {"pods": [{"name": "a-0"}]}}}"#;
        let obj: InstanceObject = serde_json::from_str(text).expect("instance");
        assert_eq!(
            obj.status.as_deref().map(RawValue::get),
            Some(r#"{"phase": "Running", "rolloutHealth": {"pods": [{"name": "a-0"}]}}"#)
        );
        let none: InstanceObject =
            serde_json::from_str(r#"{"metadata": {"name": "a"}, "status": null}"#).expect("null");
        assert!(none.status.is_none());
    }

    #[test]
    fn an_instance_keeps_only_another_manager_of_rollout_health() {
        let with = |entries: serde_json::Value| -> InstanceObject {
            serde_json::from_value(json!({"metadata": {"name": "a", "managedFields": entries}}))
                .expect("instance")
        };
        let ours = json!({"manager": FIELD_MANAGER, "operation": "Apply", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:rolloutHealth": {"f:ready": {}}}}});
        let phase = json!({"manager": "manager", "operation": "Update", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}});
        let theirs = json!({"manager": "manager", "operation": "Update", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {".": {}, "f:rolloutHealth": {".": {}, "f:ready": {}}}}});
        assert_eq!(
            with(json!([ours, phase])).other_rollout_health_manager(),
            None
        );
        let contested = with(json!([ours, phase, theirs]));
        assert_eq!(contested.other_rollout_health_manager(), Some("manager"));
        let kept = contested.metadata.managed_fields.expect("one entry");
        assert_eq!(kept.len(), 1, "only the manager, nothing of its fields");
        assert!(kept[0].fields_v1.is_none());

        // A metadata-only list's full entries: the same answers.
        let full = |entries: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(json!({"name": "a", "managedFields": entries})).expect("meta")
        };
        assert_eq!(
            other_rollout_health_manager_in(&full(json!([ours, phase]))),
            None
        );
        assert_eq!(
            other_rollout_health_manager_in(&full(json!([ours, phase, theirs]))),
            Some("manager")
        );
    }
}
