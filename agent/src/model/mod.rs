//! The vocabulary every other module shares, and nothing else: what a poll
//! produced ([`PodSample`]), which instance a thing belongs to
//! ([`InstanceKey`]), what one sweep needs ([`InstanceTarget`],
//! [`PodTarget`]), what the agent wants published ([`DesiredStatus`]), the
//! limits its verdict compared against ([`GateLimits`]), the conditions it
//! states from it ([`conditions`]), what became of writing it
//! ([`LastWrite`]) and which changes deserve an Event ([`Transition`]), the
//! ports between the core and the adapters ([`TargetSource`],
//! [`StatusSink`], [`WriteGate`], [`PodScope`], [`StoredStatusSource`],
//! [`MembersSource`]) with the snapshots they hand over ([`members`]), the
//! loop's notion of time ([`Clock`]), where an instance sits when
//! replicas share the fleet ([`units`]: buckets and watch units) and the flag values' parsers every
//! module's own `Args` shares ([`parse`]).
//!
//! Plain values and small traits; imports nothing of this crate.

mod clock;
pub mod conditions;
mod key;
mod limits;
pub mod members;
pub mod parse;
mod ports;
mod publication;
mod sample;
mod status;
mod target;
mod traits;
mod transition;
pub mod units;

pub use clock::{Clock, ScaledClock, SystemClock};
pub use key::InstanceKey;
pub use limits::GateLimits;
pub use members::{MembersSnapshot, StoredInstance};
pub use ports::{
    BoxFuture, ContestSource, InstanceUids, KeptUnits, MembersSource, PodScope, StatusLifecycle,
    StatusSink, StoredStatusSource, TargetSource, WriteGate,
};
pub use publication::{
    Contest, ControllerHealth, CrdFinding, FIELD_MANAGER, PublicationTarget, TargetChoice,
    TargetRequest, choose_target, crd_declares_rollout_gate,
};
pub use sample::{InstanceInfo, PodIdentity, PodSample, SampleResult};
#[cfg(test)]
pub(crate) use status::fixtures;
pub use status::{DesiredStatus, LastWrite, ShadowJudgement, WriteRecord};
pub use target::{GATE_CONFIG_ANNOTATION, InstanceTarget, NoAddress, PodTarget};
pub use traits::{
    FENCED_SERVING_MODE, InstanceTraits, SERVING_ROLLBACK_FLOOR_ANNOTATION, SUSPENDED_PHASES,
    update_paused_of,
};
pub use transition::{InstanceTransitions, Transition, TransitionKind};
pub use units::{SHARD_LABEL, UnitCount};
