//! The loop's in-memory ends, for the demo, the loopback tests
//! and the benches: a fixed list of targets ([`StaticTargets`]) and a
//! status store ([`MemorySink`]). In a cluster the ends are
//! `cluster::ClusterTargets` and `write::WriteHandle`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use jiff::Timestamp;
use tokio::sync::watch;

use crate::model::{DesiredStatus, InstanceKey, InstanceTarget, StatusSink, TargetSource};

/// Keeps the latest status of every instance in memory, plus how many
/// times each was published. Cheap to clone; clones share the store.
#[derive(Clone, Default)]
pub struct MemorySink {
    store: Arc<RwLock<BTreeMap<InstanceKey, (DesiredStatus, u64)>>>,
}

impl MemorySink {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest status of `key` and how many sweeps published one.
    pub fn get(&self, key: &InstanceKey) -> Option<(DesiredStatus, u64)> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Every instance's latest status.
    pub fn all(&self) -> BTreeMap<InstanceKey, DesiredStatus> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, (d, _))| (k.clone(), d.clone()))
            .collect()
    }
}

impl StatusSink for MemorySink {
    fn publish(&self, key: &InstanceKey, desired: DesiredStatus, _now: Timestamp) {
        let mut store = self
            .store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = store.entry(key.clone()).or_insert((desired.clone(), 0));
        entry.0 = desired;
        entry.1 += 1;
    }
    fn forget(&self, key: &InstanceKey) {
        self.store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// A fixed (but replaceable) list of targets: the demo, the benches and the
/// loopback tests. Cheap to clone; clones share the list.
#[derive(Clone)]
pub struct StaticTargets {
    targets: Arc<RwLock<Vec<InstanceTarget>>>,
    images: Arc<watch::Sender<u64>>,
    /// Bumped by every [`StaticTargets::update`].
    revision: Arc<AtomicU64>,
}

impl Default for StaticTargets {
    fn default() -> Self {
        StaticTargets::new(Vec::new())
    }
}

impl StaticTargets {
    /// A source serving `targets`.
    pub fn new(targets: Vec<InstanceTarget>) -> Self {
        StaticTargets {
            targets: Arc::new(RwLock::new(targets)),
            images: Arc::new(watch::Sender::new(0)),
            revision: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Changes the targets in place (e.g. a new `spec_image`). When an
    /// instance's `spec_image` changed, the loop hears of it at once
    /// ([`TargetSource::image_changes`]).
    pub fn update(&self, f: impl FnOnce(&mut Vec<InstanceTarget>)) {
        let mut guard = self
            .targets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before: BTreeMap<_, _> = guard
            .iter()
            .map(|t| (t.key(), t.spec_image.clone()))
            .collect();
        f(&mut guard);
        // Before the lock is released: a reader that sees the old
        // revision reads the targets after this update.
        self.revision.fetch_add(1, Ordering::AcqRel);
        let changed = guard
            .iter()
            .any(|t| before.get(&t.key()).is_some_and(|old| *old != t.spec_image));
        drop(guard);
        if changed {
            self.images.send_modify(|n| *n = n.wrapping_add(1));
        }
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
    fn image_changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.images.subscribe())
    }
    fn revision(&self) -> Option<u64> {
        Some(self.revision.load(Ordering::Acquire))
    }
}
