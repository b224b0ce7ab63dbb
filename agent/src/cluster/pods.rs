//! Pod rules: which pods belong to an instance, which container is Kura's,
//! and what of a pod the agent keeps ([`PodFacts`], a few fields and its
//! strings): its identity and where to poll it. Pure.
//!
//! A pod belongs to instance `ns/name` when it is in namespace `ns` and one
//! of its `metadata.ownerReferences` has `kind: StatefulSet` and `name:
//! name` (contract/rollout-health.md). Addresses are never guessed from
//! names: a pod is polled at its own `status.podIP`. Pods in phase
//! `Succeeded` or `Failed` are left out (no process answers there).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::model::{InstanceKey, NoAddress, PodIdentity, PodTarget};

use super::wire::{ContainerRead, PodObject};

/// Default Kura container name.
pub const DEFAULT_CONTAINER: &str = "kura";
/// Default poll port.
pub const DEFAULT_PORT: u16 = 4000;

/// Which port of a pod to poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollPort {
    /// A fixed port number.
    Number(u16),
    /// A named container port of the Kura container.
    Named(String),
}

/// How pods are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// The Kura container's name; the first container is used when no
    /// container has it.
    pub container_name: String,
    /// The port polled.
    pub port: PollPort,
    /// At most this many pods per instance (the rest are counted in
    /// [`crate::model::InstanceTarget::pods_dropped`]).
    pub max_pods_per_instance: usize,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            container_name: DEFAULT_CONTAINER.to_owned(),
            port: PollPort::Number(DEFAULT_PORT),
            max_pods_per_instance: kura_schemas::health::MAX_POD_ENTRIES,
        }
    }
}

/// What the agent keeps of one pod: exactly what its target is made of.
/// Two facts that are equal make the same target, so a pod event that
/// leaves them equal (a condition, a label, another container's status)
/// changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Name, UID, the Kura container's restart count and image, pod IP.
    pub identity: Arc<PodIdentity>,
    /// Where to poll it, or why it cannot be polled.
    pub addr: Result<SocketAddr, NoAddress>,
}

impl PodFacts {
    /// The pod's target.
    pub fn target(&self) -> PodTarget {
        PodTarget {
            identity: self.identity.clone(),
            addr: self.addr.clone(),
        }
    }
}

/// The instance a pod belongs to: its namespace and the name of the
/// StatefulSet that owns it.
pub fn owner_of(pod: &PodObject) -> Option<InstanceKey> {
    let namespace = pod.metadata.namespace.as_deref()?;
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "StatefulSet")?;
    Some(InstanceKey::new(namespace.to_owned(), owner.name.clone()))
}

/// The Kura container of a pod: the one named `container_name`, else the
/// first.
fn kura_container<'a>(pod: &'a PodObject, container_name: &str) -> Option<&'a ContainerRead> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == container_name)
        .or_else(|| containers.first())
}

/// The identity of a pod: name, UID, the Kura container's restart count
/// (0 while the container has no status yet: it has not restarted) and
/// image (from the pod spec: what was asked for), and the pod IP. `None`
/// when the pod has no name or UID.
pub fn pod_identity(pod: &PodObject, container_name: &str) -> Option<PodIdentity> {
    let name = pod.metadata.name.clone()?;
    let uid = pod.metadata.uid.clone()?;
    let container = kura_container(pod, container_name);
    let restart_count = container
        .and_then(|c| {
            pod.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|s| s.name == c.name)
        })
        .map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0));
    Some(PodIdentity {
        name: name.into(),
        uid: uid.into(),
        restart_count,
        image: container.and_then(|c| c.image.as_deref()).map(Into::into),
        ip: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .map(Into::into),
    })
}

