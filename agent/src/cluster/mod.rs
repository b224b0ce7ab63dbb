//! The cluster adapter: watches of `KuraInstance`s and their pods
//! (`discovery`) read as partial objects (`wire`) into what the agent
//! keeps of them (`pods`, `instances`, held in `store`) and turned
//! into the run loop's targets ([`ClusterTargets`], a
//! [`TargetSource`](crate::model::TargetSource)). Status writes go the
//! other way, through `write`.

mod args;
mod discovery;
#[cfg(test)]
mod handover_tests;
mod instances;
mod pods;
mod publication;
mod source;
mod stamp;
mod store;
mod stored;
mod units;
mod wire;

pub use args::{DiscoveryArgs, PublicationArgs};
pub use discovery::kura_instance_resource;
pub(crate) use discovery::{Discovery, DiscoveryConfig};
/// How a watched instance is read (public for the `status_io` bench:
/// each echo of a status write costs one [`entry_reading`]).
pub use instances::entry_reading;
pub(crate) use pods::{PollPort, TargetConfig};
pub use publication::{KURA_INSTANCE_CRD, Scan, choose as choose_publication_target};
pub(crate) use source::ClusterTargets;
pub use units::{PodSelection, UnitWatchConfig};
pub use wire::InstanceObject;
