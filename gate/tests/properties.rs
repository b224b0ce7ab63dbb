//! Properties of the wave judge over random tick sequences.

use jiff::{SignedDuration, Timestamp};
use kura_gate::{
    Baseline, Deployment, Gate, GateConfig, GateState, HealthView, ServerInput, ServerStatus,
    TickInput, Verdict, VerdictKind,
};
use proptest::prelude::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_784_628_000 + seconds).unwrap()
}

/// What one server looks like in one tick.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Look {
    /// Converged, fresh, every check passes (counters at their baseline).
    Good,
    /// No aggregate.
    Missing,
    /// An aggregate without `sampledAt`.
    NoSampledAt,
    /// Older than the maximum age by this many milliseconds (≥ 1).
    Stale(u64),
    /// Further in the future than the skew by this many milliseconds (≥ 1).
    Future(u64),
    /// Not ready.
    NotReady,
    /// Outbox one above its band.
    Outbox,
    /// Memory pressure 2.
    Critical,
    /// The fenced-serving grant in `Fencing`.
    Fenced,
    /// Fenced serving with no valid writer (a handover in flight).
    NoWriter,
    /// Replication lag one above its band.
    Lag,
    /// Not converged, deployment running.
    Unconverged,
    /// Not converged, deployment failed.
    DeploymentFailed,
    /// Converged with status failed.
    StatusFailed,
}

impl Look {
    fn bad_sample(self) -> bool {
        matches!(
            self,
            Look::Missing | Look::NoSampledAt | Look::Stale(_) | Look::Future(_)
        )
    }
}

fn sample_look() -> impl Strategy<Value = Look> + Clone {
    prop_oneof![
        Just(Look::Missing),
        Just(Look::NoSampledAt),
        (1u64..10_000_000).prop_map(Look::Stale),
        (1u64..10_000_000).prop_map(Look::Future),
    ]
}

fn any_look() -> impl Strategy<Value = Look> + Clone {
    prop_oneof![
        6 => Just(Look::Good),
        1 => sample_look(),
        1 => Just(Look::NotReady),
        1 => Just(Look::Outbox),
        1 => Just(Look::NoWriter),
        1 => Just(Look::Lag),
        1 => Just(Look::Unconverged),
    ]
}

fn stopping_look() -> impl Strategy<Value = Look> + Clone {
    prop_oneof![
        8 => Just(Look::Good),
        1 => Just(Look::Critical),
        1 => Just(Look::Fenced),
        1 => Just(Look::DeploymentFailed),
        1 => Just(Look::StatusFailed),
        1 => Just(Look::Unconverged),
        1 => Just(Look::NotReady),
        1 => Just(Look::Outbox),
        1 => Just(Look::Lag),
    ]
}

/// One tick: seconds since the previous one, whether the attempt goes up,
/// and each server's look.
#[derive(Debug, Clone)]
struct Step {
    dt: i64,
    resume: bool,
    looks: Vec<Look>,
}

fn steps(
    look: impl Strategy<Value = Look> + Clone,
    servers: usize,
) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            1i64..500,
            prop::bool::weighted(0.05),
            prop::collection::vec(look, servers),
        )
            .prop_map(|(dt, resume, looks)| Step { dt, resume, looks }),
        1..40,
    )
}

fn base_health(sampled: Timestamp) -> HealthView {
    let mut h = HealthView::healthy(sampled, 2);
    h.outbox_messages = Some(100);
    h.fd_timeout_count = Some(90);
    h.peer_connection_failures = Some(10);
    h.replication_lag_entries = Some(100);
    h.serving_authority = Some(kura_schemas::ServingAuthorityHealth {
        enabled_pods: 2,
        valid_writers: 1,
        phase: "Serving".into(),
        epoch: 3,
    });
    h
}

/// The servers of a tick: all in wave 0, baselines captured 10 s before the
/// attempt started.
fn servers(
    now: Timestamp,
    started: Timestamp,
    looks: &[Look],
    config: &GateConfig,
) -> Vec<ServerInput> {
    let captured = started - SignedDuration::from_secs(10);
    looks
        .iter()
        .enumerate()
        .map(|(i, look)| {
            let fresh = now - SignedDuration::from_secs(5);
            let mut health = Some(base_health(fresh));
            let mut converged = true;
            let mut deployment = Some(Deployment::Succeeded);
            let mut status = ServerStatus::Active;
            let h = health.as_mut().unwrap();
            match *look {
                Look::Good => {}
                Look::Missing => health = None,
                Look::NoSampledAt => h.sampled_at = None,
                Look::Stale(ms) => {
                    h.sampled_at = Some(
                        now - SignedDuration::from_secs(180)
                            - SignedDuration::from_millis(ms as i64),
                    )
                }
                Look::Future(ms) => {
                    h.sampled_at = Some(
                        now + SignedDuration::from_secs(60)
                            + SignedDuration::from_millis(ms as i64),
                    )
                }
                Look::NotReady => h.ready = Some(false),
                Look::Outbox => h.outbox_messages = Some(151),
                Look::Critical => h.memory_pressure_state = Some(2),
                Look::Fenced => {
                    if let Some(a) = h.serving_authority.as_mut() {
                        a.phase = "Fencing".into();
                        a.valid_writers = 0;
                    }
                }
                Look::NoWriter => {
                    if let Some(a) = h.serving_authority.as_mut() {
                        a.phase = "Quiescing".into();
                        a.valid_writers = 0;
                    }
                }
                Look::Lag => h.replication_lag_entries = Some(151),
                Look::Unconverged => {
                    converged = false;
                    deployment = Some(Deployment::Running);
                }
                Look::DeploymentFailed => {
                    converged = false;
                    deployment = Some(Deployment::Failed);
                }
                Look::StatusFailed => status = ServerStatus::Failed,
            }
            ServerInput {
                id: format!("s{i}"),
                wave: 0,
                converged,
                deployment,
                status,
                baseline: Some(Baseline::capture(
                    Some(&base_health(captured - SignedDuration::from_secs(5))),
                    captured,
                    config,
                )),
                health,
            }
        })
        .collect()
}

