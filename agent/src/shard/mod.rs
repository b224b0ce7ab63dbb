//! Sharding over several agent replicas, with Kubernetes Leases as the only
//! coordination (no consensus of our own):
//!
//! - **Membership**: every replica holds its own `coordination.k8s.io/v1`
//!   Lease named `<group>-<identity>` in the lease namespace, labelled
//!   [`GROUP_LABEL`]`=<group>`, renewed every third of its duration
//!   ([`lease`]). The live members are the holders of the group's current
//!   Leases ([`membership`]).
//! - **Ownership**: each instance `namespace/name` has a fixed bucket and
//!   watch unit (`model::units`); the units are assigned to the live
//!   members by rendezvous hashing with bounded loads ([`assign`]), and an
//!   instance belongs to its unit's owner ([`membership`]: the join rule,
//!   the departure rule, the scheme agreement). A replica polls and
//!   writes only what it owns: [`OwnedTargets`] filters the run loop's
//!   targets (the loop stops the tasks of instances it lost and drops their
//!   pending writes), and [`Shard`] is the status writer's
//!   [`WriteGate`](crate::model::WriteGate), checked right before
//!   every PATCH: no write without a current own Lease and ownership.
//! - **Handover**: a new owner's instance task restores from the published
//!   status (`InstanceEngine::restore`), so counters, baseline and soak
//!   clock carry on.
//!
//! The pure parts ([`rendezvous`], [`assign`], [`membership`]) take time as an
//! argument; [`lease`] and [`Shard`] are the IO shell.

mod args;
mod assign;
mod lease;
mod membership;
mod owned;
mod rendezvous;

pub use args::ShardArgs;
pub use assign::{Assignment, assign, instance_owner};
pub use lease::{DEFAULT_UNITS, GROUP_LABEL, UNITS_ANNOTATION};
pub(crate) use lease::{Shard, ShardConfig, ShardError};
pub(crate) use owned::OwnedTargets;
pub use rendezvous::{Member, owner};
