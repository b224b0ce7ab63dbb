//! What one sweep of one instance needs: [`InstanceTarget`] (the
//! instance, its `spec.image`, its pods and the status it was found with)
//! and [`PodTarget`] (a pod's identity and where to poll it). Discovery
//! builds them from the cluster; the demo, `check` and the tests build them
//! by hand. Nothing here knows where they come from.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kura_schemas::{AGENT_CONDITION_TYPES, KSTATUS_CONDITION_TYPES, KuraInstanceStatus};

use super::key::InstanceKey;
use super::sample::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use super::status::DesiredStatus;
use super::traits::InstanceTraits;

/// The `KuraInstance` annotation holding that instance's own gate
/// configuration: a JSON object of `GateConfig` keys (camelCase, as in
/// `--gate-config`), merged over the cluster's configuration for that
/// instance only.
pub const GATE_CONFIG_ANNOTATION: &str = "kura.tuist.dev/gate-config";

/// Why a pod has no address to poll. Its display is the short reason
/// recorded as the pod's failed sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAddress {
    /// `status.podIP` is not set yet.
    NoPodIp,
    /// `status.podIP` is not an IP address.
    InvalidPodIp(String),
    /// The Kura container declares no port of that name.
    NoNamedPort(String),
}

impl fmt::Display for NoAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoAddress::NoPodIp => f.write_str("no pod IP"),
            NoAddress::InvalidPodIp(ip) => write!(f, "invalid pod IP {ip:?}"),
            NoAddress::NoNamedPort(name) => write!(f, "no container port named {name:?}"),
        }
    }
}

/// One pod of an instance, as discovery sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    /// Identity from the pod object (never from a report), shared with
    /// the store.
    pub identity: Arc<PodIdentity>,
    /// Where to poll it, or why it cannot be polled.
    pub addr: Result<SocketAddr, NoAddress>,
}

/// Everything one sweep needs about one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceTarget {
    /// Namespace, name, `spec.replicas`, `metadata.generation`.
    pub info: InstanceInfo,
    /// `spec.image`: the image the gate judges.
    pub spec_image: String,
    /// The instance's pods, sorted by name.
    pub pods: Vec<PodTarget>,
    /// `spec.nodeLocalNetwork` is present: the pod IPs cannot be routed
    /// to, so the pods are polled through the API server's port-forward to
    /// their address's port, never at the address itself.
    pub node_local_network: bool,
    /// Pods beyond the per-instance limit of discovery, left out (never
    /// polled; [`InstanceTarget::notes`] says so).
    pub pods_dropped: usize,
    /// The status as read from the cluster (what a restarted agent
    /// continues from); the fields that did not parse are `None`.
    pub previous_status: Option<Box<KuraInstanceStatus>>,
    /// Why a status field could not be read, one line each.
    pub status_warnings: Vec<String>,
    /// The text of the instance's [`GATE_CONFIG_ANNOTATION`], as found
    /// (parsed and merged by the engine); `None` without the annotation.
    pub gate_config: Option<String>,
    /// What sets the instance apart (suspended, an update pause, fenced
    /// serving configured).
    pub traits: InstanceTraits,
}

/// The note on an instance whose pods beyond the per-instance limit are
/// not polled.
fn pods_dropped_note(dropped: usize) -> String {
    format!("{dropped} pod(s) beyond the per-instance limit are not polled")
}

impl InstanceTarget {
    /// The instance's key.
    pub fn key(&self) -> InstanceKey {
        InstanceKey::of(&self.info)
    }

    /// Namespace and name, the order targets are kept in (an
    /// [`InstanceKey`]'s), without building the key.
    pub fn name_order(&self) -> (&str, &str) {
        (&self.info.namespace, &self.info.name)
    }

