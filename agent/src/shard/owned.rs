//! [`OwnedTargets`]: the run loop's targets narrowed to the instances this
//! replica owns. The loop stops the task of an instance that leaves the
//! list and drops its pending writes (`StatusSink::forget`), and starts a
//! task (restored from the published status) for one that joins it.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::Timestamp;

use super::lease::Shard;
use crate::model::{InstanceKey, InstanceTarget, TargetSource};

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

    fn image_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.image_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::InstanceInfo;
    use crate::model::WriteGate;
    use crate::shard::ShardConfig;
    use std::time::Duration;

    /// Every target, always ready.
    struct Fixed(Vec<InstanceTarget>);

    impl TargetSource for Fixed {
        fn targets(&self) -> Vec<InstanceTarget> {
            self.0.clone()
        }
        fn ready(&self) -> bool {
            true
        }
    }

    fn target(name: &str) -> InstanceTarget {
        InstanceTarget {
            info: InstanceInfo {
                namespace: "kura".into(),
                name: name.into(),
                expected_pods: 1,
                generation: 1,
            },
            spec_image: "img".into(),
            pods: vec![],
            pods_dropped: 0,
            previous_status: None,
            status_warnings: vec![],
        }
    }

    #[tokio::test]
    async fn nothing_is_owned_or_written_before_the_lease_is_acquired() {
        // A client whose requests are never answered: the driver is not even
        // run, so the Lease is never acquired and never listed.
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let config = ShardConfig::new("ns", "g", "me", Duration::from_secs(15)).expect("config");
        let (shard, _driver) = Shard::start(client, config);
        let owned = OwnedTargets::new(
            Arc::new(Fixed(vec![target("a"), target("b")])),
            shard.clone(),
        );
        let now = Timestamp::now();
        assert!(!owned.ready(), "the loop must not start tasks yet");
        assert!(owned.targets().is_empty());
        let refused = shard.check(&InstanceKey::new("kura", "a"), now);
        assert_eq!(refused, Err("own lease not acquired".to_owned()));
        assert_eq!(
            shard.not_ready_reasons(now),
            ["lease list not received yet", "own lease not acquired yet"]
        );
        let view = shard.view(now);
        assert!(!view.ready && !view.own_lease.current && view.owned.is_empty());
    }
}
