//! One instance's pure pipeline step: a sweep's samples → the aggregate
//! (`status.rolloutHealth`) → the gate's per-instance verdict
//! (`status.rolloutGate`). The run loop drives one engine per instance (so
//! do the demo, through the loop, and the benches); its whole state is what
//! the status publishes, so it restores from a published status after an
//! agent restart or a handover. `kura-agent check` combines the same
//! aggregation and judge itself, with a synthetic instance and its own
//! soak and timeout rules (`cli::check::judge`).

use std::sync::Arc;

use jiff::Timestamp;
use kura_gate::GateConfig;
use kura_gate::instance::judge_instance;
use kura_schemas::{KuraInstanceStatus, RolloutGate, RolloutHealth};

use crate::aggregate::{AggregateConfig, InstanceAggregator};
use crate::model::{GateLimits, InstanceInfo, InstanceKey, PodSample};

/// What every instance's engine is held to; shared by all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// The aggregation's settings.
    pub aggregate: AggregateConfig,
    /// The gate's settings.
    pub gate: GateConfig,
    /// Written to `rolloutHealth.agent`.
    pub agent: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            aggregate: AggregateConfig::default(),
            gate: GateConfig::default(),
            agent: "kura-agent".to_owned(),
        }
    }
}

/// Per-instance state between sweeps.
#[derive(Debug, Clone)]
pub struct InstanceEngine {
    config: Arc<EngineConfig>,
    aggregator: InstanceAggregator,
    last_health: Option<RolloutHealth>,
    last_gate: Option<RolloutGate>,
}

impl InstanceEngine {
    /// A fresh engine for an instance seen for the first time.
    pub fn new(config: Arc<EngineConfig>) -> Self {
        InstanceEngine {
            aggregator: InstanceAggregator::new(config.aggregate),
            config,
            last_health: None,
            last_gate: None,
        }
    }

    /// Continue from a published status (agent restart, or a new owner
    /// taking the instance over): counters, baseline and soak clock carry on.
    pub fn restore(status: Option<&KuraInstanceStatus>, config: Arc<EngineConfig>) -> Self {
        let health = status.and_then(|s| s.rollout_health.clone());
        let gate = status.and_then(|s| s.rollout_gate.clone());
        InstanceEngine {
            aggregator: match &health {
                Some(h) => InstanceAggregator::restore(h, config.aggregate),
                None => InstanceAggregator::new(config.aggregate),
            },
            config,
            last_health: health,
            last_gate: gate,
        }
    }

    /// The last aggregate produced (or restored).
    pub fn health(&self) -> Option<&RolloutHealth> {
        self.last_health.as_ref()
    }

    /// The last verdict produced (or restored).
    pub fn gate(&self) -> Option<&RolloutGate> {
        self.last_gate.as_ref()
    }

    /// The limits the last verdict compared against (`None` before the
    /// first verdict), for the fleet view.
    pub fn limits(&self) -> Option<GateLimits> {
        self.last_gate
            .as_ref()
            .map(|gate| gate_limits(&self.config.gate, gate))
    }

    /// Fold one sweep and judge it. When `spec_image` differs from the image
    /// the last verdict judged, the aggregate before this sweep (taken on the
    /// old image) becomes the baseline.
    pub fn step(
        &mut self,
        info: &InstanceInfo,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
    ) -> (&RolloutHealth, &RolloutGate) {
        let health = self
            .aggregator
            .sweep(info, samples, now, &self.config.agent);
        let gate = judge_instance(
            &InstanceKey::of(info).to_string(),
            self.last_gate.as_ref(),
            spec_image,
            self.last_health.as_ref(),
            Some(&health),
            now,
            &self.config.gate,
        );
        let health = self.last_health.insert(health);
        let gate = self.last_gate.insert(gate);
        (health, gate)
    }
}

/// The limits `gate` was judged against under `config`: the sample-age
/// limits and each counter's band top from the effective baseline (the
/// same arithmetic as the counter checks; a null baseline has no band).
pub fn gate_limits(config: &GateConfig, gate: &RolloutGate) -> GateLimits {
    let base = &gate.effective_baseline;
    GateLimits {
        max_sample_age_seconds: config.max_sample_age_seconds,
        future_skew_seconds: config.future_skew_seconds,
        outbox_band_top: base.outbox_messages.map(|b| config.outbox_band_top(b)),
        fd_timeout_band_top: base.fd_timeout_count.map(|b| config.fd_timeout_band_top(b)),
        peer_failure_band_top: base
            .peer_connection_failures
            .map(|b| config.peer_failure_band_top(b)),
        counters_compared: gate.soak_eligible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::{AgentVerdict, BaselineCounters};

    #[test]
    fn limits_follow_the_effective_baseline_and_the_config() {
        let config = GateConfig {
            fd_timeout_band: 2,
            max_sample_age_seconds: 90,
            ..GateConfig::default()
        };
        let gate = RolloutGate {
            target_image: "img:2".into(),
            baseline_image: Some("img:1".into()),
            baseline_captured_at: None,
            baseline: BaselineCounters {
                outbox_messages: Some(1000),
                fd_timeout_count: Some(9),
                peer_connection_failures: None,
            },
            effective_baseline: BaselineCounters {
                outbox_messages: Some(1000),
                fd_timeout_count: Some(8),
                peer_connection_failures: None,
            },
            soak_eligible: true,
            verdict: AgentVerdict::Healthy,
            signal: None,
            healthy_since: None,
            evaluated_at: Timestamp::UNIX_EPOCH,
            evidence: Vec::new(),
        };
        let l = gate_limits(&config, &gate);
        assert_eq!(l.max_sample_age_seconds, 90);
        assert_eq!(l.future_skew_seconds, 60);
        assert_eq!(l.fd_timeout_band_top, Some(10), "effective 8 + band 2");
        assert_eq!(l.outbox_band_top, Some(1100), "1000 + 10 %");
        assert_eq!(l.peer_failure_band_top, None, "a null baseline has no band");
        assert!(l.counters_compared);
    }
}
