//! Gate configuration (contract/gate.md, "Defaults") and the band arithmetic.

use kura_schemas::api_int;
use serde::{Deserialize, Serialize};

/// Every tunable of the gate. [`GateConfig::default`] is the documented
/// default set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct GateConfig {
    /// Soak per wave in seconds: entry `n` is wave `n`'s soak, the last entry
    /// repeats for every later wave. Default `[900, 300]`. Never empty when
    /// built through [`GateConfig::validate`].
    pub soak_seconds: Vec<u64>,
    /// Seconds from a wave's start after which an incomplete wave is a hard
    /// stop. Default 3600.
    pub wave_deadline_seconds: u64,
    /// A sample older than this many seconds is stale. Default 180.
    pub max_sample_age_seconds: u64,
    /// A `sampledAt` further than this many seconds in the future is
    /// invalid. Default 60.
    pub future_skew_seconds: u64,
    /// Outbox band: percentage of the baseline added on top. Default 10.
    pub outbox_band_percent: u64,
    /// Outbox band: minimum headroom. Default 50.
    pub outbox_band_minimum: u64,
    /// Replication-lag band (pull-sync nodes): percentage of the baseline
    /// added on top. Default 10.
    pub replication_lag_band_percent: u64,
    /// Replication-lag band: minimum headroom. Default 50.
    pub replication_lag_band_minimum: u64,
    /// fd-timeout band: headroom above the baseline. Default 0 (no growth).
    pub fd_timeout_band: u64,
    /// Peer-failure band: percentage of the baseline added on top. Default 10.
    pub peer_failure_band_percent: u64,
    /// Peer-failure band: minimum headroom. Default 25.
    pub peer_failure_band_minimum: u64,
    /// The drain window of checks 13 and 18 in seconds: a backlog above
    /// its band fails only once it has not fallen for this long. Default
    /// 900; 0: the band alone decides.
    pub backlog_drain_window_seconds: u64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            soak_seconds: vec![900, 300],
            wave_deadline_seconds: 3600,
            max_sample_age_seconds: 180,
            future_skew_seconds: 60,
            outbox_band_percent: 10,
            outbox_band_minimum: 50,
            replication_lag_band_percent: 10,
            replication_lag_band_minimum: 50,
            fd_timeout_band: 0,
            peer_failure_band_percent: 10,
            peer_failure_band_minimum: 25,
            backlog_drain_window_seconds: 900,
        }
    }
}

impl GateConfig {
    /// The soak of `wave` in seconds (the last configured value repeats; an
    /// empty list means no soak).
    pub fn soak_for(&self, wave: u32) -> u64 {
        let index = usize::try_from(wave).unwrap_or(usize::MAX);
        self.soak_seconds
            .get(index)
            .or(self.soak_seconds.last())
            .copied()
            .unwrap_or(0)
    }

    /// Top of the outbox band for `baseline` (inclusive).
    pub fn outbox_band_top(&self, baseline: u64) -> u64 {
        percent_band(baseline, self.outbox_band_percent, self.outbox_band_minimum)
    }

    /// Top of the replication-lag band for `baseline` (inclusive).
    pub fn replication_lag_band_top(&self, baseline: u64) -> u64 {
        percent_band(
            baseline,
            self.replication_lag_band_percent,
            self.replication_lag_band_minimum,
        )
    }

    /// Top of the fd-timeout band for `baseline` (inclusive), saturating at
    /// 2^63−1 like every band top.
    pub fn fd_timeout_band_top(&self, baseline: u64) -> u64 {
        api_int::saturating_add(baseline, self.fd_timeout_band)
    }

    /// Top of the peer-failure band for `baseline` (inclusive).
    pub fn peer_failure_band_top(&self, baseline: u64) -> u64 {
        percent_band(
            baseline,
            self.peer_failure_band_percent,
            self.peer_failure_band_minimum,
        )
    }

