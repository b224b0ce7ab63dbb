//! Benchmarks over the Kura crates (criterion benches live in
//! `benches/benches/`) and the pieces of the `fleet-load` harness: simulated
//! pods in child processes, the agent's poll-and-aggregate path, the bare
//! loopback ceiling and process statistics.

pub mod agent_path;
pub mod ceiling;
pub mod error;
pub mod gate_docs;
pub mod proc_stats;
pub mod runner;
pub mod sim_process;
