//! The demo's simulated fleet: accounts × regions, one instance each with 1
//! to 3 pods, the wave each instance belongs to (or none: a pinned
//! instance its operator updates by hand), which one regresses, which one
//! is node-local and what their operators do during the story.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::model::{InstanceInfo, InstanceTarget, PodIdentity, PodTarget};
use crate::poll::PortForwardRelay;
use kura_sim::{ReportGeneration, SimKubelet, SimNode, SimPodHandle, SimPodSpec};

/// The namespace every demo instance lives in.
pub const NAMESPACE: &str = "kura";
/// The image the fleet runs at start.
pub const OLD_IMAGE: &str = "ghcr.io/tuist/kura:0.41.2";
/// The image the rollout brings.
pub const NEW_IMAGE: &str = "ghcr.io/tuist/kura:0.42.0";

/// What an instance's operator does during the story (simulated time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    /// Suspends the instance (`spec.suspended: true`) this long after its
    /// wave was scheduled, in the middle of its upgrade: Kura scales it to
    /// zero, the agent's verdict is `suspended` and the wave judge leaves
    /// it out of the wave's scope.
    Suspend {
        /// Time from its wave's scheduling to the suspension.
        after: Duration,
    },
    /// For an instance outside the rollout's waves: at `at` (since the
    /// story's start) its operator moves `spec.image` to the new image by
    /// hand with the `OnDelete` update strategy, so Kura's controller holds
    /// every pod on the old image (`status.updatePaused`); then deletes one
    /// held pod every `delete_every` (each comes back on the new image),
    /// and the hold is lifted once none is left.
    UpdateByHand {
        /// When the image moves (since the story's start).
        at: Duration,
        /// Time between two pod deletions; the first comes one interval
        /// after the move.
        delete_every: Duration,
    },
}

/// One instance of the demo fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoInstance {
    /// Account handle.
    pub account: String,
    /// Region.
    pub region: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// The rollout wave it belongs to (0 is the canary); `None`: outside
    /// the rollout (a pinned instance, updated by its operator if at all).
    pub wave: Option<u32>,
    /// Whether its fd timeouts keep growing after the upgrade.
    pub regresses: bool,
    /// Report generation of its pods (G3 reports the outbox, G4 does not).
    pub generation: ReportGeneration,
    /// `spec.nodeLocalNetwork`: its pods' IPs cannot be routed to (the
    /// targets carry addresses in TEST-NET-1), the agent reaches them
    /// through a port-forward (the simulated kubelet).
    pub node_local: bool,
    /// What its operator does during the story, if anything.
    pub operator: Option<OperatorAction>,
}

impl DemoInstance {
    /// The instance's name, `<account>-<region>`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.account, self.region)
    }

    /// The server id the gate sees, `kura/<name>` (the instance key).
    pub fn id(&self) -> String {
        format!("{NAMESPACE}/{}", self.name())
    }

    /// Its pods' names, by ordinal.
    pub fn pod_names(&self) -> Vec<String> {
        (0..self.replicas)
            .map(|i| format!("{}-{i}", self.name()))
            .collect()
    }
}

/// The default fleet: 5 accounts, 9 instances, 16 pods; wave 0 (the
/// canary) is one instance, waves 1 and 2 split the rest but one:
/// - `acme-us-east` (wave 1) is node-local;
/// - `globex-us-east` (wave 1) is suspended by its operator 30 s into its
///   upgrade;
/// - `umbrella-us-east` (wave 2) regresses;
/// - `hooli-eu-west` is pinned, outside the waves: its operator moves it to
///   the new image by hand at +03:00 with `OnDelete`, holding both pods,
///   and deletes them one a minute (the hold lifts at +05:00).
pub fn default_fleet() -> Vec<DemoInstance> {
    let rows: [(&str, &str, u32, Option<u32>, bool); 9] = [
        ("acme", "eu-west", 2, Some(0), false),
        ("acme", "us-east", 1, Some(1), false),
        ("globex", "eu-west", 3, Some(1), false),
        ("globex", "us-east", 2, Some(1), false),
        ("initech", "eu-west", 1, Some(2), false),
        ("initech", "us-east", 2, Some(2), false),
        ("umbrella", "eu-west", 1, Some(2), false),
        ("umbrella", "us-east", 2, Some(2), true),
        ("hooli", "eu-west", 2, None, false),
    ];
    rows.iter()
        .map(
            |&(account, region, replicas, wave, regresses)| DemoInstance {
                account: account.to_owned(),
                region: region.to_owned(),
                replicas,
                wave,
                regresses,
                // initech runs an older build that still reports its outbox.
                generation: if account == "initech" {
                    ReportGeneration::G3
                } else {
                    ReportGeneration::G4
                },
                node_local: (account, region) == ("acme", "us-east"),
                operator: match (account, region) {
                    ("globex", "us-east") => Some(OperatorAction::Suspend {
                        after: Duration::from_secs(30),
                    }),
                    ("hooli", _) => Some(OperatorAction::UpdateByHand {
                        at: Duration::from_secs(180),
                        delete_every: Duration::from_secs(60),
                    }),
                    _ => None,
                },
            },
        )
        .collect()
}

/// The number of waves of `fleet`.
pub fn wave_count(fleet: &[DemoInstance]) -> u32 {
    fleet
        .iter()
        .filter_map(|i| i.wave)
        .map(|w| w + 1)
        .max()
        .unwrap_or(0)
}

