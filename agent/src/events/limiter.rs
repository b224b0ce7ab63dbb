//! The per-instance rate bound on Events, pure (time is an argument).
//!
//! Each instance has a token bucket of `burst` tokens refilled one per
//! `refill`. A Warning (unhealthy, hard stop, pruned, contested) is
//! published at once when a token is free and no Warning of the instance
//! waits. A Normal Event (baseline captured, healthy) is published at once
//! when nothing waits and it leaves [`WARNING_RESERVE`] token in the
//! bucket: it spends any token but the one kept for a Warning. So
//! - a failing check's Warning reaches `kubectl events` within the sweep
//!   that found it, whatever Normal Events came before it: only Warnings
//!   take the last token, so a Warning waits only when the Warnings before
//!   it spent the bucket (issue 32: `RolloutHealthy` and
//!   `BaselineCaptured` must not hold back the regression);
//! - a rollout's Normal Events go out as they happen while the bucket holds
//!   more than the reserve: the start's `RolloutHealthy`, the image
//!   change's `BaselineCaptured` seconds later and `RolloutHealthy` on the
//!   new image (issue 41: when a Normal Event needed a full bucket, the
//!   second of them waited a refill, a minute, and the third two).
//!
//! With a burst no larger than the reserve nothing can be kept back: a
//! Normal Event then goes from a full bucket.
//!
//! Otherwise a transition is coalesced: the latest transition of its group
//! waits (groups: the baseline, the verdict — healthy, unhealthy, hard
//! stop —, pruning), replacing an older waiting one of the same group, and
//! is published when the tokens are there (Warnings first), with the number
//! of transitions folded into it. The reserve only ever holds a Normal
//! Event back, never lets one more through, so the Events of an instance
//! never exceed `burst + elapsed / refill` API calls
//! ([`EventLimitConfig::bound`]), and the last word is always published
//! (a Normal one once the bucket is back to `WARNING_RESERVE + 1` tokens:
//! within that many refills when nothing else waits): a flapping instance
//! ends with an Event that says how it ended.
//!
//! An instance with nothing waiting and a full bucket is forgotten, so the
//! state is bounded by the instances that had an Event in the last
//! `burst × refill`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::model::{InstanceKey, InstanceTransitions, Transition, TransitionKind};

/// Tokens a Normal Event leaves in the bucket for Warnings (it is
/// published only while the bucket holds more than this; with a smaller
/// burst, from a full bucket).
pub const WARNING_RESERVE: u32 = 1;

/// The default burst: Events an instance may get at once.
pub const DEFAULT_BURST: u32 = 6;

/// The default refill: one more Event per this long.
pub const DEFAULT_REFILL: Duration = Duration::from_secs(60);

/// The bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLimitConfig {
    /// Events an instance may get at once.
    pub burst: u32,
    /// One more Event per this long.
    pub refill: Duration,
}

/// [`DEFAULT_BURST`] at once, one more per [`DEFAULT_REFILL`]. A rollout's
/// whole story fits the burst, each Event at once: the start's
/// `RolloutHealthy`, the image change's `BaselineCaptured`, two Warnings
/// while the pods roll (a restarting pod's `sample_stale`, say),
/// `RolloutHealthy` on the new image; and after them a regression's
/// Warning still goes at once (the reserved token). A flapping instance
/// costs at most 6 + 1 a minute: 7 API calls in its first minute, 11 in
/// five, 66 in an hour. Kubernetes' own per-object spam filter (client-go's, for the
/// core Events its components record) lets 25 through at once and one
/// more per 5 minutes (37 in an hour); the burst is kept far below its 25
/// because the bound is per instance and an incident can flap every
/// instance at once. The refill stays at a minute, faster than the
/// filter's 5, so that the last word after a burst comes within 2 minutes
/// (`WARNING_RESERVE + 1` refills), not 10.
impl Default for EventLimitConfig {
    fn default() -> Self {
        EventLimitConfig {
            burst: DEFAULT_BURST,
            refill: DEFAULT_REFILL,
        }
    }
}

