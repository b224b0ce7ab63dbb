//! Where simulated pods listen: distinct loopback addresses sharing one port
//! (like pod IPs in a cluster), or 127.0.0.1 with one ephemeral port each.

use crate::SimError;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// How a simulator assigns listen addresses to its pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Addressing {
    /// Pod `i` listens on the `i`-th address from `first_ip` (skipping
    /// addresses ending in `.0` and `.255`), all on `port`; port 0 means one
    /// ephemeral port chosen when the first pod binds. If the addresses
    /// cannot be bound, the simulator falls back to [`Addressing::Ephemeral`].
    Loopback {
        /// The first pod's address, inside 127.0.0.0/8.
        first_ip: Ipv4Addr,
        /// The port every pod listens on (0: pick one).
        port: u16,
    },
    /// Every pod on 127.0.0.1 with its own ephemeral port.
    Ephemeral,
}

impl Default for Addressing {
    /// Loopback from 127.10.0.1 on one ephemeral port.
    fn default() -> Self {
        Addressing::Loopback {
            first_ip: Ipv4Addr::new(127, 10, 0, 1),
            port: 0,
        }
    }
}

impl Addressing {
    /// Bind `n` listeners.
    pub(crate) fn bind(&self, n: usize) -> Result<Vec<TcpListener>, SimError> {
        if let Addressing::Loopback { first_ip, port } = *self {
            // With a port of 0 another simulator may hold the chosen port on
            // one of our addresses: pick again a few times.
            let attempts = if port == 0 { 5 } else { 1 };
            let mut last = None;
            for _ in 0..attempts {
                match bind_loopback(first_ip, port, n) {
                    Ok(v) => return Ok(v),
                    Err(e) => last = Some(e),
                }
            }
            if let Some(e) = last {
                tracing::warn!(error = %e, "loopback addresses unavailable; falling back to 127.0.0.1 with ephemeral ports");
            }
        }
        (0..n)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(SimError::Bind))
            .collect()
    }
}

fn bind_loopback(first: Ipv4Addr, port: u16, n: usize) -> Result<Vec<TcpListener>, SimError> {
    let mut out = Vec::with_capacity(n);
    let mut port = port;
    let mut ip = u32::from(first);
    for _ in 0..n {
        while matches!(ip & 0xff, 0 | 255) {
            ip += 1;
        }
        let addr = Ipv4Addr::from(ip);
        if addr.octets()[0] != 127 {
            return Err(SimError::Scenario(format!(
                "{n} pods do not fit in 127.0.0.0/8 from {first}"
            )));
        }
        let l = TcpListener::bind(SocketAddr::from((addr, port))).map_err(SimError::Bind)?;
        if port == 0 {
            port = l.local_addr().map_err(SimError::Bind)?.port();
        }
        out.push(l);
        ip += 1;
    }
    Ok(out)
}