fn ticks(steps: &[Step], config: &GateConfig) -> Vec<TickInput> {
    let mut now = at(0);
    let mut attempt = 0;
    let mut started = now;
    steps
        .iter()
        .map(|step| {
            now += SignedDuration::from_secs(step.dt);
            if step.resume {
                attempt += 1;
                started = now;
            }
            TickInput {
                now,
                wave: 0,
                wave_started_at: started,
                attempt,
                servers: servers(now, started, &step.looks, config),
            }
        })
        .collect()
}

fn run(ticks: &[TickInput], config: &GateConfig) -> Vec<Verdict> {
    let mut gate = Gate::new(config.clone()).unwrap();
    ticks.iter().map(|t| gate.tick(t).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Missing, stale or future-dated health on any converged eligible
    /// server never yields pass, whatever the other servers look like.
    #[test]
    fn missing_stale_or_future_health_never_passes(
        seq in (1usize..5).prop_flat_map(|n| steps(any_look(), n)),
        bad in sample_look(),
        which in any::<prop::sample::Index>(),
    ) {
        let config = GateConfig { soak_seconds: vec![0], ..GateConfig::default() };
        let mut seq = seq;
        for step in &mut seq {
            let i = which.index(step.looks.len());
            step.looks[i] = bad;
        }
        let inputs = ticks(&seq, &config);
        for (tick, verdict) in run(&inputs, &config).iter().enumerate() {
            prop_assert_ne!(verdict.verdict, VerdictKind::Pass, "tick {}", tick);
        }
    }

    /// A pass means every converged eligible server was seen healthy (and
    /// the wave converged) in every tick of at least the last soak.
    /// (With the drain window at 0, so that a backlog above its band fails
    /// on its first tick, as every other look but `Good` does.)
    #[test]
    fn a_pass_implies_a_full_healthy_soak(
        seq in (1usize..4).prop_flat_map(|n| steps(any_look(), n)),
    ) {
        let config = GateConfig { backlog_drain_window_seconds: 0, ..GateConfig::default() };
        let inputs = ticks(&seq, &config);
        let verdicts = run(&inputs, &config);
        for (t, verdict) in verdicts.iter().enumerate() {
            if verdict.verdict != VerdictKind::Pass {
                continue;
            }
            // The oldest tick of the unbroken good run ending at t.
            let mut first = t;
            while first > 0
                && inputs[first - 1].attempt == inputs[t].attempt
                && seq[first - 1].looks.iter().all(|l| *l == Look::Good)
            {
                first -= 1;
            }
            prop_assert!(seq[t].looks.iter().all(|l| *l == Look::Good));
            let soaked = inputs[t].now.duration_since(inputs[first].now);
            prop_assert!(soaked >= SignedDuration::from_secs(900), "tick {} soaked {:?}", t, soaked);
            prop_assert_eq!(verdict.healthy_since, Some(inputs[first].now));
        }
        for (t, step) in seq.iter().enumerate() {
            if step.looks.iter().any(|l| l.bad_sample()) {
                prop_assert_ne!(verdicts[t].verdict, VerdictKind::Pass);
            }
        }
    }

    /// Verdicts are a function of the inputs alone: two fresh gates agree,
    /// and so does a gate restored from the serialized state at any tick.
    #[test]
    fn verdicts_depend_on_the_inputs_alone(
        seq in (1usize..4).prop_flat_map(|n| steps(stopping_look(), n)),
        split in any::<prop::sample::Index>(),
    ) {
        let config = GateConfig { soak_seconds: vec![600, 120], ..GateConfig::default() };
        let inputs = ticks(&seq, &config);
        let once = run(&inputs, &config);
        prop_assert_eq!(&once, &run(&inputs, &config));
        let split = split.index(inputs.len() + 1);
        let mut first = Gate::new(config.clone()).unwrap();
        let mut again: Vec<Verdict> = inputs[..split].iter().map(|t| first.tick(t).unwrap()).collect();
        let json = serde_json::to_string(first.state()).unwrap();
        let state: GateState = serde_json::from_str(&json).unwrap();
        let mut second = Gate::restore(config.clone(), state).unwrap();
        again.extend(inputs[split..].iter().map(|t| second.tick(t).unwrap()));
        prop_assert_eq!(once, again);
    }

    /// Once stopped, the same attempt stays stopped with the same verdict;
    /// a higher attempt starts fresh.
    #[test]
    fn a_hard_stop_latches_for_its_attempt(
        seq in (1usize..4).prop_flat_map(|n| steps(stopping_look(), n)),
    ) {
        let config = GateConfig::default();
        let inputs = ticks(&seq, &config);
        let verdicts = run(&inputs, &config);
        let mut stopped: Option<(u32, &Verdict)> = None;
        for (t, verdict) in verdicts.iter().enumerate() {
            let attempt = inputs[t].attempt;
            match stopped {
                Some((a, stop)) if a == attempt => prop_assert_eq!(verdict, stop, "tick {}", t),
                _ => {
                    stopped = None;
                    if verdict.verdict == VerdictKind::HardStop {
                        stopped = Some((attempt, verdict));
                    }
                }
            }
        }
    }

    /// A fenced server in `Fencing` stops the wave (a hard stop, never a
    /// pass), unless a hard stop that comes before it already did.
    #[test]
    fn fencing_always_stops_and_never_passes(
        seq in (1usize..4).prop_flat_map(|n| steps(stopping_look(), n)),
        which in any::<prop::sample::Index>(),
    ) {
        let config = GateConfig { soak_seconds: vec![0], ..GateConfig::default() };
        let mut seq = seq;
        for step in &mut seq {
            step.resume = false;
            let i = which.index(step.looks.len());
            step.looks[i] = Look::Fenced;
        }
        let inputs = ticks(&seq, &config);
        for (tick, verdict) in run(&inputs, &config).iter().enumerate() {
            prop_assert_eq!(verdict.verdict, VerdictKind::HardStop, "tick {}", tick);
        }
    }

    /// A backlog that keeps falling never fails checks 13 and 18, however
    /// far above its band and however long: every tick on which it is
    /// reported it is lower than on the one before (a null value now and
    /// then is no tick of the run), in the wave judge and in the agent's
    /// per-instance judge, whatever the drain window (but 0) and the
    /// spacing of the ticks.
    #[test]
    fn a_backlog_that_keeps_falling_never_fails(
        start in 1_000u64..1_000_000_000,
        falls in prop::collection::vec((1i64..2_000, 0u64..5_000, prop::bool::weighted(0.1)), 1..60),
        window in 1u64..5_000,
    ) {
        let config = GateConfig {
            soak_seconds: vec![0],
            backlog_drain_window_seconds: window,
            ..GateConfig::default()
        };
        let captured = at(-10);
        let baseline = Baseline::capture(Some(&base_health(at(-15))), captured, &config);
        let mut gate = Gate::new(config.clone()).unwrap();
        let mut agent: Option<kura_schemas::RolloutGate> = None;
        let mut level = start;
        let mut now = at(0);
        for (tick, (dt, drop, gap)) in falls.into_iter().enumerate() {
            now += SignedDuration::from_secs(dt);
            let mut h = base_health(now - SignedDuration::from_secs(5));
            if gap {
                h.outbox_messages = None;
                h.replication_lag_entries = None;
            } else {
                level = level.saturating_sub(drop.max(1)).max(200);
                h.outbox_messages = Some(level);
                h.replication_lag_entries = Some(level);
                if level == 200 {
                    // At the floor it could only stay: the run ends here.
                    break;
                }
            }
            let verdict = gate.tick(&TickInput {
                now,
                wave: 0,
                wave_started_at: at(0),
                attempt: 0,
                servers: vec![ServerInput {
                    id: "s".into(),
                    wave: 0,
                    converged: true,
                    deployment: Some(Deployment::Succeeded),
                    status: ServerStatus::Active,
                    baseline: Some(baseline.clone()),
                    health: Some(h.clone()),
                }],
            }).unwrap();
            prop_assert_ne!(verdict.verdict, VerdictKind::Soak, "tick {}: {:?}", tick, verdict);
            prop_assert_ne!(verdict.verdict, VerdictKind::HardStop, "tick {}: {:?}", tick, verdict);
            // The agent's judge, from a baseline with the same counters.
            let previous = agent.take().unwrap_or_else(|| kura_schemas::RolloutGate {
                target_image: "new".into(),
                baseline_image: Some("old".into()),
                baseline_captured_at: Some(captured),
                baseline: baseline.counters.clone(),
                effective_baseline: baseline.counters.clone(),
                soak_eligible: true,
                verdict: kura_schemas::AgentVerdict::Unhealthy,
                signal: None,
                healthy_since: None,
                evaluated_at: captured,
                evidence: Vec::new(),
                config_error: None,
                backlog_runs: Default::default(),
            });
            let judged = kura_gate::judge_instance_view(
                "s", Some(&previous), "new", None, Some(&h), now, &config,
            );
            prop_assert_eq!(judged.verdict, kura_schemas::AgentVerdict::Healthy, "tick {}: {:?}", tick, judged.evidence);
            agent = Some(judged);
        }
    }
}