    /// Whether the instance has converged on `spec.image`: `spec.replicas`
    /// pods, none left out, every one running `spec.image` by its pod spec.
    pub fn converged(&self) -> bool {
        self.pods_dropped == 0
            && u32::try_from(self.pods.len()).is_ok_and(|n| n == self.info.expected_pods)
            && self
                .pods
                .iter()
                .all(|p| p.identity.image.as_deref() == Some(self.spec_image.as_str()))
    }

    /// The agent-owned status as found in the cluster, with the time it was
    /// observed (`rolloutHealth.observedAt`): what to seed the write queue
    /// with, so a restarted agent does not rewrite an unchanged status at
    /// once. `None` unless both fields were readable.
    pub fn previous_written(&self) -> Option<(DesiredStatus, Timestamp)> {
        let status = self.previous_status.as_ref()?;
        let health = status.rollout_health.clone()?;
        let gate = status.rollout_gate.clone()?;
        let at = health.observed_at;
        Some((DesiredStatus::new(health, gate), at))
    }

    /// The conditions the agent may own (`RolloutHealthy`,
    /// `RolloutHardStopped`, and kstatus' `Reconciling` and `Stalled`) as
    /// found in the cluster: where their `lastTransitionTime` continues
    /// from after a restart or a handover. The write path keeps those it
    /// writes.
    pub fn previous_conditions(&self) -> Vec<Condition> {
        self.previous_status
            .iter()
            .flat_map(|s| &s.conditions)
            .filter(|c| {
                AGENT_CONDITION_TYPES.contains(&c.type_.as_str())
                    || KSTATUS_CONDITION_TYPES.contains(&c.type_.as_str())
            })
            .cloned()
            .collect()
    }

    /// What an operator should know about this target that the aggregate
    /// does not say: unreadable status fields, pods left out. Shown with the
    /// instance in the fleet view.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.status_warnings.clone();
        if self.pods_dropped > 0 {
            notes.push(pods_dropped_note(self.pods_dropped));
        }
        notes
    }

    /// The pods that have an address: the poller's input.
    pub fn pollable(&self) -> Vec<(Arc<PodIdentity>, SocketAddr)> {
        self.pods
            .iter()
            .filter_map(|p| p.addr.as_ref().ok().map(|a| (p.identity.clone(), *a)))
            .collect()
    }

    /// A failed sample for every pod without an address, received at `now`:
    /// such a pod lowers `sampledPods` instead of being skipped silently.
    pub fn unreachable_samples(&self, now: Timestamp) -> Vec<PodSample> {
        self.pods
            .iter()
            .filter_map(|p| {
                p.addr.as_ref().err().map(|reason| PodSample {
                    replication_lag_entries: None,
                    pod: p.identity.clone(),
                    received_at: now,
                    result: SampleResult::Error(reason.to_string()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
impl InstanceTarget {
    /// A target for tests: instance `kura/NAME` of `expected_pods`, at
    /// generation 1, on `image`; no pods, no stored status, no notes.
    pub(crate) fn bare(name: &str, image: &str, expected_pods: u32) -> Self {
        InstanceTarget {
            info: InstanceInfo {
                namespace: "kura".into(),
                name: name.into(),
                expected_pods,
                generation: 1,
            },
            spec_image: image.into(),
            pods: Vec::new(),
            node_local_network: false,
            pods_dropped: 0,
            previous_status: None,
            status_warnings: Vec::new(),
            gate_config: None,
            traits: InstanceTraits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(warnings: &[&str], dropped: usize) -> InstanceTarget {
        InstanceTarget {
            pods_dropped: dropped,
            status_warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            ..InstanceTarget::bare("a", "img", 3)
        }
    }

    #[test]
    fn notes_name_unreadable_status_fields_and_dropped_pods() {
        assert!(target(&[], 0).notes().is_empty());
        assert_eq!(
            target(&["status.rolloutGate unreadable: x"], 2).notes(),
            [
                "status.rolloutGate unreadable: x".to_owned(),
                pods_dropped_note(2)
            ]
        );
    }
}
