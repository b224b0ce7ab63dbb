//! Where results go: the status write queue (cluster), or memory (demo,
//! tests).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use jiff::Timestamp;

use crate::kube::InstanceKey;
use crate::kube::discovery::InstanceTarget;
use crate::kube::status::WriteHandle;
use crate::kube::write_queue::{ChangePolicy, DesiredStatus};

use super::StatusSink;

/// Publishes to the status write queue.
pub struct KubeSink<P> {
    handle: WriteHandle<P>,
}

impl<P> KubeSink<P> {
    /// A sink feeding `handle`.
    pub fn new(handle: WriteHandle<P>) -> Self {
        KubeSink { handle }
    }
}

impl<P: ChangePolicy + Send + 'static> StatusSink for KubeSink<P> {
    fn seed(&self, target: &InstanceTarget) {
        if let Some((written, at)) = target.previous_written() {
            self.handle.seed_written(target.key(), written, at);
        }
    }
    fn publish(&self, key: &InstanceKey, desired: DesiredStatus, now: Timestamp) {
        self.handle.push(key.clone(), desired, now);
    }
    fn forget(&self, key: &InstanceKey) {
        self.handle.remove(key);
    }
}

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
