//! The publication target at run time: chosen once at start (logged,
//! shown on the pages, the `kura_agent_publication_target` gauge), then
//! watched every [`TICK`]: in `instance` mode the instances another
//! manager contests (a Warning Event `StatusContested` and a log line
//! naming the manager when a contest starts, the gauge, `/readyz`), in
//! `companion` mode where Kura's controller's own `rolloutHealth`
//! disagrees with the agent's aggregate on `ready` or `serving` past two
//! of its cadences (a gauge per field and a line on the instance page).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::cluster::Discovery;
use crate::events::EventSink;
use crate::model::{
    InstanceTransitions, PublicationTarget, TargetChoice, Transition, TransitionKind,
};
use crate::telemetry::{self, label};
use crate::view::{DisagreementTracker, FleetView, contest_changes};

/// How often contests and disagreements are looked at: well within one
/// sweep, so a contest is acted on before the next write.
const TICK: Duration = Duration::from_secs(1);

/// Disagreements are compared every this many ticks.
const DISAGREEMENT_TICKS: u32 = 5;

/// Shows the choice: log, gauge, pages.
pub(super) fn announce(choice: &TargetChoice, view: &FleetView) {
    tracing::info!(target = %choice.target, chosen_by = choice.chosen_by,
        reason = %choice.reason, "publication target");
    for t in PublicationTarget::ALL {
        let value = if t == choice.target { 1.0 } else { 0.0 };
        let name = match t {
            PublicationTarget::Instance => label::INSTANCE,
            PublicationTarget::Companion => label::COMPANION,
        };
        metrics::gauge!(telemetry::PUBLICATION_TARGET, "target" => name).set(value);
    }
    view.set_publication_choice(choice.clone());
}

/// Watches contests (instance mode) or disagreements (companion mode)
/// forever.
pub(super) async fn watch(
    target: PublicationTarget,
    discovery: Discovery,
    view: FleetView,
    events: Option<EventSink>,
) {
    let mut contested: BTreeMap<_, Box<str>> = BTreeMap::new();
    let mut tracker = DisagreementTracker::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    loop {
        tick.tick().await;
        n = n.wrapping_add(1);
        match target {
            PublicationTarget::Instance => {
                let now = discovery.contested();
                let changes = contest_changes(&contested, &now);
                for crate::model::Contest { key, manager, uid } in &changes.started {
                    tracing::warn!(instance = %key, manager = %manager,
                        "status.rolloutHealth of this instance is also written by another manager: the agent stopped writing it (StatusContested); run the agent with --publication-target companion");
                    if let Some(events) = &events {
                        events.send(InstanceTransitions {
                            key: key.clone(),
                            uid: uid.as_deref().map(str::to_owned),
                            transitions: vec![Transition {
                                kind: TransitionKind::StatusContested,
                                action: "WriteStatus".into(),
                                note: format!(
                                    "{manager:?} also writes status.rolloutHealth: the agent stopped writing this instance; run it with --publication-target companion"
                                ),
                                image: None,
                            }],
                        });
                    }
                }
                for key in &changes.ended {
                    tracing::info!(instance = %key, "no other manager writes status.rolloutHealth any more: the agent writes this instance again");
                }
                if !changes.started.is_empty() || !changes.ended.is_empty() {
                    contested = now.into_iter().map(|c| (c.key, c.manager)).collect();
                    metrics::gauge!(telemetry::STATUS_CONTESTED_INSTANCES)
                        .set(contested.len() as f64);
                    view.set_contested(contested.clone());
                }
            }
            PublicationTarget::Companion => {
                if !n.is_multiple_of(DISAGREEMENT_TICKS) {
                    continue;
                }
                let found = tracker.observe(
                    &discovery.controller_healths(),
                    |k| view.ready_serving(k),
                    Timestamp::now(),
                );
                for field in telemetry::CONTROLLER_FIELDS {
                    let count = found.values().filter(|d| d.fields.contains(&field)).count();
                    metrics::gauge!(telemetry::CONTROLLER_DISAGREEMENTS, "field" => field)
                        .set(count as f64);
                }
                view.set_disagreements(found);
            }
        }
    }
}
