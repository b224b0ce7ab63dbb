//! The fold of one instance's pod samples into `status.rolloutHealth`
//! (contract/rollout-health.md): pure code, time passed in.
//!
//! - [`InstanceAggregator`]: per-instance state and the per-sweep fold;
//! - `fence`: the fold of the pods' `serving_authority` (pure);
//! - [`input`]: the document `kura-agent aggregate FILE` reads.
//!
//! When an aggregate is worth a status write is the write path's business
//! (`write::policy`).

mod aggregator;
mod args;
mod backfill;
mod counters;
mod fence;
pub mod input;
mod tracked;

pub use aggregator::{InstanceAggregator, MAX_TRACKED_PODS};
pub use args::AggregateArgs;
pub use tracked::GONE_ERROR;

use jiff::SignedDuration;

/// Default retention of a gone pod's counter state: one hour.
pub const DEFAULT_RETENTION: SignedDuration = SignedDuration::from_hours(1);

/// Default bound on a pod's published `error`, in bytes.
pub const DEFAULT_MAX_ERROR_BYTES: usize = 160;

/// Settings of the aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateConfig {
    /// How long a pod discovery no longer lists keeps its counter state
    /// before it folds into `retiredCounters` (default 1 h). Judged against
    /// the sweep time passed in, never a clock.
    pub retention: SignedDuration,
    /// Longest `error` kept per pod, in bytes (cut at a character boundary),
    /// so a hostile pod cannot bloat the status.
    pub max_error_bytes: usize,
}

impl Default for AggregateConfig {
    fn default() -> Self {
        AggregateConfig {
            retention: DEFAULT_RETENTION,
            max_error_bytes: DEFAULT_MAX_ERROR_BYTES,
        }
    }
}
