//! [`ClusterTargets`]: the run loop's targets from the watches' caches.

use crate::model::{InstanceKey, InstanceTarget, StatusLifecycle, TargetSource};

use super::discovery::Discovery;

/// Targets from the watches' caches.
#[derive(Clone)]
pub struct ClusterTargets {
    discovery: Discovery,
}

impl ClusterTargets {
    /// Targets from `discovery`.
    pub fn new(discovery: Discovery) -> Self {
        ClusterTargets { discovery }
    }
}

impl TargetSource for ClusterTargets {
    fn targets(&self) -> Vec<InstanceTarget> {
        let targets = self.discovery.targets();
        for skipped in &targets.skipped {
            tracing::debug!(namespace = %skipped.key.namespace, instance = %skipped.key.name,
                reason = %skipped.reason, "instance skipped");
        }
        targets.instances
    }
    fn ready(&self) -> bool {
        self.discovery.is_ready() && self.discovery.pods_current()
    }
    fn image_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.discovery.image_changes())
    }
    fn revision(&self) -> Option<u64> {
        Some(self.discovery.revision())
    }
    fn changed_since(&self, revision: u64) -> Option<Vec<InstanceKey>> {
        self.discovery.changed_since(revision)
    }
    fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        self.discovery.targets_of(keys)
    }
    fn fleet_instances(&self) -> Option<usize> {
        self.discovery.fleet_instances()
    }
    fn lifecycle(&self) -> Option<&dyn StatusLifecycle> {
        Some(&self.discovery)
    }
}
