//! The agent's per-instance judge: `status.rolloutGate` from the previous
//! gate, the spec image and the aggregates.

use jiff::{SignedDuration, Timestamp};
use kura_gate::{GateConfig, judge_instance};
use kura_schemas::{AgentVerdict, BacklogRun, RolloutGate, RolloutHealth, Signal, UpdatePaused};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_784_628_000 + seconds).unwrap()
}

fn health(sampled: i64) -> RolloutHealth {
    RolloutHealth {
        schema_version: 1,
        observed_at: at(sampled),
        sampled_at: Some(at(sampled)),
        observed_generation: 1,
        expected_pods: 2,
        sampled_pods: 2,
        ready: true,
        serving: true,
        writer_lock_owned: true,
        initial_discovery_completed: true,
        generation_consistent: true,
        ring_consistent: true,
        ring_members: 2,
        bootstrap_inflight_peers: Some(0),
        backfill_initial_cycle: "complete".into(),
        backfilling_peers: Some(0),
        backfill_degraded: false,
        backfill_budget_exhausted_peers: Some(0),
        outbox_messages: Some(100),
        replication_lag_entries: None,
        serving_authority: None,
        fd_timeout_count: 90,
        peer_connection_failures: Some(0),
        memory_pressure_state: 0,
        inflight_requests: 0,
        counter_resets: 0,
        pods: Vec::new(),
        retired_counters: Default::default(),
        agent: "agent-0".into(),
        suspended: false,
        update_paused: None,
    }
}

const ID: &str = "kura/acme-eu";

fn judge(
    previous: Option<&RolloutGate>,
    image: &str,
    source: Option<&RolloutHealth>,
    current: Option<&RolloutHealth>,
    now: i64,
) -> RolloutGate {
    judge_instance(
        ID,
        previous,
        image,
        source,
        current,
        at(now),
        &GateConfig::default(),
    )
}

#[test]
fn first_sight_has_no_baseline_and_compares_no_counter() {
    let mut current = health(0);
    current.outbox_messages = Some(1_000_000);
    let gate = judge(None, "kura:0.6", None, Some(&current), 5);
    assert_eq!(gate.target_image, "kura:0.6");
    assert_eq!(gate.baseline_image, None);
    assert_eq!(gate.baseline_captured_at, None);
    assert_eq!(gate.baseline, Default::default());
    assert_eq!(gate.effective_baseline, Default::default());
    assert!(!gate.soak_eligible);
    assert_eq!(gate.verdict, AgentVerdict::Healthy);
    assert_eq!(gate.healthy_since, Some(at(5)));
    assert_eq!(gate.evaluated_at, at(5));
}

#[test]
fn an_image_change_captures_the_old_image_aggregate_as_baseline() {
    let first = judge(None, "kura:0.5", None, Some(&health(0)), 5);
    let old = health(20);
    let mut current = health(25);
    current.outbox_messages = Some(150);
    let gate = judge(Some(&first), "kura:0.6", Some(&old), Some(&current), 30);
    assert_eq!(gate.target_image, "kura:0.6");
    assert_eq!(gate.baseline_image.as_deref(), Some("kura:0.5"));
    assert_eq!(gate.baseline_captured_at, Some(at(30)));
    assert_eq!(gate.baseline.outbox_messages, Some(100));
    assert_eq!(gate.baseline.fd_timeout_count, Some(90));
    assert_eq!(gate.effective_baseline, gate.baseline);
    assert!(gate.soak_eligible);
    assert_eq!(gate.verdict, AgentVerdict::Healthy);
    // The clock restarts with the new target.
    assert_eq!(gate.healthy_since, Some(at(30)));

    // Above its band, the outbox starts a run: it fails only once it has
    // not fallen for the drain window (900 s by default).
    current.outbox_messages = Some(151);
    let above = judge(Some(&gate), "kura:0.6", None, Some(&current), 60);
    assert_eq!(above.verdict, AgentVerdict::Healthy);
    let run = BacklogRun {
        since: at(60),
        level: 151,
    };
    assert_eq!(above.backlog_runs.outbox, Some(run.clone()));
    // The run is part of the published status: a restarted agent, which
    // restores the gate from it, continues the run.
    let restored: RolloutGate =
        serde_json::from_value(serde_json::to_value(&above).unwrap()).unwrap();
    assert_eq!(restored, above);
    current.sampled_at = Some(at(950));
    let before = judge(Some(&restored), "kura:0.6", None, Some(&current), 959);
    assert_eq!(before.verdict, AgentVerdict::Healthy);
    let next = judge(Some(&before), "kura:0.6", None, Some(&current), 960);
    assert_eq!(next.verdict, AgentVerdict::Unhealthy);
    assert_eq!(next.signal, Some(Signal::OutboxRegressed));
    assert_eq!(next.healthy_since, None);
    let evidence = &next.evidence[0];
    assert_eq!(evidence.server, ID);
    assert_eq!(
        (evidence.observed, evidence.band_top, evidence.baseline),
        (Some(151), Some(150), Some(100))
    );
    assert_eq!(evidence.run, Some(run));
    // The baseline carries over unchanged while the image stays.
    assert_eq!(next.baseline, gate.baseline);
    assert_eq!(next.baseline_captured_at, gate.baseline_captured_at);
}

