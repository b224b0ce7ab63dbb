//! Property tests of the aggregation over random sweep sequences with random
//! process restarts, container restarts, pod replacements, failed samples,
//! pods disappearing and reappearing, long gaps (retention) and agent
//! restarts (restore from the last published aggregate).

use jiff::{SignedDuration, Timestamp};
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
use kura_agent::model::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use kura_schemas::health::MAX_POD_ENTRIES;
use kura_schemas::{NodeReport, RolloutHealth, parse_report};
use proptest::prelude::*;

/// What happens to one pod in one sweep.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// Answers; counters grow by the given amounts.
    Answer(u8, u8),
    /// Listed but the poll failed.
    Fail,
    /// Not listed by discovery (scaled down, being replaced, ...).
    Absent,
    /// The process restarts in place: raw counters restart from a small value.
    ProcessRestart(u8),
    /// The container restarts: restart count + 1, raw counters anything.
    ContainerRestart(u16),
    /// The pod is replaced under the same name: new UID, raw counters anything.
    Replace(u16),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (0u8..5, 0u8..3).prop_map(|(a, b)| Action::Answer(a, b)),
        2 => Just(Action::Fail),
        2 => Just(Action::Absent),
        1 => (0u8..3).prop_map(Action::ProcessRestart),
        1 => (0u16..300).prop_map(Action::ContainerRestart),
        1 => (0u16..300).prop_map(Action::Replace),
    ]
}

#[derive(Debug, Clone)]
struct SweepPlan {
    actions: Vec<Action>,
    /// Sort keys: the order the samples are handed to the second aggregator.
    order: Vec<u8>,
    /// Seconds since the previous sweep (sometimes past the retention).
    gap_secs: u32,
    /// The agent restarts before this sweep.
    agent_restart: bool,
    ready: Vec<bool>,
}

fn sweep_plan(pods: usize) -> impl Strategy<Value = SweepPlan> {
    (
        prop::collection::vec(action(), pods),
        prop::collection::vec(any::<u8>(), pods),
        prop_oneof![4 => 1u32..120, 1 => 1800u32..5400],
        prop::bool::weighted(0.15),
        prop::collection::vec(prop::bool::weighted(0.9), pods),
    )
        .prop_map(
            |(actions, order, gap_secs, agent_restart, ready)| SweepPlan {
                actions,
                order,
                gap_secs,
                agent_restart,
                ready,
            },
        )
}

/// The simulated process behind one pod name.
#[derive(Debug, Clone)]
struct Process {
    uid: u32,
    restarts: u32,
    incarnation: u32,
    fd: u64,
    peer: u64,
    /// 1, 3 or 4: which keys the report carries.
    generation: u8,
}

fn templates() -> [NodeReport; 3] {
    let g1 = br#"{"generation":1,"ready":true,"state":"serving","ring_members":3,
        "initial_discovery_completed":true,"writer_lock_owned":true,"memory_pressure_state":0,
        "fd_timeout_count":0,"outbox_messages":3,"bootstrap_inflight_peers":0}"#;
    let g3 = br#"{"generation":1,"ready":true,"state":"serving","ring_members":3,
        "ring_fingerprint":"9f2c01ab77e4d310","initial_discovery_completed":true,
        "writer_lock_owned":true,"memory_pressure_state":1,"fd_timeout_count":0,
        "peer_connection_failure_count":0,"outbox_messages":2,"backfill_initial_cycle":"pending"}"#;
    let g4 = br#"{"generation":1,"ready":true,"state":"serving","ring_members":3,
        "ring_fingerprint":"9f2c01ab77e4d310","initial_discovery_completed":true,
        "writer_lock_owned":true,"memory_pressure_state":0,"fd_timeout_count":0,
        "peer_connection_failure_count":0,"backfill_initial_cycle":"complete",
        "serving_authority":{"identity":{"pod_uid":"x","incarnation":"0"}}}"#;
    [
        parse_report(g1).unwrap(),
        parse_report(g3).unwrap(),
        parse_report(g4).unwrap(),
    ]
}

