//! What the agent's two conditions say about an instance, from its
//! aggregate and verdict: [`rollout_healthy`] and [`rollout_hard_stopped`].
//! Pure; the write path applies them to `status.conditions` (keeping
//! `lastTransitionTime` until a status flips), the verdict endpoint shows
//! them.
//!
//! `RolloutHealthy`:
//! - no verdict yet: `Unknown`, `AwaitingFirstSample`;
//! - a check fails (`unhealthy` or `hard_stop`): `False`, reason = the
//!   signal in CamelCase, message = the evidence on one line;
//! - every check passes and every pod of the instance runs the target
//!   image: `True`, `Healthy`;
//! - every check passes but a pod still runs another image (mid-rollout,
//!   or `spec.image` just changed; the verdict is then `unhealthy` with
//!   the signal `not_converged`): `Unknown`, `NotConverged`: the pods
//!   judged are not (all) on the image the verdict is about, so nothing
//!   can be said of that image yet; a pod of unknown image: `Unknown`,
//!   `PodImagesUnknown`.
//!
//! - the instance is suspended (verdict `suspended`): `Unknown`,
//!   `InstanceSuspended`: no pod runs, so nothing can be said of any
//!   image (neither healthy nor failing; kstatus reads it as current).
//!
//! `RolloutHardStopped`: `True` (reason = the hard-stop signal) while the
//! verdict is `hard_stop`, `False` otherwise, `Unknown` before the first
//! verdict. The agent's per-instance gate latches nothing (a wave judge
//! does, contract/gate.md): the condition holds as long as the check fails.
//!
//! Messages never carry times that move every sweep (`evaluatedAt`,
//! `sampledAt`), so a condition changes only when a field the write policy
//! counts as material changes.

use kura_schemas::{
    AgentVerdict, ConditionStatus, RECONCILING, ROLLOUT_HARD_STOPPED, ROLLOUT_HEALTHY, RolloutGate,
    RolloutHealth, STALLED,
};

/// The reason of `RolloutHealthy` (and of kstatus' `Reconciling`) while
/// the instance is suspended: the signal `instance_suspended` in
/// CamelCase.
pub const SUSPENDED_REASON: &str = "InstanceSuspended";

/// A condition's `message` is cut to this many bytes.
pub const MAX_CONDITION_MESSAGE: usize = 1024;

/// One condition as the agent states it (without its times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    /// The condition type.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// CamelCase reason.
    pub reason: String,
    /// One line.
    pub message: String,
}

/// Whether every pod of the instance runs `target`, from the aggregate's
/// pod entries (pods discovery no longer lists are not part of it):
/// `Some(false)` as soon as one runs another image, `None` when there is
/// no pod or a pod's image is unknown, `Some(true)` otherwise.
pub fn pods_on_image(health: &RolloutHealth, target: &str) -> Option<bool> {
    let current = health.pods.iter().filter(|p| !p.is_gone());
    let mut any = false;
    let mut unknown = false;
    for pod in current {
        any = true;
        match pod.image.as_deref() {
            Some(image) if image != target => return Some(false),
            Some(_) => {}
            None => unknown = true,
        }
    }
    (any && !unknown).then_some(true)
}

/// How many of the instance's current pods run `target`, and how many
/// pods it has.
fn pod_counts(health: &RolloutHealth, target: &str) -> (usize, usize) {
    let current = health.pods.iter().filter(|p| !p.is_gone());
    let on = current
        .clone()
        .filter(|p| p.image.as_deref() == Some(target))
        .count();
    (on, current.count())
}

/// Only the status of `RolloutHealthy` (what the write policy compares).
pub fn rollout_healthy_status(
    health: Option<&RolloutHealth>,
    gate: Option<&RolloutGate>,
) -> ConditionStatus {
    match gate.map(|g| g.verdict) {
        None | Some(AgentVerdict::Suspended) => ConditionStatus::Unknown,
        // The agent's convergence hold: the pods judged are not (all) on
        // the image the verdict is about, so nothing can be said of that
        // image yet (not a failure of it).
        Some(AgentVerdict::Unhealthy)
            if gate.and_then(|g| g.signal) == Some(kura_schemas::Signal::NotConverged) =>
        {
            ConditionStatus::Unknown
        }
        Some(AgentVerdict::Unhealthy | AgentVerdict::HardStop) => ConditionStatus::False,
        Some(AgentVerdict::Healthy) => {
            let on_target = match (health, gate) {
                (Some(h), Some(g)) => pods_on_image(h, &g.target_image),
                _ => None,
            };
            if on_target == Some(true) {
                ConditionStatus::True
            } else {
                ConditionStatus::Unknown
            }
        }
    }
}

