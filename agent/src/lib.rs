//! The Kura rollout-health agent: discovery, polling, aggregation, the
//! gate's server checks, status writes, a debug endpoint and metrics.

pub mod aggregate;
pub mod cli;
pub mod config;
pub mod debug;
pub mod kube;
pub mod metrics;
pub mod poll;
pub mod sample;
pub mod sim;
