//! When an instance is swept: the rule "is this instance in a rollout"
//! ([`phase`]) and the schedule that follows from it ([`Cadence`],
//! [`next_start`]). Pure: time and every input are arguments; the instance
//! task only applies them.
//!
//! # The rule
//!
//! An instance is **in a rollout** (swept every
//! [`Cadence::rollout_interval`], 2 s by default) when any of these holds,
//! checked in this order (the first one is the [`Why`]):
//!
//! 1. it has no verdict yet: what was never judged is never at rest;
//! 2. its `spec.image` differs from the image its verdict judges: the watch
//!    has shown an upgrade the gate has not seen yet;
//! 3. its verdict is `hard_stop`, or
//! 4. `unhealthy`;
//! 5. its pods run more than one image (a StatefulSet mid-roll);
//! 6. its `spec.image` differs from the image of its baseline
//!    (`rolloutGate.baselineImage`: the gate captured a baseline at an
//!    image change) and the verdict has not yet been `healthy` continuously
//!    (`healthySince`) for [`Cadence::settle`] (20 min by default).
//!
//! Otherwise it is **at rest** (swept every [`Cadence::steady_interval`],
//! 30 s by default).
//!
//! Rule 6 reads only the published verdict, so it holds across agent
//! restarts and handovers: a restarted agent continues an instance's
//! rollout cadence from its `status.rolloutGate`. Its consequence: once an
//! instance was upgraded while an agent watched, any unhealthy spell
//! afterwards (rule 4) is followed by another full settle period at the
//! rollout cadence, since `healthySince` starts over. An instance never
//! upgraded under an agent (no baseline image) returns to rest as soon as
//! its verdict is healthy again.
//!
//! # The schedule
//!
//! Intervals run from the start of one sweep to the start of the next
//! ([`next_start`]), jittered by ±[`Cadence::jitter`]. A sweep that takes
//! longer than its interval (the poller's global concurrency bound is
//! saturated) is followed by the next one at once, never by a backlog of
//! missed ones: sweeps of one instance never overlap, and each instance has
//! at most one sweep in progress.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_schemas::{AgentVerdict, RolloutGate};

/// Default interval of an instance in a rollout.
pub const DEFAULT_ROLLOUT_INTERVAL: Duration = Duration::from_secs(2);
/// Default interval of an instance at rest.
pub const DEFAULT_STEADY_INTERVAL: Duration = Duration::from_secs(30);
/// Default time an upgraded instance must have been healthy before it is
/// at rest again.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(20 * 60);

/// How often instances are swept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cadence {
    /// Time between two sweeps of an instance in a rollout.
    pub rollout_interval: Duration,
    /// Time between two sweeps of an instance at rest.
    pub steady_interval: Duration,
    /// How long an upgraded instance's verdict must have been healthy
    /// before it is at rest again (rule 6 of the module documentation).
    pub settle: Duration,
    /// Relative jitter of each interval (0.1 = ±10 %).
    pub jitter: f64,
}

impl Default for Cadence {
    fn default() -> Self {
        Cadence {
            rollout_interval: DEFAULT_ROLLOUT_INTERVAL,
            steady_interval: DEFAULT_STEADY_INTERVAL,
            settle: DEFAULT_SETTLE,
            jitter: 0.1,
        }
    }
}

/// A cadence the agent cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CadenceError {
    /// At rest a sample could go stale between two sweeps.
    #[error(
        "steady interval {steady:?} with its ±{jitter_percent} % jitter lets {longest:?} pass between two \
         sweeps, not less than the maximum sample age of {max_age:?}: samples at rest would go stale \
         (use a steady interval below {limit:?})"
    )]
    SteadyTooLong {
        /// The steady interval asked for.
        steady: Duration,
        /// The jitter, in whole percent.
        jitter_percent: u32,
        /// The longest gap it allows.
        longest: Duration,
        /// The gate's maximum sample age.
        max_age: Duration,
        /// The largest steady interval that keeps samples fresh, rounded
        /// down to whole seconds.
        limit: Duration,
    },
    /// A rollout would be watched less closely than rest.
    #[error(
        "rollout interval {rollout:?} is longer than the steady interval {steady:?}: an instance in a \
         rollout would be swept less often than one at rest"
    )]
    RolloutSlowerThanSteady {
        /// The rollout interval.
        rollout: Duration,
        /// The steady interval.
        steady: Duration,
    },
}

