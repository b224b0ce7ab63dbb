//! The Kura rollout-health agent: discovery, polling, aggregation, the
//! gate's server checks, status writes, a debug endpoint and metrics.

pub mod aggregate;
pub mod check;
pub mod cli;
pub mod config;
pub mod debug;
pub mod demo;
pub mod engine;
pub mod fleet_load;
pub mod instance_metrics;
pub mod kube;
pub mod metrics;
pub mod poll;
pub mod runner;
pub mod sample;
pub mod shard;
pub mod sim;
