//! Polling pods' `GET /status/rollout`: one shared keep-alive client
//! (hyper's HTTP/1.1 connection API over a pool of idle sockets, see
//! [`client`]), a global bound on concurrent requests, a timeout per
//! attempt, a hard body limit, no redirects, and a short retry of
//! connection-level failures. Node-local instances' pods are polled
//! through the API server's port-forward instead ([`forward`]:
//! [`Poller::poll_pods_port_forward`]), never by pod IP; without an API
//! server, through a [`PortForwardRelay`] standing in for it
//! ([`Poller::with_port_forward_relay`]).
//!
//! Metrics (through the `metrics` facade; names in [`crate::telemetry`]):
//! `kura_agent_polls_total{result}` (`ok` or a [`PollError::reason`]),
//! `kura_agent_poll_retries_total` (retries, counted apart from failures),
//! `kura_agent_poll_connections_opened_total` (TCP connections opened),
//! `kura_agent_poll_duration_seconds` (one observation per attempt, from
//! the moment it holds a concurrency permit).

mod args;
mod client;
mod config;
mod error;
mod forward;
mod poller;

pub use args::PollArgs;
pub use config::PollConfig;
pub use error::PollError;
pub use forward::PortForwardRelay;
pub use poller::{Poller, READ_BUFFER};
