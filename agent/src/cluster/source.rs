//! [`ClusterTargets`]: the run loop's targets from the watches' caches.

use crate::model::{InstanceTarget, TargetSource};

use super::discovery::{Discovery, TargetConfig};

/// Targets from the watches' caches.
#[derive(Clone)]
pub struct ClusterTargets {
    discovery: Discovery,
    config: TargetConfig,
}

impl ClusterTargets {
    /// Targets from `discovery`, resolved with `config`.
    pub fn new(discovery: Discovery, config: TargetConfig) -> Self {
        ClusterTargets { discovery, config }
    }
}

impl TargetSource for ClusterTargets {
    fn targets(&self) -> Vec<InstanceTarget> {
        let targets = self.discovery.targets(&self.config);
        for skipped in &targets.skipped {
            tracing::debug!(namespace = %skipped.key.namespace, instance = %skipped.key.name,
                reason = %skipped.reason, "instance skipped");
        }
        targets.instances
    }
    fn ready(&self) -> bool {
        self.discovery.is_ready()
    }
    fn image_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.discovery.image_changes())
    }
    fn revision(&self) -> Option<u64> {
        Some(self.discovery.revision())
    }
}
