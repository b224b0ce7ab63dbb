//! Which changes a status write made are [`Transition`]s worth an Event,
//! from what was written before and what this write wrote. Pure; the
//! driver hands them to whoever publishes Events (`cli::run` composes the
//! events adapter).
//!
//! - `BaselineCaptured`: the written `rolloutGate.baselineCapturedAt`
//!   changed to a new time (a `spec.image` change).
//! - `RolloutHardStopped`: `RolloutHardStopped` turned `True`.
//! - `RolloutUnhealthy`: `RolloutHealthy` turned `False`, or stayed
//!   `False` with a new reason (another signal); not when the same write
//!   reports a hard stop with that signal.
//! - `RolloutHealthy`: `RolloutHealthy` turned `True`.
//! - `StatusPruned`: a write whose fields the API server dropped or
//!   refused (the CRD is too old), after one that was not.
//!
//! Nothing for a heartbeat, a new generation or new evidence of the same
//! failing check.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kura_schemas::{BaselineCounters, ROLLOUT_HARD_STOPPED, ROLLOUT_HEALTHY};

use super::conditions::ConditionMark;

use crate::model::{DesiredStatus, Transition, TransitionKind, WriteRecord};

/// What a write changed, as far as Events care.
#[derive(Debug, Clone, Copy)]
pub struct WriteChange<'a> {
    /// The status accepted before this write (or found at start), if any.
    pub before: Option<&'a DesiredStatus>,
    /// The conditions written before (or found at start).
    pub conditions_before: &'a [ConditionMark],
    /// Whether the last write before this one was pruned.
    pub pruned_before: bool,
    /// What this write sent.
    pub sent: &'a DesiredStatus,
    /// The conditions it sent.
    pub conditions_sent: &'a [Condition],
    /// What became of it.
    pub record: &'a WriteRecord,
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn find_mark<'a>(marks: &'a [ConditionMark], type_: &str) -> Option<&'a ConditionMark> {
    marks.iter().find(|c| &*c.type_ == type_)
}

/// The transitions of one write (see the module documentation).
pub fn transitions(change: &WriteChange<'_>) -> Vec<Transition> {
    match change.record {
        WriteRecord::Pruned { missing } => {
            if change.pruned_before {
                return Vec::new();
            }
            return vec![Transition {
                kind: TransitionKind::StatusPruned,
                action: "WriteStatus".into(),
                note: format!(
                    "the KuraInstance CRD in this cluster does not declare {}: apply the CRD shipped with this agent",
                    missing.join(", ")
                ),
                image: None,
            }];
        }
        WriteRecord::Failed { .. } => return Vec::new(),
        WriteRecord::Applied => {}
    }
    let mut out = Vec::new();
    let gate = &change.sent.gate;
    // Shared by the write's transitions, made only when there is one (most
    // writes have none).
    let mut target: Option<std::sync::Arc<str>> = None;
    let mut image = || {
        Some(std::sync::Arc::clone(
            target.get_or_insert_with(|| gate.target_image.as_str().into()),
        ))
    };
    if let Some(at) = gate.baseline_captured_at
        && change.before.and_then(|b| b.gate.baseline_captured_at) != Some(at)
    {
        out.push(Transition {
            kind: TransitionKind::BaselineCaptured,
            action: "CaptureBaseline".into(),
            note: baseline_note(gate),
            image: image(),
        });
    }
    let was = |t: &str| find_mark(change.conditions_before, t);
    let now = |t: &str| find(change.conditions_sent, t);
    let mut hard_stop_reason = None;
    if let Some(stopped) = now(ROLLOUT_HARD_STOPPED)
        && stopped.status == "True"
        && was(ROLLOUT_HARD_STOPPED).is_none_or(|c| &*c.status != "True")
    {
        hard_stop_reason = Some(stopped.reason.as_str());
        out.push(Transition {
            kind: TransitionKind::RolloutHardStopped,
            action: stopped.reason.clone().into(),
            note: stopped.message.clone(),
            image: image(),
        });
    }
    if let Some(healthy) = now(ROLLOUT_HEALTHY) {
        let before = was(ROLLOUT_HEALTHY);
        match healthy.status.as_str() {
            "True" if before.is_none_or(|c| &*c.status != "True") => out.push(Transition {
                kind: TransitionKind::RolloutHealthy,
                action: "Judge".into(),
                note: healthy.message.clone(),
                image: image(),
            }),
            "False"
                if before.is_none_or(|c| &*c.status != "False" || *c.reason != *healthy.reason)
                    && hard_stop_reason != Some(healthy.reason.as_str()) =>
            {
                out.push(Transition {
                    kind: TransitionKind::RolloutUnhealthy,
                    action: healthy.reason.clone().into(),
                    note: healthy.message.clone(),
                    image: image(),
                });
            }
            _ => {}
        }
    }
    out
}

