//! Benchmarks over the Kura crates (criterion benches live in
//! `benches/benches/`) and the pieces of the `fleet-load` harness: simulated
//! pods in child processes, the agent's poll-and-aggregate path, the bare
//! loopback ceiling, the agent's run loop over time and process statistics.

pub mod agent_path;
pub mod ceiling;
pub mod error;
pub mod loop_side;
pub mod proc_stats;
pub mod runner;
pub mod sim_process;