fn report(templates: &[NodeReport; 3], p: &Process, ready: bool) -> NodeReport {
    let mut r = match p.generation {
        1 => templates[0].clone(),
        3 => templates[1].clone(),
        _ => templates[2].clone(),
    };
    r.ready = ready;
    r.fd_timeout_count = p.fd;
    if r.peer_connection_failure_count.is_some() {
        r.peer_connection_failure_count = Some(p.peer);
    }
    if let Some(id) = r
        .serving_authority
        .as_mut()
        .and_then(|a| a.identity.as_mut())
    {
        id.incarnation = Some(p.incarnation.to_string());
        id.pod_uid = Some(format!("uid-{}", p.uid));
    }
    r
}

/// Turn plans into the samples of each sweep (in name order) and the times.
fn materialize(
    pods: usize,
    generations: &[u8],
    plans: &[SweepPlan],
) -> Vec<(Timestamp, Vec<PodSample>)> {
    let templates = templates();
    let mut procs: Vec<Process> = (0..pods)
        .map(|i| Process {
            uid: i as u32 * 1000,
            restarts: 0,
            incarnation: 0,
            fd: 0,
            peer: 0,
            generation: generations[i % generations.len()],
        })
        .collect();
    let mut now: Timestamp = "2026-07-21T10:00:00Z".parse().unwrap();
    let mut out = Vec::new();
    for plan in plans {
        now += SignedDuration::from_secs(i64::from(plan.gap_secs));
        let mut samples = Vec::new();
        for (i, act) in plan.actions.iter().enumerate() {
            let p = &mut procs[i];
            match *act {
                Action::Answer(a, b) => {
                    p.fd += u64::from(a);
                    p.peer += u64::from(b);
                }
                Action::ProcessRestart(v) => {
                    p.fd = u64::from(v);
                    p.peer = 0;
                    p.incarnation += 1;
                }
                Action::ContainerRestart(v) => {
                    p.restarts += 1;
                    p.incarnation += 1;
                    p.fd = u64::from(v);
                    p.peer = u64::from(v / 3);
                }
                Action::Replace(v) => {
                    p.uid += 1;
                    p.restarts = 0;
                    p.incarnation += 1;
                    p.fd = u64::from(v);
                    p.peer = u64::from(v / 2);
                }
                Action::Fail | Action::Absent => {}
            }
            if matches!(act, Action::Absent) {
                continue;
            }
            let result = if matches!(act, Action::Fail) {
                SampleResult::Error("timeout".into())
            } else {
                SampleResult::Report(Box::new(report(&templates, p, plan.ready[i])))
            };
            samples.push(PodSample {
                replication_lag_entries: None,
                pod: std::sync::Arc::new(PodIdentity {
                    name: format!("acme-{i:02}").into(),
                    uid: format!("uid-{}", p.uid).into(),
                    restart_count: p.restarts,
                    image: None,
                    ip: None,
                }),
                received_at: now - SignedDuration::from_millis(i as i64),
                result,
            });
        }
        out.push((now, samples));
    }
    out
}

fn instance(expected: u32) -> InstanceInfo {
    InstanceInfo {
        namespace: "kura".into(),
        name: "acme".into(),
        expected_pods: expected,
        generation: 1,
    }
}