impl EventLimitConfig {
    /// The most Events (API calls) one instance can cost over `window`
    /// from its first: `burst + window / refill` (rounded down). The
    /// reserve for Warnings does not change it: it only holds Normal
    /// Events back.
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

/// The tokens a bucket of `capacity` must hold for a transition of `kind`
/// to be published: 1 for a Warning (any free token); for a Normal Event
/// one more than [`WARNING_RESERVE`], so that it never takes the token a
/// failing check's Warning needs (issue 32), and no more than the
/// capacity, so that it always goes from a full bucket.
fn threshold(capacity: f64, kind: TransitionKind) -> f64 {
    if kind.is_warning() {
        1.0
    } else {
        (1.0 + f64::from(WARNING_RESERVE)).min(capacity)
    }
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
    /// published (see [`threshold`]).
    fn threshold(&self, kind: TransitionKind) -> f64 {
        threshold(self.capacity(), kind)
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
        self.instances.retain(|key, budget| {
            if now > budget.updated {
                let elapsed = now.duration_since(budget.updated).as_secs_f64();
                budget.tokens = (budget.tokens + elapsed / refill.as_secs_f64()).min(capacity);
                budget.updated = now;
            }
            while let Some((group, kind)) = Self::next_waiting(&budget.waiting) {
                if budget.tokens + EPSILON < threshold(capacity, kind) {
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
                image: None,
            }],
        }
    }

    fn config() -> EventLimitConfig {
        EventLimitConfig {
            burst: 3,
            refill: Duration::from_secs(60),
        }
    }

    /// An instance flapping every 10 s sweep for 5 minutes on the default
    /// bound: 30 transitions, at most 6 + 5 Events, and the last state
    /// published.
    #[test]
    fn a_flapping_instance_costs_at_most_burst_plus_one_per_refill() {
        let limit = EventLimitConfig::default();
        let mut limiter = EventLimiter::new(limit);
        let mut published: Vec<Publish> = Vec::new();
        let mut in_the_first_minute = 0;
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
            if sweep * 10_000 < 60_000 {
                in_the_first_minute = published.len();
            }
        }
        assert_eq!(limit.bound(Duration::from_secs(60)), 7);
        assert!(in_the_first_minute <= 7, "{in_the_first_minute}");
        let bound = limit.bound(Duration::from_secs(300));
        assert_eq!(bound, 11);
        assert!(published.len() as u64 <= bound, "{}", published.len());
        assert_eq!(
            immediate + suppressed as usize,
            30,
            "every transition is published at once or waits"
        );
        assert!(immediate as u64 <= bound);
        // After the flapping stops, the last word (healthy, a Normal Event:
        // it leaves the reserved token) comes out within WARNING_RESERVE + 1
        // refills.
        let end = ts(300_000);
        let at = limiter.next_due(end).expect("the last state waits");
        let refills = i64::from(WARNING_RESERVE + 1);
        assert!(at <= ts(300_000 + refills * 60_000), "{at}");
        let last = limiter.due(at);
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].transition.note, last_note);
        assert!(last[0].coalesced > 0, "says how many it stands for");
        assert_eq!(last[0].uid.as_deref(), Some("uid-a"));
        assert_eq!(limiter.next_due(at), None);
        // Idle and refilled: forgotten.
        assert!(limiter.due(ts(900_000)).is_empty());
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
        b.transitions[0].action = signal.to_owned().into();
        b
    }

    /// Issue 32 item 8: every pod restarts at once; the agent says
    /// `sample_stale` for the gap, after `RolloutHealthy` and
    /// `BaselineCaptured`; the real regression, found one 10 s sweep later,
    /// must reach Events in that sweep, not a minute later.
    #[test]
    fn a_new_failing_signal_is_published_within_one_sweep_after_normal_events() {
        let mut limiter = EventLimiter::new(EventLimitConfig::default());
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
        // The Normal Events went out at once too (issue 41), and nothing
        // waits.
        assert_eq!(published.len(), 4, "{published:?}");
        assert_eq!(limiter.next_due(ts(20_000)), None);
    }

    /// Plays `offers` (each at its time, in milliseconds from `ts(0)`)
    /// through `limiter` as the publisher task does: each batch is offered
    /// at its time, and whatever waits is published at the time
    /// [`EventLimiter::next_due`] names, until nothing waits. Returns each
    /// published Event with the time it went out.
    fn play(
        limiter: &mut EventLimiter,
        offers: Vec<(i64, InstanceTransitions)>,
    ) -> Vec<(Timestamp, Publish)> {
        let mut out = Vec::new();
        let mut offers = offers.into_iter().peekable();
        let mut now = ts(0);
        for _ in 0..10_000 {
            let next_offer = offers.peek().map(|(at, _)| ts(*at));
            let due = limiter.next_due(now);
            match (next_offer, due) {
                (Some(at), due) if due.is_none_or(|d| at <= d) => {
                    let Some((_, b)) = offers.next() else { break };
                    now = at;
                    let (published, _) = limiter.offer(b, now);
                    out.extend(published.into_iter().map(|p| (now, p)));
                }
                (_, Some(at)) => {
                    now = at;
                    out.extend(limiter.due(now).into_iter().map(|p| (now, p)));
                }
                (_, None) => break,
            }
        }
        out
    }

    /// How long after `offered_at` the Event whose note is `note` went
    /// out (`None`: never).
    fn delay(published: &[(Timestamp, Publish)], note: &str, offered_at: i64) -> Option<f64> {
        published
            .iter()
            .find(|(_, p)| p.transition.note == note)
            .map(|(at, _)| at.duration_since(ts(offered_at)).as_secs_f64())
    }

    /// Plays `story` (offered at ms, kind, note) through `limiter`: each
    /// transition's kind and note, and how long after it was offered it
    /// was published (`None`: never).
    fn play_story<'a>(
        limiter: &mut EventLimiter,
        story: &[(i64, TransitionKind, &'a str)],
    ) -> Vec<(TransitionKind, &'a str, Option<f64>)> {
        let published = play(
            limiter,
            story
                .iter()
                .map(|(at, kind, note)| (*at, batch(*kind, note)))
                .collect(),
        );
        story
            .iter()
            .map(|(at, kind, note)| (*kind, *note, delay(&published, note, *at)))
            .collect()
    }

    /// Issue 41: a rollout's story on the shipped defaults. The instance
    /// starts healthy (`RolloutHealthy`), seconds later `spec.image`
    /// changes (`BaselineCaptured`), seconds after that the pods run the
    /// new image healthy (`RolloutHealthy` again): each Event must be out
    /// within 15 s of its transition, not a refill (a minute) later.
    #[test]
    fn a_rollouts_normal_events_each_come_out_within_15_s() {
        let mut limiter = EventLimiter::new(EventLimitConfig::default());
        let story = [
            (0, TransitionKind::RolloutHealthy, "healthy on v1"),
            (
                4_000,
                TransitionKind::BaselineCaptured,
                "baseline on v1 for v2",
            ),
            (12_000, TransitionKind::RolloutHealthy, "healthy on v2"),
        ];
        let delays = play_story(&mut limiter, &story);
        for (_, note, d) in &delays {
            assert!(
                d.is_some_and(|d| d <= 15.0),
                "{note}: published {d:?} s after its transition (all: {delays:?})"
            );
        }
    }

    /// The same rollout with a Warning in the middle (a pod restarting on
    /// the new image says `sample_stale` for a sweep) and a regression
    /// after it turned healthy: every Event within 15 s of its transition,
    /// the Warnings at once.
    #[test]
    fn a_rollouts_events_with_warnings_between_each_come_out_within_15_s() {
        let mut limiter = EventLimiter::new(EventLimitConfig::default());
        let story = [
            (0, TransitionKind::RolloutHealthy, "healthy on v1"),
            (
                4_000,
                TransitionKind::BaselineCaptured,
                "baseline on v1 for v2",
            ),
            (8_000, TransitionKind::RolloutUnhealthy, "sample stale"),
            (12_000, TransitionKind::RolloutHealthy, "healthy on v2"),
            (
                22_000,
                TransitionKind::RolloutUnhealthy,
                "fd timeouts regressed",
            ),
        ];
        for (kind, note, d) in play_story(&mut limiter, &story) {
            let within = if kind.is_warning() { 0.0 } else { 15.0 };
            assert!(
                d.is_some_and(|d| d <= within),
                "{note}: published {d:?} s after its transition, want <= {within} s"
            );
        }
    }

    /// The policy itself, on a bucket of 3: a Normal Event spends any
    /// token but the last (kept for a Warning), so two Normal Events in a
    /// row go at once; a third waits until the bucket holds two tokens
    /// again; a Warning behind them takes the reserved token at once.
    #[test]
    fn a_normal_event_spends_any_token_but_the_one_reserved_for_warnings() {
        let mut limiter = EventLimiter::new(config());
        let published = play(
            &mut limiter,
            vec![
                (0, batch(TransitionKind::RolloutHealthy, "healthy")),
                (1_000, batch(TransitionKind::BaselineCaptured, "baseline 1")),
                (2_000, batch(TransitionKind::BaselineCaptured, "baseline 2")),
                (3_000, batch(TransitionKind::RolloutUnhealthy, "unhealthy")),
            ],
        );
        assert_eq!(delay(&published, "healthy", 0), Some(0.0));
        assert_eq!(
            delay(&published, "baseline 1", 1_000),
            Some(0.0),
            "{published:?}"
        );
        assert_eq!(
            delay(&published, "unhealthy", 3_000),
            Some(0.0),
            "the reserved token"
        );
        // The second baseline waited for two tokens: 1 + 3/60 were left at
        // 3 s, the Warning spent one, so (2 - 3/60) × 60 s = 117 s after
        // 3 s: 118 s after it came.
        let waited = delay(&published, "baseline 2", 2_000).expect("published at last");
        assert!((117.0..=119.0).contains(&waited), "{waited} s");
        assert_eq!(published.len(), 4);
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

    const KINDS: [TransitionKind; 6] = [
        TransitionKind::BaselineCaptured,
        TransitionKind::RolloutHealthy,
        TransitionKind::RolloutUnhealthy,
        TransitionKind::RolloutHardStopped,
        TransitionKind::StatusPruned,
        TransitionKind::StatusContested,
    ];

    /// Any bound, any mix of transitions at any times: the Events never
    /// exceed `burst + elapsed / refill` at any moment, every transition is
    /// published at once or waits, and the last transition of each group
    /// is published in the end (the last word), after it came.
    #[test]
    fn any_bound_and_mix_stays_within_the_bound_and_the_last_word_comes_out() {
        use proptest::prelude::*;
        let step = (0usize..KINDS.len(), 0i64..90_000);
        proptest!(ProptestConfig::with_cases(300), |(
            burst in 1u32..10,
            refill_s in 1u64..300,
            steps in proptest::collection::vec(step, 1..80),
        )| {
            let limit = EventLimitConfig { burst, refill: Duration::from_secs(refill_s) };
            let mut limiter = EventLimiter::new(limit);
            let mut published: Vec<(Timestamp, Publish)> = Vec::new();
            let mut last_of_group: BTreeMap<Group, (String, Timestamp)> = BTreeMap::new();
            let mut now_ms = 0i64;
            let mut offered = 0u32;
            let mut outcome = 0u32;
            for (i, (k, dt)) in steps.into_iter().enumerate() {
                now_ms += dt;
                let now = ts(now_ms);
                let kind = KINDS[k];
                let note = format!("{i}");
                last_of_group.insert(group(kind), (note.clone(), now));
                let (out, waiting) = limiter.offer(batch(kind, &note), now);
                offered += 1;
                outcome += u32::try_from(out.len()).unwrap_or(u32::MAX) + waiting;
                published.extend(out.into_iter().map(|p| (now, p)));
                published.extend(limiter.due(now).into_iter().map(|p| (now, p)));
                let elapsed = Duration::from_millis(u64::try_from(now_ms).unwrap_or(0));
                prop_assert!(published.len() as u64 <= limit.bound(elapsed),
                    "{} Events by {now_ms} ms > {}", published.len(), limit.bound(elapsed));
            }
            prop_assert_eq!(offered, outcome);
            // Drain what waits, at the times the limiter names.
            let mut now = ts(now_ms);
            for _ in 0..100 {
                let Some(at) = limiter.next_due(now) else { break };
                now = at;
                published.extend(limiter.due(now).into_iter().map(|p| (now, p)));
            }
            prop_assert_eq!(limiter.next_due(now), None, "everything came out");
            let elapsed = Duration::try_from(now.duration_since(ts(0))).unwrap_or(Duration::MAX);
            prop_assert!(published.len() as u64 <= limit.bound(elapsed));
            for (note, offered_at) in last_of_group.values() {
                let out = published.iter().find(|(_, p)| &p.transition.note == note);
                prop_assert!(out.is_some_and(|(at, _)| at >= offered_at),
                    "the last word {note} was not published");
            }
        });
    }

    /// Normal Events never take the token reserved for Warnings: after any
    /// Normal Events at any times (a burst above the reserve), a Warning
    /// goes out at once; and in any mix, a Warning waits only when the
    /// Warnings before it spent the bucket (the last token spent went to a
    /// Warning) or a Warning already waits.
    #[test]
    fn a_warning_after_normal_events_goes_out_at_once() {
        use proptest::prelude::*;
        let step = (0usize..KINDS.len(), 0i64..30_000);
        proptest!(ProptestConfig::with_cases(300), |(
            burst in (WARNING_RESERVE + 1)..10,
            refill_s in 1u64..300,
            normals in proptest::collection::vec((0usize..2, 0i64..30_000), 0..40),
            mix in proptest::collection::vec(step, 0..60),
            gap in 0i64..30_000,
        )| {
            let limit = EventLimitConfig { burst, refill: Duration::from_secs(refill_s) };
            // Normal Events only, then a Warning.
            let mut limiter = EventLimiter::new(limit);
            let mut now_ms = 0i64;
            for (i, (k, dt)) in normals.into_iter().enumerate() {
                now_ms += dt;
                limiter.offer(batch(KINDS[k], &format!("{i}")), ts(now_ms));
                limiter.due(ts(now_ms));
            }
            now_ms += gap;
            let (out, waiting) =
                limiter.offer(batch(TransitionKind::RolloutUnhealthy, "regression"), ts(now_ms));
            prop_assert_eq!((out.len(), waiting), (1, 0));
            prop_assert_eq!(&out[0].transition.note, "regression");

            // Any mix: track which kind spent the last token.
            let mut limiter = EventLimiter::new(limit);
            let mut now_ms = 0i64;
            let mut last_spent_by_warning = false;
            for (i, (k, dt)) in mix.into_iter().enumerate() {
                now_ms += dt;
                let now = ts(now_ms);
                let kind = KINDS[k];
                let warning_waits = limiter.instances.values().any(|b| {
                    b.waiting.values().any(|w| w.kind.is_warning())
                });
                let (out, _) = limiter.offer(batch(kind, &format!("{i}")), now);
                if kind.is_warning() && !warning_waits && !last_spent_by_warning {
                    prop_assert!(out.iter().any(|p| p.transition.kind == kind),
                        "a Warning after Normal Events waited (step {i})");
                }
                for p in out.iter().chain(limiter.due(now).iter()) {
                    last_spent_by_warning = p.transition.kind.is_warning();
                }
            }
        });
    }
}
