//! The server checks (contract/gate.md, "Checking one server"; the
//! signal each raises, its number, kind and order are declared once in
//! `kura_schemas::SIGNALS`),
//! soak eligibility, counter-reset handling and the drain rule of the
//! backlog checks (13 and 18). Shared by the wave judge and the agent's
//! per-instance judge.

use jiff::{SignedDuration, Timestamp};
use kura_schemas::{
    BacklogRun, BacklogRuns, BaselineCounters, Evidence, FenceEvidence, ServingAuthorityHealth,
    Signal, UpdatePaused,
};

use crate::config::GateConfig;
use crate::health_view::HealthView;

/// How a sample's `sampledAt` relates to `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// No aggregate at all.
    Missing,
    /// An aggregate without `sampledAt` (no pod answered).
    NoSampledAt,
    /// Older than the maximum age; the age in whole seconds, rounded up.
    Stale(u64),
    /// Further in the future than the skew allowance; seconds ahead, rounded up.
    Future(u64),
    /// Usable.
    Fresh,
}

/// Classifies a sample's time against `now` (checks 2 to 4). Equality with
/// a limit is fresh.
pub fn freshness(health: Option<&HealthView>, now: Timestamp, config: &GateConfig) -> Freshness {
    let Some(health) = health else {
        return Freshness::Missing;
    };
    let Some(sampled_at) = health.sampled_at else {
        return Freshness::NoSampledAt;
    };
    let age = now.duration_since(sampled_at);
    if age > seconds(config.max_sample_age_seconds) {
        return Freshness::Stale(ceil_seconds(age));
    }
    let ahead = sampled_at.duration_since(now);
    if ahead > seconds(config.future_skew_seconds) {
        return Freshness::Future(ceil_seconds(ahead));
    }
    Freshness::Fresh
}

/// Whether an aggregate captured at `captured_at` makes its server
/// soak-eligible: present, fresh at capture, every pod sampled, `ready`,
/// `serving`, `ringConsistent`, memory pressure below 2 and, on an instance
/// that runs fenced serving, at least one valid writer and a grant not in
/// `Fencing`. A missing field makes the server ineligible.
pub fn soak_eligible(
    health: Option<&HealthView>,
    captured_at: Timestamp,
    config: &GateConfig,
) -> bool {
    if freshness(health, captured_at, config) != Freshness::Fresh {
        return false;
    }
    let Some(h) = health else {
        return false;
    };
    let all_sampled = matches!((h.sampled_pods, h.expected_pods), (Some(s), Some(e)) if s >= e);
    all_sampled
        && h.ready == Some(true)
        && h.serving == Some(true)
        && h.ring_consistent == Some(true)
        && matches!(h.memory_pressure_state, Some(p) if p < 2)
        && h.serving_authority
            .as_ref()
            .is_none_or(|a| a.valid_writers >= 1 && !a.is_fencing())
}

/// The evidence of checks 16 and 17 for a fence state.
fn fence_evidence(server: &str, signal: Signal, a: &ServingAuthorityHealth) -> Evidence {
    let fence = FenceEvidence::from(a);
    Evidence {
        observed: Some(u64::from(a.valid_writers)),
        detail: Some(fence.describe()),
        fence: Some(fence),
        ..Evidence::new(server, signal)
    }
}

/// Counter-reset handling: a fd-timeout or peer-failure count below its
/// effective baseline is a reset, so the effective baseline drops to it.
/// Returns whether anything changed. The outbox is a backlog (a gauge), not
/// a counter: a lower outbox is a drained queue and never moves its baseline.
/// Call it only with a fresh sample (see [`freshness`]): an old sample is
/// naturally lower than a newer baseline and must not tighten the band.
pub fn lower_on_reset(effective: &mut BaselineCounters, health: &HealthView) -> bool {
    let fd = lower(&mut effective.fd_timeout_count, health.fd_timeout_count);
    let peers = lower(
        &mut effective.peer_connection_failures,
        health.peer_connection_failures,
    );
    fd || peers
}

fn lower(baseline: &mut Option<u64>, current: Option<u64>) -> bool {
    match (*baseline, current) {
        (Some(b), Some(c)) if c < b => {
            *baseline = Some(c);
            true
        }
        _ => false,
    }
}

/// The evidence of check 19: the operator's pause (strategy, partition,
/// template image, held pods) as the aggregate copied it, in `detail` and
/// in `updatePaused`.
pub fn update_paused_evidence(server: &str, pause: &UpdatePaused) -> Evidence {
    Evidence {
        detail: Some(pause.describe()),
        update_paused: Some(Box::new(pause.clone())),
        ..Evidence::new(server, Signal::UpdatePaused)
    }
}

