//! Benchmarks over the Kura crates (criterion benches live in
//! `benches/benches/`) and the pieces of the `fleet-load` harness: simulated
//! pods in child processes, the bare loopback ceiling, the agent's run
//! loop over time (`loop_side`) and the measuring child processes; and the
//! real-cluster tier (`cluster_load`, the `cluster-load` binary). The agent's side of the harness (its per-sweep path,
//! the child protocol and process statistics) lives in
//! `kura_agent::tools::fleet_load_side`, so a shipped `kura-agent` binary can be
//! measured the same way.

#![deny(missing_docs)]

pub use kura_agent::tools::fleet_load_side::fleet as agent_path;
pub use kura_agent::tools::fleet_load_side::proc_stats;

pub mod ceiling;
pub mod cluster_load;
pub mod error;
pub mod gate_docs;
pub mod loop_side;
pub mod profiler;
pub mod runner;
pub mod sim_process;
