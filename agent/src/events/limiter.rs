//! The per-instance rate bound on Events, pure (time is an argument).
//!
//! Each instance has a token bucket of `burst` tokens refilled one per
//! `refill`. A Warning (unhealthy, hard stop, pruned) is published at once
//! when a token is free and no Warning of the instance waits; a Normal
//! Event (baseline captured, healthy) only when the bucket is full and
//! nothing waits, so Normal Events never spend the tokens a failing check's
//! Warning needs: a new failing signal reaches `kubectl events` within the
//! sweep that found it, as long as fewer than `burst` Warnings came in the
//! last refills. Otherwise a transition is coalesced: the latest
//! transition of its group waits (groups: the baseline, the verdict —
//! healthy, unhealthy, hard stop —, pruning), replacing an older waiting
//! one of the same group, and is published when the tokens are there
//! (Warnings first), with the number of transitions folded into it. So the Events of an
//! instance never exceed `burst + elapsed / refill` API calls, and the
//! last word is always published: a flapping instance ends with an Event
//! that says how it ended.
//!
//! An instance with nothing waiting and a full bucket is forgotten, so the
//! state is bounded by the instances that had an Event in the last
//! `burst × refill`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::model::{InstanceKey, InstanceTransitions, Transition, TransitionKind};

/// The bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLimitConfig {
    /// Events an instance may get at once.
    pub burst: u32,
    /// One more Event per this long.
    pub refill: Duration,
}

impl Default for EventLimitConfig {
    fn default() -> Self {
        EventLimitConfig {
            burst: 3,
            refill: Duration::from_secs(60),
        }
    }
}

impl EventLimitConfig {
    /// The most Events (API calls) one instance can cost over `window`.
    pub fn bound(&self, window: Duration) -> u64 {
        let refills = window.as_nanos() / self.refill.as_nanos().max(1);
        u64::from(self.burst) + u64::try_from(refills).unwrap_or(u64::MAX)
    }
}

/// Rounding slack on token counts (refill times are computed back from
/// token deficits in floating point).
const EPSILON: f64 = 1e-9;

/// One Event to publish now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The instance.
    pub key: InstanceKey,
    /// Its UID, when known.
    pub uid: Option<String>,
    /// What changed.
    pub transition: Transition,
    /// How many transitions of the instance were coalesced since its last
    /// Event (0: none).
    pub coalesced: u32,
}

/// Which transitions replace each other while waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Baseline,
    Pruned,
    Verdict,
}

fn group(kind: TransitionKind) -> Group {
    match kind {
        TransitionKind::BaselineCaptured => Group::Baseline,
        TransitionKind::StatusPruned | TransitionKind::StatusContested => Group::Pruned,
        TransitionKind::RolloutHealthy
        | TransitionKind::RolloutUnhealthy
        | TransitionKind::RolloutHardStopped => Group::Verdict,
    }
}

#[derive(Debug, Clone)]
struct Budget {
    tokens: f64,
    updated: Timestamp,
    uid: Option<String>,
    waiting: BTreeMap<Group, Transition>,
    coalesced: u32,
}

/// The limiter. See the module documentation.
#[derive(Debug, Clone)]
pub struct EventLimiter {
    config: EventLimitConfig,
    instances: HashMap<InstanceKey, Budget>,
}

impl EventLimiter {
    /// A limiter with every bucket full.
    pub fn new(config: EventLimitConfig) -> Self {
        EventLimiter {
            config: EventLimitConfig {
                burst: config.burst.max(1),
                refill: config.refill.max(Duration::from_millis(1)),
            },
            instances: HashMap::new(),
        }
    }

    fn capacity(&self) -> f64 {
        f64::from(self.config.burst)
    }

    fn refill(&self, budget: &mut Budget, now: Timestamp) {
        if now > budget.updated {
            let elapsed = now.duration_since(budget.updated).as_secs_f64();
            budget.tokens =
                (budget.tokens + elapsed / self.config.refill.as_secs_f64()).min(self.capacity());
            budget.updated = now;
        }
    }

