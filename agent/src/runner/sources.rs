//! Where targets come from: the kube watches, or a static list.

use std::sync::{Arc, RwLock};

use crate::kube::discovery::{Discovery, InstanceTarget, TargetConfig};

use super::TargetSource;

/// Targets from the kube watches' caches.
#[derive(Clone)]
pub struct KubeTargets {
    discovery: Discovery,
    config: TargetConfig,
}

impl KubeTargets {
    /// Targets from `discovery`, resolved with `config`.
    pub fn new(discovery: Discovery, config: TargetConfig) -> Self {
        KubeTargets { discovery, config }
    }
}

impl TargetSource for KubeTargets {
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
}

/// A fixed (but replaceable) list of targets: the demo, `check` and the
/// loopback tests. Cheap to clone; clones share the list.
#[derive(Clone, Default)]
pub struct StaticTargets {
    targets: Arc<RwLock<Vec<InstanceTarget>>>,
}

impl StaticTargets {
    /// A source serving `targets`.
    pub fn new(targets: Vec<InstanceTarget>) -> Self {
        StaticTargets {
            targets: Arc::new(RwLock::new(targets)),
        }
    }

    /// Changes the targets in place (e.g. a new `spec_image`).
    pub fn update(&self, f: impl FnOnce(&mut Vec<InstanceTarget>)) {
        let mut guard = self
            .targets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard);
    }
}

impl TargetSource for StaticTargets {
    fn targets(&self) -> Vec<InstanceTarget> {
        self.targets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
    fn ready(&self) -> bool {
        true
    }
}
