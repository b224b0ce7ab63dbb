//! An exported timeline replayed with the agent's own judge
//! (`kura_gate::instance::judge_instance`), as `kura-gate replay
//! --agent-view` does it: what the timeline tests compare with the
//! verdicts the agent published.

use kura_gate::instance::judge_instance;
use kura_gate::{GateConfig, parse_config_over};
use kura_schemas::{AgentVerdict, BaselineCounters, InstanceTimeline, RolloutGate, Signal};

/// The agent's judge over an exported timeline: the previous verdict
/// starts as the first tick's baseline (the effective one in force there)
/// and then is each tick's own result, as the agent's engine carries it.
/// Returns each tick's verdict and signal.
pub fn reproduce(doc: &InstanceTimeline) -> Vec<(AgentVerdict, Option<Signal>)> {
    let config: GateConfig = parse_config_over(
        &GateConfig::default(),
        &serde_json::to_value(&doc.config).expect("config"),
    )
    .expect("the configuration in force parses");
    let first = doc.ticks.first().map(|t| &t.servers[0]);
    let mut previous = first
        .and_then(|s| s.baseline.as_ref())
        .map(|b| RolloutGate {
            target_image: doc.instance.target_image.clone(),
            baseline_image: doc.instance.baseline_image.clone(),
            baseline_captured_at: Some(b.captured_at),
            baseline: b.counters.clone(),
            effective_baseline: b.counters.clone(),
            soak_eligible: b.soak_eligible,
            verdict: AgentVerdict::Unhealthy,
            signal: None,
            healthy_since: None,
            evaluated_at: b.captured_at,
            evidence: Vec::new(),
            config_error: None,
        });
    if previous.is_none() {
        // No baseline: the agent judges as for an instance seen first.
        previous = first.map(|_| RolloutGate {
            target_image: doc.instance.target_image.clone(),
            baseline_image: None,
            baseline_captured_at: None,
            baseline: BaselineCounters::default(),
            effective_baseline: BaselineCounters::default(),
            soak_eligible: false,
            verdict: AgentVerdict::Unhealthy,
            signal: None,
            healthy_since: None,
            evaluated_at: doc.window.from,
            evidence: Vec::new(),
            config_error: None,
        });
    }
    doc.ticks
        .iter()
        .map(|tick| {
            let server = &tick.servers[0];
            let health = server
                .health
                .as_ref()
                .map(|h| h.to_rollout_health(tick.now));
            let gate = judge_instance(
                &server.id,
                previous.as_ref(),
                &doc.instance.target_image,
                None,
                health.as_ref(),
                tick.now,
                &config,
            );
            let out = (gate.verdict, gate.signal);
            previous = Some(gate);
            out
        })
        .collect()
}

/// Each tick's published verdict and signal.
pub fn published(doc: &InstanceTimeline) -> Vec<(AgentVerdict, Option<Signal>)> {
    doc.ticks
        .iter()
        .map(|t| {
            (
                t.servers[0].published.verdict,
                t.servers[0].published.signal,
            )
        })
        .collect()
}
