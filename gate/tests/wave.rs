//! Wave-judge details the scenarios do not show: the remembered effective
//! baselines stay bounded and follow the captures; inputs the gate refuses.

use jiff::Timestamp;
use kura_gate::wave::steady_server;
use kura_gate::{Baseline, Gate, GateConfig, GateError, HealthView, ServerStatus, TickInput};
use kura_schemas::Signal;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_784_628_000 + seconds).unwrap()
}

fn server(id: &str, now: i64, captured: i64, fd: u64) -> kura_gate::ServerInput {
    let config = GateConfig::default();
    let mut base = HealthView::healthy(at(captured - 5), 1);
    base.fd_timeout_count = Some(90);
    let mut s = steady_server(id, 0, base, at(captured), &config);
    let mut health = HealthView::healthy(at(now - 5), 1);
    health.fd_timeout_count = Some(fd);
    s.health = Some(health);
    s
}

fn tick(now: i64, servers: Vec<kura_gate::ServerInput>) -> TickInput {
    TickInput {
        now: at(now),
        wave: 0,
        wave_started_at: at(0),
        attempt: 0,
        servers,
    }
}

#[test]
fn lowered_baselines_follow_captures_and_leave_with_their_servers() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    gate.tick(&tick(
        10,
        vec![server("a", 10, 0, 3), server("b", 10, 0, 5)],
    ))
    .unwrap();
    let kept = &gate.state().effective_baselines;
    assert_eq!(kept.len(), 2);
    assert_eq!(kept["a"].effective.fd_timeout_count, Some(3));

    // A new capture for "a" replaces its lowered baseline: 80 is below the
    // new 90 and lowers it afresh; "b" is destroyed and leaves the state.
    let mut b = server("b", 20, 0, 5);
    b.status = ServerStatus::Destroyed;
    gate.tick(&tick(20, vec![server("a", 20, 15, 80), b]))
        .unwrap();
    let kept = &gate.state().effective_baselines;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept["a"].captured_at, at(15));
    assert_eq!(kept["a"].effective.fd_timeout_count, Some(80));

    // Growth after the reset is caught against the lowered baseline.
    let verdict = gate.tick(&tick(30, vec![server("a", 30, 15, 81)])).unwrap();
    assert_eq!(verdict.signal, Some(Signal::FdTimeoutsRegressed));
    assert_eq!(verdict.evidence[0].baseline, Some(80));

    // A server gone from the input leaves the state too.
    let other = server("c", 40, 15, 90);
    gate.tick(&tick(40, vec![other])).unwrap();
    assert!(gate.state().effective_baselines.is_empty());
}

#[test]
fn an_ineligible_or_missing_baseline_is_not_judged_on_health() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let mut no_baseline = server("a", 10, 0, 1_000);
    no_baseline.baseline = None;
    no_baseline.health = None;
    let mut sick = server("b", 10, 0, 1_000);
    let mut sick_base = HealthView::healthy(at(-5), 1);
    sick_base.serving = Some(false);
    sick.baseline = Some(Baseline::capture(Some(&sick_base), at(0), gate.config()));
    let verdict = gate.tick(&tick(10, vec![no_baseline, sick])).unwrap();
    assert_eq!(verdict.signal, Some(Signal::Soaking));
    assert_eq!(verdict.remaining_seconds, Some(900));
}

#[test]
fn refused_inputs_leave_the_state_alone() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let mut later = tick(10, vec![server("a", 10, 0, 90)]);
    later.attempt = 2;
    gate.tick(&later).unwrap();
    let before = gate.state().clone();
    let mut earlier = tick(20, vec![server("a", 20, 0, 90)]);
    earlier.attempt = 1;
    assert_eq!(
        gate.tick(&earlier),
        Err(GateError::AttemptWentBack {
            previous: 2,
            got: 1
        })
    );
    let mut twice = tick(20, vec![server("a", 20, 0, 90), server("a", 20, 0, 90)]);
    twice.attempt = 2;
    assert_eq!(
        gate.tick(&twice),
        Err(GateError::DuplicateServer("a".into()))
    );
    assert_eq!(gate.state(), &before);
    assert_eq!(
        Gate::new(GateConfig {
            soak_seconds: Vec::new(),
            ..GateConfig::default()
        })
        .err(),
        Some(GateError::EmptySoakList)
    );
}

#[test]
fn a_new_wave_start_restarts_the_soak_clock() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let first = gate.tick(&tick(10, vec![server("a", 10, 0, 90)])).unwrap();
    assert_eq!(first.healthy_since, Some(at(10)));
    let mut restarted = tick(20, vec![server("a", 20, 0, 90)]);
    restarted.wave_started_at = at(15);
    let verdict = gate.tick(&restarted).unwrap();
    assert_eq!(verdict.healthy_since, Some(at(20)));
    assert_eq!(verdict.remaining_seconds, Some(900));
}