impl Cadence {
    /// Checks the cadence against the gate's maximum sample age: the
    /// longest jittered steady interval must stay below it, so an instance
    /// at rest always has a fresh sample; and a rollout is never swept
    /// less often than rest.
    pub fn validate(&self, max_sample_age: Duration) -> Result<(), CadenceError> {
        let longest = jittered(self.steady_interval, self.jitter, 1.0);
        if longest >= max_sample_age {
            let factor = 1.0 + self.jitter.clamp(0.0, 1.0);
            let limit = Duration::from_secs(
                (max_sample_age.as_secs_f64() / factor - 1e-9)
                    .floor()
                    .max(0.0) as u64,
            );
            return Err(CadenceError::SteadyTooLong {
                steady: self.steady_interval,
                jitter_percent: (self.jitter.clamp(0.0, 1.0) * 100.0).round() as u32,
                longest,
                max_age: max_sample_age,
                limit,
            });
        }
        if self.rollout_interval > self.steady_interval {
            return Err(CadenceError::RolloutSlowerThanSteady {
                rollout: self.rollout_interval,
                steady: self.steady_interval,
            });
        }
        Ok(())
    }

    /// One interval for every instance, whatever its phase (what
    /// `--sweep-interval` sets; the demo and the tests use it).
    pub fn fixed(interval: Duration) -> Self {
        Cadence {
            rollout_interval: interval,
            steady_interval: interval,
            ..Cadence::default()
        }
    }

    /// The interval of an instance in `phase`, before jitter.
    pub fn interval(&self, phase: Phase) -> Duration {
        match phase {
            Phase::Rollout(_) => self.rollout_interval,
            Phase::Steady => self.steady_interval,
        }
    }

    /// The interval of an instance in `phase`, jittered by `unit` (a draw
    /// in `[0, 1]` the caller provides).
    pub fn jittered_interval(&self, phase: Phase, unit: f64) -> Duration {
        jittered(self.interval(phase), self.jitter, unit)
    }
}

/// Whether an instance is in a rollout, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Swept at the rollout interval.
    Rollout(Why),
    /// Swept at the steady interval.
    Steady,
}

impl Phase {
    /// The `cadence` label of the sweep-interval metrics.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Rollout(_) => ROLLOUT,
            Phase::Steady => STEADY,
        }
    }

    /// True in a rollout.
    pub fn in_rollout(self) -> bool {
        matches!(self, Phase::Rollout(_))
    }
}

/// The `cadence` labels: of an interval at the rollout cadence, at the
/// steady cadence, and of one cut short by a `spec.image` change.
pub use crate::telemetry::label::{IMAGE_CHANGE, ROLLOUT, STEADY};

/// Why an instance is in a rollout (the rule of the module documentation
/// that holds first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Rule 1: no verdict yet.
    NoVerdict,
    /// Rule 2: `spec.image` is not the image the verdict judges.
    ImageChanged,
    /// Rule 3: the verdict is `hard_stop`.
    HardStop,
    /// Rule 4: the verdict is `unhealthy`.
    Unhealthy,
    /// Rule 5: the pods run more than one image.
    MixedImages,
    /// Rule 6: upgraded, not yet healthy for the settle period.
    Settling,
}

/// The phase of an instance whose `spec.image` is `spec_image`, whose
/// pods run `pod_images` (`None`: not known, ignored), whose last verdict
/// is `gate`, at `now`, with `settle` as the settle period. See the module
/// documentation for the rule.
pub fn phase<'a>(
    spec_image: &str,
    pod_images: impl IntoIterator<Item = Option<&'a str>>,
    gate: Option<&RolloutGate>,
    now: Timestamp,
    settle: Duration,
) -> Phase {
    let Some(gate) = gate else {
        return Phase::Rollout(Why::NoVerdict);
    };
    if gate.target_image != spec_image {
        return Phase::Rollout(Why::ImageChanged);
    }
    match gate.verdict {
        AgentVerdict::HardStop => return Phase::Rollout(Why::HardStop),
        AgentVerdict::Unhealthy => return Phase::Rollout(Why::Unhealthy),
        AgentVerdict::Healthy => {}
        // No pods to poll: the steady cadence is plenty to see it return.
        AgentVerdict::Suspended => return Phase::Steady,
    }
    let mut images = pod_images.into_iter().flatten();
    if let Some(first) = images.next()
        && images.any(|i| i != first)
    {
        return Phase::Rollout(Why::MixedImages);
    }
    let upgraded = gate
        .baseline_image
        .as_deref()
        .is_some_and(|b| b != spec_image);
    if upgraded && !healthy_for(gate.healthy_since, now, settle) {
        return Phase::Rollout(Why::Settling);
    }
    Phase::Steady
}

