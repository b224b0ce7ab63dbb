//! The agent's per-instance half of the gate (contract/gate.md, "In the
//! agent: `status.rolloutGate`"): pure, with the previous
//! [`RolloutGate`] as the whole state, so an agent restored from status
//! continues exactly where it left off.
//!
//! Rules:
//! - No previous gate (the agent sees the instance for the first time): the
//!   target is `spec_image`, there is no baseline (`baselineImage`,
//!   `baselineCapturedAt` and every counter null, so no counter is ever
//!   compared) and `soakEligible` is false.
//! - `spec_image` differs from the previous target: a new baseline is
//!   captured at `now` from `baseline_source` (the last aggregate taken on
//!   the old image; `None` gives null counters and not eligible),
//!   `baselineImage` is the old target, the effective baseline starts equal
//!   to the captured one and `healthySince` starts over.
//! - Otherwise baseline and effective baseline carry over; a fresh sample
//!   with a fd-timeout or peer-failure count below the effective baseline
//!   lowers it (a reset).
//! - A suspended instance (its aggregate has `suspended: true`) has no pods
//!   and nothing to judge: the verdict is `suspended` with the signal
//!   `instance_suspended` (one evidence entry), `healthySince` is cleared
//!   and everything else (baseline, effective baseline, backlog runs)
//!   carries over untouched; dropping the baseline of a suspended instance
//!   is the caller's business (the agent starts a returning instance
//!   afresh).
//! - The absolute checks (1 to 12, 16, 17 and 19) run for every instance,
//!   eligible or not: the agent reports the instance's health as it is.
//!   The counter checks (13 to 15, 18) run only for a soak-eligible
//!   instance, since a sick-at-baseline instance's counters are no
//!   reference.
//! - The backlog runs of checks 13 and 18 (the drain rule) are kept in
//!   `backlogRuns`: they start empty with every new baseline and move on
//!   every judgement of a soak-eligible instance, whatever the checks say
//!   (the agent has no convergence of its own here: its pods' images are
//!   the caller's to judge).
//! - Verdict: `hard_stop` when a hard-stop check fails (1, 16, 19, in that
//!   order), `unhealthy` when another check fails (its signal and
//!   evidence), `healthy` otherwise. `healthySince` is kept while healthy
//!   and cleared otherwise. Nothing latches here: latching belongs to the
//!   orchestrator's wave judge.
//! - `configError` is always null in the result: the caller chose `config`
//!   and says so itself when an instance's own configuration was refused
//!   (the agent does, for the `kura.tuist.dev/gate-config` annotation).

use jiff::Timestamp;
use kura_schemas::{
    AgentVerdict, BacklogRuns, BaselineCounters, Evidence, RolloutGate, RolloutHealth, Signal,
};

use crate::baseline::counters_of;
use crate::checks::{
    Freshness, check_server_with_runs, follow_backlogs, freshness, lower_on_reset, soak_eligible,
};
use crate::config::GateConfig;
use crate::health_view::HealthView;

/// Judges one instance's newest aggregate and returns its next
/// `status.rolloutGate`. `instance` names the instance in the evidence
/// (e.g. `namespace/name`).
pub fn judge_instance(
    instance: &str,
    previous: Option<&RolloutGate>,
    spec_image: &str,
    baseline_source: Option<&RolloutHealth>,
    current: Option<&RolloutHealth>,
    now: Timestamp,
    config: &GateConfig,
) -> RolloutGate {
    judge_instance_view(
        instance,
        previous,
        spec_image,
        baseline_source.map(HealthView::from).as_ref(),
        current.map(HealthView::from).as_ref(),
        now,
        config,
    )
}

