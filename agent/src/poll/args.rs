//! The poller's flags of `kura-agent run` and their translation into
//! [`PollConfig`] (which port is polled is the targets' business:
//! `cluster::DiscoveryArgs`).

use std::time::Duration;

use clap::Args;

use crate::model::parse::parse_positive_duration;
use crate::poll::PollConfig;

/// How pods are polled.
#[derive(Debug, Clone, Args)]
pub struct PollArgs {
    /// Polls in flight at once, across all instances.
    #[arg(long, env = "KURA_AGENT_POLL_CONCURRENCY", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub poll_concurrency: u32,

    /// Port-forward streams open at once, across all instances: the pods of
    /// node-local instances (`spec.nodeLocalNetwork`) are polled through
    /// the API server's pod port-forward, one stream per poll (needs `get`
    /// and `create` on `pods/portforward`: the agent's websocket upgrade is
    /// a GET, authorized as `get`; `create` is the SPDY form's verb).
    #[arg(long, env = "KURA_AGENT_PORT_FORWARD_STREAMS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub port_forward_streams: u32,

    /// Per-request poll timeout.
    #[arg(long, env = "KURA_AGENT_POLL_TIMEOUT", default_value = "2s", value_parser = parse_positive_duration)]
    pub poll_timeout: Duration,

    /// Keep one idle connection per pod between sweeps (`false`: a new
    /// connection per poll). An idle kept connection costs its socket only
    /// (a few hundred bytes of agent memory, plus the kernel's buffers).
    #[arg(long, env = "KURA_AGENT_POLL_KEEP_ALIVE", default_value_t = true, action = clap::ArgAction::Set)]
    pub poll_keep_alive: bool,

    /// Largest report body accepted, in bytes.
    #[arg(long, env = "KURA_AGENT_BODY_LIMIT", default_value_t = 64 * 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub body_limit: u32,
}

impl PollArgs {
    /// The poller's settings.
    pub fn config(&self) -> PollConfig {
        PollConfig {
            concurrency: self.poll_concurrency as usize,
            timeout: self.poll_timeout,
            body_limit: self.body_limit as usize,
            keep_alive: self.poll_keep_alive,
            port_forward_streams: self.port_forward_streams as usize,
            ..PollConfig::default()
        }
    }
}