/// `baseline on kura:1 for kura:2: outbox 3, replication lag none, fd
/// timeouts 5, peer failures none; held to it` (or `not held to it:
/// unhealthy at capture`).
fn baseline_note(gate: &kura_schemas::RolloutGate) -> String {
    let count = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |n| n.to_string());
    let BaselineCounters {
        outbox_messages,
        replication_lag_entries,
        fd_timeout_count,
        peer_connection_failures,
    } = &gate.baseline;
    format!(
        "baseline on {} for {}: outbox {}, replication lag {}, fd timeouts {}, peer failures {}; {}",
        gate.baseline_image.as_deref().unwrap_or("an unknown image"),
        gate.target_image,
        count(*outbox_messages),
        count(*replication_lag_entries),
        count(*fd_timeout_count),
        count(*peer_connection_failures),
        if gate.soak_eligible {
            "held to it"
        } else {
            "not held to it: the instance was not healthy at capture"
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::conditions::{ConditionSet, conditions_for, marks};
    use jiff::Timestamp;
    use kura_schemas::{AgentVerdict, Evidence, PodHealth, RolloutGate, RolloutHealth, Signal};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn status(at: i64, verdict: AgentVerdict, signal: Option<Signal>) -> DesiredStatus {
        DesiredStatus::new(
            RolloutHealth {
                pods: vec![std::sync::Arc::new(PodHealth {
                    name: "a-0".into(),
                    image: Some("img:2".into()),
                    ..PodHealth::default()
                })],
                ..crate::model::fixtures::health(ts(at))
            },
            RolloutGate {
                target_image: "img:2".into(),
                verdict,
                signal,
                healthy_since: (verdict == AgentVerdict::Healthy).then(|| ts(0)),
                evidence: signal
                    .map(|s| vec![Evidence::new("ns/a", s)])
                    .unwrap_or_default(),
                ..crate::model::fixtures::gate(ts(at))
            },
        )
    }

    /// What writing `next` after `before` (both accepted) reports.
    fn kinds(
        before: Option<&DesiredStatus>,
        next: &DesiredStatus,
        record: &WriteRecord,
        pruned_before: bool,
    ) -> Vec<TransitionKind> {
        let set = ConditionSet::default();
        let conditions_before = before
            .map(|b| marks(&conditions_for(b, &[], set)))
            .unwrap_or_default();
        let conditions_sent = conditions_for(next, &conditions_before, set);
        transitions(&WriteChange {
            before,
            conditions_before: &conditions_before,
            pruned_before,
            sent: next,
            conditions_sent: &conditions_sent,
            record,
        })
        .into_iter()
        .map(|t| t.kind)
        .collect()
    }

    #[test]
    fn flips_are_transitions_and_repeats_are_not() {
        use TransitionKind::*;
        let healthy = status(0, AgentVerdict::Healthy, None);
        let not_ready = status(10, AgentVerdict::Unhealthy, Some(Signal::NotReady));
        let ok = WriteRecord::Applied;
        assert_eq!(kinds(None, &healthy, &ok, false), [RolloutHealthy]);
        assert!(
            kinds(
                Some(&healthy),
                &status(30, AgentVerdict::Healthy, None),
                &ok,
                false
            )
            .is_empty()
        );
        assert_eq!(
            kinds(Some(&healthy), &not_ready, &ok, false),
            [RolloutUnhealthy]
        );
        assert!(
            kinds(
                Some(&not_ready),
                &status(20, AgentVerdict::Unhealthy, Some(Signal::NotReady)),
                &ok,
                false
            )
            .is_empty(),
            "the same failing check again"
        );
        assert_eq!(
            kinds(
                Some(&not_ready),
                &status(20, AgentVerdict::Unhealthy, Some(Signal::RingSkew)),
                &ok,
                false
            ),
            [RolloutUnhealthy],
            "another signal"
        );
        let stopped = status(
            30,
            AgentVerdict::HardStop,
            Some(Signal::MemoryPressureCritical),
        );
        assert_eq!(
            kinds(Some(&healthy), &stopped, &ok, false),
            [RolloutHardStopped],
            "one Warning for a hard stop, not two"
        );
        assert_eq!(
            kinds(Some(&stopped), &healthy, &ok, false),
            [RolloutHealthy]
        );
    }

    #[test]
    fn a_new_baseline_and_pruning_are_transitions_once() {
        use TransitionKind::*;
        let before = status(0, AgentVerdict::Healthy, None);
        let mut next = status(10, AgentVerdict::Healthy, None);
        std::sync::Arc::make_mut(&mut next.gate).baseline_captured_at = Some(ts(10));
        std::sync::Arc::make_mut(&mut next.gate).baseline_image = Some("img:1".into());
        std::sync::Arc::make_mut(&mut next.gate)
            .baseline
            .fd_timeout_count = Some(4);
        let change = |pruned_before| WriteChange {
            before: Some(&before),
            conditions_before: &[],
            pruned_before,
            sent: &next,
            conditions_sent: &[],
            record: &WriteRecord::Applied,
        };
        let found = transitions(&change(false));
        assert_eq!(found[0].kind, BaselineCaptured);
        assert_eq!(
            found[0].note,
            "baseline on img:1 for img:2: outbox none, replication lag none, fd timeouts 4, peer failures none; not held to it: the instance was not healthy at capture"
        );
        let again = kinds(Some(&next), &next, &WriteRecord::Applied, false);
        assert!(!again.contains(&BaselineCaptured));

        let pruned = WriteRecord::Pruned {
            missing: vec!["status.conditions".into()],
        };
        assert_eq!(kinds(Some(&before), &next, &pruned, false), [StatusPruned]);
        assert!(
            kinds(Some(&before), &next, &pruned, true).is_empty(),
            "once"
        );
        let failed = WriteRecord::Failed {
            kind: "error".into(),
            message: "boom".into(),
        };
        assert!(kinds(Some(&before), &next, &failed, false).is_empty());
    }
}
