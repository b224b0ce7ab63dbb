//! The debug server's flag of `kura-agent run`.

use std::net::SocketAddr;

use clap::Args;

/// Where the debug server listens.
#[derive(Debug, Clone, Args)]
pub struct DebugArgs {
    /// Listen address of the read-only debug and metrics server. `[::]`
    /// listens on IPv4 and IPv6 (falls back to `0.0.0.0` on a host without
    /// IPv6).
    #[arg(long, env = "KURA_AGENT_DEBUG_LISTEN", default_value = "[::]:8080")]
    pub debug_listen: SocketAddr,
}