/// The drain rule (gate.md, checks 13 and 18) for one backlog on one tick:
/// moves `run` for the backlog's value `current` against its band's top.
///
/// - `current` null: the run is left as it is.
/// - `current` ≤ `top`, or a drain window of 0: no run (the band alone
///   decides).
/// - no run yet: it starts at `now`, at `current`.
/// - `current` below the run's level (it fell, however little): the run
///   restarts at `now`, at `current`. So does a run that starts after
///   `now` (a clock going back, a stored state from elsewhere): the drain
///   window counts from a tick that saw the backlog.
/// - otherwise the run goes on.
pub fn follow_run(
    run: &mut Option<BacklogRun>,
    current: Option<u64>,
    top: u64,
    now: Timestamp,
    window_seconds: u64,
) {
    let Some(value) = current else {
        return;
    };
    if window_seconds == 0 || value <= top {
        *run = None;
        return;
    }
    match run {
        Some(r) if value >= r.level && r.since <= now => {}
        _ => {
            *run = Some(BacklogRun {
                since: now,
                level: value,
            });
        }
    }
}

/// Moves both backlog runs of a server for this tick ([`follow_run`]): the
/// outbox against its band above `counters.outboxMessages`, the
/// replication lag against its band above `counters.replicationLagEntries`.
/// A null baseline or value (or no aggregate) leaves that run as it is.
/// Call it on every tick on which the server is converged and
/// soak-eligible, whatever the checks then say, before
/// [`check_server_with_runs`].
pub fn follow_backlogs(
    runs: &mut BacklogRuns,
    health: Option<&HealthView>,
    counters: &BaselineCounters,
    now: Timestamp,
    config: &GateConfig,
) {
    let Some(h) = health else {
        return;
    };
    let window = config.backlog_drain_window_seconds;
    if let Some(base) = counters.outbox_messages {
        let top = config.outbox_band_top(base);
        follow_run(&mut runs.outbox, h.outbox_messages, top, now, window);
    }
    if let Some(base) = counters.replication_lag_entries {
        let top = config.replication_lag_band_top(base);
        follow_run(
            &mut runs.replication_lag,
            h.replication_lag_entries,
            top,
            now,
            window,
        );
    }
}

/// Whether a backlog above its band fails, given its run as
/// [`follow_run`] left it this tick: `runs` `None` is the band alone (no
/// run kept), as is a drain window of 0; else it fails once the run is at
/// least the drain window old (no run: it just started, it passes). The
/// run to name in the evidence comes with a failure.
fn backlog_stuck(
    run: Option<Option<&BacklogRun>>,
    now: Timestamp,
    config: &GateConfig,
) -> Option<Option<BacklogRun>> {
    let window = config.backlog_drain_window_seconds;
    match run {
        None => Some(None),
        Some(_) if window == 0 => Some(None),
        Some(Some(r)) if now.duration_since(r.since) >= seconds(window) => Some(Some(r.clone())),
        Some(_) => None,
    }
}

/// [`check_server_with_runs`] without backlog runs: the backlog checks (13
/// and 18) are judged by their band alone, as with a drain window of 0.
/// For callers that keep no state between ticks.
pub fn check_server(
    server: &str,
    health: Option<&HealthView>,
    counters: Option<&BaselineCounters>,
    now: Timestamp,
    config: &GateConfig,
) -> Option<Evidence> {
    check_server_with_runs(server, health, counters, None, now, config)
}

