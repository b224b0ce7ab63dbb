//! The Events adapter: the status write path's [`Transition`]s become
//! Kubernetes Events (events.k8s.io/v1) on the `KuraInstance`, so `kubectl events --for kura/NAME`
//! and `kubectl describe kura NAME` say when a baseline was captured, when
//! the verdict turned healthy or unhealthy (with the evidence), when a hard
//! stop began and when the cluster's CRD dropped the agent's fields.
//!
//! - [`limiter`]: the per-instance rate bound (pure, time passed in): at
//!   most `burst` Events at once and one more per `refill`; a Warning takes
//!   any token, a Normal Event any but the one reserved for Warnings
//!   ([`WARNING_RESERVE`]), so Normal Events never hold back a Warning and
//!   a rollout's Normal Events are not held back either; transitions over
//!   the bound are coalesced (the latest of each kind waits and is
//!   published when the budget allows, saying how many were folded in);
//! - [`publisher`]: the task that publishes them ([`EventSink`] is what the
//!   write path's callback hands transitions to; a full queue drops and
//!   counts, it never blocks a status write);
//! - [`recorder`]: the API calls, folding a repeat into an Event series
//!   as kube-runtime's `events::Recorder` does, with a cache of about 150
//!   bytes a series where the Recorder kept whole Event objects.
//!
//! The recorder aggregates a repeat of the same reason and action within
//! 6 minutes into one Event series (a PATCH instead of a CREATE), but
//! every repeat is still an API call: the limiter is what bounds the calls
//! of an instance that flaps every sweep (`burst + minutes × per-minute`,
//! by default 6 + 1 per minute: at most 7 in its first minute, 11 in 5).
//!
//! [`Transition`]: crate::model::Transition

mod args;
pub mod limiter;
mod publisher;
pub mod recorder;

pub use args::EventArgs;
pub use limiter::{EventLimitConfig, EventLimiter, Publish, WARNING_RESERVE};
pub use publisher::{EventSink, start_events};
pub use recorder::Reporter;
