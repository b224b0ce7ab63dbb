//! The status-write path, from "the loop has a new desired status" to
//! "the API server has it":
//!
//! - [`policy`]: when a desired status is worth a write (material and
//!   priority changes; pure);
//! - [`queue`]: which instance to write next and when (one slot per
//!   instance, heartbeat, token bucket, retries with backoff; pure, time
//!   passed in);
//! - [`conditions`]: the agent's `status.conditions` entries for a
//!   desired status, `lastTransitionTime` moving only on a flip (pure);
//! - [`apply`]: one write: server-side apply on the `status` subresource,
//!   pruning detection, the [`WriteGate`](crate::model::WriteGate) asked
//!   right before the PATCH;
//! - [`transitions`]: which changes a write made deserve an Event (pure);
//! - [`driver`]: the loop that drains the queue through the writer;
//!   [`WriteHandle`] is the run loop's status sink; results go to a
//!   callback, never straight into the fleet view.

mod apply;
mod args;
pub mod conditions;
mod driver;
mod policy;
mod queue;
pub mod transitions;

pub use apply::{
    FIELD_MANAGER, StatusWriter, WriteError, WriteOutcome, apply_body, check_returned, strip_nulls,
};
pub use args::{ConditionArgs, WriteArgs, parse_heartbeat_max};
pub use driver::{MAX_IN_FLIGHT_CEILING, WriteHandle, WriteReport, in_flight_for, run_writes};
pub use queue::{
    DEFAULT_HEARTBEAT_WRITES_PER_SECOND, HEARTBEAT_CEILING, WriteQueue, WriteQueueConfig,
    heartbeat_for,
};