    /// Offers one write's transitions at `now`; returns those to publish
    /// now (the rest wait, coalesced). `suppressed` counts the ones that
    /// had to wait.
    pub fn offer(&mut self, batch: InstanceTransitions, now: Timestamp) -> (Vec<Publish>, u32) {
        let capacity = self.capacity();
        let mut budget = self.instances.remove(&batch.key).unwrap_or(Budget {
            tokens: capacity,
            updated: now,
            uid: None,
            waiting: BTreeMap::new(),
            coalesced: 0,
        });
        self.refill(&mut budget, now);
        if batch.uid.is_some() {
            budget.uid = batch.uid;
        }
        let mut out = Vec::new();
        let mut suppressed = 0;
        for transition in batch.transitions {
            // A newer transition of a group supersedes the waiting one.
            if budget.waiting.remove(&group(transition.kind)).is_some() {
                budget.coalesced += 1;
            }
            let warning = transition.kind.is_warning();
            // What waits goes first, except that a Warning goes before a
            // waiting Normal Event.
            let behind = budget
                .waiting
                .values()
                .any(|w| !warning || w.kind.is_warning());
            if !behind && budget.tokens + EPSILON >= self.threshold(transition.kind) {
                budget.tokens = (budget.tokens - 1.0).max(0.0);
                out.push(Publish {
                    key: batch.key.clone(),
                    uid: budget.uid.clone(),
                    transition,
                    coalesced: std::mem::take(&mut budget.coalesced),
                });
            } else {
                suppressed += 1;
                budget.waiting.insert(group(transition.kind), transition);
            }
        }
        self.instances.insert(batch.key, budget);
        (out, suppressed)
    }

    /// The tokens the bucket must hold for a transition of `kind` to be
    /// published: 1 for a Warning; a Normal Event leaves `burst - 1` for
    /// Warnings, so it goes only from a full bucket and the Events that
    /// report a failing check are never held back by the ones before them
    /// (issue 32: `RolloutHealthy` and `BaselineCaptured` spent the burst and
    /// the real regression waited a minute).
    fn threshold(&self, kind: TransitionKind) -> f64 {
        if kind.is_warning() {
            1.0
        } else {
            self.capacity()
        }
    }

    /// The group of `waiting` to publish next: Warnings first, then in
    /// group order.
    fn next_waiting(waiting: &BTreeMap<Group, Transition>) -> Option<(Group, TransitionKind)> {
        waiting
            .iter()
            .find(|(_, t)| t.kind.is_warning())
            .or_else(|| waiting.iter().next())
            .map(|(g, t)| (*g, t.kind))
    }

    /// The waiting transitions whose instance has the tokens at `now`
    /// (Warnings first, then baseline, pruning, verdict). Forgets idle
    /// instances.
    pub fn due(&mut self, now: Timestamp) -> Vec<Publish> {
        let mut out = Vec::new();
        let capacity = self.capacity();
        let refill = self.config.refill;
        let warning_floor = 1.0;
        let threshold = |kind: TransitionKind| {
            if kind.is_warning() {
                warning_floor
            } else {
                capacity
            }
        };
        self.instances.retain(|key, budget| {
            if now > budget.updated {
                let elapsed = now.duration_since(budget.updated).as_secs_f64();
                budget.tokens = (budget.tokens + elapsed / refill.as_secs_f64()).min(capacity);
                budget.updated = now;
            }
            while let Some((group, kind)) = Self::next_waiting(&budget.waiting) {
                if budget.tokens + EPSILON < threshold(kind) {
                    break;
                }
                let Some(transition) = budget.waiting.remove(&group) else {
                    break;
                };
                budget.tokens = (budget.tokens - 1.0).max(0.0);
                // The fold count goes with the last waiting transition.
                let coalesced = if budget.waiting.is_empty() {
                    std::mem::take(&mut budget.coalesced)
                } else {
                    0
                };
                out.push(Publish {
                    key: key.clone(),
                    uid: budget.uid.clone(),
                    transition,
                    coalesced,
                });
            }
            !(budget.waiting.is_empty() && budget.tokens + EPSILON >= capacity)
        });
        out
    }