/// Runs the server checks in contract order and returns the evidence of the
/// first failure, or `None` when every check passes: the hard-stop checks
/// first (1, 16, then 19), then 2 to 15, 17 and 18 in table order.
///
/// `counters` is the effective baseline the counter checks (13 to 15, 18)
/// compare with; `None` skips them (no baseline, or not soak-eligible), and
/// a null counter inside it is never compared. `runs` are the server's
/// backlog runs, already moved for this tick ([`follow_backlogs`]): a
/// backlog above its band fails only when its run is at least
/// `backlogDrainWindowSeconds` old, and the evidence names the run; `None`
/// judges the backlogs by their band alone. A missing
/// `memoryPressureState` is not a hard stop but makes the sample
/// `sample_invalid` (checked right after check 4): unknown pressure is
/// never healthy.
pub fn check_server_with_runs(
    server: &str,
    health: Option<&HealthView>,
    counters: Option<&BaselineCounters>,
    runs: Option<&BacklogRuns>,
    now: Timestamp,
    config: &GateConfig,
) -> Option<Evidence> {
    let ev = |signal: Signal| Evidence::new(server, signal);
    // 1. memory pressure
    if let Some(pressure) = health.and_then(|h| h.memory_pressure_state)
        && pressure >= 2
    {
        return Some(Evidence {
            observed: Some(u64::from(pressure)),
            band_top: Some(1),
            ..ev(Signal::MemoryPressureCritical)
        });
    }
    // 16. the fenced-serving grant in `Fencing`: no pod may write (hard stop)
    if let Some(a) = health.and_then(|h| h.serving_authority.as_ref())
        && a.is_fencing()
    {
        return Some(fence_evidence(server, Signal::ServingFenced, a));
    }
    // 19. an operator's update pause holds pods on the old image (hard stop)
    if let Some(pause) = health.and_then(|h| h.update_paused.as_ref()) {
        return Some(update_paused_evidence(server, pause));
    }
    // 2 to 4. presence and time
    match freshness(health, now, config) {
        Freshness::Missing => {
            return Some(Evidence {
                detail: Some("no aggregate".into()),
                ..ev(Signal::SampleMissing)
            });
        }
        Freshness::NoSampledAt => {
            return Some(Evidence {
                band_top: Some(config.max_sample_age_seconds),
                detail: Some("sampledAt is missing".into()),
                ..ev(Signal::SampleStale)
            });
        }
        Freshness::Stale(age) => {
            return Some(Evidence {
                observed: Some(age),
                band_top: Some(config.max_sample_age_seconds),
                detail: Some("sample age in seconds".into()),
                ..ev(Signal::SampleStale)
            });
        }
        Freshness::Future(ahead) => {
            return Some(Evidence {
                observed: Some(ahead),
                band_top: Some(config.future_skew_seconds),
                detail: Some("seconds sampledAt is ahead of now".into()),
                ..ev(Signal::SampleInvalid)
            });
        }
        Freshness::Fresh => {}
    }
    let h = health?;
    if h.memory_pressure_state.is_none() {
        return Some(Evidence {
            detail: Some("memoryPressureState is missing".into()),
            ..ev(Signal::SampleInvalid)
        });
    }
    // 5. every pod sampled
    match (h.sampled_pods, h.expected_pods) {
        (Some(sampled), Some(expected)) if sampled >= expected => {}
        (sampled, expected) => {
            return Some(Evidence {
                observed: sampled.map(u64::from),
                band_top: expected.map(u64::from),
                detail: Some(match (sampled, expected) {
                    (Some(_), Some(_)) => "sampledPods below expectedPods".into(),
                    (None, _) => "sampledPods is missing".into(),
                    (_, None) => "expectedPods is missing".into(),
                }),
                ..ev(Signal::PodsUnsampled)
            });
        }
    }
    // 6 to 8, 11: flags that must hold (9 and 10 sit between them)
    let flag = |value: Option<bool>, want: bool, field: &str, signal: Signal| match value {
        Some(v) if v == want => None,
        Some(v) => Some(Evidence {
            observed: Some(u64::from(v)),
            detail: Some(format!("{field} is {v}")),
            ..ev(signal)
        }),
        None => Some(Evidence {
            detail: Some(format!("{field} is missing")),
            ..ev(signal)
        }),
    };
    if let Some(e) = flag(h.ready, true, "ready", Signal::NotReady)
        .or_else(|| flag(h.serving, true, "serving", Signal::NotServing))
        .or_else(|| flag(h.ring_consistent, true, "ringConsistent", Signal::RingSkew))
    {
        return Some(e);
    }
    // 9. bootstrap (null: not reported by this node generation)
    if let Some(n) = h.bootstrap_inflight_peers
        && n > 0
    {
        return Some(Evidence {
            observed: Some(n),
            band_top: Some(0),
            ..ev(Signal::BootstrapInFlight)
        });
    }
    // 10. initial catch-up settled: `pending`, or a value this version does
    // not know, holds the gate (absent, `complete` and `degraded` pass here;
    // `degraded` is check 11).
    if let Some(cycle) = h.backfill_initial_cycle.as_deref()
        && backfill_pending(cycle)
    {
        return Some(Evidence {
            detail: Some(format!("backfillInitialCycle is {:?}", bounded(cycle))),
            ..ev(Signal::BackfillPending)
        });
    }
    // 11. backfill degraded
    if let Some(e) = flag(
        h.backfill_degraded,
        false,
        "backfillDegraded",
        Signal::BackfillDegraded,
    ) {
        return Some(e);
    }
    // 12. budget-exhausted peers
    if let Some(n) = h.backfill_budget_exhausted_peers
        && n > 0
    {
        return Some(Evidence {
            observed: Some(n),
            band_top: Some(0),
            ..ev(Signal::BackfillBudgetExhausted)
        });
    }
    if let Some(e) = counters.and_then(|c| counter_checks(server, h, c, runs, now, config)) {
        return Some(e);
    }
    // 17. fenced serving with no valid writer (a handover in flight, a grant
    // not yet active): held until a pod holds a valid grant again
    if let Some(a) = h.serving_authority.as_ref()
        && a.valid_writers == 0
    {
        return Some(fence_evidence(server, Signal::NoValidWriter, a));
    }
    // 18. replication lag (skipped when baseline or current is null)
    let counters = counters?;
    if let (Some(base), Some(current)) =
        (counters.replication_lag_entries, h.replication_lag_entries)
    {
        let top = config.replication_lag_band_top(base);
        if current > top
            && let Some(run) = backlog_stuck(runs.map(|r| r.replication_lag.as_ref()), now, config)
        {
            return Some(Evidence {
                observed: Some(current),
                band_top: Some(top),
                baseline: Some(base),
                run,
                ..ev(Signal::ReplicationLagRegressed)
            });
        }
    }
    None
}

