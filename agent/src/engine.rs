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
use crate::model::{InstanceInfo, InstanceKey, PodSample};

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