/// The failing check's evidence on one line, or the signal alone.
fn failure_message(gate: &RolloutGate) -> String {
    match gate.evidence.first() {
        Some(e) => e.summary(),
        None => format!(
            "{}: {}",
            gate.verdict.as_str(),
            gate.signal.map_or("no signal", |s| s.as_str())
        ),
    }
}

fn reason_of(gate: &RolloutGate, otherwise: &str) -> String {
    gate.signal.map_or(otherwise, |s| s.reason()).to_owned()
}

/// `message` on one line and at most [`MAX_CONDITION_MESSAGE`] bytes.
fn one_line(message: String) -> String {
    let mut line = message.replace(['\n', '\r'], " ");
    let cut = kura_schemas::text::cut_at_char_boundary(&line, MAX_CONDITION_MESSAGE).len();
    line.truncate(cut);
    line
}

/// `RolloutHealthy` for an instance's aggregate and verdict (see the
/// module documentation).
pub fn rollout_healthy(
    health: Option<&RolloutHealth>,
    gate: Option<&RolloutGate>,
) -> ConditionState {
    let status = rollout_healthy_status(health, gate);
    let (reason, message) = match (gate, status) {
        (None, _) => (
            "AwaitingFirstSample".to_owned(),
            "the agent has not judged a sweep of this instance yet".to_owned(),
        ),
        (Some(g), ConditionStatus::False) => (reason_of(g, "Unhealthy"), failure_message(g)),
        (Some(g), _) if g.verdict == AgentVerdict::Suspended => (
            SUSPENDED_REASON.to_owned(),
            "the instance is suspended: it runs no pod, so no image can be judged".to_owned(),
        ),
        (Some(g), ConditionStatus::True) => {
            let (on, of) = health.map_or((0, 0), |h| pod_counts(h, &g.target_image));
            let since = g
                .healthy_since
                .map_or(String::new(), |t| format!(" since {t}"));
            (
                "Healthy".to_owned(),
                format!(
                    "every check passes on {}{since}; {on} of {of} pods run it",
                    g.target_image
                ),
            )
        }
        (Some(g), ConditionStatus::Unknown) => {
            let on_target = health.and_then(|h| pods_on_image(h, &g.target_image));
            let (on, of) = health.map_or((0, 0), |h| pod_counts(h, &g.target_image));
            if on_target == Some(false) || of == 0 {
                (
                    "NotConverged".to_owned(),
                    format!(
                        "{on} of {of} pods run {}: not every pod runs the target image yet",
                        g.target_image
                    ),
                )
            } else {
                (
                    "PodImagesUnknown".to_owned(),
                    format!(
                        "the checks pass, but the image of {} of {of} pods is unknown",
                        of - on
                    ),
                )
            }
        }
    };
    ConditionState {
        type_: ROLLOUT_HEALTHY,
        status,
        reason,
        message: one_line(message),
    }
}

/// `RolloutHardStopped` for an instance's verdict (see the module
/// documentation).
pub fn rollout_hard_stopped(gate: Option<&RolloutGate>) -> ConditionState {
    let (status, reason, message) = match gate {
        None => (
            ConditionStatus::Unknown,
            "AwaitingFirstSample".to_owned(),
            "the agent has not judged a sweep of this instance yet".to_owned(),
        ),
        Some(g) if g.verdict == AgentVerdict::HardStop => (
            ConditionStatus::True,
            reason_of(g, "HardStop"),
            failure_message(g),
        ),
        Some(_) => (
            ConditionStatus::False,
            "NoHardStop".to_owned(),
            "no hard-stop check fails".to_owned(),
        ),
    };
    ConditionState {
        type_: ROLLOUT_HARD_STOPPED,
        status,
        reason,
        message: one_line(message),
    }
}

