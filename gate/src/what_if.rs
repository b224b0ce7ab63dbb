//! What-if (`kura-gate replay --gate-config FILE --diff`): one document
//! judged twice, with its own configuration and with a candidate, and only
//! the ticks where the two answers differ, plus a summary of each.
//!
//! The candidate replaces the document's configuration everywhere the gate
//! reads one, including the soak eligibility of baselines given as
//! aggregates (the document is read again with it,
//! [`parse_replay_judged_with`]).
//!
//! A tick differs when its verdict or signal differs (the wave view), or, in
//! the agent view, when one server's verdict or signal differs at that tick
//! (one line per server and tick). Evidence, `serverId`, `healthySince` and
//! `remainingSeconds` are shown but do not make a difference on their own.
//!
//! The summary, for each configuration:
//! - `firstPass`: the first tick whose verdict is `pass` (wave view); in the
//!   agent view the first tick where a server has been `healthy` for its
//!   wave's soak (what the wave judge would pass on).
//! - `firstHold`: the first tick that holds the rollout for a failing check:
//!   a `soak` whose signal is not `soaking` (a failing check, or servers
//!   not converged) in the wave view; `unhealthy` in the agent view.
//! - `firstHardStop` and `hardStopTicks`: the first `hard_stop` tick and how
//!   many ticks are `hard_stop`.
//! - `timeToPassSeconds`: from the passing tick's `waveStartedAt` to its
//!   `now` (wave view); from the server's baseline capture (or, with no
//!   baseline, the document's first tick) to the passing tick's `now`
//!   (agent view). Null when nothing passed.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kura_schemas::{AgentVerdict, Evidence, Signal};
use serde::Serialize;

use crate::agent_view::{AgentLine, agent_view};
use crate::config::GateConfig;
use crate::document::{ReplayInput, parse_replay, parse_replay_judged_with};
use crate::replay::{ReplayError, ReplayLine, run_replay};
use crate::wave::{Verdict, VerdictKind};

/// Which judge a what-if compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The wave judge (`kura-gate replay`'s default output).
    Wave,
    /// The agent's per-instance judge (`--agent-view`).
    Agent,
}

/// A tick (or, in the agent view, a tick of one server) judged twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Difference {
    /// The wave judge's two verdicts of one tick.
    Wave {
        /// Index of the tick, from 0.
        tick: usize,
        /// With the document's own configuration.
        document: Verdict,
        /// With the candidate configuration.
        candidate: Verdict,
    },
    /// The agent's two verdicts of one server at one tick.
    #[serde(rename_all = "camelCase")]
    Agent {
        /// Index of the tick, from 0.
        tick: usize,
        /// The server (instance).
        server_id: String,
        /// With the document's own configuration.
        document: AgentSide,
        /// With the candidate configuration.
        candidate: AgentSide,
    },
}

/// One side of an agent-view difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSide {
    /// `healthy`, `unhealthy` or `hard_stop`.
    pub verdict: AgentVerdict,
    /// The first failing check; null when healthy.
    pub signal: Option<Signal>,
    /// The failing check's evidence.
    pub evidence: Vec<Evidence>,
}

/// A tick the summary points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Moment {
    /// Index of the tick, from 0.
    pub tick: usize,
    /// The tick's `now`.
    pub at: Timestamp,
    /// The server, in the agent view (null in the wave view).
    pub server_id: Option<String>,
    /// The signal of that verdict (null for a pass).
    pub signal: Option<Signal>,
}

/// What one configuration decided over the whole document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The first pass.
    pub first_pass: Option<Moment>,
    /// The first hold on a failing check.
    pub first_hold: Option<Moment>,
    /// The first hard stop.
    pub first_hard_stop: Option<Moment>,
    /// How many ticks (agent view: server ticks) are `hard_stop`.
    pub hard_stop_ticks: usize,
    /// Seconds to the first pass; null when nothing passed.
    pub time_to_pass_seconds: Option<i64>,
}

/// The what-if's last line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// `wave` or `agent`.
    pub view: &'static str,
    /// Ticks in the document.
    pub ticks: usize,
    /// Lines that differ (ticks in the wave view, server ticks in the agent
    /// view).
    pub differences: usize,
    /// With the document's own configuration.
    pub document: Outcome,
    /// With the candidate configuration.
    pub candidate: Outcome,
}

/// A what-if's answer: the differing lines then the summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WhatIf {
    /// The differing ticks, in document order.
    pub differences: Vec<Difference>,
    /// What each configuration decided.
    pub summary: Summary,
}

/// The summary line as printed: `{"summary": {...}}`.
#[derive(Debug, Serialize)]
pub struct SummaryLine<'a> {
    /// The summary.
    pub summary: &'a Summary,
}

