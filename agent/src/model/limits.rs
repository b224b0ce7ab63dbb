//! [`GateLimits`]: the limits the gate held one instance to in its last
//! sweep, so the fleet page can show every gated signal beside its band
//! without knowing the gate's configuration (which may differ per
//! instance).

/// What one instance's last verdict compared against: the sample-age
/// limits and the counter bands computed from the effective baseline.
/// Small and `Copy`: the fleet view keeps one per instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLimits {
    /// A sample older than this many seconds is stale (checks 2 to 4).
    pub max_sample_age_seconds: u64,
    /// A `sampledAt` further ahead than this many seconds is invalid.
    pub future_skew_seconds: u64,
    /// Top of the outbox band (inclusive), when the effective baseline has
    /// an outbox.
    pub outbox_band_top: Option<u64>,
    /// Top of the replication-lag band (inclusive), when the effective
    /// baseline has a replication lag.
    pub replication_lag_band_top: Option<u64>,
    /// Top of the fd-timeout band, when the effective baseline has one.
    pub fd_timeout_band_top: Option<u64>,
    /// Top of the peer-failure band, when the effective baseline has one.
    pub peer_failure_band_top: Option<u64>,
    /// Whether the counter checks (13 to 15, 18) ran: only for an instance
    /// that was soak-eligible when its baseline was captured.
    pub counters_compared: bool,
}