/// kstatus' `Reconciling` and `Stalled` from the agent's two conditions,
/// for the tools that read a resource's readiness the kstatus way (Flux's
/// health checks, `helm --wait`, kpt): `Stalled` is `True` while
/// `RolloutHardStopped` is (the rollout needs an operator), `Reconciling`
/// is `True` while `RolloutHealthy` is not `True` and nothing is stalled
/// (with its reason and message: not judged, not converged, held by a
/// failing check). The two are never both `True` (kstatus takes whichever
/// it meets first). kstatus then reads the instance as in progress, failed
/// or current. Written only when asked (`--kstatus-conditions`): these
/// types conventionally belong to the resource's controller.
pub fn kstatus_conditions(
    healthy: &ConditionState,
    hard_stopped: &ConditionState,
) -> [ConditionState; 2] {
    let reconciling = if hard_stopped.status == ConditionStatus::True {
        ConditionState {
            type_: RECONCILING,
            status: ConditionStatus::False,
            reason: hard_stopped.reason.clone(),
            message: "stalled: the rollout gate stopped the rollout".to_owned(),
        }
    } else if healthy.reason == SUSPENDED_REASON {
        // Nothing to reconcile: a suspended instance is at rest, so kstatus
        // (Flux, `helm --wait`) reads it as current rather than waiting
        // for ever on an instance with no pods.
        ConditionState {
            type_: RECONCILING,
            status: ConditionStatus::False,
            reason: healthy.reason.clone(),
            message: healthy.message.clone(),
        }
    } else if healthy.status == ConditionStatus::True {
        ConditionState {
            type_: RECONCILING,
            status: ConditionStatus::False,
            reason: healthy.reason.clone(),
            message: "the rollout of the current image is judged healthy".to_owned(),
        }
    } else {
        ConditionState {
            type_: RECONCILING,
            status: ConditionStatus::True,
            reason: healthy.reason.clone(),
            message: healthy.message.clone(),
        }
    };
    let stalled = ConditionState {
        type_: STALLED,
        status: if hard_stopped.status == ConditionStatus::True {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: hard_stopped.reason.clone(),
        message: hard_stopped.message.clone(),
    };
    [reconciling, stalled]
}

/// Both of the agent's conditions, in the order they are written.
pub fn agent_conditions(
    health: Option<&RolloutHealth>,
    gate: Option<&RolloutGate>,
) -> [ConditionState; 2] {
    [rollout_healthy(health, gate), rollout_hard_stopped(gate)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use kura_schemas::{Evidence, PodHealth, Signal};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn pod(name: &str, image: Option<&str>) -> PodHealth {
        PodHealth {
            name: name.into(),
            image: image.map(Into::into),
            ..PodHealth::default()
        }
    }

    fn health(pods: Vec<PodHealth>) -> RolloutHealth {
        RolloutHealth {
            observed_generation: 3,
            expected_pods: 2,
            sampled_pods: 2,
            ring_members: 2,
            pods: pods.into_iter().map(std::sync::Arc::new).collect(),
            ..crate::model::fixtures::health(ts(0))
        }
    }

    fn gate(verdict: AgentVerdict, signal: Option<Signal>) -> RolloutGate {
        RolloutGate {
            target_image: "kura:2".into(),
            baseline_image: Some("kura:1".into()),
            baseline_captured_at: Some(ts(0)),
            baseline: Default::default(),
            effective_baseline: Default::default(),
            soak_eligible: true,
            verdict,
            signal,
            healthy_since: (verdict == AgentVerdict::Healthy).then(|| ts(5)),
            evaluated_at: ts(9),
            evidence: signal
                .map(|s| {
                    vec![Evidence {
                        observed: Some(7),
                        band_top: Some(5),
                        baseline: Some(5),
                        ..Evidence::new("kura/acme", s)
                    }]
                })
                .unwrap_or_default(),
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    #[test]
    fn healthy_on_the_target_image_is_true() {
        let h = health(vec![pod("a-0", Some("kura:2")), pod("a-1", Some("kura:2"))]);
        let g = gate(AgentVerdict::Healthy, None);
        let c = rollout_healthy(Some(&h), Some(&g));
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(c.reason, "Healthy");
        assert!(c.message.contains("kura:2") && c.message.contains("2 of 2"));
        assert_eq!(
            rollout_hard_stopped(Some(&g)).status,
            ConditionStatus::False
        );
    }

    #[test]
    fn healthy_on_old_pods_is_unknown_until_every_pod_runs_the_target() {
        let g = gate(AgentVerdict::Healthy, None);
        let h = health(vec![pod("a-0", Some("kura:2")), pod("a-1", Some("kura:1"))]);
        let c = rollout_healthy(Some(&h), Some(&g));
        assert_eq!(c.status, ConditionStatus::Unknown);
        assert_eq!(c.reason, "NotConverged");
        assert!(
            c.message.starts_with("1 of 2 pods run kura:2"),
            "{}",
            c.message
        );
        // A pod gone from discovery no longer counts.
        let mut gone = pod("a-2", Some("kura:1"));
        gone.error = Some(kura_schemas::health::GONE_POD_ERROR.into());
        let h = health(vec![
            pod("a-0", Some("kura:2")),
            pod("a-1", Some("kura:2")),
            gone,
        ]);
        assert_eq!(
            rollout_healthy(Some(&h), Some(&g)).status,
            ConditionStatus::True
        );
        let h = health(vec![pod("a-0", Some("kura:2")), pod("a-1", None)]);
        let c = rollout_healthy(Some(&h), Some(&g));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::Unknown, "PodImagesUnknown")
        );
        let c = rollout_healthy(Some(&health(vec![])), Some(&g));
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::Unknown, "NotConverged")
        );
    }

    #[test]
    fn a_failing_check_is_false_with_the_signal_and_its_evidence() {
        let h = health(vec![pod("a-0", Some("kura:1"))]);
        let g = gate(AgentVerdict::Unhealthy, Some(Signal::FdTimeoutsRegressed));
        let c = rollout_healthy(Some(&h), Some(&g));
        assert_eq!(c.status, ConditionStatus::False);
        assert_eq!(c.reason, "FdTimeoutsRegressed");
        assert_eq!(
            c.message,
            "server kura/acme: fd_timeouts_regressed: fd timeouts 7, band top 5, baseline 5"
        );
        // Foreign text with a line break stays on one line.
        let mut broken = g.clone();
        broken.evidence[0].server = "kura/bad \"soak\"\nvalue".to_owned();
        assert_eq!(
            rollout_healthy(Some(&h), Some(&broken)).message,
            "server kura/bad \"soak\" value: fd_timeouts_regressed: fd timeouts 7, band top 5, baseline 5"
        );
        let hs = gate(AgentVerdict::HardStop, Some(Signal::MemoryPressureCritical));
        assert_eq!(
            rollout_healthy(Some(&h), Some(&hs)).reason,
            "MemoryPressureCritical"
        );
        let stopped = rollout_hard_stopped(Some(&hs));
        assert_eq!(stopped.status, ConditionStatus::True);
        assert_eq!(stopped.reason, "MemoryPressureCritical");
        assert!(
            stopped
                .message
                .contains("memory pressure 7 (critical), limit 5")
        );
    }

    #[test]
    fn kstatus_reads_in_progress_until_healthy_and_failed_on_a_hard_stop() {
        let h = health(vec![pod("a-0", Some("kura:2")), pod("a-1", Some("kura:1"))]);
        let g = gate(AgentVerdict::Healthy, None);
        let [healthy, stopped] = agent_conditions(Some(&h), Some(&g));
        let [reconciling, stalled] = kstatus_conditions(&healthy, &stopped);
        assert_eq!(
            (reconciling.status, reconciling.reason.as_str()),
            (ConditionStatus::True, "NotConverged")
        );
        assert_eq!(stalled.status, ConditionStatus::False);
        let h = health(vec![pod("a-0", Some("kura:2"))]);
        let [healthy, stopped] = agent_conditions(Some(&h), Some(&g));
        let [reconciling, _] = kstatus_conditions(&healthy, &stopped);
        assert_eq!(reconciling.status, ConditionStatus::False);
        let hs = gate(AgentVerdict::HardStop, Some(Signal::MemoryPressureCritical));
        let [healthy, stopped] = agent_conditions(Some(&h), Some(&hs));
        let [reconciling, stalled] = kstatus_conditions(&healthy, &stopped);
        assert_eq!(
            reconciling.status,
            ConditionStatus::False,
            "never both True: kstatus would take the first it meets"
        );
        assert_eq!(
            (stalled.status, stalled.reason.as_str()),
            (ConditionStatus::True, "MemoryPressureCritical")
        );
    }

    #[test]
    fn no_verdict_is_unknown_and_messages_stay_bounded() {
        for c in agent_conditions(None, None) {
            assert_eq!(c.status, ConditionStatus::Unknown);
            assert_eq!(c.reason, "AwaitingFirstSample");
        }
        let g = gate(AgentVerdict::Unhealthy, Some(Signal::NotReady));
        let long = "é".repeat(MAX_CONDITION_MESSAGE);
        let mut g = g;
        g.evidence[0].server = long;
        let c = rollout_healthy(None, Some(&g));
        assert!(c.message.starts_with("server é"), "{}", c.message);
        assert!(c.message.len() <= MAX_CONDITION_MESSAGE);
    }
}