/// One simulated pod per replica, in fleet order. Counters start at small,
/// different values (a fleet that has run for a while), so the upgrade's
/// process restarts visibly reset them. A mesh spans an account's
/// instances across regions: `ring_members` is the account's pod count and
/// the fingerprint is the account's.
pub fn pod_specs(fleet: &[DemoInstance]) -> Vec<SimPodSpec> {
    let mut specs = Vec::new();
    let mut index = 0u64;
    for instance in fleet {
        let mesh: u64 = fleet
            .iter()
            .filter(|i| i.account == instance.account)
            .map(|i| u64::from(i.replicas))
            .sum();
        for name in instance.pod_names() {
            let mut spec = SimPodSpec::new(name);
            spec.node = SimNode {
                report_generation: instance.generation,
                ring_members: mesh,
                ring_fingerprint: fingerprint(&instance.account),
                fd_timeout_count: 2 + (index * 7) % 9,
                peer_connection_failure_count: (index * 5) % 7,
                outbox_messages: 10 + (index * 3) % 20,
                ..SimNode::default()
            };
            specs.push(spec);
            index += 1;
        }
    }
    specs
}

/// A 16-hex-digit ring fingerprint derived from the account (FNV-1a).
fn fingerprint(account: &str) -> String {
    let hash = account.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The pod IP discovery lists for a node-local pod: in TEST-NET-1
/// (192.0.2.0/24, RFC 5737), which no route leads to, so polling it by
/// pod IP cannot work; its last octet is the simulated pod's.
pub fn unroutable_ip(pod: &SimPodHandle) -> IpAddr {
    let last = match pod.addr().ip() {
        IpAddr::V4(ip) => ip.octets()[3],
        IpAddr::V6(_) => 1,
    };
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// One pod target as discovery would list it: identity from the simulated
/// pod (name, UID, restart count, IP) with the image it runs. A node-local
/// pod's IP is [`unroutable_ip`] (its status port is the simulated pod's).
pub fn pod_target(pod: &SimPodHandle, image: &str, node_local: bool) -> PodTarget {
    let addr = if node_local {
        SocketAddr::new(unroutable_ip(pod), pod.addr().port())
    } else {
        pod.addr()
    };
    PodTarget {
        identity: std::sync::Arc::new(PodIdentity {
            name: pod.name().into(),
            uid: pod.uid().into(),
            restart_count: pod.restarts(),
            image: Some(image.into()),
            ip: Some(addr.ip().to_string().into()),
        }),
        addr: Ok(addr),
    }
}

/// The names of the pods of `fleet`'s node-local instances: the pods the
/// simulated kubelet serves.
pub fn node_local_pods(fleet: &[DemoInstance]) -> Vec<String> {
    fleet
        .iter()
        .filter(|i| i.node_local)
        .flat_map(DemoInstance::pod_names)
        .collect()
}

/// The simulated kubelet as the agent's port-forward relay: a pod of the
/// demo's namespace on its node is reached at its loopback address (the
/// agent never connects to the pod IP of the targets).
#[derive(Debug)]
pub struct DemoKubelet(pub SimKubelet);

impl PortForwardRelay for DemoKubelet {
    fn resolve(&self, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr> {
        if namespace != NAMESPACE {
            return None;
        }
        self.0.forward_addr(pod, port)
    }
}

/// The agent's static targets for `fleet`, every pod on [`OLD_IMAGE`].
/// `pods` holds the simulated pods in [`pod_specs`] order.
pub fn targets(fleet: &[DemoInstance], pods: &[SimPodHandle]) -> Vec<InstanceTarget> {
    fleet
        .iter()
        .map(|instance| {
            let names = instance.pod_names();
            InstanceTarget {
                info: InstanceInfo {
                    namespace: NAMESPACE.to_owned(),
                    name: instance.name(),
                    expected_pods: instance.replicas,
                    generation: 1,
                },
                spec_image: OLD_IMAGE.to_owned(),
                pods: pods
                    .iter()
                    .filter(|p| names.iter().any(|n| n == p.name()))
                    .map(|p| pod_target(p, OLD_IMAGE, instance.node_local))
                    .collect(),
                pods_dropped: 0,
                node_local_network: instance.node_local,
                previous_status: None,
                status_warnings: Vec::new(),
                gate_config: None,
                traits: Default::default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_fleet_has_a_canary_two_more_waves_and_one_regression() {
        let fleet = default_fleet();
        assert_eq!(fleet.len(), 9);
        assert_eq!(fleet.iter().map(|i| i.replicas).sum::<u32>(), 16);
        assert_eq!(wave_count(&fleet), 3);
        assert_eq!(fleet.iter().filter(|i| i.wave == Some(0)).count(), 1);
        let regressing: Vec<_> = fleet.iter().filter(|i| i.regresses).collect();
        assert_eq!(regressing.len(), 1);
        assert_eq!(regressing[0].wave, Some(2));
        // The held update is outside every wave (gate check 19 would stop
        // any wave holding it); the suspension is in a wave before the
        // last; the node-local instance is in a wave that must pass.
        for i in &fleet {
            match i.operator {
                Some(OperatorAction::UpdateByHand { .. }) => assert_eq!(i.wave, None),
                Some(OperatorAction::Suspend { .. }) => assert_eq!(i.wave, Some(1)),
                None => assert!(i.wave.is_some()),
            }
        }
        let local: Vec<_> = fleet.iter().filter(|i| i.node_local).collect();
        assert_eq!(local.len(), 1);
        assert_eq!(local[0].wave, Some(1));
        assert_eq!(node_local_pods(&fleet), ["acme-us-east-0"]);
        assert!(
            pod_specs(&fleet)
                .iter()
                .all(|s| s.node.fd_timeout_count > 0)
        );
        assert_ne!(fingerprint("acme"), fingerprint("globex"));
    }
}
