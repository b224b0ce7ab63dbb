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

fn pause() -> kura_schemas::UpdatePaused {
    kura_schemas::UpdatePaused {
        strategy: "OnDelete".into(),
        partition: None,
        template_image: Some("kura:0.7".into()),
        held_pods: vec!["acme-0".into()],
    }
}

#[test]
fn an_update_pause_stops_the_wave_converged_or_not_after_the_other_hard_stops() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    // Not converged, not soak-eligible: check 19 still applies.
    let mut held = server("a", 10, 0, 90);
    held.converged = false;
    held.baseline = None;
    held.health.as_mut().unwrap().update_paused = Some(Box::new(pause()));
    let verdict = gate.tick(&tick(10, vec![held.clone()])).unwrap();
    assert_eq!(verdict.verdict, kura_gate::VerdictKind::HardStop);
    assert_eq!(verdict.signal, Some(Signal::UpdatePaused));
    assert_eq!(verdict.server_id.as_deref(), Some("a"));
    let e = &verdict.evidence[0];
    assert_eq!(e.update_paused, Some(Box::new(pause())));
    assert_eq!(
        e.detail.as_deref(),
        Some("OnDelete pause, template image kura:0.7, holding acme-0")
    );
    // It latches, and its state restores.
    let state: kura_gate::GateState =
        serde_json::from_str(&serde_json::to_string(gate.state()).unwrap()).unwrap();
    let mut restored = Gate::restore(GateConfig::default(), state).unwrap();
    assert_eq!(restored.tick(&tick(20, vec![])).unwrap(), verdict);

    // Fencing on another (converged, eligible) server comes first; so
    // does memory pressure on the paused server itself.
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let mut fenced = server("b", 10, 0, 90);
    fenced.health.as_mut().unwrap().serving_authority =
        Some(kura_schemas::ServingAuthorityHealth {
            enabled_pods: 1,
            valid_writers: 0,
            phase: "Fencing".into(),
            epoch: 1,
        });
    let verdict = gate.tick(&tick(10, vec![held, fenced])).unwrap();
    assert_eq!(verdict.signal, Some(Signal::ServingFenced));
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let mut both = server("c", 10, 0, 90);
    let h = both.health.as_mut().unwrap();
    h.update_paused = Some(Box::new(pause()));
    h.memory_pressure_state = Some(2);
    let verdict = gate.tick(&tick(10, vec![both])).unwrap();
    assert_eq!(verdict.signal, Some(Signal::MemoryPressureCritical));
    assert_eq!(verdict.evidence.len(), 1);
}

#[test]
fn a_suspended_server_leaves_scope() {
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let mut asleep = server("a", 10, 0, 5_000);
    asleep.converged = false;
    let h = asleep.health.as_mut().unwrap();
    h.suspended = Some(true);
    h.update_paused = Some(Box::new(pause()));
    h.memory_pressure_state = Some(2);
    // Its wave has nothing else: it passes at once, as an empty wave does.
    let verdict = gate.tick(&tick(10, vec![asleep.clone()])).unwrap();
    assert_eq!(verdict.verdict, kura_gate::VerdictKind::Pass);
    // Beside a healthy server it neither holds nor stops the wave.
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let verdict = gate
        .tick(&tick(10, vec![asleep, server("b", 10, 0, 90)]))
        .unwrap();
    assert_eq!(verdict.signal, Some(Signal::Soaking));
}

