//! The server checks: contract order, bands, missing fields, eligibility.

use jiff::Timestamp;
use kura_gate::checks::{check_server, soak_eligible};
use kura_gate::{GateConfig, HealthView};
use kura_schemas::{BaselineCounters, ServingAuthorityHealth, Signal};

/// A change to a health view.
type Mutation = fn(&mut HealthView);

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_784_628_000 + seconds).unwrap()
}

fn counters(outbox: u64, fd: u64, peers: u64) -> BaselineCounters {
    BaselineCounters {
        outbox_messages: Some(outbox),
        replication_lag_entries: Some(outbox),
        fd_timeout_count: Some(fd),
        peer_connection_failures: Some(peers),
    }
}

fn signal(health: Option<&HealthView>, base: Option<&BaselineCounters>) -> Option<Signal> {
    check_server("s", health, base, at(0), &GateConfig::default()).map(|e| e.signal)
}

#[test]
fn the_first_failing_check_in_contract_order_names_the_signal() {
    // Fail every check at once, then fix them one by one in contract order.
    let base = counters(100, 90, 0);
    let mut h = HealthView {
        sampled_at: Some(at(-10)),
        expected_pods: Some(2),
        sampled_pods: Some(1),
        ready: Some(false),
        serving: Some(false),
        ring_consistent: Some(false),
        bootstrap_inflight_peers: Some(1),
        backfill_initial_cycle: Some("pending".into()),
        backfill_degraded: Some(true),
        backfill_budget_exhausted_peers: Some(2),
        outbox_messages: Some(151),
        replication_lag_entries: Some(151),
        serving_authority: Some(fence("Fencing", 0)),
        fd_timeout_count: Some(91),
        peer_connection_failures: Some(26),
        memory_pressure_state: Some(2),
        suspended: None,
        update_paused: Some(Box::new(kura_schemas::UpdatePaused {
            strategy: "OnDelete".into(),
            ..kura_schemas::UpdatePaused::default()
        })),
    };
    let mut seen = Vec::new();
    let fixes: Vec<Mutation> = vec![
        |h| h.memory_pressure_state = Some(1),
        |h| h.serving_authority = Some(fence("Quiescing", 0)),
        |h| h.update_paused = None,
        |h| h.sampled_pods = Some(2),
        |h| h.ready = Some(true),
        |h| h.serving = Some(true),
        |h| h.ring_consistent = Some(true),
        |h| h.bootstrap_inflight_peers = Some(0),
        |h| h.backfill_initial_cycle = Some("degraded".into()),
        |h| h.backfill_degraded = Some(false),
        |h| h.backfill_budget_exhausted_peers = Some(0),
        |h| h.outbox_messages = Some(150),
        |h| h.fd_timeout_count = Some(90),
        |h| h.peer_connection_failures = Some(25),
        |h| h.serving_authority = Some(fence("Serving", 1)),
        |h| h.replication_lag_entries = Some(150),
    ];
    for fix in fixes {
        seen.push(signal(Some(&h), Some(&base)));
        fix(&mut h);
    }
    seen.push(signal(Some(&h), Some(&base)));
    use Signal::*;
    let want = [
        MemoryPressureCritical,
        ServingFenced,
        UpdatePaused,
        PodsUnsampled,
        NotReady,
        NotServing,
        RingSkew,
        BootstrapInFlight,
        BackfillPending,
        BackfillDegraded,
        BackfillBudgetExhausted,
        OutboxRegressed,
        FdTimeoutsRegressed,
        PeerConnectionFailuresRegressed,
        NoValidWriter,
        ReplicationLagRegressed,
    ];
    let mut expected: Vec<_> = want.into_iter().map(Some).collect();
    expected.push(None);
    assert_eq!(seen, expected);
}

