//! The poller's settings. Which port of a pod is polled is discovery's
//! business (`cluster::PollPort`): the poller gets addresses.

use std::time::Duration;

/// Poller settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollConfig {
    /// Most requests in flight at once, over every instance (default 64).
    pub concurrency: usize,
    /// Limit on one attempt, connect to last body byte (default 2 s). The
    /// TCP connect alone gets half of it, so a connect timeout (retried) is
    /// told apart from a pod that accepted and never answered (not retried).
    pub timeout: Duration,
    /// Largest report body accepted, in bytes (default
    /// [`kura_schemas::report::DEFAULT_BODY_LIMIT`]).
    pub body_limit: usize,
    /// Extra attempts after a connection-level failure (default 1).
    pub retries: usize,
    /// Delay before the first retry; doubles with each further one (default
    /// [`DEFAULT_RETRY_DELAY`]).
    pub retry_delay: Duration,
    /// Keep one idle connection per pod between sweeps (default true).
    /// Saves a TCP handshake per poll; an idle connection costs its socket
    /// and nothing more (no task, no buffer). Without it every poll opens
    /// and closes its own connection.
    pub keep_alive: bool,
    /// Most port-forward streams open at once (node-local instances' pods,
    /// polled through the API server; default 8). Each is one websocket
    /// to the API server and one stream through the pod's kubelet, held
    /// for one poll; these polls wait for a stream, not for a
    /// [`PollConfig::concurrency`] permit.
    pub port_forward_streams: usize,
}

/// The delay before a poll's first retry, unless configured.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(100);

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            concurrency: 64,
            timeout: Duration::from_secs(2),
            body_limit: kura_schemas::report::DEFAULT_BODY_LIMIT,
            retries: 1,
            retry_delay: DEFAULT_RETRY_DELAY,
            keep_alive: true,
            port_forward_streams: 8,
        }
    }
}