/// Where to poll a pod.
pub fn pod_address(pod: &PodObject, config: &TargetConfig) -> Result<SocketAddr, NoAddress> {
    let ip_text = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|s| !s.is_empty())
        .ok_or(NoAddress::NoPodIp)?;
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| NoAddress::InvalidPodIp(ip_text.to_owned()))?;
    let port = match &config.port {
        PollPort::Number(p) => *p,
        PollPort::Named(name) => kura_container(pod, &config.container_name)
            .and_then(|c| c.ports.as_ref())
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
            })
            .and_then(|p| u16::try_from(p.container_port).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| NoAddress::NoNamedPort(name.clone()))?,
    };
    Ok(SocketAddr::new(ip, port))
}

/// Whether the pod has finished (`Succeeded` or `Failed`): no process
/// answers there.
fn is_finished(pod: &PodObject) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// What the agent keeps of `pod`, with the instance it belongs to; `None`
/// for a pod no instance polls (no StatefulSet owner, no name or UID,
/// finished).
pub fn facts_of(pod: &PodObject, config: &TargetConfig) -> Option<(InstanceKey, PodFacts)> {
    if is_finished(pod) {
        return None;
    }
    let owner = owner_of(pod)?;
    let identity = pod_identity(pod, &config.container_name)?;
    Some((
        owner,
        PodFacts {
            identity: Arc::new(identity),
            addr: pod_address(pod, config),
        },
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A pod of StatefulSet `owner` with a sidecar and a Kura container.
    pub(crate) fn pod(
        ns: &str,
        name: &str,
        owner: &str,
        ip: Option<&str>,
        extra: serde_json::Value,
    ) -> PodObject {
        let mut v = json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner,
                                              "uid": "sts", "controller": true}]},
            "spec": {"containers": [
                {"name": "sidecar", "image": "envoy:1"},
                {"name": "kura", "image": "ghcr.io/tuist/kura:0.6.0",
                 "ports": [{"name": "http", "containerPort": 4100}]}
            ]},
            "status": {"phase": "Running",
                       "containerStatuses": [
                           {"name": "sidecar", "restartCount": 9, "ready": true, "image": "envoy:1", "imageID": ""},
                           {"name": "kura", "restartCount": 2, "ready": true, "image": "x", "imageID": ""}]}
        });
        if let Some(ip) = ip {
            v["status"]["podIP"] = json!(ip);
        }
        merge(&mut v, extra);
        serde_json::from_value(v).expect("pod")
    }

    pub(crate) fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn container_falls_back_to_the_first_and_named_ports_resolve() {
        let p = pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}));
        let id = pod_identity(&p, "not-there").expect("identity");
        assert_eq!(id.restart_count, 9);
        assert_eq!(id.image.as_deref(), Some("envoy:1"));
        let named = TargetConfig {
            port: PollPort::Named("http".into()),
            ..TargetConfig::default()
        };
        assert_eq!(
            pod_address(&p, &named),
            Ok("10.0.0.1:4100".parse().expect("addr"))
        );
        let missing = TargetConfig {
            port: PollPort::Named("grpc".into()),
            ..TargetConfig::default()
        };
        assert_eq!(
            pod_address(&p, &missing),
            Err(NoAddress::NoNamedPort("grpc".into()))
        );
    }

    #[test]
    fn only_running_pods_of_a_statefulset_have_facts() {
        let cfg = TargetConfig::default();
        let (owner, facts) = facts_of(
            &pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({})),
            &cfg,
        )
        .expect("facts");
        assert_eq!(owner, InstanceKey::new("kura", "acme"));
        assert_eq!(facts.identity.restart_count, 2);
        let done = pod(
            "kura",
            "acme-1",
            "acme",
            None,
            json!({"status": {"phase": "Failed"}}),
        );
        assert!(facts_of(&done, &cfg).is_none());
        let orphan = pod(
            "kura",
            "x-0",
            "acme",
            None,
            json!({"metadata": {"ownerReferences": []}}),
        );
        assert!(facts_of(&orphan, &cfg).is_none());
    }
}
