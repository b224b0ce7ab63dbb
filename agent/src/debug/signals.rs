//! The gate's words for people: the one-line summary of a verdict's
//! evidence ([`summary`]: the evidence's own words,
//! `kura_schemas::Evidence::figures`, which the conditions, `check` and
//! the demo share), and every gated signal of an instance with
//! its baseline, limit, current value and result ([`check_rows`]), in the
//! order of the contract's server checks.
//!
//! The rows restate the gate's server checks (kura-gate `check_server`)
//! for display, each one on its own where the gate stops at the first
//! failure; a test holds them to the gate: the first failing row is always
//! the verdict's signal. The verdict's own signal is shown failing whatever
//! the restatement says.

use jiff::{SignedDuration, Timestamp};
use kura_schemas::{FenceEvidence, RolloutGate, RolloutHealth, Signal};

use crate::model::GateLimits;

/// The first evidence of `gate` in one line, or a dash.
pub fn summary(gate: Option<&RolloutGate>) -> String {
    match gate {
        None => "not judged yet".to_owned(),
        Some(g) => match g.evidence.first() {
            Some(e) => e.figures(),
            None if g.signal.is_none() => "every gated signal passes".to_owned(),
            None => g.signal.map(|s| s.to_string()).unwrap_or_default(),
        },
    }
}

/// The result of one gated signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Within its limit.
    Pass,
    /// Outside it.
    Fail,
    /// The check did not compare (why).
    NotCompared(&'static str),
}

/// One gated signal as the instance page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRow {
    /// The contract's check number(s), from the signal home
    /// (`kura_schemas::SIGNALS`).
    pub check: String,
    /// The signal it raises.
    pub signal: Signal,
    /// What it reads, for people: the signal home's words.
    pub what: &'static str,
    /// The (effective) baseline, for the counter checks.
    pub baseline: String,
    /// The band top or limit.
    pub limit: String,
    /// The current value.
    pub current: String,
    /// Pass, fail or not compared.
    pub outcome: Outcome,
}

fn row(
    signal: Signal,
    limit: impl Into<String>,
    current: impl Into<String>,
    fails: bool,
) -> CheckRow {
    CheckRow {
        check: signal.check().map(|n| n.to_string()).unwrap_or_default(),
        signal,
        what: signal.words(),
        baseline: "–".to_owned(),
        limit: limit.into(),
        current: current.into(),
        outcome: if fails { Outcome::Fail } else { Outcome::Pass },
    }
}

fn flag_row(signal: Signal, value: bool, want: bool) -> CheckRow {
    row(
        signal,
        if want { "true" } else { "false" },
        if value { "true" } else { "false" },
        value != want,
    )
}

fn counter_row(
    signal: Signal,
    captured: Option<u64>,
    effective: Option<u64>,
    top: Option<u64>,
    current: Option<u64>,
    compared: Result<(), &'static str>,
) -> CheckRow {
    let baseline = match (effective, captured) {
        (Some(e), Some(c)) if e != c => format!("{e} (captured {c}, lowered on a reset)"),
        (Some(e), _) => e.to_string(),
        (None, _) => "–".to_owned(),
    };
    let outcome = match (compared, effective, top, current) {
        (Err(why), ..) => Outcome::NotCompared(why),
        (Ok(()), None, ..) | (Ok(()), _, None, _) => Outcome::NotCompared("no baseline value"),
        (Ok(()), _, Some(_), None) if signal != Signal::FdTimeoutsRegressed => {
            Outcome::NotCompared("not reported")
        }
        (Ok(()), _, Some(top), current) => {
            if current.is_some_and(|c| c <= top) {
                Outcome::Pass
            } else {
                Outcome::Fail
            }
        }
    };
    CheckRow {
        check: signal.check().map(|n| n.to_string()).unwrap_or_default(),
        signal,
        what: signal.words(),
        baseline,
        limit: top.map_or_else(|| "–".to_owned(), |t| format!("≤ {t}")),
        current: current.map_or_else(|| "not reported".to_owned(), |c| c.to_string()),
        outcome,
    }
}