/// Checks 13 to 15: the outbox (with the drain rule), fd timeouts and
/// peer failures against their bands above the effective baseline.
fn counter_checks(
    server: &str,
    h: &HealthView,
    counters: &BaselineCounters,
    runs: Option<&BacklogRuns>,
    now: Timestamp,
    config: &GateConfig,
) -> Option<Evidence> {
    let ev = |signal: Signal| Evidence::new(server, signal);
    // 13. outbox (skipped when baseline or current is null): above its
    // band and not draining
    if let (Some(base), Some(current)) = (counters.outbox_messages, h.outbox_messages) {
        let top = config.outbox_band_top(base);
        if current > top
            && let Some(run) = backlog_stuck(runs.map(|r| r.outbox.as_ref()), now, config)
        {
            return Some(Evidence {
                observed: Some(current),
                band_top: Some(top),
                baseline: Some(base),
                run,
                ..ev(Signal::OutboxRegressed)
            });
        }
    }
    // 14. fd timeouts (skipped when the baseline is null; a missing current
    // value fails)
    if let Some(base) = counters.fd_timeout_count {
        let top = config.fd_timeout_band_top(base);
        match h.fd_timeout_count {
            Some(current) if current <= top => {}
            current => {
                return Some(Evidence {
                    observed: current,
                    band_top: Some(top),
                    baseline: Some(base),
                    detail: current
                        .is_none()
                        .then(|| "fdTimeoutCount is missing".into()),
                    ..ev(Signal::FdTimeoutsRegressed)
                });
            }
        }
    }
    // 15. peer failures (skipped when baseline or current is null)
    if let (Some(base), Some(current)) = (
        counters.peer_connection_failures,
        h.peer_connection_failures,
    ) {
        let top = config.peer_failure_band_top(base);
        if current > top {
            return Some(Evidence {
                observed: Some(current),
                band_top: Some(top),
                baseline: Some(base),
                ..ev(Signal::PeerConnectionFailuresRegressed)
            });
        }
    }
    None
}

/// Check 10's rule on a folded `backfillInitialCycle`: the initial catch-up
/// has not settled when the cycle is `pending` or a value this version does
/// not know. Absent (`""`), `complete` and `degraded` (check 11's business)
/// are settled.
pub fn backfill_pending(cycle: &str) -> bool {
    !matches!(cycle, "" | "complete" | "degraded")
}

/// At most 64 characters of a reported text, for evidence.
fn bounded(text: &str) -> &str {
    match text.char_indices().nth(64) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn seconds(value: u64) -> SignedDuration {
    SignedDuration::from_secs(i64::try_from(value).unwrap_or(i64::MAX))
}

/// Whole seconds of a non-negative duration, rounded up.
pub(crate) fn ceil_seconds(duration: SignedDuration) -> u64 {
    let whole = u64::try_from(duration.as_secs()).unwrap_or(0);
    if duration.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}