#[test]
fn a_pending_or_unknown_initial_cycle_holds_and_names_the_value() {
    let mut h = HealthView::healthy(at(-10), 3);
    for (cycle, held) in [
        (None, false),
        (Some(""), false),
        (Some("complete"), false),
        (Some("pending"), true),
        (Some("some-newer-value"), true),
    ] {
        h.backfill_initial_cycle = cycle.map(str::to_owned);
        let evidence = check_server("s", Some(&h), None, at(0), &GateConfig::default());
        if held {
            let evidence = evidence.expect("a pending cycle must hold the gate");
            assert_eq!(evidence.signal, Signal::BackfillPending);
            let detail = evidence.detail.unwrap_or_default();
            assert!(detail.contains(cycle.unwrap()), "{detail}");
        } else {
            assert_eq!(evidence, None, "cycle {cycle:?}");
        }
    }
    // Degraded is settled for check 10 and caught by check 11.
    h.backfill_initial_cycle = Some("degraded".into());
    h.backfill_degraded = Some(true);
    assert_eq!(signal(Some(&h), None), Some(Signal::BackfillDegraded));
    // Background backfill after a complete cycle passes.
    h.backfill_initial_cycle = Some("complete".into());
    h.backfill_degraded = Some(false);
    assert_eq!(signal(Some(&h), None), None);
}

#[test]
fn time_checks_come_before_content_and_after_memory() {
    let mut h = HealthView::healthy(at(-181), 1);
    h.ready = Some(false);
    assert_eq!(signal(Some(&h), None), Some(Signal::SampleStale));
    h.sampled_at = Some(at(61));
    assert_eq!(signal(Some(&h), None), Some(Signal::SampleInvalid));
    h.sampled_at = Some(at(60));
    assert_eq!(signal(Some(&h), None), Some(Signal::NotReady));
    h.memory_pressure_state = Some(3);
    h.sampled_at = Some(at(-1000));
    assert_eq!(signal(Some(&h), None), Some(Signal::MemoryPressureCritical));
    assert_eq!(signal(None, None), Some(Signal::SampleMissing));
}

#[test]
fn sub_second_staleness_is_stale_and_reported_rounded_up() {
    let h = HealthView::healthy(at(-180) - jiff::SignedDuration::from_millis(1), 1);
    let evidence = check_server("s", Some(&h), None, at(0), &GateConfig::default()).unwrap();
    assert_eq!(evidence.signal, Signal::SampleStale);
    assert_eq!(evidence.observed, Some(181));
}

#[test]
fn every_missing_required_field_fails_and_missing_optional_counts_do_not() {
    let base = counters(0, 0, 0);
    let required: Vec<(Mutation, Signal)> = vec![
        (|h| h.sampled_at = None, Signal::SampleStale),
        (|h| h.memory_pressure_state = None, Signal::SampleInvalid),
        (|h| h.expected_pods = None, Signal::PodsUnsampled),
        (|h| h.sampled_pods = None, Signal::PodsUnsampled),
        (|h| h.ready = None, Signal::NotReady),
        (|h| h.serving = None, Signal::NotServing),
        (|h| h.ring_consistent = None, Signal::RingSkew),
        (|h| h.backfill_degraded = None, Signal::BackfillDegraded),
        (|h| h.fd_timeout_count = None, Signal::FdTimeoutsRegressed),
    ];
    for (clear, want) in required {
        let mut h = HealthView::healthy(at(0), 1);
        clear(&mut h);
        let evidence = check_server("s", Some(&h), Some(&base), at(0), &GateConfig::default())
            .expect("a missing required field never passes");
        assert_eq!(evidence.signal, want);
        assert!(evidence.detail.is_some_and(|d| d.contains("missing")));
    }
    let mut h = HealthView::healthy(at(0), 1);
    h.bootstrap_inflight_peers = None;
    h.backfill_budget_exhausted_peers = None;
    h.outbox_messages = None;
    h.peer_connection_failures = None;
    assert_eq!(signal(Some(&h), Some(&base)), None);
}

#[test]
fn a_null_baseline_counter_is_never_compared() {
    let mut h = HealthView::healthy(at(0), 1);
    h.outbox_messages = Some(u64::MAX);
    h.fd_timeout_count = Some(u64::MAX);
    h.peer_connection_failures = Some(u64::MAX);
    assert_eq!(signal(Some(&h), Some(&BaselineCounters::default())), None);
}

