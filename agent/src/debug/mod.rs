//! The read-only debug HTTP server: it reads the [`FleetView`] and the
//! metrics recorder and never changes either.
//!
//! - [`html`]: the small HTML overview page;
//! - [`instance_metrics`]: the per-instance `kura_instance_*` series of
//!   `/metrics`, rendered from the view at scrape time;
//! - [`server`]: the hyper server and its routes.
//!
//! [`FleetView`]: crate::view::FleetView

mod html;
mod instance_metrics;
mod server;

pub use server::{DebugServer, DebugState};
