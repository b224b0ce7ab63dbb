//! The read-only debug HTTP server and the in-memory fleet view it serves.
//!
//! - [`view`]: [`FleetView`], what the run loop (or
//!   `kura-agent demo`) saw, decided and wrote, per instance;
//! - [`html`]: the small HTML overview page;
//! - [`server`]: the hyper server and its routes.

pub mod html;
pub mod server;
pub mod view;

pub use server::{DebugServer, DebugState};
pub use view::{
    FleetView, InstanceView, LastWrite, MembersSource, PodView, Readiness, SweepRecord, WriteRecord,
};
