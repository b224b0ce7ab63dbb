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
use crate::model::{GateLimits, InstanceInfo, InstanceKey, PodSample, SampleResult};

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

/// Per-instance state between sweeps. The last aggregate and verdict are
/// shared, immutable values: the run loop hands the same `Arc`s to the
/// fleet view and the status sink, so each exists once in memory.
#[derive(Debug, Clone)]
pub struct InstanceEngine {
    config: Arc<EngineConfig>,
    aggregator: InstanceAggregator,
    last_health: Option<Arc<RolloutHealth>>,
    last_gate: Option<Arc<RolloutGate>>,
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
            last_health: health.map(Arc::new),
            last_gate: gate.map(Arc::new),
        }
    }

    /// The last aggregate produced (or restored).
    pub fn health(&self) -> Option<&RolloutHealth> {
        self.last_health.as_deref()
    }

    /// The last verdict produced (or restored).
    pub fn gate(&self) -> Option<&RolloutGate> {
        self.last_gate.as_deref()
    }

    /// The limits the last verdict compared against (`None` before the
    /// first verdict), for the fleet view.
    pub fn limits(&self) -> Option<GateLimits> {
        self.last_gate
            .as_ref()
            .map(|gate| gate_limits(&self.config.gate, gate))
    }

    /// Fold one sweep and judge it. When `spec_image` differs from the image
    /// the last verdict judged, the last aggregate taken on the old image
    /// becomes the baseline: this sweep's own, when every pod in it answered
    /// and still runs the old image (the loop sweeps at once when the watch
    /// shows the change, so that is the aggregate closest to the upgrade),
    /// else the aggregate before this sweep. Returns the new aggregate and
    /// verdict as shared values (clone the `Arc`s to keep them).
    pub fn step(
        &mut self,
        info: &InstanceInfo,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
    ) -> (&Arc<RolloutHealth>, &Arc<RolloutGate>) {
        let health = self
            .aggregator
            .sweep(info, samples, now, &self.config.agent);
        let fresh_baseline = self
            .last_gate
            .as_deref()
            .is_some_and(|g| g.target_image != spec_image && all_on(samples, &g.target_image));
        let baseline_source = if fresh_baseline {
            Some(&health)
        } else {
            self.last_health.as_deref()
        };
        let gate = judge_instance(
            &InstanceKey::of(info).to_string(),
            self.last_gate.as_deref(),
            spec_image,
            baseline_source,
            Some(&health),
            now,
            &self.config.gate,
        );
        let health = self.last_health.insert(Arc::new(health));
        let gate = self.last_gate.insert(Arc::new(gate));
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

/// Whether `samples` is not empty and every one is a report from a pod
/// that runs `image` (by its pod spec).
fn all_on(samples: &[PodSample], image: &str) -> bool {
    !samples.is_empty()
        && samples.iter().all(|s| {
            s.pod.image.as_deref() == Some(image) && matches!(s.result, SampleResult::Report(_))
        })
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

    use crate::model::PodIdentity;
    use jiff::SignedDuration;
    use kura_schemas::parse_report;

    const V1: &str = "ghcr.io/tuist/kura:1.0.0";
    const V2: &str = "ghcr.io/tuist/kura:1.1.0";

    fn info() -> InstanceInfo {
        InstanceInfo {
            namespace: "kura".into(),
            name: "acme".into(),
            expected_pods: 2,
            generation: 1,
        }
    }

    /// A G1 fixture report with `fd` fd timeouts, from pod `i` on `image`.
    fn sample(i: usize, image: &str, fd: u64, at: Timestamp) -> PodSample {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/reports/g1-bootstrap.json"
        );
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("json");
        v["fd_timeout_count"] = serde_json::json!(fd);
        let report = parse_report(&serde_json::to_vec(&v).expect("bytes")).expect("report");
        PodSample {
            pod: PodIdentity {
                name: format!("acme-{i}"),
                uid: format!("u-{i}"),
                restart_count: 0,
                image: Some(image.to_owned()),
                ip: None,
            },
            received_at: at,
            result: SampleResult::Report(Box::new(report)),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000).expect("ts") + SignedDuration::from_secs(s)
    }

    #[test]
    fn the_baseline_is_the_aggregate_closest_to_the_upgrade() {
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &info(),
            V1,
            &[sample(0, V1, 1, at(0)), sample(1, V1, 1, at(0))],
            at(0),
        );
        // 30 s later the watch shows the upgrade and the loop sweeps at
        // once: the pods still run v1, their counters grew meanwhile. That
        // sweep is the baseline, not the one 30 s old.
        let (_, gate) = engine.step(
            &info(),
            V2,
            &[sample(0, V1, 4, at(30)), sample(1, V1, 1, at(30))],
            at(30),
        );
        assert_eq!(gate.baseline_image.as_deref(), Some(V1));
        assert_eq!(gate.baseline.fd_timeout_count, Some(5));
        assert_eq!(gate.baseline_captured_at, Some(at(30)));
        assert!(gate.soak_eligible);

        // A pod already on the new image (or one that did not answer): the
        // aggregate before the change stays the baseline.
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &info(),
            V1,
            &[sample(0, V1, 1, at(0)), sample(1, V1, 1, at(0))],
            at(0),
        );
        let (_, gate) = engine.step(
            &info(),
            V2,
            &[sample(0, V2, 0, at(30)), sample(1, V1, 3, at(30))],
            at(30),
        );
        assert_eq!(gate.baseline.fd_timeout_count, Some(2));
        let mut failed = sample(1, V1, 3, at(30));
        failed.result = SampleResult::Error("timeout".into());
        assert!(!all_on(&[sample(0, V1, 3, at(30)), failed], V1));
        assert!(!all_on(&[], V1));
    }
}