/// Whether `since` is at least `settle` before `now` (never when `since` is
/// absent or in the future).
fn healthy_for(since: Option<Timestamp>, now: Timestamp, settle: Duration) -> bool {
    let Some(since) = since else {
        return false;
    };
    let settle = SignedDuration::try_from(settle).unwrap_or(SignedDuration::MAX);
    now.duration_since(since) >= settle
}

/// When the next sweep of an instance starts: `interval` after the last
/// sweep `started`, but never before it `ended` (a sweep that overran its
/// interval is followed by the next at once; missed sweeps are not made
/// up). Any clock with ordered instants works (tokio's, the standard one,
/// or plain durations in tests).
pub fn next_start<I>(started: I, ended: I, interval: Duration) -> I
where
    I: Ord + std::ops::Add<Duration, Output = I>,
{
    (started + interval).max(ended)
}

/// Whether a sweep from `started` to `ended` took longer than `interval`
/// (the next one starts late, at once: the agent is not keeping up).
pub fn overran<I>(started: I, ended: I, interval: Duration) -> bool
where
    I: Ord + std::ops::Add<Duration, Output = I>,
{
    ended > started + interval
}

/// `base` scaled by a factor in `[1 - spread, 1 + spread]`, chosen by
/// `unit` in `[0, 1]` (a random draw the caller provides, so this stays
/// pure). Spreads sweeps so that instances and agents started together do
/// not poll in lock-step.
pub fn jittered(base: Duration, spread: f64, unit: f64) -> Duration {
    let spread = if spread.is_finite() {
        spread.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    base.mul_f64(1.0 - spread + 2.0 * spread * unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::{BaselineCounters, Signal};
    use proptest::prelude::*;

    const V1: &str = "ghcr.io/tuist/kura:1.0.0";
    const V2: &str = "ghcr.io/tuist/kura:1.1.0";
    const SETTLE: Duration = Duration::from_secs(1200);

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn gate(
        target: &str,
        baseline: Option<&str>,
        verdict: AgentVerdict,
        since: Option<i64>,
    ) -> RolloutGate {
        RolloutGate {
            target_image: target.to_owned(),
            baseline_image: baseline.map(str::to_owned),
            baseline_captured_at: baseline.map(|_| ts(0)),
            baseline: BaselineCounters::default(),
            effective_baseline: BaselineCounters::default(),
            soak_eligible: true,
            verdict,
            signal: match verdict {
                AgentVerdict::Healthy => None,
                AgentVerdict::Unhealthy => Some(Signal::NotReady),
                AgentVerdict::HardStop => Some(Signal::MemoryPressureCritical),
                AgentVerdict::Suspended => Some(Signal::InstanceSuspended),
            },
            healthy_since: since.map(ts),
            evaluated_at: ts(0),
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    fn same(image: &str, n: usize) -> Vec<Option<&str>> {
        vec![Some(image); n]
    }

    #[test]
    fn each_rule_in_order() {
        let now = ts(10_000);
        let healthy_long = gate(V2, Some(V1), AgentVerdict::Healthy, Some(0));
        let p = |spec: &str, pods: Vec<Option<&str>>, g: Option<&RolloutGate>| {
            phase(spec, pods, g, now, SETTLE)
        };
        assert_eq!(p(V2, same(V2, 3), None), Phase::Rollout(Why::NoVerdict));
        assert_eq!(
            p("ghcr.io/tuist/kura:1.2.0", same(V2, 3), Some(&healthy_long)),
            Phase::Rollout(Why::ImageChanged)
        );
        assert_eq!(
            p(
                V2,
                same(V2, 3),
                Some(&gate(V2, None, AgentVerdict::HardStop, None))
            ),
            Phase::Rollout(Why::HardStop)
        );
        assert_eq!(
            p(
                V2,
                same(V2, 3),
                Some(&gate(V2, None, AgentVerdict::Unhealthy, None))
            ),
            Phase::Rollout(Why::Unhealthy)
        );
        assert_eq!(
            p(V2, vec![Some(V2), Some(V1), None], Some(&healthy_long)),
            Phase::Rollout(Why::MixedImages)
        );
        // Healthy for 1199 s after an upgrade: still settling; 1200 s: at rest.
        let since = 10_000 - 1199;
        assert_eq!(
            p(
                V2,
                same(V2, 3),
                Some(&gate(V2, Some(V1), AgentVerdict::Healthy, Some(since)))
            ),
            Phase::Rollout(Why::Settling)
        );
        assert_eq!(
            p(
                V2,
                same(V2, 3),
                Some(&gate(V2, Some(V1), AgentVerdict::Healthy, Some(since - 1)))
            ),
            Phase::Steady
        );
        assert_eq!(p(V2, same(V2, 3), Some(&healthy_long)), Phase::Steady);
    }

    #[test]
    fn never_upgraded_and_healthy_is_at_rest_at_once() {
        let g = gate(V1, None, AgentVerdict::Healthy, Some(9_999));
        assert_eq!(
            phase(V1, same(V1, 2), Some(&g), ts(10_000), SETTLE),
            Phase::Steady
        );
        // Pods whose image is unknown, or no pods at all, are no mix.
        assert_eq!(
            phase(V1, vec![None, Some(V1), None], Some(&g), ts(10_000), SETTLE),
            Phase::Steady
        );
        assert_eq!(
            phase(V1, Vec::new(), Some(&g), ts(10_000), SETTLE),
            Phase::Steady
        );
    }

    #[test]
    fn a_healthy_since_in_the_future_or_missing_is_not_settled() {
        let future = gate(V2, Some(V1), AgentVerdict::Healthy, Some(20_000));
        assert_eq!(
            phase(V2, same(V2, 1), Some(&future), ts(10_000), SETTLE),
            Phase::Rollout(Why::Settling)
        );
        let missing = gate(V2, Some(V1), AgentVerdict::Healthy, None);
        assert_eq!(
            phase(V2, same(V2, 1), Some(&missing), ts(10_000), SETTLE),
            Phase::Rollout(Why::Settling)
        );
    }

    #[test]
    fn schedule_runs_start_to_start_and_never_overlaps() {
        let d = Duration::from_millis;
        assert_eq!(next_start(d(0), d(100), d(2000)), d(2000));
        assert!(!overran(d(0), d(100), d(2000)));
        // Overran: the next starts when this one ended, not later, and
        // missed intervals are not made up.
        assert_eq!(next_start(d(0), d(5000), d(2000)), d(5000));
        assert!(overran(d(0), d(5000), d(2000)));
        assert!(!overran(d(0), d(2000), d(2000)));
    }

    #[test]
    fn fixed_and_default_intervals() {
        let c = Cadence::default();
        assert_eq!(c.interval(Phase::Rollout(Why::Unhealthy)), d_secs(2));
        assert_eq!(c.interval(Phase::Steady), d_secs(30));
        assert_eq!(c.settle, d_secs(1200));
        let f = Cadence::fixed(d_secs(10));
        assert_eq!(f.interval(Phase::Rollout(Why::NoVerdict)), d_secs(10));
        assert_eq!(f.interval(Phase::Steady), d_secs(10));
        assert_eq!(Phase::Steady.label(), STEADY);
        assert_eq!(Phase::Rollout(Why::Settling).label(), ROLLOUT);
    }

    #[test]
    fn validate_keeps_samples_fresh_at_rest() {
        let max_age = d_secs(180);
        assert_eq!(Cadence::default().validate(max_age), Ok(()));
        // 163 s × 1.1 = 179.3 s: fine; 164 s × 1.1 = 180.4 s: refused, and
        // so is anything at or above the maximum age itself.
        let with = |steady: u64| Cadence {
            steady_interval: d_secs(steady),
            ..Cadence::default()
        };
        assert_eq!(with(163).validate(max_age), Ok(()));
        for steady in [164, 180, 600] {
            let err = with(steady).validate(max_age).expect_err("refused");
            assert!(
                matches!(err, CadenceError::SteadyTooLong { limit, .. } if limit == d_secs(163)),
                "{err:?}"
            );
            assert!(err.to_string().contains("below 163s"), "{err}");
        }
        let slow_rollout = Cadence {
            rollout_interval: d_secs(60),
            ..Cadence::default()
        };
        assert!(matches!(
            slow_rollout.validate(max_age),
            Err(CadenceError::RolloutSlowerThanSteady { .. })
        ));
        assert_eq!(Cadence::fixed(d_secs(10)).validate(max_age), Ok(()));
    }

    fn d_secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn jitter_stays_within_spread() {
        let base = Duration::from_secs(10);
        assert_eq!(jittered(base, 0.1, 0.0), Duration::from_secs(9));
        assert_eq!(jittered(base, 0.1, 1.0), Duration::from_secs(11));
        assert_eq!(jittered(base, 0.1, 0.5), base);
        assert_eq!(jittered(base, 0.0, 0.9), base);
        assert_eq!(jittered(base, f64::NAN, f64::NAN), base);
    }

    fn arb_verdict() -> impl Strategy<Value = AgentVerdict> {
        prop_oneof![
            Just(AgentVerdict::Healthy),
            Just(AgentVerdict::Unhealthy),
            Just(AgentVerdict::HardStop),
        ]
    }

    fn arb_image() -> impl Strategy<Value = String> {
        prop_oneof![Just(V1.to_owned()), Just(V2.to_owned())]
    }

    fn arb_gate() -> impl Strategy<Value = Option<RolloutGate>> {
        proptest::option::of((
            arb_image(),
            proptest::option::of(arb_image()),
            arb_verdict(),
            proptest::option::of(-3_000i64..3_000),
        ))
        .prop_map(|g| {
            g.map(|(target, baseline, verdict, since)| {
                gate(&target, baseline.as_deref(), verdict, since)
            })
        })
    }

    proptest! {
        /// Never at rest unless the verdict is healthy on `spec.image`
        /// with the pods on one image, and, after an upgrade, healthy for
        /// the whole settle period.
        #[test]
        fn at_rest_only_when_healthy_settled_and_converged(
            spec in arb_image(),
            pods in proptest::collection::vec(proptest::option::of(arb_image()), 0..4),
            g in arb_gate(),
            now in -3_000i64..3_000,
            settle in 0u64..3_000,
        ) {
            let settle = Duration::from_secs(settle);
            let p = phase(&spec, pods.iter().map(|i| i.as_deref()), g.as_ref(), ts(now), settle);
            if p == Phase::Steady {
                let g = g.as_ref().expect("a verdict");
                prop_assert_eq!(g.verdict, AgentVerdict::Healthy);
                prop_assert_eq!(&g.target_image, &spec);
                let known: std::collections::BTreeSet<_> = pods.iter().flatten().collect();
                prop_assert!(known.len() <= 1);
                if g.baseline_image.as_ref().is_some_and(|b| *b != spec) {
                    let since = g.healthy_since.expect("healthy since");
                    prop_assert!(ts(now).duration_since(since).as_secs() as u64 >= settle.as_secs());
                }
            }
        }

        /// Time only ever moves an instance towards rest: with the same
        /// inputs, an instance at rest at `t` is at rest at every later time.
        #[test]
        fn rest_is_monotone_in_time(
            spec in arb_image(),
            pods in proptest::collection::vec(proptest::option::of(arb_image()), 0..4),
            g in arb_gate(),
            now in -3_000i64..3_000,
            later in 0i64..3_000,
        ) {
            let at = |t: i64| phase(&spec, pods.iter().map(|i| i.as_deref()), g.as_ref(), ts(t), SETTLE);
            if at(now) == Phase::Steady {
                prop_assert_eq!(at(now + later), Phase::Steady);
            }
        }

        /// The next sweep never starts before the last one ended, and never
        /// later than the interval after its start unless it overran.
        #[test]
        fn next_start_bounds(start in 0u64..10_000, took in 0u64..10_000, interval in 0u64..10_000) {
            let d = Duration::from_millis;
            let next = next_start(d(start), d(start + took), d(interval));
            prop_assert!(next >= d(start + took));
            prop_assert!(next >= d(start + interval));
            if !overran(d(start), d(start + took), d(interval)) {
                prop_assert_eq!(next, d(start + interval));
            } else {
                prop_assert_eq!(next, d(start + took));
            }
        }
    }
}
