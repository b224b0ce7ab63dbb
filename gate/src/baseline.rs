//! Baselines: what a server looked like when its wave was scheduled.

use jiff::Timestamp;
use kura_schemas::BaselineCounters;
use serde::{Deserialize, Serialize};

use crate::checks::soak_eligible;
use crate::config::GateConfig;
use crate::health_view::HealthView;

/// A server's baseline, captured from its aggregate at the moment its wave
/// was scheduled (or at resume). The caller stores it and passes it in every
/// tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// When it was captured.
    pub captured_at: Timestamp,
    /// The counters at capture (each may be null: never compared then).
    pub counters: BaselineCounters,
    /// Whether the server was healthy at capture; only soak-eligible servers
    /// are held to the server checks by the wave judge.
    pub soak_eligible: bool,
}

impl Baseline {
    /// Captures a baseline at `captured_at` from the server's aggregate
    /// (`None`: no aggregate, so null counters and not soak-eligible).
    pub fn capture(
        health: Option<&HealthView>,
        captured_at: Timestamp,
        config: &GateConfig,
    ) -> Self {
        Baseline {
            captured_at,
            counters: counters_of(health),
            soak_eligible: soak_eligible(health, captured_at, config),
        }
    }
}

/// The four compared values of an aggregate (null when absent).
pub fn counters_of(health: Option<&HealthView>) -> BaselineCounters {
    BaselineCounters {
        outbox_messages: health.and_then(|h| h.outbox_messages),
        replication_lag_entries: health.and_then(|h| h.replication_lag_entries),
        fd_timeout_count: health.and_then(|h| h.fd_timeout_count),
        peer_connection_failures: health.and_then(|h| h.peer_connection_failures),
    }
}