    /// When [`EventLimiter::due`] will next have something, if anything
    /// waits.
    pub fn next_due(&self, now: Timestamp) -> Option<Timestamp> {
        self.instances
            .values()
            .filter_map(|b| Self::next_waiting(&b.waiting).map(|(_, kind)| (b, kind)))
            .map(|(b, kind)| {
                let missing =
                    (self.threshold(kind) - b.tokens).max(0.0) * self.config.refill.as_secs_f64();
                let at = b
                    .updated
                    .checked_add(SignedDuration::from_secs_f64(missing))
                    .unwrap_or(Timestamp::MAX);
                at.max(now)
            })
            .min()
    }

    /// Instances with state (a bucket not full, or something waiting).
    pub fn tracked(&self) -> usize {
        self.instances.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_780_000_000_000 + ms).expect("ts")
    }

    fn batch(kind: TransitionKind, note: &str) -> InstanceTransitions {
        InstanceTransitions {
            key: InstanceKey::new("ns", "a"),
            uid: Some("uid-a".into()),
            transitions: vec![Transition {
                kind,
                action: "Judge".into(),
                note: note.into(),
            }],
        }
    }

    fn config() -> EventLimitConfig {
        EventLimitConfig {
            burst: 3,
            refill: Duration::from_secs(60),
        }
    }

    /// An instance flapping every 10 s sweep for 5 minutes: 30
    /// transitions, at most 3 + 5 Events, and the last state published.
    #[test]
    fn a_flapping_instance_costs_at_most_burst_plus_one_per_refill() {
        let mut limiter = EventLimiter::new(config());
        let mut published: Vec<Publish> = Vec::new();
        let mut immediate = 0;
        let mut suppressed = 0;
        let mut last_note = String::new();
        for sweep in 0..30 {
            let now = ts(sweep * 10_000);
            let (kind, note) = if sweep % 2 == 0 {
                (
                    TransitionKind::RolloutUnhealthy,
                    format!("unhealthy {sweep}"),
                )
            } else {
                (TransitionKind::RolloutHealthy, format!("healthy {sweep}"))
            };
            last_note.clone_from(&note);
            let (now_out, s) = limiter.offer(batch(kind, &note), now);
            immediate += now_out.len();
            published.extend(now_out);
            suppressed += s;
            published.extend(limiter.due(now));
        }
        let bound = config().bound(Duration::from_secs(300));
        assert_eq!(bound, 8);
        assert!(published.len() as u64 <= bound, "{}", published.len());
        assert_eq!(
            immediate + suppressed as usize,
            30,
            "every transition is published at once or waits"
        );
        assert!(immediate as u64 <= bound);
        // After the flapping stops, the last word (healthy, a Normal Event:
        // it waits for a full bucket) comes out within burst refills.
        let end = ts(300_000);
        let at = limiter.next_due(end).expect("the last state waits");
        assert!(at <= ts(300_000 + 3 * 60_000), "{at}");
        let last = limiter.due(at);
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].transition.note, last_note);
        assert!(last[0].coalesced > 0, "says how many it stands for");
        assert_eq!(last[0].uid.as_deref(), Some("uid-a"));
        assert_eq!(limiter.next_due(at), None);
        // Idle and refilled: forgotten.
        assert!(limiter.due(ts(600_000)).is_empty());
        assert_eq!(limiter.tracked(), 0);
    }

    #[test]
    fn a_baseline_is_never_replaced_by_a_verdict_while_waiting_and_goes_after_it() {
        let mut limiter = EventLimiter::new(EventLimitConfig {
            burst: 1,
            refill: Duration::from_secs(60),
        });
        let (out, _) = limiter.offer(batch(TransitionKind::RolloutHealthy, "h"), ts(0));
        assert_eq!(out.len(), 1);
        let mut both = batch(TransitionKind::BaselineCaptured, "b");
        both.transitions
            .extend(batch(TransitionKind::RolloutUnhealthy, "u").transitions);
        let (out, suppressed) = limiter.offer(both, ts(1_000));
        assert!(out.is_empty());
        assert_eq!(suppressed, 2);
        // The Warning first, then the Normal Event.
        let first = limiter.due(ts(60_000));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].transition.kind, TransitionKind::RolloutUnhealthy);
        let second = limiter.due(ts(120_000));
        assert_eq!(second[0].transition.kind, TransitionKind::BaselineCaptured);
    }

    fn unhealthy(signal: &str) -> InstanceTransitions {
        let mut b = batch(TransitionKind::RolloutUnhealthy, signal);
        b.transitions[0].action = signal.into();
        b
    }

    /// Issue 32 item 8: every pod restarts at once; the agent says
    /// `sample_stale` for the gap, after `RolloutHealthy` and
    /// `BaselineCaptured`; the real regression, found one 10 s sweep later,
    /// must reach Events in that sweep, not a minute later.
    #[test]
    fn a_new_failing_signal_is_published_within_one_sweep_after_normal_events() {
        let mut limiter = EventLimiter::new(config());
        let mut published = Vec::new();
        let mut sweep = |limiter: &mut EventLimiter, b: InstanceTransitions, at: i64| {
            let (out, _) = limiter.offer(b, ts(at));
            published.extend(out.into_iter().map(|p| (at, p.transition.action)));
            let due = limiter.due(ts(at));
            published.extend(due.into_iter().map(|p| (at, p.transition.action)));
        };
        let mut both = batch(TransitionKind::RolloutHealthy, "healthy");
        both.transitions[0].action = "Judge".into();
        let mut baseline = batch(TransitionKind::BaselineCaptured, "baseline");
        baseline.transitions[0].action = "CaptureBaseline".into();
        both.transitions.extend(baseline.transitions);
        sweep(&mut limiter, both, 0);
        sweep(&mut limiter, unhealthy("SampleStale"), 10_000);
        sweep(&mut limiter, unhealthy("FdTimeoutsRegressed"), 20_000);
        let regression = published
            .iter()
            .find(|(_, action)| action == "FdTimeoutsRegressed")
            .map(|(at, _)| *at);
        assert_eq!(regression, Some(20_000), "{published:?}");
        // The baseline Event is not lost: it follows once the bucket is full.
        let at = limiter.next_due(ts(20_000)).expect("the baseline waits");
        let rest = limiter.due(at);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].transition.kind, TransitionKind::BaselineCaptured);
    }

    /// Whatever the mix of Warnings and Normal Events, an instance never
    /// costs more than `burst + elapsed / refill` Events.
    #[test]
    fn any_mix_of_transitions_stays_within_the_bound() {
        let kinds = [
            TransitionKind::BaselineCaptured,
            TransitionKind::RolloutHealthy,
            TransitionKind::RolloutUnhealthy,
            TransitionKind::RolloutHardStopped,
            TransitionKind::StatusPruned,
        ];
        for seed in 0..200u64 {
            let mut limiter = EventLimiter::new(config());
            let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let mut published = 0u64;
            for step in 0..120i64 {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let now = ts(step * 5_000);
                let kind = kinds[usize::try_from(state >> 61).unwrap_or(0) % kinds.len()];
                let (out, _) = limiter.offer(batch(kind, &format!("{step}")), now);
                published += out.len() as u64;
                published += limiter.due(now).len() as u64;
                let bound = config().bound(Duration::from_millis(
                    u64::try_from(step * 5_000).unwrap_or(0),
                ));
                assert!(
                    published <= bound,
                    "seed {seed} step {step}: {published} > {bound}"
                );
            }
        }
    }
}
