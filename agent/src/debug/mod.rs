//! The read-only debug HTTP server: it reads its [`DebugState`] (the
//! [`FleetView`], the metrics recorder and the lookups `run` hands it) and
//! never changes any of it.
//!
//! - [`server`]: the hyper server (connections, the method and path
//!   checks, the streamed scrape); `routes`: one function per route and
//!   the table from paths to them; [`state`]: [`DebugState`], everything
//!   the server reads, handed in once by whoever starts it (the view,
//!   the recorder, the clock, readiness, members, stored statuses,
//!   identity);
//! - the HTML pages: [`fleet_page`] (`/`; its query in [`fleet_query`],
//!   the window of rows it shows in [`fleet_window`]) and [`instance_page`]
//!   (`/instances/{namespace}/{name}`), built from [`html`] (escaping,
//!   formatting, the page shell and its CSP), [`assets`] (the one style
//!   sheet and script, inlined), [`signals`] (evidence in words, the gated
//!   signals table), [`chart`] (the history as inline SVG) and [`shadow`]
//!   (the shadow configuration's verdicts beside the live ones);
//! - [`answers`]: the JSON answers about instances every replica gives
//!   for every instance it sweeps or watches (`/debug/instances*`, the
//!   verdict document of `/api/v1/instances/{namespace}/{name}/verdict`);
//! - the timeline of `/api/v1/instances/{namespace}/{name}/timeline` (the
//!   view's [`crate::view::Timelines`], its query in `timeline_query`);
//! - [`instance_metrics`]: the per-instance `kura_instance_*` series of
//!   `/metrics`, rendered from the view at scrape time, and streamed a
//!   chunk at a time by `scrape_body`;
//! - `connections`: the bounds on waiting and served connections (only
//!   idle ones are shed; the rest queue); `head`: a connection's first
//!   request head, read before it takes a slot; `watched`: a served
//!   connection's socket (its activity, and bounds on clients that do not
//!   read their answers);
//! - `listen`: binding the listener (`[::]` dual-stack).
//!
//! [`FleetView`]: crate::view::FleetView

pub mod answers;
mod args;
mod assets;
mod chart;
mod connections;
mod fleet_page;
mod fleet_query;
mod fleet_window;
mod head;
mod html;
mod instance_metrics;
mod instance_page;
mod listen;
mod routes;
mod scrape_body;
mod server;
mod shadow;
mod signals;
pub mod state;
mod timeline_query;
mod watched;

pub use args::DebugArgs;
pub use state::{DebugState, InstanceAnswer, SyncProbe};

pub use server::{
    DebugServer, HEADER_READ_TIMEOUT, IDLE_GRACE, Limits, MAX_CONNECTIONS, MAX_HEAD_BYTES,
    MAX_WAITING, QUEUE_LIMIT, RESPONSE_TIMEOUT, WRITE_STALL_TIMEOUT,
};
