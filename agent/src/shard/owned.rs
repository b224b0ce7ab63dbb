//! [`OwnedTargets`]: the run loop's targets narrowed to the instances this
//! replica owns. The loop stops the task of an instance that leaves the
//! list and drops its pending writes (`StatusSink::forget`), and starts a
//! task (restored from the published status) for one that joins it.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::Timestamp;

use super::lease::Shard;
use crate::kube::InstanceKey;
use crate::kube::discovery::InstanceTarget;
use crate::runner::TargetSource;

/// A [`TargetSource`] keeping only the instances owned by this replica.
pub struct OwnedTargets {
    inner: Arc<dyn TargetSource>,
    shard: Arc<Shard>,
}

impl OwnedTargets {
    /// `inner`'s targets, narrowed by `shard`.
    pub fn new(inner: Arc<dyn TargetSource>, shard: Arc<Shard>) -> Self {
        OwnedTargets { inner, shard }
    }
}

impl TargetSource for OwnedTargets {
    fn targets(&self) -> Vec<InstanceTarget> {
        let now = Timestamp::now();
        let membership = self.shard.membership(now);
        let owned: Vec<InstanceTarget> = self
            .inner
            .targets()
            .into_iter()
            .filter(|t| membership.owns(&t.key().to_string()))
            .collect();
        let keys: BTreeSet<InstanceKey> = owned.iter().map(InstanceTarget::key).collect();
        self.shard.record_owned(keys, &membership, now);
        owned
    }

    fn ready(&self) -> bool {
        self.inner.ready() && self.shard.is_ready()
    }
}
