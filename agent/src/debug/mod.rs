//! The read-only debug HTTP server: it reads the [`FleetView`] and the
//! metrics recorder and never changes either.
//!
//! - [`html`]: the small HTML overview page;
//! - [`instance_metrics`]: the per-instance `kura_instance_*` series of
//!   `/metrics`, rendered from the view at scrape time;
//! - [`server`]: the hyper server and its routes;
//! - `connections`: the bound on open connections (accept, then shed the
//!   longest idle);
//! - `listen`: binding the listener (`[::]` dual-stack).
//!
//! [`FleetView`]: crate::view::FleetView

mod connections;
mod html;
mod instance_metrics;
mod listen;
mod server;

pub use server::{DebugServer, DebugState, HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
