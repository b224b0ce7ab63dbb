//! The agent's view of a replay document (`kura-gate replay --agent-view`):
//! every server of every tick judged as the agent judges one instance
//! ([`judge_instance_view`], the same code as the agent's
//! `status.rolloutGate`), beside the verdict the agent published for it when
//! the document is an exported timeline.
//!
//! State per server, kept across ticks:
//! - The first time a server appears, and whenever its `baseline` differs
//!   from the one its state was started from, the state starts over from
//!   that baseline: the captured counters are also the effective ones,
//!   `soakEligible` as given, `healthySince` null. A server with no (null)
//!   baseline starts as the agent's first sight of an instance: no baseline,
//!   not soak-eligible, so only the absolute checks run.
//! - Otherwise the previous verdict carries over, as in the agent: a fresh
//!   sample with a fd-timeout or peer-failure count below the effective
//!   baseline lowers it (a reset), `healthySince` is kept while healthy.
//! - Every server is judged whatever its wave, convergence, deployment or
//!   status: the agent judges instances, the wave judge decides what counts.
//!
//! A window that starts after the baseline was captured cannot show resets
//! seen before it; the agent's export starts at its baseline.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kura_schemas::{AgentVerdict, BaselineCounters, Evidence, RolloutGate, Signal};
use serde::Serialize;

use crate::baseline::Baseline;
use crate::document::{Published, ReplayInput};
use crate::instance::{hold_until_converged, judge_instance_view};

/// One line of the agent view: one server at one tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentLine {
    /// Index of the tick in the document, from 0.
    pub tick: usize,
    /// The server (instance) judged.
    pub server_id: String,
    /// `healthy`, `unhealthy` or `hard_stop`.
    pub verdict: AgentVerdict,
    /// The first failing check; null when healthy.
    pub signal: Option<Signal>,
    /// Since when every check has passed; null when not healthy.
    pub healthy_since: Option<Timestamp>,
    /// The failing check's evidence (empty when healthy).
    pub evidence: Vec<Evidence>,
    /// What the agent published for this server at this tick, if the
    /// document says.
    pub published: Option<Published>,
    /// Whether `verdict` and `signal` are what the agent published; null
    /// when nothing was published.
    pub agrees: Option<bool>,
}

impl AgentLine {
    /// Whether the agent's view has this server passing its soak: healthy
    /// for at least `soak_seconds` at `now`.
    pub fn soaked(&self, now: Timestamp, soak_seconds: u64) -> bool {
        match (self.verdict, self.healthy_since) {
            (AgentVerdict::Healthy, Some(since)) => {
                u64::try_from(now.as_second().saturating_sub(since.as_second()))
                    .is_ok_and(|held| held >= soak_seconds)
            }
            _ => false,
        }
    }
}

/// One server's state between ticks: the agent's last verdict and the
/// baseline it was started from.
struct Judged {
    from: Option<Baseline>,
    gate: RolloutGate,
}

/// The agent view of `input`, judged with `input.config`: one line per
/// server per tick, in document order.
pub fn agent_view(input: &ReplayInput) -> Vec<AgentLine> {
    let config = &input.config;
    let mut states: BTreeMap<&str, Judged> = BTreeMap::new();
    let mut lines = Vec::new();
    for (index, tick) in input.ticks.iter().enumerate() {
        for server in &tick.servers {
            let target = input
                .instance
                .as_ref()
                .map_or(server.id.as_str(), |i| i.target_image.as_str());
            let previous = match states.get(server.id.as_str()) {
                Some(judged) if judged.from == server.baseline => Some(judged.gate.clone()),
                _ => server
                    .baseline
                    .as_ref()
                    .map(|baseline| started_from(baseline, target, input)),
            };
            let mut gate = judge_instance_view(
                &server.id,
                previous.as_ref(),
                target,
                None,
                server.health.as_ref(),
                tick.now,
                config,
            );
            // The agent's convergence rule, from the timeline's record of
            // it (the evidence's detail, which pods ran what, is not
            // recorded).
            hold_until_converged(&mut gate, &server.id, server.converged, None);
            let published = input
                .published
                .get(index)
                .and_then(|by_id| by_id.get(&server.id))
                .copied();
            lines.push(AgentLine {
                tick: index,
                server_id: server.id.clone(),
                verdict: gate.verdict,
                signal: gate.signal,
                healthy_since: gate.healthy_since,
                evidence: gate.evidence.clone(),
                agrees: published.map(|p| p.verdict == gate.verdict && p.signal == gate.signal),
                published,
            });
            states.insert(
                &server.id,
                Judged {
                    from: server.baseline.clone(),
                    gate,
                },
            );
        }
    }
    lines
}

/// The agent's state right after capturing `baseline` for `target`.
fn started_from(baseline: &Baseline, target: &str, input: &ReplayInput) -> RolloutGate {
    let counters: BaselineCounters = baseline.counters.clone();
    RolloutGate {
        target_image: target.to_owned(),
        baseline_image: input
            .instance
            .as_ref()
            .and_then(|i| i.baseline_image.clone()),
        baseline_captured_at: Some(baseline.captured_at),
        baseline: counters.clone(),
        effective_baseline: counters,
        soak_eligible: baseline.soak_eligible,
        verdict: AgentVerdict::Unhealthy,
        signal: None,
        healthy_since: None,
        evaluated_at: baseline.captured_at,
        evidence: Vec::new(),
        config_error: None,
        backlog_runs: Default::default(),
    }
}