#[test]
fn a_counter_reset_lowers_the_effective_baseline_and_later_growth_is_caught() {
    let first = judge(None, "a", None, Some(&health(0)), 5);
    let gate = judge(Some(&first), "b", Some(&health(0)), Some(&health(5)), 10);
    let mut current = health(15);
    current.fd_timeout_count = 3;
    let reset = judge(Some(&gate), "b", None, Some(&current), 20);
    assert_eq!(reset.verdict, AgentVerdict::Healthy);
    assert_eq!(reset.baseline.fd_timeout_count, Some(90));
    assert_eq!(reset.effective_baseline.fd_timeout_count, Some(3));
    assert_eq!(reset.healthy_since, gate.healthy_since);

    // The agent restarts: it restores the gate from status.
    let restored: RolloutGate =
        serde_json::from_str(&serde_json::to_string(&reset).unwrap()).unwrap();
    current.fd_timeout_count = 4;
    current.sampled_at = Some(at(25));
    let grown = judge(Some(&restored), "b", None, Some(&current), 30);
    assert_eq!(grown.verdict, AgentVerdict::Unhealthy);
    assert_eq!(grown.signal, Some(Signal::FdTimeoutsRegressed));
    assert_eq!(grown.evidence[0].baseline, Some(3));
    assert_eq!(grown.evidence[0].band_top, Some(3));
}

#[test]
fn a_stale_sample_does_not_lower_the_baseline() {
    let first = judge(None, "a", None, Some(&health(0)), 5);
    let gate = judge(Some(&first), "b", Some(&health(0)), Some(&health(5)), 10);
    let mut old = health(0);
    old.fd_timeout_count = 3;
    let stale = judge(Some(&gate), "b", None, Some(&old), 400);
    assert_eq!(stale.signal, Some(Signal::SampleStale));
    assert_eq!(stale.effective_baseline.fd_timeout_count, Some(90));
}

#[test]
fn sick_at_baseline_gets_absolute_checks_but_no_counter_comparison() {
    let first = judge(None, "a", None, Some(&health(0)), 5);
    let mut sick = health(0);
    sick.ready = false;
    let gate = judge(Some(&first), "b", Some(&sick), Some(&sick), 10);
    assert!(!gate.soak_eligible);
    assert_eq!(gate.verdict, AgentVerdict::Unhealthy);
    assert_eq!(gate.signal, Some(Signal::NotReady));

    let mut grown = health(15);
    grown.outbox_messages = Some(1_000_000);
    grown.fd_timeout_count = 1_000;
    let judged = judge(Some(&gate), "b", None, Some(&grown), 20);
    assert_eq!(judged.verdict, AgentVerdict::Healthy);
    assert_eq!(judged.healthy_since, Some(at(20)));
}