/// [`judge_instance`] on aggregates already read into [`HealthView`]s (what
/// a replay document holds): the same judgement, the same result.
pub fn judge_instance_view(
    instance: &str,
    previous: Option<&RolloutGate>,
    spec_image: &str,
    baseline_source: Option<&HealthView>,
    current: Option<&HealthView>,
    now: Timestamp,
    config: &GateConfig,
) -> RolloutGate {
    let mut gate = match previous {
        None => RolloutGate {
            target_image: spec_image.to_owned(),
            baseline_image: None,
            baseline_captured_at: None,
            baseline: BaselineCounters::default(),
            effective_baseline: BaselineCounters::default(),
            soak_eligible: false,
            verdict: AgentVerdict::Unhealthy,
            signal: None,
            healthy_since: None,
            evaluated_at: now,
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: BacklogRuns::default(),
        },
        Some(previous) if previous.target_image != spec_image => {
            let counters = counters_of(baseline_source);
            RolloutGate {
                target_image: spec_image.to_owned(),
                baseline_image: Some(previous.target_image.clone()),
                baseline_captured_at: Some(now),
                baseline: counters.clone(),
                effective_baseline: counters,
                soak_eligible: soak_eligible(baseline_source, now, config),
                verdict: AgentVerdict::Unhealthy,
                signal: None,
                healthy_since: None,
                evaluated_at: now,
                evidence: Vec::new(),
                config_error: None,
                backlog_runs: BacklogRuns::default(),
            }
        }
        Some(previous) => previous.clone(),
    };

    gate.evaluated_at = now;
    // Whether the instance's own configuration was refused is the caller's
    // to say (it chose `config`); nothing carries over from `previous`.
    gate.config_error = None;
    if current.is_some_and(HealthView::is_suspended) {
        gate.verdict = AgentVerdict::Suspended;
        gate.signal = Some(Signal::InstanceSuspended);
        gate.healthy_since = None;
        gate.evidence = vec![Evidence {
            detail: Some("the instance is suspended: no pods to judge".to_owned()),
            ..Evidence::new(instance, Signal::InstanceSuspended)
        }];
        return gate;
    }
    if let Some(health) = current
        && freshness(Some(health), now, config) == Freshness::Fresh
    {
        lower_on_reset(&mut gate.effective_baseline, health);
    }
    let counters = gate.soak_eligible.then_some(&gate.effective_baseline);
    if let Some(counters) = counters {
        follow_backlogs(&mut gate.backlog_runs, current, counters, now, config);
    }
    let failure = check_server_with_runs(
        instance,
        current,
        counters,
        Some(&gate.backlog_runs),
        now,
        config,
    );

    match failure {
        None => {
            gate.verdict = AgentVerdict::Healthy;
            gate.signal = None;
            gate.healthy_since = Some(match gate.healthy_since {
                Some(since) if since <= now => since,
                _ => now,
            });
            gate.evidence = Vec::new();
        }
        Some(evidence) => {
            gate.verdict = if evidence.signal.is_hard_stop() {
                AgentVerdict::HardStop
            } else {
                AgentVerdict::Unhealthy
            };
            gate.signal = Some(evidence.signal);
            gate.healthy_since = None;
            gate.evidence = vec![evidence];
        }
    }
    gate
}

/// The agent's convergence rule (gate.md, "In the agent"): while the
/// instance's pods have not converged on the target image (a pod runs
/// another image, or no sampled pod runs the target), the verdict is
/// `unhealthy` with the signal `not_converged`, unless a hard stop
/// applies or the instance is suspended; the agent never calls an
/// instance healthy for an image no sampled pod runs. `detail` says which
/// pods run what (the evidence). Applied by the agent after
/// [`judge_instance`], and by `replay --agent-view` from the timeline's
/// `converged`, so both say the same. Before it, the agent sets aside a
/// hard stop (critical memory pressure, `Fencing`) that only pods of
/// another image report (issue 41: a rollback's pods still on the image
/// that stopped); a timeline does not record per-pod images, so
/// `replay --agent-view` keeps such a hard stop and shows it as a
/// disagreement with the published `not_converged`.
pub fn hold_until_converged(
    gate: &mut RolloutGate,
    instance: &str,
    converged: bool,
    detail: Option<String>,
) {
    if converged
        || matches!(
            gate.verdict,
            AgentVerdict::HardStop | AgentVerdict::Suspended
        )
    {
        return;
    }
    gate.verdict = AgentVerdict::Unhealthy;
    gate.signal = Some(kura_schemas::Signal::NotConverged);
    gate.healthy_since = None;
    gate.evidence = vec![kura_schemas::Evidence {
        detail,
        ..kura_schemas::Evidence::new(instance, kura_schemas::Signal::NotConverged)
    }];
}
