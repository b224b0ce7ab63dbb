//! The agent's entries of `status.conditions` as written: the states of
//! [`model::conditions`](crate::model::conditions), each with
//! `observedGeneration` = the `metadata.generation` the sweep ran against
//! and a `lastTransitionTime` that moves only when its `status` flips
//! (then to the time of the sweep that saw the flip), never on a
//! heartbeat or a new reason. Pure.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use kura_schemas::{AGENT_CONDITION_TYPES, KSTATUS_CONDITION_TYPES};

use crate::model::DesiredStatus;
use crate::model::conditions::{agent_conditions, kstatus_conditions};

/// Which conditions the agent writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConditionSet {
    /// Also kstatus' `Reconciling` and `Stalled`
    /// ([`kstatus_conditions`]).
    pub kstatus: bool,
}

impl ConditionSet {
    /// Whether the agent writes (and owns) conditions of `type_`.
    pub fn owns(&self, type_: &str) -> bool {
        AGENT_CONDITION_TYPES.contains(&type_)
            || (self.kstatus && KSTATUS_CONDITION_TYPES.contains(&type_))
    }
}

/// What is kept of a condition the agent wrote (or found at start): what
/// the next write continues (`lastTransitionTime`) and what tells a flip
/// (`status`, `reason`), not its message or generation: full
/// `Condition`s kept per instance cost memory for every instance of the
/// fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionMark {
    /// `type`.
    pub type_: Box<str>,
    /// `status`.
    pub status: Box<str>,
    /// `reason`.
    pub reason: Box<str>,
    /// `lastTransitionTime`.
    pub last_transition_time: Time,
}

impl From<&Condition> for ConditionMark {
    fn from(c: &Condition) -> Self {
        ConditionMark {
            type_: c.type_.as_str().into(),
            status: c.status.as_str().into(),
            reason: c.reason.as_str().into(),
            last_transition_time: c.last_transition_time.clone(),
        }
    }
}

/// The marks of `conditions`.
pub fn marks(conditions: &[Condition]) -> Box<[ConditionMark]> {
    conditions.iter().map(ConditionMark::from).collect()
}

/// The agent's conditions for `status`, continuing `previous` (the ones
/// last written, or found in the cluster).
pub fn conditions_for(
    status: &DesiredStatus,
    previous: &[ConditionMark],
    set: ConditionSet,
) -> Vec<Condition> {
    let flipped_at = seconds(status.gate.evaluated_at);
    let [healthy, stopped] = agent_conditions(Some(&status.health), Some(&status.gate));
    let kstatus = set.kstatus.then(|| kstatus_conditions(&healthy, &stopped));
    [healthy, stopped]
        .into_iter()
        .chain(kstatus.into_iter().flatten())
        .map(|state| {
            let status_text = state.status.as_str();
            let last_transition_time = previous
                .iter()
                .find(|c| *c.type_ == *state.type_ && *c.status == *status_text)
                .map_or(Time(flipped_at), |c| c.last_transition_time.clone());
            Condition {
                type_: state.type_.to_owned(),
                status: status_text.to_owned(),
                reason: state.reason,
                message: state.message,
                observed_generation: Some(status.health.observed_generation),
                last_transition_time,
            }
        })
        .collect()
}

/// `t` cut to whole seconds (what a condition's time holds).
fn seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// Whether `a` and `b` state the same conditions (type, status, reason,
/// message, observedGeneration, in any order), whatever their
/// `lastTransitionTime`.
pub fn same_statement(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            b.iter().any(|y| {
                x.type_ == y.type_
                    && x.status == y.status
                    && x.reason == y.reason
                    && x.message == y.message
                    && x.observed_generation == y.observed_generation
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::{
        AgentVerdict, PodHealth, ROLLOUT_HARD_STOPPED, ROLLOUT_HEALTHY, RolloutGate, RolloutHealth,
        Signal,
    };

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn status(at: i64, generation: i64, verdict: AgentVerdict) -> DesiredStatus {
        DesiredStatus::new(
            RolloutHealth {
                observed_generation: generation,
                pods: vec![std::sync::Arc::new(PodHealth {
                    name: "a-0".into(),
                    image: Some("img".into()),
                    ..PodHealth::default()
                })],
                ..crate::model::fixtures::health(ts(at))
            },
            RolloutGate {
                verdict,
                signal: (verdict != AgentVerdict::Healthy).then_some(Signal::NotReady),
                healthy_since: (verdict == AgentVerdict::Healthy).then(|| ts(0)),
                ..crate::model::fixtures::gate(ts(at) + jiff::SignedDuration::from_millis(250))
            },
        )
    }

    fn find<'a>(cs: &'a [Condition], t: &str) -> &'a Condition {
        cs.iter().find(|c| c.type_ == t).expect("condition")
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let first = conditions_for(
            &status(0, 1, AgentVerdict::Healthy),
            &[],
            ConditionSet::default(),
        );
        let healthy = find(&first, ROLLOUT_HEALTHY);
        assert_eq!(healthy.status, "True");
        assert_eq!(healthy.observed_generation, Some(1));
        assert_eq!(healthy.last_transition_time, Time(ts(0)), "whole seconds");

        // A later sweep, a new generation, same status: the time stays.
        let later = conditions_for(
            &status(40, 2, AgentVerdict::Healthy),
            &marks(&first),
            ConditionSet::default(),
        );
        assert_eq!(
            find(&later, ROLLOUT_HEALTHY).last_transition_time,
            Time(ts(0))
        );
        assert_eq!(find(&later, ROLLOUT_HEALTHY).observed_generation, Some(2));
        assert!(!same_statement(&first, &later), "the generation differs");

        // The verdict flips: the time moves to the flipping sweep.
        let flipped = conditions_for(
            &status(50, 2, AgentVerdict::Unhealthy),
            &marks(&later),
            ConditionSet::default(),
        );
        let unhealthy = find(&flipped, ROLLOUT_HEALTHY);
        assert_eq!(unhealthy.status, "False");
        assert_eq!(unhealthy.reason, "NotReady");
        assert_eq!(unhealthy.last_transition_time, Time(ts(50)));
        assert_eq!(
            find(&flipped, ROLLOUT_HARD_STOPPED).last_transition_time,
            Time(ts(0)),
            "RolloutHardStopped stayed False"
        );
        let again = conditions_for(
            &status(60, 2, AgentVerdict::Unhealthy),
            &marks(&flipped),
            ConditionSet::default(),
        );
        assert!(same_statement(&flipped, &again));
        assert_eq!(
            find(&again, ROLLOUT_HEALTHY).last_transition_time,
            Time(ts(50))
        );

        let with_kstatus = conditions_for(
            &status(60, 2, AgentVerdict::Unhealthy),
            &marks(&flipped),
            ConditionSet { kstatus: true },
        );
        let types: Vec<&str> = with_kstatus.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                ROLLOUT_HEALTHY,
                ROLLOUT_HARD_STOPPED,
                "Reconciling",
                "Stalled"
            ]
        );
        assert_eq!(find(&with_kstatus, "Reconciling").status, "True");
        assert_eq!(find(&with_kstatus, "Stalled").status, "False");
        assert!(ConditionSet { kstatus: true }.owns("Stalled"));
        assert!(!ConditionSet::default().owns("Stalled"));
        assert!(!ConditionSet { kstatus: true }.owns("Ready"));
    }
}