#[test]
fn eligibility_needs_a_fresh_complete_healthy_aggregate() {
    let config = GateConfig::default();
    let good = HealthView::healthy(at(-180), 3);
    assert!(soak_eligible(Some(&good), at(0), &config));
    assert!(!soak_eligible(None, at(0), &config));
    let cases: Vec<Mutation> = vec![
        |h| h.sampled_at = Some(at(-181)),
        |h| h.sampled_at = Some(at(61)),
        |h| h.sampled_at = None,
        |h| h.sampled_pods = Some(2),
        |h| h.ready = Some(false),
        |h| h.serving = None,
        |h| h.ring_consistent = Some(false),
        |h| h.memory_pressure_state = Some(2),
        |h| h.memory_pressure_state = None,
    ];
    for (i, spoil) in cases.into_iter().enumerate() {
        let mut h = good.clone();
        spoil(&mut h);
        assert!(!soak_eligible(Some(&h), at(0), &config), "case {i}");
    }
    // Backfill trouble or old counters do not make a server ineligible.
    let mut busy = good.clone();
    busy.backfill_degraded = Some(true);
    busy.memory_pressure_state = Some(1);
    assert!(soak_eligible(Some(&busy), at(0), &config));
}

mod storable_evidence {
    use super::*;
    use kura_schemas::api_int::API_INT_MAX;
    use proptest::prelude::*;

    fn count() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..1000,
            (API_INT_MAX - 1000)..=API_INT_MAX,
            0u64..=API_INT_MAX
        ]
    }

    proptest! {
        /// Every number the checks publish as evidence fits what the API
        /// server stores (2^63−1) whenever the aggregate's counts do, for
        /// any band configuration: a band top above it would make every
        /// status write of the instance fail.
        #[test]
        fn evidence_never_exceeds_what_the_api_server_stores(
            base in (count(), count(), count()),
            current in (count(), count(), count()),
            bands in (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        ) {
            let config = GateConfig {
                outbox_band_percent: bands.0,
                outbox_band_minimum: bands.1,
                fd_timeout_band: bands.2,
                peer_failure_band_percent: bands.3,
                peer_failure_band_minimum: bands.4,
                ..GateConfig::default()
            };
            let h = HealthView {
                sampled_at: Some(at(-10)),
                expected_pods: Some(1),
                sampled_pods: Some(1),
                ready: Some(true),
                serving: Some(true),
                ring_consistent: Some(true),
                bootstrap_inflight_peers: Some(0),
                backfill_initial_cycle: Some("complete".into()),
                backfill_degraded: Some(false),
                backfill_budget_exhausted_peers: Some(0),
                outbox_messages: Some(current.0),
                replication_lag_entries: Some(current.0),
                serving_authority: None,
                fd_timeout_count: Some(current.1),
                peer_connection_failures: Some(current.2),
                memory_pressure_state: Some(0),
                suspended: None,
                update_paused: None,
            };
            let baseline = counters(base.0, base.1, base.2);
            if let Some(e) = check_server("s", Some(&h), Some(&baseline), at(0), &config) {
                for n in [e.observed, e.band_top, e.baseline].into_iter().flatten() {
                    prop_assert!(n <= API_INT_MAX, "{e:?}");
                }
            }
            for (top, b) in [
                (config.outbox_band_top(base.0), base.0),
                (config.fd_timeout_band_top(base.1), base.1),
                (config.peer_failure_band_top(base.2), base.2),
            ] {
                prop_assert!(top <= API_INT_MAX, "band top {top} above the ceiling");
                prop_assert!(top >= b, "band top {top} below its baseline {b}");
            }
        }
    }
}

/// A fence state with three enabled pods.
fn fence(phase: &str, writers: u32) -> ServingAuthorityHealth {
    ServingAuthorityHealth {
        enabled_pods: 3,
        valid_writers: writers,
        phase: phase.to_owned(),
        epoch: if writers > 0 { 4 } else { 0 },
    }
}

