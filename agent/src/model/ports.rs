//! The two ends of the run loop, as traits: where targets come from
//! ([`TargetSource`]: the cluster's watches, a static list, the shard's
//! narrowing of either) and where desired statuses go ([`StatusSink`]: the
//! write queue, memory). The loop knows only these; adapters implement them.

use jiff::Timestamp;

use super::key::InstanceKey;
use super::status::DesiredStatus;
use super::target::InstanceTarget;

/// Where the loop's targets come from.
pub trait TargetSource: Send + Sync + 'static {
    /// The current targets (instances with their pods).
    fn targets(&self) -> Vec<InstanceTarget>;
    /// Whether the source has its initial state (before that, the loop
    /// neither starts nor stops instance tasks).
    fn ready(&self) -> bool;
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
}