#[test]
fn critical_memory_pressure_is_a_hard_stop_eligible_or_not() {
    let mut critical = health(0);
    critical.memory_pressure_state = 2;
    let gate = judge(None, "a", None, Some(&critical), 5);
    assert_eq!(gate.verdict, AgentVerdict::HardStop);
    assert_eq!(gate.signal, Some(Signal::MemoryPressureCritical));
    assert_eq!(gate.evidence[0].observed, Some(2));
    assert_eq!(gate.healthy_since, None);
}

#[test]
fn no_aggregate_or_an_old_one_is_never_healthy() {
    let missing = judge(None, "a", None, None, 5);
    assert_eq!(missing.verdict, AgentVerdict::Unhealthy);
    assert_eq!(missing.signal, Some(Signal::SampleMissing));
    let stale = judge(None, "a", None, Some(&health(0)), 181);
    assert_eq!(stale.signal, Some(Signal::SampleStale));
    assert_eq!(stale.evidence[0].observed, Some(181));
    let edge = judge(None, "a", None, Some(&health(0)), 180);
    assert_eq!(edge.verdict, AgentVerdict::Healthy);
    let mut no_pod = health(0);
    no_pod.sampled_at = None;
    let judged = judge(None, "a", None, Some(&no_pod), 5);
    assert_eq!(judged.signal, Some(Signal::SampleStale));
}

#[test]
fn healthy_since_is_kept_while_healthy_and_cleared_otherwise() {
    let a = judge(None, "a", None, Some(&health(0)), 5);
    let b = judge(Some(&a), "a", None, Some(&health(60)), 65);
    assert_eq!(b.healthy_since, Some(at(5)));
    let mut bad = health(120);
    bad.serving = false;
    let c = judge(Some(&b), "a", None, Some(&bad), 125);
    assert_eq!(
        (c.verdict, c.healthy_since),
        (AgentVerdict::Unhealthy, None)
    );
    let d = judge(Some(&c), "a", None, Some(&health(180)), 185);
    assert_eq!(d.healthy_since, Some(at(185)));
    assert!(d.evidence.is_empty());
    assert_eq!(d.signal, None);
}

#[test]
fn an_image_change_without_an_old_aggregate_gives_a_null_ineligible_baseline() {
    let a = judge(None, "a", None, Some(&health(0)), 5);
    let b = judge(Some(&a), "b", None, Some(&health(5)), 10);
    assert_eq!(b.baseline_image.as_deref(), Some("a"));
    assert_eq!(b.baseline, Default::default());
    assert!(!b.soak_eligible);
}

#[test]
fn a_stale_old_aggregate_is_not_soak_eligible() {
    let a = judge(None, "a", None, Some(&health(0)), 5);
    let b = judge(Some(&a), "b", Some(&health(0)), Some(&health(300)), 300);
    assert!(!b.soak_eligible);
    let c = judge(Some(&a), "b", Some(&health(120)), Some(&health(300)), 300);
    assert!(c.soak_eligible);
    assert_eq!(
        c.baseline_captured_at.unwrap().duration_since(at(120)),
        SignedDuration::from_secs(180)
    );
}

#[test]
fn the_same_arguments_give_the_same_gate() {
    let a = judge(None, "a", None, Some(&health(0)), 5);
    let mut current = health(10);
    current.peer_connection_failures = Some(7);
    let one = judge(Some(&a), "b", Some(&health(3)), Some(&current), 12);
    let two = judge(
        Some(&a.clone()),
        "b",
        Some(&health(3)),
        Some(&current.clone()),
        12,
    );
    assert_eq!(one, two);
}