#[test]
fn backlog_runs_are_kept_restored_and_cleared_by_a_new_capture() {
    let config = GateConfig::default();
    let mut gate = Gate::new(config.clone()).unwrap();
    let with_outbox = |now: i64, captured: i64, outbox: u64| {
        let mut s = server("a", now, captured, 90);
        s.health.as_mut().unwrap().outbox_messages = Some(outbox);
        s
    };
    // Baseline outbox 0: band top 50.
    let v = gate.tick(&tick(10, vec![with_outbox(10, 0, 400)])).unwrap();
    assert_eq!(v.signal, Some(Signal::Soaking));
    let runs = &gate.state().backlog_runs["a"];
    assert_eq!(runs.captured_at, at(0));
    assert_eq!(
        runs.outbox,
        Some(kura_schemas::BacklogRun {
            since: at(10),
            level: 400
        })
    );
    // Not converged: the run is left as it is, whatever the value.
    let mut rolling = with_outbox(300, 0, 10);
    rolling.converged = false;
    gate.tick(&tick(300, vec![rolling])).unwrap();
    assert_eq!(
        gate.state().backlog_runs["a"]
            .outbox
            .as_ref()
            .unwrap()
            .since,
        at(10)
    );
    // Restored from its stored state, the gate continues the run: at 910
    // it has not fallen for 900 s.
    let state: kura_gate::GateState =
        serde_json::from_str(&serde_json::to_string(gate.state()).unwrap()).unwrap();
    let mut restored = Gate::restore(config.clone(), state).unwrap();
    let v = restored
        .tick(&tick(909, vec![with_outbox(909, 0, 400)]))
        .unwrap();
    assert_eq!(v.signal, Some(Signal::Soaking));
    let v = restored
        .tick(&tick(910, vec![with_outbox(910, 0, 400)]))
        .unwrap();
    assert_eq!(v.signal, Some(Signal::OutboxRegressed));
    let e = &v.evidence[0];
    assert_eq!(
        (e.observed, e.band_top, e.baseline),
        (Some(400), Some(50), Some(0))
    );
    assert_eq!(
        e.run,
        Some(kura_schemas::BacklogRun {
            since: at(10),
            level: 400
        })
    );
    // A new capture clears the run: it starts again.
    let v = restored
        .tick(&tick(920, vec![with_outbox(920, 915, 400)]))
        .unwrap();
    assert_eq!(v.signal, Some(Signal::Soaking));
    assert_eq!(
        restored.state().backlog_runs["a"]
            .outbox
            .as_ref()
            .unwrap()
            .since,
        at(920)
    );
    // A resume (a higher attempt) clears it too.
    let mut resumed = tick(930, vec![with_outbox(930, 915, 400)]);
    resumed.attempt = 1;
    restored.tick(&resumed).unwrap();
    assert_eq!(
        restored.state().backlog_runs["a"]
            .outbox
            .as_ref()
            .unwrap()
            .since,
        at(930)
    );
    // A state with runs but no attempt is refused.
    let bogus = kura_gate::GateState {
        backlog_runs: restored.state().backlog_runs.clone(),
        ..kura_gate::GateState::default()
    };
    assert!(Gate::restore(config, bogus).is_err());
}

/// The hard stops are the signal home's (`kura_schemas::SIGNALS`): a
/// state that latched any of them restores, and a latched signal the home
/// does not call a hard stop is refused. A hard stop added to the home is
/// one the wave judge latches and restores, with no second list to edit.
#[test]
fn every_hard_stop_of_the_signal_home_restores_latched_and_no_other_signal_does() {
    for signal in Signal::ALL {
        let state = kura_gate::GateState {
            attempt: Some(0),
            wave: Some(0),
            wave_started_at: Some(at(0)),
            latched: Some(kura_gate::Verdict {
                verdict: kura_gate::VerdictKind::HardStop,
                signal: Some(signal),
                server_id: Some("a".into()),
                healthy_since: None,
                remaining_seconds: None,
                evidence: Vec::new(),
            }),
            ..Default::default()
        };
        let restored = Gate::restore(GateConfig::default(), state);
        assert_eq!(
            restored.is_ok(),
            signal.is_hard_stop(),
            "{signal}: {restored:?}"
        );
    }
}

/// Every hard-stop server check of the home stops the wave as a hard stop
/// (never a soak), and the first in the home's run order wins.
#[test]
fn a_server_hard_stop_stops_the_wave_in_the_homes_order() {
    let mut health = HealthView::healthy(at(995), 1);
    health.memory_pressure_state = Some(2);
    health.update_paused = Some(Box::new(kura_schemas::UpdatePaused {
        strategy: "OnDelete".into(),
        ..Default::default()
    }));
    let mut s = server("a", 1000, 900, 90);
    s.health = Some(health);
    let mut gate = Gate::new(GateConfig::default()).unwrap();
    let verdict = gate.tick(&tick(1000, vec![s])).unwrap();
    assert_eq!(verdict.verdict, kura_gate::VerdictKind::HardStop);
    let first_hard = Signal::server_checks()
        .into_iter()
        .find(|s| s.is_hard_stop())
        .unwrap();
    assert_eq!(verdict.signal, Some(first_hard));
}
