//! One instance's pure pipeline step: a sweep's samples → the aggregate
//! (`status.rolloutHealth`) → the gate's per-instance verdict
//! (`status.rolloutGate`). The run loop, the demo and `check` all drive it;
//! its whole state is what the status publishes, so it restores from a
//! published status after an agent restart.

use jiff::Timestamp;
use kura_gate::GateConfig;
use kura_gate::instance::judge_instance;
use kura_schemas::{KuraInstanceStatus, RolloutGate, RolloutHealth};

use crate::aggregate::{AggregateConfig, InstanceAggregator};
use crate::sample::{InstanceInfo, PodSample};

/// Per-instance state between sweeps.
#[derive(Debug, Clone)]
pub struct InstanceEngine {
    aggregator: InstanceAggregator,
    last_health: Option<RolloutHealth>,
    last_gate: Option<RolloutGate>,
}

impl InstanceEngine {
    /// A fresh engine for an instance seen for the first time.
    pub fn new(config: AggregateConfig) -> Self {
        InstanceEngine {
            aggregator: InstanceAggregator::new(config),
            last_health: None,
            last_gate: None,
        }
    }

    /// Continue from a published status (agent restart, or a new owner
    /// taking the instance over): counters, baseline and soak clock carry on.
    pub fn restore(status: Option<&KuraInstanceStatus>, config: AggregateConfig) -> Self {
        let health = status.and_then(|s| s.rollout_health.clone());
        let gate = status.and_then(|s| s.rollout_gate.clone());
        InstanceEngine {
            aggregator: match &health {
                Some(h) => InstanceAggregator::restore(h, config),
                None => InstanceAggregator::new(config),
            },
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
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        info: &InstanceInfo,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
        agent: &str,
        gate_config: &GateConfig,
    ) -> (&RolloutHealth, &RolloutGate) {
        let health = self.aggregator.sweep(info, samples, now, agent);
        let key = format!("{}/{}", info.namespace, info.name);
        let gate = judge_instance(
            &key,
            self.last_gate.as_ref(),
            spec_image,
            self.last_health.as_ref(),
            Some(&health),
            now,
            gate_config,
        );
        let health = self.last_health.insert(health);
        let gate = self.last_gate.insert(gate);
        (health, gate)
    }
}
