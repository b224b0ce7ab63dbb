//! The cluster adapter: watches of `KuraInstance`s and their pods
//! ([`discovery`]) turned into the run loop's targets ([`ClusterTargets`],
//! a [`TargetSource`](crate::model::TargetSource)). Status writes go the
//! other way, through `write`.

pub(crate) mod discovery;
mod source;

pub use discovery::kura_instance_resource;
pub(crate) use discovery::{Discovery, DiscoveryConfig, PollPort, TargetConfig};
pub(crate) use source::ClusterTargets;
