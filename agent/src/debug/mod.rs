//! The read-only debug HTTP server: it reads the [`FleetView`] and the
//! metrics recorder and never changes either.
//!
//! - [`answers`]: the JSON answers about instances every replica gives
//!   for every instance it sweeps or watches (`/debug/instances*`, the
//!   verdict document of `/api/v1/instances/{namespace}/{name}/verdict`);
//! - [`html`]: the small HTML overview page;
//! - [`instance_metrics`]: the per-instance `kura_instance_*` series of
//!   `/metrics`, rendered from the view at scrape time;
//! - [`server`]: the hyper server and its routes.
//!
//! [`FleetView`]: crate::view::FleetView

pub mod answers;
mod html;
mod instance_metrics;
mod server;

pub use server::{DebugServer, DebugState};
