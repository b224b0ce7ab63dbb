//! The vocabulary every other module shares, and nothing else: what a poll
//! produced ([`PodSample`]), which instance a thing belongs to
//! ([`InstanceKey`]), what one sweep needs ([`InstanceTarget`],
//! [`PodTarget`]), what the agent wants published ([`DesiredStatus`]), the
//! limits its verdict compared against ([`GateLimits`]), the conditions it
//! states from it ([`conditions`]), what became of writing it
//! ([`LastWrite`]) and which changes deserve an Event ([`Transition`]), the
//! ports between the loop and the adapters ([`TargetSource`],
//! [`StatusSink`], [`WriteGate`]) and the loop's notion of time
//! ([`Clock`]).
//!
//! Plain values and small traits; imports nothing of this crate.

mod clock;
pub mod conditions;
mod key;
mod limits;
mod ports;
mod sample;
mod status;
mod target;
mod transition;

pub use clock::{Clock, ScaledClock, SystemClock};
pub use key::InstanceKey;
pub use limits::GateLimits;
pub use ports::{PodScope, StatusSink, TargetSource, WriteGate};
pub use sample::{InstanceInfo, PodIdentity, PodSample, SampleResult};
#[cfg(test)]
pub(crate) use status::fixtures;
pub use status::{DesiredStatus, LastWrite, WriteRecord};
pub use target::{GATE_CONFIG_ANNOTATION, InstanceTarget, NoAddress, PodTarget};
pub use transition::{InstanceTransitions, Transition, TransitionKind};
