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
//! Layers; a module imports only modules listed before it, and only the
//! ones `layering_check`'s table allows it (that test fails on any other
//! `use crate::`):
//! - vocabulary: [`model`] (keys, samples, targets, desired status, every port, clock), [`telemetry`] (metric names, label values), [`gate_text`] (the strict reader of gate-configuration text)
//! - core, no IO: [`aggregate`], [`engine`] (pure), and [`view`], the fleet view they feed
//! - adapters (IO): [`poll`] (the one the loop owns), [`cluster`], [`shard`], [`write`], [`events`] (behind `model`'s ports)
//! - loop: [`runner`] (one sweep: `runner::sweep`)
//! - presentation, reads the view: [`debug`]
//! - composition root: [`cli`] (`run`, the product binary's one subcommand)
//! - tools (feature `tools`, on by default; the image is built without
//!   it): `tools` (`check`, `baseline`, `demo`, `aggregate`, `simulate`,
//!   `timelines`, `fleet_load_side`)
//!
//! docs/architecture.md draws the same map with what each module owns.
//!
//! Where new work goes (docs/architecture.md, "Where new work goes", has
//! the rest):
//! - a new signal: its variant and its one row of `kura_schemas::SIGNALS`
//!   (schemas/src/signal.rs: name, reason, hard stop or not, check number
//!   and so its order, words, evidence fields), its check in
//!   gate/src/checks.rs (or the wave judge, gate/src/wave.rs, for a signal
//!   of the wave), and for a server check its row's value in
//!   agent/src/debug/signals.rs; the gate, the wave judge's hard stops,
//!   the metric labels, the conditions and the CLI read the home, and
//!   `signal_check` and the check table's test fail on a surface that
//!   names a signal the home does not;
//! - a new status field: its type in schemas/src/health.rs
//!   (`rolloutHealth`) or schemas/src/gate_status.rs (`rolloutGate`), the
//!   CRDs and JSON Schemas regenerated (`cargo run -p kura-schemas --bin
//!   crdgen`), its value made in [`aggregate`] or [`engine`], and whether
//!   its change is worth a write in `write::policy`;
//! - a new flag of `run`: a field of the `Args` of the module it configures
//!   (that module's args.rs, e.g. agent/src/write/args.rs), with its
//!   translation beside it, and its chart value in
//!   charts/kura-health-agent/ (values.yaml and the Deployment's args);
//! - a new route: its handler and its row of the route table in
//!   agent/src/debug/routes.rs, answering from `debug::DebugState` (the
//!   view and the ports handed in at start), never the loop or an adapter.
//!
//! # Cargo features
//!
//! - `tools` (default): every subcommand but `run` (`check`, `baseline`,
//!   `demo`, `aggregate`, `simulate`, `timelines` and the fleet-load side),
//!   the `tools` module, and `kura-sim` for `demo` and `simulate`. The
//!   container image builds without it (`--no-default-features`: `run`
//!   alone, the product).
//! - `fleet-load-side` (in `tools`): only the agent's side of benches'
//!   `fleet-load` harness (`kura-agent fleet-load-side`,
//!   `tools::fleet_load_side`), so the product binary plus this harness can
//!   be measured (`--no-default-features --features fleet-load-side`); it
//!   adds no dependency.
//! - `system-allocator`: glibc malloc instead of jemalloc in the binaries,
//!   for heap profilers that hook malloc (heaptrack).

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
/// Every subcommand but `run`: the whole module with `tools`, only
/// `fleet_load_side` with `fleet-load-side` alone.
#[cfg(any(feature = "tools", feature = "fleet-load-side"))]
pub mod tools;
pub mod view;
pub mod write;

#[cfg(test)]
mod layering_check;
#[cfg(test)]
mod signal_check;
#[cfg(test)]
mod source_files;
#[cfg(test)]
mod telemetry_check;
