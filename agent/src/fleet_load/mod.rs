//! The agent's side of the `fleet-load` harness (`benches/`): the run
//! loop's per-sweep path over a fleet of pods ([`fleet::AgentFleet`]), the
//! line protocol through which a parent `fleet-load` drives it in a child
//! process ([`protocol`]) and what that child measures of itself
//! ([`proc_stats`]).
//!
//! It lives in the agent crate so that a shipped binary can be measured
//! exactly as the harness measures its own build: `fleet-load --agent-bin
//! NAME=PATH` runs `PATH fleet-load-side` (a hidden subcommand of
//! `kura-agent`), which is the same code as `fleet-load`'s own agent side.

pub mod fleet;
pub mod proc_stats;
pub mod protocol;
