//! [`OwnedTargets`]: the run loop's targets narrowed to the instances this
//! replica owns. The loop stops the task of an instance that leaves the
//! list and drops its pending writes (`StatusSink::forget`), and starts a
//! task (restored from the published status) for one that joins it.
//!
//! A fence by a stale Lease view alone ([`Hold`]) keeps the tasks: the
//! replica's own Lease is current, so nobody else may take its units, and
//! its writes are refused until the view is fresh again. Stopping them
//! would re-read every status of the replica when the view came back
//! (one GET each: 3,334 at once once when a loaded API server delayed
//! every replica's view by a few seconds). Held only while the members and
//! this replica's units are what they were when it last acted, and for at
//! most the settle time; otherwise the tasks stop as for any other fence.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

use super::lease::Shard;
use super::membership::{Fence, Membership, UnitPlan, plus};
use super::rendezvous::Member;
use crate::model::{InstanceKey, InstanceTarget, TargetSource};

/// A [`TargetSource`] keeping only the instances owned by this replica.
///
/// Its revision moves when the inner source's does or when the
/// membership changes (a member joins, leaves, settles, or this replica's
/// Lease lapses), so a group at rest re-reads nothing. While the
/// membership stands, a change the inner source names per instance is
/// re-read for those instances only; a new membership re-reads all.
pub struct OwnedTargets {
    inner: Arc<dyn TargetSource>,
    shard: Arc<Shard>,
    state: Mutex<Owned>,
}

/// The membership last seen (and how many were seen) and the instances
/// owned at the last read.
#[derive(Default)]
struct Owned {
    membership: Option<Membership>,
    /// Whether the instances owned are held through a fence (the last
    /// [`Hold::through`]).
    holding: bool,
    hold: Hold,
    epoch: u64,
    keys: BTreeSet<InstanceKey>,
}

/// Whether a fence keeps the tasks of the instances owned before it (see
/// the module documentation). Pure: time is an argument.
#[derive(Debug, Default)]
pub struct Hold {
    /// The units and members when this replica last could act.
    acting: Option<(Arc<UnitPlan>, Vec<Member>)>,
    /// When the fence under way began.
    fenced_since: Option<Timestamp>,
}

impl Hold {
    /// Under `m` at `now`, with `settle`: whether the instances owned
    /// before a fence stay owned (their writes refused meanwhile). Only
    /// for a stale view (the own Lease current, no scheme conflict), the
    /// units and live members unchanged since the replica last acted, and
    /// less than `settle` into the fence.
    pub fn through(&mut self, m: &Membership, now: Timestamp, settle: Duration) -> bool {
        if m.may_act() {
            self.acting = Some((Arc::clone(&m.plan), m.live.clone()));
            self.fenced_since = None;
            return false;
        }
        let since = *self.fenced_since.get_or_insert(now);
        matches!(m.fence, Some(Fence::StaleView { .. }))
            && m.conflict.is_none()
            && plus(since, settle) > now
            && self
                .acting
                .as_ref()
                .is_some_and(|(plan, live)| **plan == *m.plan && *live == m.live)
    }
}

/// Whether `key` is owned under `m`, or held through a fence (`held`).
fn owned_or_held(m: &Membership, held: Option<&BTreeSet<InstanceKey>>, key: &InstanceKey) -> bool {
    m.owns(key) || held.is_some_and(|h| h.contains(key))
}

/// Bits of the revision taken by the inner source's revision; the
/// membership's epoch takes the rest.
const INNER_BITS: u32 = 40;
const INNER_MASK: u64 = (1 << INNER_BITS) - 1;