    /// Checks the value rules every configuration is held to, wherever it
    /// comes from (a replay document, the agent's `--gate-config` file, a
    /// `KuraInstance` annotation, the C ABI): the soak list is not empty
    /// ([`GateError::EmptySoakList`](crate::GateError::EmptySoakList)), the
    /// maximum sample age is at least 1 s (0 would call every sample
    /// stale) and no band percentage is above [`MAX_BAND_PERCENT`]
    /// ([`GateError::ConfigValue`](crate::GateError::ConfigValue), naming
    /// the key). The first broken rule is returned, in key order.
    pub fn validate(&self) -> Result<(), crate::GateError> {
        if self.soak_seconds.is_empty() {
            return Err(crate::GateError::EmptySoakList);
        }
        let invalid =
            |key: &'static str, reason: String| crate::GateError::ConfigValue { key, reason };
        if self.max_sample_age_seconds == 0 {
            return Err(invalid(
                "maxSampleAgeSeconds",
                "must be at least 1 (0 would make every sample stale)".to_owned(),
            ));
        }
        for (key, percent) in [
            ("outboxBandPercent", self.outbox_band_percent),
            (
                "replicationLagBandPercent",
                self.replication_lag_band_percent,
            ),
            ("peerFailureBandPercent", self.peer_failure_band_percent),
        ] {
            if percent > MAX_BAND_PERCENT {
                return Err(invalid(
                    key,
                    format!(
                        "{percent} is above the limit of {MAX_BAND_PERCENT} (percent of the baseline)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The largest band percentage a configuration may set (ten times the
/// baseline on top of it): anything wider is no regression check at all
/// and most likely a typo.
pub const MAX_BAND_PERCENT: u64 = 1000;

/// Every key of a configuration document, in document order (the
/// camelCase names of [`GateConfig`]'s fields).
pub const CONFIG_KEYS: [&str; 12] = [
    "soakSeconds",
    "waveDeadlineSeconds",
    "maxSampleAgeSeconds",
    "futureSkewSeconds",
    "outboxBandPercent",
    "outboxBandMinimum",
    "replicationLagBandPercent",
    "replicationLagBandMinimum",
    "fdTimeoutBand",
    "peerFailureBandPercent",
    "peerFailureBandMinimum",
    "backlogDrainWindowSeconds",
];

/// `baseline + max(ceil(baseline × percent / 100), minimum)` in exact integer
/// arithmetic, saturating at 2^63−1 ([`api_int::API_INT_MAX`]): a band top
/// is published as evidence in `status.rolloutGate`, and the API server
/// stores no larger integer (a larger one would make every status write of
/// the instance fail).
pub fn percent_band(baseline: u64, percent: u64, minimum: u64) -> u64 {
    let scaled = u128::from(baseline) * u128::from(percent);
    let headroom = scaled.div_ceil(100).max(u128::from(minimum));
    let top = u128::from(baseline) + headroom;
    u64::try_from(top).map_or(api_int::API_INT_MAX, api_int::saturate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_match_the_contract_examples() {
        let config = GateConfig::default();
        assert_eq!(config.outbox_band_top(100), 150);
        assert_eq!(config.outbox_band_top(1000), 1100);
        assert_eq!(config.outbox_band_top(1001), 1102);
        assert_eq!(config.peer_failure_band_top(0), 25);
        assert_eq!(config.peer_failure_band_top(300), 330);
        assert_eq!(config.fd_timeout_band_top(90), 90);
        assert_eq!(config.replication_lag_band_top(0), 50);
        assert_eq!(config.replication_lag_band_top(1001), 1102);
        let apart = GateConfig {
            replication_lag_band_percent: 50,
            replication_lag_band_minimum: 0,
            ..GateConfig::default()
        };
        assert_eq!(apart.replication_lag_band_top(100), 150);
        assert_eq!(apart.outbox_band_top(100), 150);
        assert_eq!(apart.replication_lag_band_top(10), 15);
        assert_eq!(apart.outbox_band_top(10), 60);
    }

    #[test]
    fn band_tops_saturate_at_what_the_api_server_stores() {
        let max = api_int::API_INT_MAX;
        let config = GateConfig {
            fd_timeout_band: 10,
            ..GateConfig::default()
        };
        for base in [max - 5, max, u64::MAX] {
            assert_eq!(config.outbox_band_top(base), max, "outbox {base}");
            assert_eq!(config.peer_failure_band_top(base), max, "peers {base}");
            assert_eq!(config.fd_timeout_band_top(base), max, "fd {base}");
        }
        // 10 % of 2^63-1 would have been above it.
        assert_eq!(
            percent_band(max / 2, 10, 0),
            max / 2 + (max / 2).div_ceil(10)
        );
        assert_eq!(percent_band(max / 10 * 9, 20, 0), max);
    }

    #[test]
    fn validation_names_the_key_and_the_reason() {
        assert_eq!(GateConfig::default().validate(), Ok(()));
        let at_limits = GateConfig {
            max_sample_age_seconds: 1,
            outbox_band_percent: MAX_BAND_PERCENT,
            peer_failure_band_percent: MAX_BAND_PERCENT,
            ..GateConfig::default()
        };
        assert_eq!(at_limits.validate(), Ok(()));
        let key_of = |config: GateConfig| match config.validate() {
            Err(crate::GateError::ConfigValue { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            key_of(GateConfig {
                max_sample_age_seconds: 0,
                ..GateConfig::default()
            }),
            "maxSampleAgeSeconds"
        );
        assert_eq!(
            key_of(GateConfig {
                outbox_band_percent: 1001,
                ..GateConfig::default()
            }),
            "outboxBandPercent"
        );
        assert_eq!(
            key_of(GateConfig {
                replication_lag_band_percent: 1001,
                ..GateConfig::default()
            }),
            "replicationLagBandPercent"
        );
        assert_eq!(
            key_of(GateConfig {
                peer_failure_band_percent: u64::MAX,
                ..GateConfig::default()
            }),
            "peerFailureBandPercent"
        );
        assert_eq!(
            GateConfig {
                soak_seconds: Vec::new(),
                ..GateConfig::default()
            }
            .validate(),
            Err(crate::GateError::EmptySoakList)
        );
    }

    #[test]
    fn the_key_list_is_the_serialized_form() {
        let value = serde_json::to_value(GateConfig::default()).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = CONFIG_KEYS.to_vec();
        want.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn soak_repeats_the_last_value() {
        let config = GateConfig::default();
        assert_eq!(config.soak_for(0), 900);
        assert_eq!(config.soak_for(1), 300);
        assert_eq!(config.soak_for(7), 300);
    }
}
