//! The status-write path, from "the loop has a new desired status" to
//! "the API server has it":
//!
//! - [`policy`]: when a desired status is worth a write (material and
//!   priority changes; pure);
//! - [`queue`]: which instance to write next and when (one slot per
//!   instance, heartbeat, token bucket, retries with backoff; pure, time
//!   passed in);
//! - [`apply`]: one write: server-side apply on the `status` subresource,
//!   pruning detection, the [`WriteGate`](crate::model::WriteGate) asked
//!   right before the PATCH;
//! - [`driver`]: the loop that drains the queue through the writer;
//!   [`WriteHandle`] is the run loop's status sink; results go to a
//!   callback, never straight into the fleet view.

pub(crate) mod apply;
mod driver;
mod policy;
mod queue;

pub use apply::{StatusWriter, WriteError, WriteOutcome, strip_nulls};
pub use driver::{WriteHandle, run_writes};
pub use queue::{WriteQueue, WriteQueueConfig};