impl OwnedTargets {
    /// `inner`'s targets, narrowed by `shard`.
    pub fn new(inner: Arc<dyn TargetSource>, shard: Arc<Shard>) -> Self {
        OwnedTargets {
            inner,
            shard,
            state: Mutex::new(Owned::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Owned> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The instances owned before a fence that `m` holds through it, if
    /// it does ([`Hold`]).
    fn held(&self, m: &Membership, now: Timestamp) -> Option<BTreeSet<InstanceKey>> {
        let mut state = self.lock();
        let holding = state.hold.through(m, now, self.shard.settle());
        state.holding = holding;
        holding.then(|| state.keys.clone())
    }
}

impl TargetSource for OwnedTargets {
    fn targets(&self) -> Vec<InstanceTarget> {
        let now = Timestamp::now();
        let membership = self.shard.scoped_membership(now);
        let held = self.held(&membership, now);
        let owned: Vec<InstanceTarget> = self
            .inner
            .targets()
            .into_iter()
            .filter(|t| owned_or_held(&membership, held.as_ref(), &t.key()))
            .collect();
        let keys: BTreeSet<InstanceKey> = owned.iter().map(InstanceTarget::key).collect();
        self.lock().keys.clone_from(&keys);
        self.shard.record_owned(keys, &membership, now);
        owned
    }

    /// Takes the membership as it stands for the pods kept first: when
    /// it moved, the pods are listed again and the source is not ready
    /// until they are in.
    fn ready(&self) -> bool {
        self.shard.refresh_scope(Timestamp::now());
        self.inner.ready() && self.shard.is_ready()
    }

    fn image_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.image_changes()
    }

    fn revision(&self) -> Option<u64> {
        let inner = self.inner.revision()?;
        let now = Timestamp::now();
        let membership = self.shard.scoped_membership(now);
        let mut state = self.lock();
        let holding = state.hold.through(&membership, now, self.shard.settle());
        // A hold that ends (the settle time passed) is a new epoch too:
        // the held instances' tasks stop then.
        if state.membership.as_ref() != Some(&membership) || state.holding != holding {
            state.membership = Some(membership);
            state.holding = holding;
            state.epoch += 1;
        }
        Some((state.epoch << INNER_BITS) | (inner & INNER_MASK))
    }

    fn changed_since(&self, revision: u64) -> Option<Vec<InstanceKey>> {
        if revision >> INNER_BITS != self.lock().epoch {
            return None;
        }
        self.inner.changed_since(revision & INNER_MASK)
    }

    fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        let now = Timestamp::now();
        let membership = self.shard.scoped_membership(now);
        let held = self.held(&membership, now);
        let owned: Vec<InstanceTarget> = self
            .inner
            .targets_of(keys)
            .into_iter()
            .filter(|t| owned_or_held(&membership, held.as_ref(), &t.key()))
            .collect();
        let all = {
            let mut state = self.lock();
            for key in keys {
                state.keys.remove(key);
            }
            state.keys.extend(owned.iter().map(InstanceTarget::key));
            state.keys.clone()
        };
        self.shard.record_owned(all, &membership, now);
        owned
    }

    fn lifecycle(&self) -> Option<&dyn crate::model::StatusLifecycle> {
        self.inner.lifecycle()
    }

    /// Every replica's instances: the inner source's fleet (not its
    /// targets, which would be built at every reconcile to count them).
    fn fleet_instances(&self) -> Option<usize> {
        self.inner.fleet_instances()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        InstanceTarget::bare(name, "img", 1)
    }

    /// A shard whose client is never answered: the driver is not even
    /// run, so the Lease is never acquired and never listed.
    fn unanswered_shard() -> Arc<Shard> {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let config = ShardConfig::new("ns", "g", "me", Duration::from_secs(15)).expect("config");
        let (shard, _driver) = Shard::start(client, config);
        shard
    }

    #[tokio::test]
    async fn nothing_is_owned_or_written_before_the_lease_is_acquired() {
        let shard = unanswered_shard();
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

    /// A source whose revision and changes the test sets.
    struct Moving(Mutex<(u64, Vec<InstanceKey>)>);

    impl TargetSource for Moving {
        fn targets(&self) -> Vec<InstanceTarget> {
            vec![target("a")]
        }
        fn ready(&self) -> bool {
            true
        }
        fn revision(&self) -> Option<u64> {
            Some(self.0.lock().expect("lock").0)
        }
        fn changed_since(&self, _revision: u64) -> Option<Vec<InstanceKey>> {
            Some(self.0.lock().expect("lock").1.clone())
        }
    }

    #[tokio::test]
    async fn the_revision_moves_with_the_source_and_the_membership_only() {
        let shard = unanswered_shard();
        let inner = Arc::new(Moving(Mutex::new((5, vec![]))));
        let owned = OwnedTargets::new(inner.clone(), shard);
        let first = owned.revision().expect("revision");
        assert_eq!(owned.revision(), Some(first), "nothing moved");
        *inner.0.lock().expect("lock") = (6, vec![InstanceKey::new("kura", "a")]);
        let second = owned.revision().expect("revision");
        assert_ne!(second, first);
        // The same membership: the inner source's changes pass through.
        assert_eq!(
            owned.changed_since(first),
            Some(vec![InstanceKey::new("kura", "a")])
        );
        // A revision from another membership epoch re-reads all.
        assert_eq!(owned.changed_since(second + (1 << INNER_BITS)), None);
    }
}