/// Judges the document `text` with its own configuration and with
/// `candidate`, in `view`.
pub fn what_if(text: &str, candidate: &GateConfig, view: View) -> Result<WhatIf, ReplayError> {
    candidate
        .validate()
        .map_err(|source| crate::document::config_error("", source))?;
    let own = parse_replay(text)?;
    let other = parse_replay_judged_with(text, Some(candidate))?;
    match view {
        View::Wave => {
            let mine = run_replay(&own)?;
            let theirs = run_replay(&other)?;
            let differences = mine
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| {
                    a.verdict.verdict != b.verdict.verdict || a.verdict.signal != b.verdict.signal
                })
                .map(|(a, b)| Difference::Wave {
                    tick: a.tick,
                    document: a.verdict.clone(),
                    candidate: b.verdict.clone(),
                })
                .collect::<Vec<_>>();
            Ok(WhatIf {
                summary: Summary {
                    view: "wave",
                    ticks: own.ticks.len(),
                    differences: differences.len(),
                    document: wave_outcome(&own, &mine),
                    candidate: wave_outcome(&other, &theirs),
                },
                differences,
            })
        }
        View::Agent => {
            let mine = agent_view(&own);
            let theirs = agent_view(&other);
            let differences = mine
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| a.verdict != b.verdict || a.signal != b.signal)
                .map(|(a, b)| Difference::Agent {
                    tick: a.tick,
                    server_id: a.server_id.clone(),
                    document: side(a),
                    candidate: side(b),
                })
                .collect::<Vec<_>>();
            Ok(WhatIf {
                summary: Summary {
                    view: "agent",
                    ticks: own.ticks.len(),
                    differences: differences.len(),
                    document: agent_outcome(&own, &mine),
                    candidate: agent_outcome(&other, &theirs),
                },
                differences,
            })
        }
    }
}

fn side(line: &AgentLine) -> AgentSide {
    AgentSide {
        verdict: line.verdict,
        signal: line.signal,
        evidence: line.evidence.clone(),
    }
}

/// The wave judge's outcome over `lines` (one per tick of `input`).
pub fn wave_outcome(input: &ReplayInput, lines: &[ReplayLine]) -> Outcome {
    let mut outcome = Outcome::default();
    for (line, tick) in lines.iter().zip(&input.ticks) {
        let moment = || Moment {
            tick: line.tick,
            at: tick.now,
            server_id: None,
            signal: line.verdict.signal,
        };
        match line.verdict.verdict {
            VerdictKind::Pass => {
                if outcome.first_pass.is_none() {
                    outcome.first_pass = Some(moment());
                    outcome.time_to_pass_seconds =
                        Some(tick.now.as_second() - tick.wave_started_at.as_second());
                }
            }
            VerdictKind::Soak => {
                if line.verdict.signal != Some(Signal::Soaking) && outcome.first_hold.is_none() {
                    outcome.first_hold = Some(moment());
                }
            }
            VerdictKind::HardStop => {
                outcome.hard_stop_ticks += 1;
                if outcome.first_hard_stop.is_none() {
                    outcome.first_hard_stop = Some(moment());
                }
            }
        }
    }
    outcome
}

/// The agent view's outcome over `lines` (from [`agent_view`] of `input`).
pub fn agent_outcome(input: &ReplayInput, lines: &[AgentLine]) -> Outcome {
    let mut outcome = Outcome::default();
    let Some(first_now) = input.ticks.first().map(|t| t.now) else {
        return outcome;
    };
    // Each server's wave and baseline capture, by tick, to find its soak and
    // where its clock starts.
    let mut started: BTreeMap<&str, Timestamp> = BTreeMap::new();
    let mut servers = lines.iter();
    for (index, tick) in input.ticks.iter().enumerate() {
        for server in &tick.servers {
            let Some(line) = servers.next() else {
                return outcome;
            };
            let start = *started.entry(server.id.as_str()).or_insert(
                server
                    .baseline
                    .as_ref()
                    .map_or(first_now, |b| b.captured_at),
            );
            let moment = || Moment {
                tick: index,
                at: tick.now,
                server_id: Some(server.id.clone()),
                signal: line.signal,
            };
            match line.verdict {
                AgentVerdict::Healthy => {
                    if outcome.first_pass.is_none()
                        && line.soaked(tick.now, input.config.soak_for(server.wave))
                    {
                        outcome.first_pass = Some(moment());
                        outcome.time_to_pass_seconds =
                            Some(tick.now.as_second() - start.as_second());
                    }
                }
                AgentVerdict::Unhealthy => {
                    if outcome.first_hold.is_none() {
                        outcome.first_hold = Some(moment());
                    }
                }
                AgentVerdict::HardStop => {
                    outcome.hard_stop_ticks += 1;
                    if outcome.first_hard_stop.is_none() {
                        outcome.first_hard_stop = Some(moment());
                    }
                }
                // A suspended instance has nothing to judge: neither a
                // pass nor a hold.
                AgentVerdict::Suspended => {}
            }
        }
    }
    outcome
}
