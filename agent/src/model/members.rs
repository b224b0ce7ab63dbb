//! What the ports of the fleet view hand over: the sharding group as one
//! replica sees it ([`MembersSnapshot`], what `/debug/members` shows and
//! the overview page summarises) and an instance as the replica's watch
//! last saw it ([`StoredInstance`]). Plain values; the `shard` and
//! `cluster` adapters build them, `debug` renders them.

use jiff::Timestamp;
use kura_schemas::KuraInstanceStatus;
use serde::Serialize;

use super::key::InstanceKey;
use super::target::InstanceTarget;

/// The sharding group at one moment, as this replica sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MembersSnapshot {
    /// This replica.
    pub identity: String,
    /// The group label value.
    pub group: String,
    /// Where the Leases live.
    pub lease_namespace: String,
    /// This replica's Lease.
    pub lease_name: String,
    /// Whether sharding is ready (first renewal done, Leases listed).
    pub ready: bool,
    /// This replica's Lease as it knows it.
    pub own_lease: OwnLeaseSnapshot,
    /// Live members.
    pub members: Vec<MemberSnapshot>,
    /// Every Lease of the group.
    pub leases: Vec<LeaseSnapshot>,
    /// Instances this replica owns (as of the last reconcile).
    pub owned: Vec<String>,
    /// Ownership changes (gained + lost) since start.
    pub ownership_changes_total: u64,
    /// The latest changes, newest first.
    pub recent_changes: Vec<OwnershipChange>,
    /// How many watch units the instances are grouped into (`None`: not
    /// sharded by unit).
    pub units: Option<u16>,
    /// The units this replica owns now.
    pub owned_units: Vec<u16>,
    /// Members that departed less than the settle time ago (a unit
    /// moving between two other members waits for them).
    pub departed: Vec<String>,
    /// Why this replica owns no unit because another member assigns
    /// differently, if so.
    pub scheme_conflict: Option<String>,
}

/// This replica's own Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnLeaseSnapshot {
    /// When this process first acquired it.
    pub acquired_at: Option<Timestamp>,
    /// Send time of the last accepted renewal.
    pub last_renewed: Option<Timestamp>,
    /// Writes stop at this time unless renewed.
    pub writes_allowed_until: Option<Timestamp>,
    /// Whether writes are allowed now.
    pub current: bool,
    /// Renewals accepted.
    pub renewals_ok: u64,
    /// Renewals failed.
    pub renewals_failed: u64,
    /// The last renewal error, if the last renewal failed.
    pub last_error: Option<String>,
}

/// One live member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberSnapshot {
    /// Its identity.
    pub id: String,
    /// Whether it may gain instances yet (false while joining).
    pub settled: bool,
    /// Whether it is this replica.
    pub me: bool,
    /// The units it holds under the live members' assignment.
    pub units: usize,
    /// The unit count its Lease publishes (`None`: an agent that assigns
    /// by instance key).
    pub published_units: Option<String>,
    /// Whether its Lease publishes exact balance (`false`: an agent
    /// before it; the group then assigns with the tenth's slack).
    pub exact_balance: bool,
}

/// One Lease of the group: what membership reads of it, and whether it is
/// current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSnapshot {
    /// The Lease object's name.
    pub name: String,
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `spec.renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
    /// When it expires (if well-formed).
    pub expires_at: Option<Timestamp>,
    /// Whether it is current.
    pub current: bool,
}

/// One change of this replica's owned set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipChange {
    /// When the run loop saw it.
    pub at: Timestamp,
    /// The instance.
    pub instance: String,
    /// `gained` or `lost`.
    pub change: &'static str,
    /// The live members at that moment.
    pub members: Vec<String>,
}

/// An instance as the replica's `KuraInstance` watch last saw it: its
/// generation, `spec.image` and the status stored in the cluster (written
/// by whichever replica owns it).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredInstance {
    /// Namespace and name.
    pub key: InstanceKey,
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.image`.
    pub spec_image: String,
    /// The status, read leniently (unreadable fields are `None`).
    pub status: Option<KuraInstanceStatus>,
    /// Why a status field could not be read, one line each.
    pub notes: Vec<String>,
}

impl StoredInstance {
    /// The stored view of a target (its pods are not used).
    pub fn of(target: &InstanceTarget) -> Self {
        StoredInstance {
            key: target.key(),
            generation: target.info.generation,
            spec_image: target.spec_image.clone(),
            status: target.previous_status.as_deref().cloned(),
            notes: target.status_warnings.clone(),
        }
    }
}
