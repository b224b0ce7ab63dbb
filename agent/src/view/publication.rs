//! Where the agent publishes, as the pages, `/readyz` and the metrics show
//! it: the target chosen at start, the instances another manager contests
//! (instance mode) and, in companion mode, where Kura's controller's own
//! `rolloutHealth` has disagreed with the agent's aggregate on `ready` or
//! `serving` for longer than two of the controller's cadences. The
//! trackers are pure (time passed in); `kura-agent run` feeds them from
//! the instance watch.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};

use crate::model::{Contest, ControllerHealth, InstanceKey, TargetChoice};

/// How long Kura's controller takes between two publications of its
/// `rolloutHealth` (about every 30 s, on every reconcile).
pub const CONTROLLER_CADENCE: SignedDuration = SignedDuration::from_secs(30);

/// A disagreement shorter than this (two of the controller's cadences) is
/// the two sampling at different moments, not one of them reading the
/// pods wrongly.
pub const DISAGREEMENT_GRACE: SignedDuration = SignedDuration::from_secs(60);

/// What the pages know about where the agent publishes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublicationState {
    /// The target chosen at start (none in the demo and the tests that
    /// write nowhere).
    pub choice: Option<TargetChoice>,
    /// Instances another manager contests, and that manager.
    pub contested: BTreeMap<InstanceKey, Box<str>>,
    /// Instances whose controller numbers have disagreed past the grace.
    pub disagreements: BTreeMap<InstanceKey, Disagreement>,
}

/// One instance's lasting disagreement between Kura's controller's
/// `rolloutHealth` and the agent's aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// `ready`, `serving` or both, in that order.
    pub fields: Vec<&'static str>,
    /// Since when (the first sweep that saw it).
    pub since: Timestamp,
    /// The controller's numbers.
    pub controller: ControllerHealth,
    /// The agent's `ready` and `serving`.
    pub agent: (bool, bool),
}

impl Disagreement {
    /// One line for the instance page.
    pub fn describe(&self, now: Timestamp) -> String {
        let word = |b: Option<bool>| b.map_or("–", |b| if b { "true" } else { "false" });
        format!(
            "Kura's controller and the agent disagree on {} for {} s: controller ready {} serving {}, agent ready {} serving {}; one of the two reads the pods wrongly",
            self.fields.join(" and "),
            now.duration_since(self.since).as_secs().max(0),
            word(self.controller.ready),
            word(self.controller.serving),
            word(Some(self.agent.0)),
            word(Some(self.agent.1)),
        )
    }
}

/// Tracks, per instance and field, since when Kura's controller and the
/// agent disagree.
#[derive(Debug, Default)]
pub struct DisagreementTracker {
    since: HashMap<InstanceKey, Timestamp>,
}

impl DisagreementTracker {
    /// Compares every instance's controller numbers with the agent's
    /// (`agent` answers `ready` and `serving` of the agent's latest
    /// aggregate, `None` when it has none) at `now`; returns the
    /// disagreements older than [`DISAGREEMENT_GRACE`]. Instances not in
    /// `controller` any more are forgotten.
    pub fn observe(
        &mut self,
        controller: &[(InstanceKey, ControllerHealth)],
        agent: impl Fn(&InstanceKey) -> Option<(bool, bool)>,
        now: Timestamp,
    ) -> BTreeMap<InstanceKey, Disagreement> {
        let mut out = BTreeMap::new();
        let mut seen = HashMap::with_capacity(controller.len());
        for (key, theirs) in controller {
            let Some(ours) = agent(key) else { continue };
            let mut fields = Vec::new();
            if theirs.ready.is_some_and(|r| r != ours.0) {
                fields.push("ready");
            }
            if theirs.serving.is_some_and(|s| s != ours.1) {
                fields.push("serving");
            }
            if fields.is_empty() {
                continue;
            }
            let since = self.since.get(key).copied().unwrap_or(now);
            seen.insert(key.clone(), since);
            if now.duration_since(since) > DISAGREEMENT_GRACE {
                out.insert(
                    key.clone(),
                    Disagreement {
                        fields,
                        since,
                        controller: *theirs,
                        agent: ours,
                    },
                );
            }
        }
        self.since = seen;
        out
    }
}

/// What changed in the set of contested instances.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ContestChanges {
    /// Newly contested.
    pub started: Vec<Contest>,
    /// No longer contested.
    pub ended: Vec<InstanceKey>,
}

/// The changes from `before` to `now` (each instance with its manager; a
/// new manager on an instance already contested is a new contest).
pub fn contest_changes(
    before: &BTreeMap<InstanceKey, Box<str>>,
    now: &[Contest],
) -> ContestChanges {
    let started = now
        .iter()
        .filter(|c| before.get(&c.key) != Some(&c.manager))
        .cloned()
        .collect();
    let ended = before
        .keys()
        .filter(|k| !now.iter().any(|c| &c.key == *k))
        .cloned()
        .collect();
    ContestChanges { started, ended }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn key(n: &str) -> InstanceKey {
        InstanceKey::new("kura", n)
    }

    fn controller(ready: bool, serving: bool) -> ControllerHealth {
        ControllerHealth {
            ready: Some(ready),
            serving: Some(serving),
            sampled_at: None,
        }
    }

    #[test]
    fn a_disagreement_counts_only_past_two_controller_cadences() {
        let mut t = DisagreementTracker::default();
        let theirs = [(key("a"), controller(true, true))];
        let ours = |_: &InstanceKey| Some((false, true));
        assert!(t.observe(&theirs, ours, ts(0)).is_empty());
        assert!(
            t.observe(&theirs, ours, ts(60)).is_empty(),
            "60 s is the grace"
        );
        let found = t.observe(&theirs, ours, ts(61));
        let d = found.get(&key("a")).expect("a disagreement");
        assert_eq!(d.fields, ["ready"]);
        assert_eq!(d.since, ts(0));
        assert!(d.describe(ts(61)).contains("disagree on ready for 61 s"));
        // Agreeing again resets the clock.
        assert!(
            t.observe(&theirs, |_| Some((true, true)), ts(62))
                .is_empty()
        );
        assert!(t.observe(&theirs, ours, ts(100)).is_empty());
        // No aggregate of the agent's: nothing to compare.
        assert!(t.observe(&theirs, |_| None, ts(500)).is_empty());
    }

    #[test]
    fn both_fields_are_named_and_unknown_controller_fields_never_disagree() {
        let mut t = DisagreementTracker::default();
        let theirs = [
            (key("a"), controller(false, false)),
            (
                key("b"),
                ControllerHealth {
                    ready: None,
                    serving: None,
                    sampled_at: None,
                },
            ),
        ];
        let ours = |_: &InstanceKey| Some((true, true));
        t.observe(&theirs, ours, ts(0));
        let found = t.observe(&theirs, ours, ts(90));
        assert_eq!(found.len(), 1);
        assert_eq!(found[&key("a")].fields, ["ready", "serving"]);
    }

    #[test]
    fn contests_start_and_end_once() {
        let mut before = BTreeMap::new();
        let now = vec![Contest {
            key: key("a"),
            manager: Box::from("manager"),
            uid: Some(Box::from("u1")),
        }];
        let c = contest_changes(&before, &now);
        assert_eq!(c.started.len(), 1);
        assert!(c.ended.is_empty());
        before.insert(key("a"), Box::from("manager"));
        assert_eq!(contest_changes(&before, &now), ContestChanges::default());
        let c = contest_changes(&before, &[]);
        assert_eq!(c.ended, [key("a")]);
    }
}
