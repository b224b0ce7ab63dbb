//! Every port between the agent's core (the loop, the write path, the
//! fleet view) and the adapters, as traits: where targets come from
//! ([`TargetSource`]: the cluster's watches, a static list, the shard's
//! narrowing of either; [`StatusLifecycle`]: the stored statuses those
//! targets start from), where desired statuses go ([`StatusSink`]: the
//! write queue, memory), who may write an instance's status now
//! ([`WriteGate`]: the shard), which pods the watches keep ([`PodScope`]:
//! the shard), and what the fleet view answers from for the instances this
//! replica does not sweep ([`StoredStatusSource`]: the watches;
//! [`MembersSource`]: the shard). The core knows only these; adapters
//! implement them, `kura-agent run` plugs them in.

use std::collections::BTreeSet;

use jiff::Timestamp;
use tokio::sync::watch;

use super::key::InstanceKey;
use super::members::{MembersSnapshot, StoredInstance};
use super::status::DesiredStatus;
use super::target::InstanceTarget;
use super::units::UnitCount;

/// Where the loop's targets come from.
pub trait TargetSource: Send + Sync + 'static {
    /// The current targets (instances with their pods).
    fn targets(&self) -> Vec<InstanceTarget>;
    /// Whether the source has its initial state (before that, the loop
    /// neither starts nor stops instance tasks).
    fn ready(&self) -> bool;
    /// A signal that changes whenever an instance's `spec.image` changed
    /// (the value counts the changes; only its changing matters): the loop
    /// then re-reads the targets at once, instead of at its next periodic
    /// reconcile, and the instance is swept at once, so the gate's baseline
    /// is taken as close to the upgrade as possible. `None`: the source
    /// has no such signal (changes are seen at the next reconcile).
    fn image_changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
    /// A number that changes whenever [`TargetSource::targets`] may
    /// answer differently (it counts the changes; only its changing
    /// matters), read before the targets: while it stays the same, the
    /// loop does not re-read them (building every target of a large fleet
    /// each second costs CPU and a transient copy of them all). `None`:
    /// the source cannot tell (e.g. ownership that moves with time), and
    /// the loop re-reads at every reconcile.
    fn revision(&self) -> Option<u64> {
        None
    }
    /// The instances whose targets may differ since the source answered
    /// `revision` (a value of [`TargetSource::revision`]), each once: the
    /// loop then re-reads only those ([`TargetSource::targets_of`]).
    /// `None`: the source cannot tell, and the loop re-reads every target.
    fn changed_since(&self, _revision: u64) -> Option<Vec<InstanceKey>> {
        None
    }
    /// The instances of the whole fleet the source sees (sharded: every
    /// replica's, before ownership narrows them), when it can tell;
    /// `None`: the targets are the fleet.
    fn fleet_instances(&self) -> Option<usize> {
        None
    }
    /// The current targets of `keys`; a key without one (the instance is
    /// gone, or no longer this source's) is left out.
    fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        self.targets()
            .into_iter()
            .filter(|t| keys.contains(&t.key()))
            .collect()
    }
    /// The stored-status lifecycle of this source's instances, when it
    /// keeps their stored statuses (the cluster's watches do). Default:
    /// none (the targets carry their statuses as they are).
    fn lifecycle(&self) -> Option<&dyn StatusLifecycle> {
        None
    }
}

/// The stored-status lifecycle (docs/architecture.md, "Stored statuses"),
/// owned by `cluster::stored`: each instance's status, as read from the
/// cluster, is Held (a task starts from it), Released (this replica's
/// task holds it) or Rereading (the task stopped: read again with one
/// GET; no target of the instance is handed out until it is in). The run
/// loop drives the two transitions that are its own.
pub trait StatusLifecycle: Send + Sync {
    /// `key`'s task has published its first sweep: its engine holds all
    /// the stored status says, so the source may stop keeping it (the
    /// statuses seen from then on are the agent's own writes).
    fn release_status(&self, key: &InstanceKey);
    /// `key`'s task stopped or ended: the source keeps its status again,
    /// reading it again if it was let go (`last`, what the task last
    /// published, is answered meanwhile). Returns whether it is being
    /// read again: the instance's target is then withheld until it is in,
    /// and named as changed when it is.
    fn keep_status(&self, key: &InstanceKey, last: Option<&DesiredStatus>) -> bool;
}

