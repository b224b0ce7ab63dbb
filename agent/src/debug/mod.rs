//! The read-only debug HTTP server: it reads the [`FleetView`] and the
//! metrics recorder and never changes either.
//!
//! - [`html`]: the small HTML overview page;
//! - [`server`]: the hyper server and its routes.
//!
//! [`FleetView`]: crate::view::FleetView

pub mod html;
pub mod server;

pub use server::{DebugServer, DebugState};
