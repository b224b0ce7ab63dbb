//! The demo's simulated fleet: accounts × regions, one instance each with 1
//! to 3 pods, the wave each instance belongs to, and which one regresses.

use crate::model::{InstanceInfo, InstanceTarget, PodIdentity, PodTarget};
use kura_sim::{ReportGeneration, SimNode, SimPodHandle, SimPodSpec};

/// The namespace every demo instance lives in.
pub const NAMESPACE: &str = "kura";
/// The image the fleet runs at start.
pub const OLD_IMAGE: &str = "ghcr.io/tuist/kura:0.41.2";
/// The image the rollout brings.
pub const NEW_IMAGE: &str = "ghcr.io/tuist/kura:0.42.0";

/// One instance of the demo fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoInstance {
    /// Account handle.
    pub account: String,
    /// Region.
    pub region: String,
    /// `spec.replicas`.
    pub replicas: u32,
    /// The rollout wave it belongs to (0 is the canary).
    pub wave: u32,
    /// Whether its fd timeouts keep growing after the upgrade.
    pub regresses: bool,
    /// Report generation of its pods (G3 reports the outbox, G4 does not).
    pub generation: ReportGeneration,
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

/// The default fleet: 4 accounts × 2 regions, 14 pods; wave 0 (the canary)
/// is one instance, waves 1 and 2 split the rest; in wave 2
/// `umbrella-us-east` regresses.
pub fn default_fleet() -> Vec<DemoInstance> {
    let rows: [(&str, &str, u32, u32, bool); 8] = [
        ("acme", "eu-west", 2, 0, false),
        ("acme", "us-east", 1, 1, false),
        ("globex", "eu-west", 3, 1, false),
        ("globex", "us-east", 2, 1, false),
        ("initech", "eu-west", 1, 2, false),
        ("initech", "us-east", 2, 2, false),
        ("umbrella", "eu-west", 1, 2, false),
        ("umbrella", "us-east", 2, 2, true),
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
            },
        )
        .collect()
}

/// The number of waves of `fleet`.
pub fn wave_count(fleet: &[DemoInstance]) -> u32 {
    fleet.iter().map(|i| i.wave + 1).max().unwrap_or(0)
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

/// One pod target as discovery would list it: identity from the simulated
/// pod (name, UID, restart count, IP) with the image it runs.
pub fn pod_target(pod: &SimPodHandle, image: &str) -> PodTarget {
    PodTarget {
        identity: std::sync::Arc::new(PodIdentity {
            name: pod.name().to_owned(),
            uid: pod.uid().to_owned(),
            restart_count: pod.restarts(),
            image: Some(image.to_owned()),
            ip: Some(pod.addr().ip().to_string()),
        }),
        addr: Ok(pod.addr()),
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
                    .map(|p| pod_target(p, OLD_IMAGE))
                    .collect(),
                pods_dropped: 0,
                node_local_network: false,
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
        assert_eq!(fleet.len(), 8);
        assert_eq!(fleet.iter().map(|i| i.replicas).sum::<u32>(), 14);
        assert_eq!(wave_count(&fleet), 3);
        assert_eq!(fleet.iter().filter(|i| i.wave == 0).count(), 1);
        let regressing: Vec<_> = fleet.iter().filter(|i| i.regresses).collect();
        assert_eq!(regressing.len(), 1);
        assert_eq!(regressing[0].wave, 2);
        assert!(
            pod_specs(&fleet)
                .iter()
                .all(|s| s.node.fd_timeout_count > 0)
        );
        assert_ne!(fingerprint("acme"), fingerprint("globex"));
    }
}
