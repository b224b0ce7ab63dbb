//! The Kura rollout-health agent: discovery, polling, aggregation, the
//! gate's server checks, status writes, a debug endpoint and metrics.

pub mod aggregate;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod debug;
pub mod demo;
pub mod engine;
pub mod model;
pub mod poll;
pub mod runner;
pub mod shard;
pub mod telemetry;
pub mod view;
pub mod write;
