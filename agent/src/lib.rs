//! The Kura rollout-health agent, the product alone (the simulated fleet
//! of the demo and the tests is the `kura-sim` crate). Data flow:
//!
//! ```text
//! cluster (watch) -> targets -> runner -> poll -> samples -> engine (aggregate, gate) -> desired status
//! desired status -> write (policy, queue, conditions, apply, driver) -> API server;   runner + write results -> view
//! write transitions -> events (rate bound, series) -> API server
//! view -> debug (page, routes, /metrics series);   every layer -> telemetry (metric names)
//! ```
//!
//! Layers; a module imports only from the layers above it in this list
//! (`layering_check` holds the table of allowed imports):
//! - vocabulary: [`model`] (keys, samples, targets, desired status, every port, clock), [`telemetry`] (metric names, label values), [`gate_text`] (the strict reader of gate-configuration text)
//! - core, pure: [`aggregate`], [`engine`]; state: [`view`] (the fleet view)
//! - the poller the loop owns: [`poll`]; loop: [`runner`] (one sweep: `runner::sweep`)
//! - adapters behind the ports: [`cluster`], [`shard`], [`write`], [`events`]
//! - presentation, reads the view: [`debug`]
//! - cli: [`cli`] composes everything (`run`); `check`, `baseline`, `demo`, `aggregate`, `simulate`, `fleet_load_side` are tooling
//!
//! docs/architecture.md draws the same map with what each module owns.

#![deny(missing_docs)]

pub mod aggregate;
pub mod cli;
pub mod cluster;
pub mod debug;
pub mod engine;
pub mod events;
pub mod gate_text;
pub mod model;
pub mod poll;
pub mod runner;
pub mod shard;
pub mod telemetry;
#[cfg(feature = "fleet-load-side")]
pub mod tools;
pub mod view;
pub mod write;

#[cfg(test)]
mod layering_check;
#[cfg(test)]
mod telemetry_check;