/// Every gated signal of an instance (its last aggregate, verdict and the
/// limits that verdict used), in check order; empty without an aggregate
/// or a verdict. Freshness is judged at the verdict's `evaluatedAt`, as the
/// gate did.
pub fn check_rows(
    health: Option<&RolloutHealth>,
    gate: Option<&RolloutGate>,
    limits: Option<&GateLimits>,
) -> Vec<CheckRow> {
    let (Some(h), Some(g), Some(l)) = (health, gate, limits) else {
        return Vec::new();
    };
    let now = g.evaluated_at;
    let max_age = l.max_sample_age_seconds;
    let (fresh_signal, fresh_current, fresh_fails) = match h.sampled_at {
        None => (Signal::SampleStale, "no pod answered".to_owned(), true),
        Some(at) => {
            let age = now.duration_since(at);
            let ahead = at.duration_since(now);
            if age > secs(max_age) {
                (Signal::SampleStale, format!("{} s", ceil(age)), true)
            } else if ahead > secs(l.future_skew_seconds) {
                (
                    Signal::SampleInvalid,
                    format!("{} s in the future", ceil(ahead)),
                    true,
                )
            } else {
                (
                    Signal::SampleStale,
                    format!("{} s", u64::try_from(age.as_secs()).unwrap_or(0)),
                    false,
                )
            }
        }
    };
    let compared = if !l.counters_compared {
        Err(if g.baseline_image.is_none() {
            "no baseline yet (no image change seen)"
        } else {
            "not soak-eligible at baseline"
        })
    } else {
        Ok(())
    };
    let cycle = h.backfill_initial_cycle.as_str();
    let fence = h.serving_authority.as_ref();
    let not_fenced = |signal, limit| CheckRow {
        outcome: Outcome::NotCompared("no pod runs fenced serving"),
        ..row(signal, limit, "not fenced", false)
    };
    let not_reported = |signal, limit| CheckRow {
        outcome: Outcome::NotCompared("not reported"),
        ..row(signal, limit, "not reported", false)
    };
    let mut rows = vec![
        row(
            Signal::MemoryPressureCritical,
            "≤ 1",
            h.memory_pressure_state.to_string(),
            h.memory_pressure_state >= 2,
        ),
        match fence {
            Some(a) => row(
                Signal::ServingFenced,
                "not Fencing",
                FenceEvidence::from(a).describe(),
                a.is_fencing(),
            ),
            None => not_fenced(Signal::ServingFenced, "not Fencing"),
        },
        row(
            Signal::UpdatePaused,
            "none",
            h.update_paused
                .as_ref()
                .map_or_else(|| "none".to_owned(), |p| p.describe()),
            h.update_paused.is_some(),
        ),
        // Checks 2 to 4 in one row: the sample's age (a missing aggregate
        // has no rows at all).
        CheckRow {
            check: SAMPLE_TIME_CHECKS.to_owned(),
            what: Signal::SampleStale.words(),
            ..row(
                fresh_signal,
                format!("≤ {max_age} s"),
                fresh_current,
                fresh_fails,
            )
        },
        row(
            Signal::PodsUnsampled,
            format!("{} (expected)", h.expected_pods),
            h.sampled_pods.to_string(),
            h.sampled_pods < h.expected_pods,
        ),
        flag_row(Signal::NotReady, h.ready, true),
        flag_row(Signal::NotServing, h.serving, true),
        flag_row(Signal::RingSkew, h.ring_consistent, true),
        match h.bootstrap_inflight_peers {
            Some(n) => row(Signal::BootstrapInFlight, "0", n.to_string(), n > 0),
            None => not_reported(Signal::BootstrapInFlight, "0"),
        },
        row(
            Signal::BackfillPending,
            "complete or degraded",
            if cycle.is_empty() {
                "not reported".to_owned()
            } else {
                cycle.to_owned()
            },
            kura_gate::checks::backfill_pending(cycle),
        ),
        flag_row(Signal::BackfillDegraded, h.backfill_degraded, false),
        match h.backfill_budget_exhausted_peers {
            Some(n) => row(Signal::BackfillBudgetExhausted, "0", n.to_string(), n > 0),
            None => not_reported(Signal::BackfillBudgetExhausted, "0"),
        },
        counter_row(
            Signal::OutboxRegressed,
            g.baseline.outbox_messages,
            g.effective_baseline.outbox_messages,
            l.outbox_band_top,
            h.outbox_messages,
            compared,
        ),
        counter_row(
            Signal::FdTimeoutsRegressed,
            g.baseline.fd_timeout_count,
            g.effective_baseline.fd_timeout_count,
            l.fd_timeout_band_top,
            Some(h.fd_timeout_count),
            compared,
        ),
        counter_row(
            Signal::PeerConnectionFailuresRegressed,
            g.baseline.peer_connection_failures,
            g.effective_baseline.peer_connection_failures,
            l.peer_failure_band_top,
            h.peer_connection_failures,
            compared,
        ),
        match fence {
            Some(a) => row(
                Signal::NoValidWriter,
                "≥ 1",
                a.valid_writers.to_string(),
                a.valid_writers == 0,
            ),
            None => not_fenced(Signal::NoValidWriter, "≥ 1"),
        },
        counter_row(
            Signal::ReplicationLagRegressed,
            g.baseline.replication_lag_entries,
            g.effective_baseline.replication_lag_entries,
            l.replication_lag_band_top,
            h.replication_lag_entries,
            compared,
        ),
    ];
    // In the order the gate runs its checks (the signal home's): the hard
    // stops first (1, 16, then 19), then the others by number.
    rows.sort_by_key(|r| r.signal.run_order());
    // A backlog above its band that the gate let through is draining: it
    // has fallen within the drain window (its run is in the verdict).
    for r in &mut rows {
        let run = match r.signal {
            Signal::OutboxRegressed => g.backlog_runs.outbox.as_ref(),
            Signal::ReplicationLagRegressed => g.backlog_runs.replication_lag.as_ref(),
            _ => None,
        };
        if r.outcome == Outcome::Fail && run.is_some() && g.signal != Some(r.signal) {
            r.outcome = Outcome::NotCompared("above its band, draining within the drain window");
        }
    }
    // The verdict is the gate's: its signal fails whatever the restatement
    // above computed.
    if let Some(signal) = g.signal
        && let Some(r) = rows.iter_mut().find(|r| r.signal == signal)
    {
        r.outcome = Outcome::Fail;
    }
    rows
}