fn check_invariants(
    prev: Option<&RolloutHealth>,
    next: &RolloutHealth,
) -> Result<(), TestCaseError> {
    prop_assert!(!next.ready || next.sampled_pods >= next.expected_pods);
    prop_assert!(!next.serving || next.sampled_pods >= next.expected_pods);
    prop_assert!(!next.ring_consistent || next.sampled_pods >= next.expected_pods);
    prop_assert!(next.pods.len() <= MAX_POD_ENTRIES);
    if let Some(p) = prev {
        prop_assert!(
            next.fd_timeout_count >= p.fd_timeout_count,
            "fdTimeoutCount fell from {} to {}",
            p.fd_timeout_count,
            next.fd_timeout_count
        );
        if let Some(before) = p.peer_connection_failures {
            let after = next.peer_connection_failures;
            prop_assert!(
                after.is_some_and(|a| a >= before),
                "peerConnectionFailures fell from {before} to {after:?}"
            );
        }
        prop_assert!(next.counter_resets >= p.counter_resets);
    }
    Ok(())
}

/// Runs the sequence twice (samples in name order and in a shuffled order),
/// with the planned agent restarts, and once without any restart. Plans
/// drawn for more pods are cut to `pods`.
fn run_sequence(
    pods: usize,
    expected: u32,
    generations: &[u8],
    plans: Vec<SweepPlan>,
) -> Result<(), TestCaseError> {
    let plans: Vec<SweepPlan> = plans
        .into_iter()
        .map(|mut p| {
            p.actions.truncate(pods);
            p.order.truncate(pods);
            p.ready.truncate(pods);
            p
        })
        .collect();
    let plans = &plans[..];
    let sweeps = materialize(pods, generations, plans);
    let inst = instance(expected);
    let config = AggregateConfig::default();
    let mut a = InstanceAggregator::new(config);
    let mut b = InstanceAggregator::new(config);
    let mut never_restarted = InstanceAggregator::new(config);
    let mut last: Option<RolloutHealth> = None;
    let mut anyone_gone = false;
    for (plan, (now, samples)) in plans.iter().zip(&sweeps) {
        if plan.agent_restart
            && let Some(prev) = &last
        {
            a = InstanceAggregator::restore(prev, config);
            b = InstanceAggregator::restore(prev, config);
        }
        let mut shuffled: Vec<(u8, PodSample)> = samples
            .iter()
            .map(|s| {
                let i: usize = s.pod.name[5..].parse().unwrap();
                (plan.order[i], s.clone())
            })
            .collect();
        shuffled.sort_by_key(|(k, _)| *k);
        let shuffled: Vec<PodSample> = shuffled.into_iter().map(|(_, s)| s).collect();

        let out_a = a.fold(&inst, samples, *now, "agent-a");
        let out_b = b.fold(&inst, &shuffled, *now, "agent-a");
        let out_c = never_restarted.fold(&inst, samples, *now, "agent-a");
        prop_assert_eq!(
            &out_a,
            &out_b,
            "the order of pods in a sweep changed the aggregate"
        );
        check_invariants(last.as_ref(), &out_a)?;
        anyone_gone |= plan.actions.iter().any(|a| matches!(a, Action::Absent));
        if !anyone_gone {
            // With every pod listed throughout, a restored agent is exactly
            // the agent that never restarted.
            prop_assert_eq!(&out_a, &out_c, "restore lost state");
        }
        // The published state restores to an aggregator that republishes it.
        let round_trip = InstanceAggregator::restore(&out_a, config);
        let again = round_trip.clone().fold(&inst, samples, *now, "agent-a");
        prop_assert!(again.fd_timeout_count >= out_a.fd_timeout_count);
        last = Some(out_a);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn small_instances(
        pods in 1usize..5,
        expected in 1u32..5,
        generations in prop::collection::vec(prop::sample::select(vec![1u8, 3, 4]), 1..4),
        plans in prop::collection::vec(sweep_plan(5), 1..30),
    ) {
        run_sequence(pods, expected, &generations, plans)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// More pods than the published bound: 32 are published, the rest's
    /// counter state is kept by the aggregator (and carried across a
    /// restore), and the invariants still hold.
    #[test]
    fn instances_past_the_pod_bound(
        pods in 30usize..40,
        plans in prop::collection::vec(sweep_plan(40), 1..8),
    ) {
        run_sequence(pods, 3, &[4, 3], plans)?;
    }
}
