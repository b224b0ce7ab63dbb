//! The cluster adapter: watches of `KuraInstance`s and their pods
//! ([`discovery`]) turned into the run loop's targets ([`ClusterTargets`],
//! a [`TargetSource`](crate::model::TargetSource)). Status writes go the
//! other way through [`crate::write`].

pub mod discovery;
mod source;

pub use discovery::{
    Discovery, DiscoveryConfig, PollPort, TargetConfig, Targets, kura_instance_resource,
};
pub use source::ClusterTargets;