/// The check numbers of the one row that shows the sample's time (checks
/// 2 to 4: missing, stale, in the future).
const SAMPLE_TIME_CHECKS: &str = "2–4";

fn secs(value: u64) -> SignedDuration {
    SignedDuration::from_secs(i64::try_from(value).unwrap_or(i64::MAX))
}

fn ceil(d: SignedDuration) -> u64 {
    let whole = u64::try_from(d.as_secs()).unwrap_or(0);
    if d.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// Seconds from `sampled_at` to `now` for the fleet table.
pub fn sample_age(health: Option<&RolloutHealth>, now: Timestamp) -> Option<u64> {
    health
        .and_then(|h| h.sampled_at)
        .map(|at| u64::try_from(now.duration_since(at).as_secs()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gate_limits;
    use kura_gate::GateConfig;
    use kura_schemas::{AgentVerdict, Evidence, RetiredCounters};
    use proptest::prelude::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn health() -> RolloutHealth {
        RolloutHealth {
            replication_lag_entries: None,
            serving_authority: None,
            schema_version: 1,
            observed_at: ts(0),
            sampled_at: Some(ts(0)),
            observed_generation: 1,
            expected_pods: 3,
            sampled_pods: 3,
            ready: true,
            serving: true,
            writer_lock_owned: true,
            initial_discovery_completed: true,
            generation_consistent: true,
            ring_consistent: true,
            ring_members: 3,
            bootstrap_inflight_peers: None,
            backfill_initial_cycle: "complete".into(),
            backfilling_peers: None,
            backfill_degraded: false,
            backfill_budget_exhausted_peers: Some(0),
            outbox_messages: Some(100),
            fd_timeout_count: 8,
            peer_connection_failures: Some(3),
            memory_pressure_state: 0,
            inflight_requests: 0,
            counter_resets: 0,
            pods: Vec::new(),
            retired_counters: RetiredCounters::default(),
            agent: "a".into(),
            suspended: false,
            update_paused: None,
        }
    }

    #[test]
    fn evidence_reads_like_the_issue_says() {
        let e = Evidence {
            observed: Some(66),
            band_top: Some(8),
            baseline: Some(8),
            ..Evidence::new("kura/a", Signal::FdTimeoutsRegressed)
        };
        assert_eq!(e.figures(), "fd timeouts 66, band top 8, baseline 8");
        let e = Evidence {
            observed: Some(2),
            band_top: Some(1),
            ..Evidence::new("kura/a", Signal::MemoryPressureCritical)
        };
        assert_eq!(e.figures(), "memory pressure 2 (critical), limit 1");
        let e = Evidence {
            detail: Some("ready is false".into()),
            ..Evidence::new("kura/a", Signal::NotReady)
        };
        assert_eq!(e.figures(), "ready is false");
        let e = Evidence {
            observed: Some(1),
            band_top: Some(3),
            ..Evidence::new("kura/a", Signal::PodsUnsampled)
        };
        assert_eq!(e.figures(), "1 of 3 pods sampled");
        assert_eq!(summary(None), "not judged yet");
    }

    /// A previous gate with a baseline taken on `img:1`, judging `img:2`.
    fn previous(eligible: bool, fd: u64, peers: Option<u64>, outbox: Option<u64>) -> RolloutGate {
        let counters = kura_schemas::BaselineCounters {
            replication_lag_entries: None,
            outbox_messages: outbox,
            fd_timeout_count: Some(fd),
            peer_connection_failures: peers,
        };
        RolloutGate {
            target_image: "img:2".into(),
            baseline_image: Some("img:1".into()),
            baseline_captured_at: Some(ts(-600)),
            baseline: counters.clone(),
            effective_baseline: counters,
            soak_eligible: eligible,
            verdict: AgentVerdict::Healthy,
            signal: None,
            healthy_since: None,
            evaluated_at: ts(-10),
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    #[test]
    fn a_draining_backlog_and_an_update_pause_read_as_the_gate_judged_them() {
        let config = GateConfig::default();
        let mut h = health();
        h.outbox_messages = Some(1_000);
        // Above the band (100 + 50), first seen: a run starts, the gate
        // lets it through while it may still drain.
        let g = kura_gate::judge_instance(
            "kura/a",
            Some(&previous(true, 8, None, Some(100))),
            "img:2",
            None,
            Some(&h),
            ts(5),
            &config,
        );
        assert_eq!(g.verdict, AgentVerdict::Healthy, "{g:?}");
        assert!(g.backlog_runs.outbox.is_some());
        let rows = check_rows(Some(&h), Some(&g), Some(&gate_limits(&config, &g)));
        let outbox = rows
            .iter()
            .find(|r| r.signal == Signal::OutboxRegressed)
            .expect("outbox row");
        assert_eq!(
            outbox.outcome,
            Outcome::NotCompared("above its band, draining within the drain window")
        );
        assert_eq!(first_failing(&rows), None);

        h.outbox_messages = Some(100);
        h.update_paused = Some(Box::new(kura_schemas::UpdatePaused {
            strategy: "OnDelete".into(),
            ..Default::default()
        }));
        let g = kura_gate::judge_instance(
            "kura/a",
            Some(&previous(true, 8, None, Some(100))),
            "img:2",
            None,
            Some(&h),
            ts(5),
            &config,
        );
        let rows = check_rows(Some(&h), Some(&g), Some(&gate_limits(&config, &g)));
        assert_eq!(first_failing(&rows), Some(Signal::UpdatePaused));
        assert_eq!(g.signal, Some(Signal::UpdatePaused));
    }

    fn first_failing(rows: &[CheckRow]) -> Option<Signal> {
        rows.iter()
            .find(|r| r.outcome == Outcome::Fail)
            .map(|r| r.signal)
    }

    #[test]
    fn a_healthy_instance_passes_every_row_and_counters_need_eligibility() {
        let config = GateConfig::default();
        let prev = previous(true, 8, Some(3), Some(100));
        let g = kura_gate::judge_instance(
            "kura/a",
            Some(&prev),
            "img:2",
            None,
            Some(&health()),
            ts(5),
            &config,
        );
        assert_eq!(g.verdict, AgentVerdict::Healthy);
        let rows = check_rows(Some(&health()), Some(&g), Some(&gate_limits(&config, &g)));
        assert_eq!(rows.len(), Signal::server_checks().len() - 2);
        assert!(rows.iter().all(|r| r.outcome != Outcome::Fail), "{rows:#?}");
        let fd = rows
            .iter()
            .find(|r| r.signal == Signal::FdTimeoutsRegressed)
            .expect("fd row");
        assert_eq!((fd.baseline.as_str(), fd.limit.as_str()), ("8", "≤ 8"));
        assert_eq!(fd.outcome, Outcome::Pass);

        let prev = previous(false, 8, Some(3), Some(100));
        let g = kura_gate::judge_instance(
            "kura/a",
            Some(&prev),
            "img:2",
            None,
            Some(&health()),
            ts(5),
            &config,
        );
        let rows = check_rows(Some(&health()), Some(&g), Some(&gate_limits(&config, &g)));
        assert!(
            rows.iter()
                .any(|r| r.outcome == Outcome::NotCompared("not soak-eligible at baseline"))
        );
        assert!(check_rows(None, Some(&g), None).is_empty());
    }

    /// The page's check table is the signal home's (`kura_schemas::SIGNALS`):
    /// every row names a server check of the home, with the home's number
    /// and words, in the home's run order, and every server check of the
    /// home has its row (checks 2 to 4 share one). A row for a signal the
    /// home does not list as a server check, or a check the page forgot,
    /// fails here.
    #[test]
    fn the_check_table_lists_exactly_the_server_checks_of_the_signal_home() {
        let config = GateConfig::default();
        let prev = previous(true, 8, Some(3), Some(100));
        let g = kura_gate::judge_instance(
            "kura/a",
            Some(&prev),
            "img:2",
            None,
            Some(&health()),
            ts(5),
            &config,
        );
        let rows = check_rows(Some(&health()), Some(&g), Some(&gate_limits(&config, &g)));
        let mut shown = Vec::new();
        for r in &rows {
            let number = r
                .signal
                .check()
                .unwrap_or_else(|| panic!("{} is no server check of the signal home", r.signal));
            if r.check == SAMPLE_TIME_CHECKS {
                assert_eq!(r.what, Signal::SampleStale.words());
                shown.extend([
                    Signal::SampleMissing,
                    Signal::SampleStale,
                    Signal::SampleInvalid,
                ]);
            } else {
                assert_eq!(r.check, number.to_string(), "{}", r.signal);
                assert_eq!(r.what, r.signal.words(), "{}", r.signal);
                shown.push(r.signal);
            }
        }
        assert_eq!(
            shown,
            Signal::server_checks(),
            "the rows in the home's run order"
        );
    }

    proptest! {
        /// The rows never disagree with the gate: the first failing row is
        /// the verdict's signal, and a healthy verdict has no failing row.
        #[test]
        fn the_first_failing_row_is_the_verdicts_signal(
            pressure in 0u8..3,
            age in -120i64..400,
            sampled in 0u32..4,
            ready: bool, serving: bool, ring: bool,
            bootstrap in proptest::option::of(0u64..3),
            cycle in prop_oneof![Just(""), Just("complete"), Just("degraded"), Just("pending"), Just("weird")],
            degraded: bool,
            budget in proptest::option::of(0u64..3),
            outbox in proptest::option::of(0u64..300),
            fd in 0u64..20,
            peers in proptest::option::of(0u64..60),
            no_sample: bool,
            eligible: bool,
            base_fd in 0u64..20,
            base_peers in proptest::option::of(0u64..40),
            base_outbox in proptest::option::of(0u64..200),
            fd_band in 0u64..3,
            fence in proptest::option::of((0u32..3, prop_oneof![Just("Serving"), Just("Fencing"), Just("Quiescing"), Just(""), Just("Other")])),
            lag in proptest::option::of(0u64..300),
            base_lag in proptest::option::of(0u64..200),
        ) {
            let config = GateConfig { fd_timeout_band: fd_band, ..GateConfig::default() };
            let now = ts(1000);
            let mut h = health();
            h.memory_pressure_state = pressure;
            h.sampled_at = (!no_sample).then(|| ts(1000 - age));
            h.sampled_pods = sampled;
            h.ready = ready;
            h.serving = serving;
            h.ring_consistent = ring;
            h.bootstrap_inflight_peers = bootstrap;
            h.backfill_initial_cycle = cycle.to_owned();
            h.backfill_degraded = degraded;
            h.backfill_budget_exhausted_peers = budget;
            h.outbox_messages = outbox;
            h.fd_timeout_count = fd;
            h.peer_connection_failures = peers;
            h.replication_lag_entries = lag;
            h.serving_authority = fence.map(|(writers, phase)| kura_schemas::ServingAuthorityHealth {
                enabled_pods: 2,
                valid_writers: writers,
                phase: phase.to_owned(),
                epoch: u64::from(writers),
            });
            let mut prev = previous(eligible, base_fd, base_peers, base_outbox);
            prev.baseline.replication_lag_entries = base_lag;
            prev.effective_baseline.replication_lag_entries = base_lag;
            let g = kura_gate::judge_instance("kura/a", Some(&prev), "img:2", None, Some(&h), now, &config);
            let rows = check_rows(Some(&h), Some(&g), Some(&gate_limits(&config, &g)));
            // Without the override of the verdict's own row.
            let mut unforced = g.clone();
            unforced.signal = None;
            let restated = check_rows(Some(&h), Some(&unforced), Some(&gate_limits(&config, &g)));
            prop_assert_eq!(first_failing(&restated), g.signal, "{:#?}", restated);
            prop_assert_eq!(first_failing(&rows), g.signal);
            if g.verdict == AgentVerdict::Healthy {
                prop_assert!(rows.iter().all(|r| r.outcome != Outcome::Fail));
            }
        }
    }
}