#[test]
fn fencing_is_a_hard_stop_after_memory_pressure_and_before_everything_else() {
    let base = counters(100, 90, 0);
    let mut h = HealthView::healthy(at(-10), 3);
    h.fd_timeout_count = Some(95);
    h.serving_authority = Some(fence("Fencing", 0));
    // Fencing before an fd regression, and even before a stale sample.
    let e = check_server(
        "kura/a",
        Some(&h),
        Some(&base),
        at(0),
        &GateConfig::default(),
    )
    .expect("fencing fails");
    assert_eq!(e.signal, Signal::ServingFenced);
    assert!(e.signal.is_hard_stop());
    let fence_seen = e.fence.expect("fence evidence");
    assert_eq!(
        (
            fence_seen.phase.as_str(),
            fence_seen.enabled_pods,
            fence_seen.valid_writers,
            fence_seen.epoch
        ),
        ("Fencing", 3, 0, 0)
    );
    assert_eq!(e.observed, Some(0));
    assert!(e.detail.unwrap_or_default().contains("grant phase Fencing"));
    h.sampled_at = Some(at(-1000));
    assert_eq!(signal(Some(&h), Some(&base)), Some(Signal::ServingFenced));
    // Memory pressure comes first.
    h.memory_pressure_state = Some(2);
    assert_eq!(
        signal(Some(&h), Some(&base)),
        Some(Signal::MemoryPressureCritical)
    );
    // Without a baseline (not soak-eligible) fencing still stops.
    h.memory_pressure_state = Some(0);
    assert_eq!(signal(Some(&h), None), Some(Signal::ServingFenced));
}

#[test]
fn no_valid_writer_outside_fencing_holds_and_a_writer_releases() {
    let mut h = HealthView::healthy(at(-10), 3);
    for phase in [
        "Quiescing",
        "Revoking",
        "Preparing",
        "Serving",
        "",
        "Rebalancing",
    ] {
        h.serving_authority = Some(fence(phase, 0));
        let e = check_server("s", Some(&h), None, at(0), &GateConfig::default())
            .unwrap_or_else(|| panic!("{phase}: no writer must hold"));
        assert_eq!(e.signal, Signal::NoValidWriter, "{phase}");
        assert!(!e.signal.is_hard_stop());
        assert_eq!(e.fence.map(|f| f.phase), Some(phase.to_owned()));
        h.serving_authority = Some(fence(phase, 1));
        assert_eq!(signal(Some(&h), None), None, "{phase} with a writer");
    }
    // Not fenced at all: both checks are skipped.
    h.serving_authority = None;
    assert_eq!(signal(Some(&h), None), None);
}

#[test]
fn replication_lag_is_banded_apart_from_the_outbox_and_skipped_when_null() {
    let config = GateConfig {
        replication_lag_band_percent: 0,
        replication_lag_band_minimum: 5,
        ..GateConfig::default()
    };
    let base = counters(100, 0, 0);
    let mut h = HealthView::healthy(at(-10), 3);
    h.outbox_messages = Some(140);
    h.replication_lag_entries = Some(105);
    assert_eq!(
        check_server("s", Some(&h), Some(&base), at(0), &config),
        None,
        "at the top passes"
    );
    h.replication_lag_entries = Some(106);
    let e = check_server("s", Some(&h), Some(&base), at(0), &config).expect("above the band");
    assert_eq!(e.signal, Signal::ReplicationLagRegressed);
    assert_eq!(
        (e.observed, e.band_top, e.baseline),
        (Some(106), Some(105), Some(100))
    );
    // Null current or null baseline: skipped, never a pass by zero.
    h.replication_lag_entries = None;
    assert_eq!(
        check_server("s", Some(&h), Some(&base), at(0), &config),
        None
    );
    h.replication_lag_entries = Some(10_000);
    let no_lag_base = BaselineCounters {
        replication_lag_entries: None,
        ..base
    };
    assert_eq!(
        check_server("s", Some(&h), Some(&no_lag_base), at(0), &config),
        None
    );
}

#[test]
fn soak_eligibility_needs_a_valid_writer_outside_fencing() {
    let config = GateConfig::default();
    let mut h = HealthView::healthy(at(-10), 3);
    assert!(soak_eligible(Some(&h), at(0), &config));
    h.serving_authority = Some(fence("Serving", 1));
    assert!(soak_eligible(Some(&h), at(0), &config));
    h.serving_authority = Some(fence("Serving", 0));
    assert!(!soak_eligible(Some(&h), at(0), &config));
    h.serving_authority = Some(ServingAuthorityHealth {
        valid_writers: 1,
        ..fence("Fencing", 0)
    });
    assert!(!soak_eligible(Some(&h), at(0), &config));
}