/// Where the loop's results go.
pub trait StatusSink: Send + Sync + 'static {
    /// Called once when an instance task starts, with the status found for
    /// it (what a restarted agent continues from).
    fn seed(&self, _target: &InstanceTarget) {}
    /// The latest desired status of an instance.
    fn publish(&self, key: &InstanceKey, desired: DesiredStatus, now: Timestamp);
    /// The instance is gone.
    fn forget(&self, key: &InstanceKey);
    /// The instances of the whole fleet this replica set shares (not only
    /// this replica's): what the status heartbeat scales with.
    fn fleet_size(&self, _instances: usize) {}
}

/// Decides, right before each PATCH, whether this replica may write an
/// instance's status (sharding: its own Lease is current and it owns the
/// instance). A refusal is the reason.
pub trait WriteGate: Send + Sync {
    /// `Ok` to write `key` at `now`.
    fn check(&self, key: &InstanceKey, now: Timestamp) -> Result<(), String>;
}

/// Who else writes an instance's `status.rolloutHealth` (instance mode):
/// the writer asks right before each PATCH and sends nothing to a
/// contested instance (rollout-health.md: no write war).
pub trait ContestSource: Send + Sync {
    /// The other manager of `key`'s `status.rolloutHealth`, if any.
    fn contested_by(&self, key: &InstanceKey) -> Option<Box<str>>;
}

/// The UIDs of the watched instances (companion mode): the owner
/// reference of a companion the writer creates, without a GET.
pub trait InstanceUids: Send + Sync {
    /// `key`'s `metadata.uid`, when the watch has it.
    fn uid_of(&self, key: &InstanceKey) -> Option<Box<str>>;
    /// Whether `key` is known to have no companion yet (the companion
    /// watch has listed and has none): the writer then creates it before
    /// its first status apply instead of after that apply's 404. `false`
    /// when unknown.
    fn companion_absent(&self, _key: &InstanceKey) -> bool {
        false
    }
}

/// Which instances' pods the watches keep (sharding: the instances this
/// replica owns or is about to own), so a replica holds no pod it will
/// not sweep. Without one, every pod is kept.
pub trait PodScope: Send + Sync + 'static {
    /// Whether the pods of `key` are kept.
    fn keeps(&self, key: &InstanceKey) -> bool;
    /// A signal that changes whenever [`PodScope::keeps`] may answer
    /// differently (its value counts the changes): the pods are then
    /// listed again, and the targets are not read until that list is in.
    fn changes(&self) -> watch::Receiver<u64>;
    /// The watch units whose instances and pods are kept (owned, or about
    /// to be owned, under the scope's membership), when the replicas
    /// share the fleet by unit: the watches then select those units on the
    /// API server. `None`: every instance is watched and
    /// [`PodScope::keeps`] filters the pods.
    fn kept_units(&self) -> Option<KeptUnits> {
        None
    }
}

/// The watch units a replica keeps ([`PodScope::kept_units`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptUnits {
    /// How the buckets are grouped into units.
    pub count: UnitCount,
    /// The kept units (each below `count`).
    pub units: BTreeSet<u16>,
}

/// The sharding group as this replica sees it, for the fleet view (who
/// owns an instance) and the debug pages (`/debug/members`, the overview's
/// sharding section), when sharding is on.
pub trait MembersSource: Send + Sync {
    /// The group at `now`.
    fn members(&self, now: Timestamp) -> MembersSnapshot;
    /// The replica that writes `key`'s status at `now` (the owner among
    /// the live members), `None` when no member is live.
    fn owner_of(&self, key: &InstanceKey, now: Timestamp) -> Option<String>;
}

/// Every instance the replica watches, with its stored status: what the
/// view answers from for the instances the replica does not sweep.
pub trait StoredStatusSource: Send + Sync {
    /// Every watched instance, by namespace and name.
    fn stored_instances(&self) -> Vec<StoredInstance>;
    /// One instance, if watched (or fetched, see
    /// [`StoredStatusSource::fetch`]).
    fn stored_instance(&self, key: &InstanceKey) -> Option<StoredInstance> {
        self.stored_instances().into_iter().find(|s| &s.key == key)
    }
    /// Reads `key`'s stored status from the API server when this replica
    /// does not watch the instance (sharding by unit: another replica's),
    /// so that [`StoredStatusSource::stored_instance`] answers it for a
    /// few seconds. Default: nothing to read (every instance is watched).
    fn fetch<'a>(&'a self, _key: &'a InstanceKey) -> BoxFuture<'a> {
        Box::pin(std::future::ready(()))
    }
}

/// A boxed future of a port's asynchronous method.
pub type BoxFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