#[test]
fn a_suspended_instance_is_suspended_and_keeps_its_baseline_and_runs() {
    let first = judge(None, "a", None, Some(&health(0)), 5);
    let mut current = health(25);
    current.outbox_messages = Some(400);
    let gate = judge(Some(&first), "b", Some(&health(0)), Some(&current), 30);
    assert_eq!(gate.verdict, AgentVerdict::Healthy);
    assert!(gate.backlog_runs.outbox.is_some());
    let mut suspended = health(40);
    suspended.suspended = true;
    suspended.sampled_at = None;
    suspended.sampled_pods = 0;
    suspended.expected_pods = 0;
    suspended.memory_pressure_state = 2;
    suspended.update_paused = Some(Box::new(UpdatePaused {
        strategy: "OnDelete".into(),
        ..UpdatePaused::default()
    }));
    let next = judge(Some(&gate), "b", None, Some(&suspended), 45);
    assert_eq!(next.verdict, AgentVerdict::Suspended);
    assert_eq!(next.signal, Some(Signal::InstanceSuspended));
    assert_eq!(next.healthy_since, None);
    assert_eq!(next.evidence.len(), 1);
    assert_eq!(next.evidence[0].signal, Signal::InstanceSuspended);
    assert_eq!(next.baseline, gate.baseline);
    assert_eq!(next.backlog_runs, gate.backlog_runs);
    assert_eq!(next.evaluated_at, at(45));
}

#[test]
fn an_update_pause_is_a_hard_stop_after_memory_pressure_even_without_a_baseline() {
    let mut current = health(0);
    current.update_paused = Some(Box::new(UpdatePaused {
        strategy: "Partition".into(),
        partition: Some(2),
        template_image: Some("kura:0.7".into()),
        held_pods: vec!["acme-0".into(), "acme-1".into()],
    }));
    // First sight: no baseline, not soak-eligible; 19 is absolute.
    let gate = judge(None, "kura:0.7", None, Some(&current), 5);
    assert_eq!(gate.verdict, AgentVerdict::HardStop);
    assert_eq!(gate.signal, Some(Signal::UpdatePaused));
    let e = &gate.evidence[0];
    assert_eq!(e.update_paused, current.update_paused);
    assert_eq!(
        e.detail.as_deref(),
        Some("Partition pause, partition 2, template image kura:0.7, holding acme-0, acme-1")
    );
    // Memory pressure comes first.
    current.memory_pressure_state = 2;
    let gate = judge(None, "kura:0.7", None, Some(&current), 5);
    assert_eq!(gate.signal, Some(Signal::MemoryPressureCritical));
}

#[test]
fn a_falling_outbox_never_fails_and_a_drain_window_of_zero_is_the_band_alone() {
    let first = judge(None, "a", None, Some(&health(0)), 5);
    let gate = judge(Some(&first), "b", Some(&health(0)), Some(&health(5)), 10);
    // Falling by one every minute for an hour, far above the band (150).
    let mut g = gate.clone();
    for minute in 1..=60 {
        let mut current = health(minute * 60 - 5);
        current.outbox_messages = Some(10_000 - u64::try_from(minute).unwrap());
        g = judge(Some(&g), "b", None, Some(&current), minute * 60);
        assert_eq!(g.verdict, AgentVerdict::Healthy, "minute {minute}");
        assert_eq!(
            g.backlog_runs.outbox.as_ref().map(|r| r.since),
            Some(at(minute * 60))
        );
    }
    let mut current = health(55);
    current.outbox_messages = Some(151);
    let zero = GateConfig {
        backlog_drain_window_seconds: 0,
        ..GateConfig::default()
    };
    let banded = judge_instance(ID, Some(&gate), "b", None, Some(&current), at(60), &zero);
    assert_eq!(banded.signal, Some(Signal::OutboxRegressed));
    assert_eq!(banded.evidence[0].run, None);
    assert!(banded.backlog_runs.is_empty(), "no run kept at 0");
    // Back within the band, the run is cleared.
    let above = judge(Some(&gate), "b", None, Some(&current), 60);
    assert!(above.backlog_runs.outbox.is_some());
    current.outbox_messages = Some(150);
    let within = judge(Some(&above), "b", None, Some(&current), 61);
    assert!(within.backlog_runs.is_empty());
    // A new baseline (a new target image) clears the runs.
    current.outbox_messages = Some(151);
    let fresh = judge(Some(&above), "c", Some(&health(60)), Some(&current), 70);
    assert_eq!(
        fresh.backlog_runs.outbox.as_ref().map(|r| r.since),
        Some(at(70))
    );
}
