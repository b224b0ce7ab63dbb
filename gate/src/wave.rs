//! The wave judge (contract/gate.md, "Judging a wave"): one tick in, one
//! verdict out, all state between ticks in one serializable [`GateState`].

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use kura_schemas::{BacklogRun, BacklogRuns, BaselineCounters, Evidence, Signal};
use serde::{Deserialize, Serialize};

use crate::baseline::Baseline;
use crate::checks::{
    Freshness, ceil_seconds, check_server_with_runs, follow_backlogs, freshness, lower_on_reset,
    update_paused_evidence,
};
use crate::config::GateConfig;
use crate::error::GateError;
use crate::health_view::HealthView;

/// At most this many evidence entries in one verdict (the first ones in
/// server input order); a verdict over thousands of servers stays small.
pub const MAX_EVIDENCE: usize = 16;

/// A server's deployment as the orchestrator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Deployment {
    /// Scheduled, not started.
    Pending,
    /// In progress.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl Deployment {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Deployment::Pending => "pending",
            Deployment::Running => "running",
            Deployment::Succeeded => "succeeded",
            Deployment::Failed => "failed",
            Deployment::Cancelled => "cancelled",
        }
    }
}

/// A server's lifecycle status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerStatus {
    /// In service.
    Active,
    /// Failed.
    Failed,
    /// Gone: out of scope.
    Destroyed,
}

impl ServerStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Active => "active",
            ServerStatus::Failed => "failed",
            ServerStatus::Destroyed => "destroyed",
        }
    }
}

/// One server of the rollout's scope in one tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInput {
    /// Stable id; state carries from tick to tick by it.
    pub id: String,
    /// The wave the server belongs to.
    pub wave: u32,
    /// Its observed image is the target.
    pub converged: bool,
    /// Its deployment, if any.
    pub deployment: Option<Deployment>,
    /// Its status.
    pub status: ServerStatus,
    /// Its baseline; `None` means nothing was captured, which makes the
    /// server not soak-eligible (like an absent aggregate at capture).
    pub baseline: Option<Baseline>,
    /// Its current aggregate, if any.
    pub health: Option<HealthView>,
}

/// Everything one tick judges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TickInput {
    /// The current time.
    pub now: Timestamp,
    /// The current wave.
    pub wave: u32,
    /// When the current wave started.
    pub wave_started_at: Timestamp,
    /// The attempt number; a higher one starts fresh.
    pub attempt: u32,
    /// Every server of the scope so far. Servers of a later wave than
    /// `wave` are not in scope yet and are ignored.
    pub servers: Vec<ServerInput>,
}

/// `pass`, `soak` or `hard_stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// The next wave may start.
    Pass,
    /// Wait.
    Soak,
    /// Stop the rollout.
    HardStop,
}

impl VerdictKind {
    /// Every verdict of the wave judge, in a fixed order.
    pub const ALL: [VerdictKind; 3] = [VerdictKind::Pass, VerdictKind::Soak, VerdictKind::HardStop];

    /// The wire spelling: the one place the words `pass`, `soak` and
    /// `hard_stop` are written (the CLI, the demo and the C ABI's
    /// vocabulary print these).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Pass => "pass",
            VerdictKind::Soak => "soak",
            VerdictKind::HardStop => "hard_stop",
        }
    }
}

impl std::fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer of one tick.
///
/// Evidence: empty for `pass` and for `soak`/`soaking` (nothing failed);
/// for `soak` on `not_converged` one `not_converged` entry per unconverged
/// server of the current wave (its deployment and status in `detail`) then
/// the failing health checks; for an unhealthy soak the first failing check
/// of each failing server; for a hard stop the servers hitting that stop;
/// for `wave_deadline_exceeded` one entry with the elapsed seconds
/// (`observed`) against the deadline (`bandTop`), naming the first server
/// still holding the wave, followed by what still held it. At most
/// [`MAX_EVIDENCE`] entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `pass`, `soak` or `hard_stop`.
    pub verdict: VerdictKind,
    /// `soaking`, `not_converged`, a server signal or a hard-stop signal;
    /// null for `pass`.
    pub signal: Option<Signal>,
    /// The server behind the signal, if any.
    pub server_id: Option<String>,
    /// Since when the wave has been converged and healthy without a break.
    pub healthy_since: Option<Timestamp>,
    /// Seconds of soak left; null unless soaking.
    pub remaining_seconds: Option<u64>,
    /// Why (see the type's documentation).
    pub evidence: Vec<Evidence>,
}

/// A server's effective baseline after counter resets, remembered only
/// while it differs from the captured one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EffectiveBaseline {
    /// The capture this belongs to; a new capture replaces it.
    pub captured_at: Timestamp,
    /// The captured counters this was derived from.
    pub captured: BaselineCounters,
    /// The counters after resets lowered them.
    pub effective: BaselineCounters,
}

/// A server's backlog runs (the drain rule of checks 13 and 18) and the
/// baseline capture they belong to: a new capture clears them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerBacklogRuns {
    /// The `capturedAt` of the baseline the runs were followed against.
    pub captured_at: Timestamp,
    /// The outbox's run; null when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<BacklogRun>,
    /// The replication lag's run; null when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag: Option<BacklogRun>,
}

impl ServerBacklogRuns {
    /// The two runs.
    pub fn runs(&self) -> BacklogRuns {
        BacklogRuns {
            outbox: self.outbox.clone(),
            replication_lag: self.replication_lag.clone(),
        }
    }
}

/// Everything the wave judge keeps between ticks: one serde value the
/// caller stores and restores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GateState {
    /// The attempt judged so far.
    pub attempt: Option<u32>,
    /// The wave judged so far and its start; a change restarts the soak clock.
    pub wave: Option<u32>,
    /// Start of that wave.
    pub wave_started_at: Option<Timestamp>,
    /// Start of the current run of converged and healthy ticks.
    pub healthy_since: Option<Timestamp>,
    /// A hard stop of this attempt, returned for every later tick.
    pub latched: Option<Verdict>,
    /// Lowered baselines by server id.
    pub effective_baselines: BTreeMap<String, EffectiveBaseline>,
    /// Backlog runs by server id (absent from the stored state when there
    /// is none, as in states written before the drain rule).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub backlog_runs: BTreeMap<String, ServerBacklogRuns>,
}

impl GateState {
    /// Checks that the gate could have written this state, so that a stored
    /// state (corrupted, edited, or from another version) cannot shortcut
    /// the rules when restored:
    ///
    /// - only a hard stop latches (a `latched` pass or soak would answer
    ///   for every later tick of the attempt, a failed deployment included),
    ///   with a hard-stop signal, and never together with a `healthySince`;
    /// - the wave, its start and `healthySince` belong to an attempt, and a
    ///   `healthySince` to a wave with its start;
    /// - an effective baseline only ever lowers the captured fd-timeout and
    ///   peer-failure counters and keeps the others (a higher one would
    ///   widen a band and let a regression pass).
    ///
    /// What only a tick can tell, a `healthySince` before the wave's start
    /// or after `now`, restarts the soak clock in [`Gate::tick`]. A
    /// `healthySince` between the two is taken as stored: the gate cannot
    /// tell it from one it wrote, so the stored state must be kept as
    /// safely as any other record the rollout trusts.
    pub fn validate(&self) -> Result<(), GateError> {
        let invalid = |field: &str, reason: String| GateError::InvalidState {
            field: field.to_owned(),
            reason,
        };
        if self.attempt.is_none()
            && (self.wave.is_some()
                || self.wave_started_at.is_some()
                || self.healthy_since.is_some()
                || self.latched.is_some()
                || !self.effective_baselines.is_empty()
                || !self.backlog_runs.is_empty())
        {
            return Err(invalid(
                "attempt",
                "null, but the state holds what only a judged attempt has".into(),
            ));
        }
        if self.wave.is_some() != self.wave_started_at.is_some() {
            return Err(invalid(
                "waveStartedAt",
                "a wave and its start are stored together or not at all".into(),
            ));
        }
        if self.healthy_since.is_some() && self.wave.is_none() {
            return Err(invalid(
                "healthySince",
                "set without a wave it belongs to".into(),
            ));
        }
        if let Some(latched) = &self.latched {
            if latched.verdict != VerdictKind::HardStop {
                return Err(invalid(
                    "latched",
                    format!("only a hard stop latches, not {}", latched.verdict),
                ));
            }
            match latched.signal {
                // The signals a hard stop can carry (the home's hard stops):
                // the only verdicts that latch.
                Some(signal) if signal.is_hard_stop() => {}
                other => {
                    return Err(invalid(
                        "latched.signal",
                        format!(
                            "{} is not a hard-stop signal",
                            other.map_or("null", |s| s.as_str())
                        ),
                    ));
                }
            }
            if latched.healthy_since.is_some() || latched.remaining_seconds.is_some() {
                return Err(invalid(
                    "latched",
                    "a hard stop has no healthySince and no remainingSeconds".into(),
                ));
            }
            if self.wave.is_none() {
                return Err(invalid(
                    "latched",
                    "set without a wave it belongs to".into(),
                ));
            }
            if self.healthy_since.is_some() {
                return Err(invalid(
                    "healthySince",
                    "set while a hard stop is latched (a hard stop clears it)".into(),
                ));
            }
        }
        for (id, kept) in &self.effective_baselines {
            let field = |counter: &str| format!("effectiveBaselines[{id:?}].effective.{counter}");
            let (captured, effective) = (&kept.captured, &kept.effective);
            for (name, captured, effective) in [
                (
                    "outboxMessages",
                    captured.outbox_messages,
                    effective.outbox_messages,
                ),
                (
                    "replicationLagEntries",
                    captured.replication_lag_entries,
                    effective.replication_lag_entries,
                ),
            ] {
                if captured != effective {
                    return Err(invalid(
                        &field(name),
                        "differs from the captured value (only counter resets lower a baseline, and this counter has none)".into(),
                    ));
                }
            }
            for (name, captured, effective) in [
                (
                    "fdTimeoutCount",
                    captured.fd_timeout_count,
                    effective.fd_timeout_count,
                ),
                (
                    "peerConnectionFailures",
                    captured.peer_connection_failures,
                    effective.peer_connection_failures,
                ),
            ] {
                match (captured, effective) {
                    (None, None) => {}
                    (Some(c), Some(e)) if e <= c => {}
                    (c, e) => {
                        return Err(invalid(
                            &field(name),
                            format!(
                                "{} with {} captured: a reset only lowers a captured counter",
                                e.map_or("null".into(), |v| v.to_string()),
                                c.map_or("null".into(), |v| v.to_string()),
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The wave judge: a configuration and the state carried between ticks.
#[derive(Debug, Clone)]
pub struct Gate {
    config: GateConfig,
    state: GateState,
}

impl Gate {
    /// A gate with empty state.
    pub fn new(config: GateConfig) -> Result<Self, GateError> {
        Self::restore(config, GateState::default())
    }

    /// A gate continuing from a stored state. The state must be one the
    /// gate could have written ([`GateState::validate`]); what can only be
    /// judged against a tick (a `healthySince` outside the tick's wave and
    /// `now`) is judged by [`Gate::tick`], for every tick alike.
    pub fn restore(config: GateConfig, state: GateState) -> Result<Self, GateError> {
        config.validate()?;
        state.validate()?;
        Ok(Gate { config, state })
    }

    /// The state to store between ticks.
    pub fn state(&self) -> &GateState {
        &self.state
    }

    /// The configuration.
    pub fn config(&self) -> &GateConfig {
        &self.config
    }

    /// Judges one tick and updates the state. On error the state is left
    /// unchanged.
    pub fn tick(&mut self, input: &TickInput) -> Result<Verdict, GateError> {
        let mut ids = HashSet::with_capacity(input.servers.len());
        for server in &input.servers {
            if !ids.insert(server.id.as_str()) {
                return Err(GateError::DuplicateServer(server.id.clone()));
            }
        }
        match self.state.attempt {
            Some(previous) if input.attempt < previous => {
                return Err(GateError::AttemptWentBack {
                    previous,
                    got: input.attempt,
                });
            }
            Some(previous) if input.attempt == previous => {}
            _ => {
                self.state = GateState {
                    attempt: Some(input.attempt),
                    ..GateState::default()
                };
            }
        }
        if let Some(latched) = &self.state.latched {
            return Ok(latched.clone());
        }
        if self.state.wave != Some(input.wave)
            || self.state.wave_started_at != Some(input.wave_started_at)
        {
            self.state.wave = Some(input.wave);
            self.state.wave_started_at = Some(input.wave_started_at);
            self.state.healthy_since = None;
        }
        let verdict = self.judge(input);
        if verdict.verdict == VerdictKind::HardStop {
            self.state.latched = Some(verdict.clone());
        }
        Ok(verdict)
    }

    fn judge(&mut self, input: &TickInput) -> Verdict {
        let config = self.config.clone();
        let now = input.now;
        let mut deployment_failed = Evidences::default();
        let mut regressed = Evidences::default();
        // One collection per hard-stop server check, in the order the
        // checks run (the signal home's order).
        let mut server_stops: Vec<(Signal, Evidences)> = Signal::server_checks()
            .into_iter()
            .filter(|s| s.is_hard_stop())
            .map(|s| (s, Evidences::default()))
            .collect();
        let mut unconverged = Evidences::default();
        let mut unhealthy = Evidences::default();
        let mut current_wave_servers = 0usize;
        let mut kept = 0usize;

        for server in &input.servers {
            // Destroyed and suspended servers leave scope (a suspended
            // instance has no pods and comes back empty: nothing of its
            // baseline survives), and so do servers of later waves.
            let suspended = server.health.as_ref().is_some_and(HealthView::is_suspended);
            if server.wave > input.wave || server.status == ServerStatus::Destroyed || suspended {
                self.forget_baseline(&server.id);
                self.forget_runs(&server.id);
                continue;
            }
            if !server.converged && server.deployment == Some(Deployment::Failed) {
                deployment_failed.push(|| Evidence {
                    detail: Some("deployment failed before converging".into()),
                    ..Evidence::new(&server.id, Signal::DeploymentFailed)
                });
            }
            if server.converged && server.status == ServerStatus::Failed {
                regressed.push(|| Evidence {
                    detail: Some("converged server has status failed".into()),
                    ..Evidence::new(&server.id, Signal::ServerRegressedToFailed)
                });
            }
            if server.wave == input.wave {
                current_wave_servers += 1;
                if !server.converged {
                    unconverged.push(|| Evidence {
                        detail: Some(format!(
                            "deployment {}, status {}",
                            server.deployment.map_or("null", Deployment::as_str),
                            server.status.as_str()
                        )),
                        ..Evidence::new(&server.id, Signal::NotConverged)
                    });
                }
            }
            let eligible = server.baseline.as_ref().filter(|b| b.soak_eligible);
            // 19 applies to every server of the scope; a converged,
            // soak-eligible one meets it among its server checks below
            // (after 1 and 16).
            if !(server.converged && eligible.is_some())
                && let Some(pause) = server
                    .health
                    .as_ref()
                    .and_then(|h| h.update_paused.as_ref())
            {
                stop_of(&mut server_stops, Signal::UpdatePaused)
                    .push(|| update_paused_evidence(&server.id, pause));
            }
            let Some(baseline) = eligible else {
                self.forget_baseline(&server.id);
                continue;
            };
            let (effective, remembered) = self.effective_for(server, baseline, now);
            kept += usize::from(remembered);
            if !server.converged {
                continue;
            }
            let runs = self.follow_runs(server, baseline, &effective, now);
            if let Some(failure) = check_server_with_runs(
                &server.id,
                server.health.as_ref(),
                Some(&effective),
                Some(&runs),
                now,
                &config,
            ) {
                if failure.signal.is_hard_stop() {
                    stop_of(&mut server_stops, failure.signal).push(|| failure);
                } else {
                    unhealthy.push(|| failure);
                }
            }
        }
        if self.state.effective_baselines.len() > kept || !self.state.backlog_runs.is_empty() {
            // Entries of servers no longer in the input.
            let ids: HashSet<&str> = input.servers.iter().map(|s| s.id.as_str()).collect();
            self.state
                .effective_baselines
                .retain(|id, _| ids.contains(id.as_str()));
            self.state
                .backlog_runs
                .retain(|id, _| ids.contains(id.as_str()));
        }

        let stops = [deployment_failed, regressed]
            .into_iter()
            .chain(server_stops.into_iter().map(|(_, stop)| stop));
        for stop in stops {
            if let Some(first) = stop.first_server() {
                self.state.healthy_since = None;
                return Verdict {
                    verdict: VerdictKind::HardStop,
                    signal: Some(stop.items[0].signal),
                    server_id: Some(first),
                    healthy_since: None,
                    remaining_seconds: None,
                    evidence: stop.items,
                };
            }
        }

        if unconverged.is_empty() && unhealthy.is_empty() {
            // An empty wave has nothing to converge or soak: it passes on
            // its first healthy tick.
            let soak = if current_wave_servers == 0 {
                0
            } else {
                self.config.soak_for(input.wave)
            };
            // The soak counts from a healthy tick of this wave: a
            // `healthySince` after `now` (a clock going back, a state from
            // elsewhere) or before the wave's start (no tick of this wave
            // can have seen it healthy then) restarts the clock at `now`.
            let since = match self.state.healthy_since {
                Some(since) if since <= now && since >= input.wave_started_at => since,
                _ => now,
            };
            self.state.healthy_since = Some(since);
            let elapsed = now.duration_since(since);
            let soak_duration =
                jiff::SignedDuration::from_secs(i64::try_from(soak).unwrap_or(i64::MAX));
            return if elapsed >= soak_duration {
                Verdict {
                    verdict: VerdictKind::Pass,
                    signal: None,
                    server_id: None,
                    healthy_since: Some(since),
                    remaining_seconds: None,
                    evidence: Vec::new(),
                }
            } else {
                Verdict {
                    verdict: VerdictKind::Soak,
                    signal: Some(Signal::Soaking),
                    server_id: None,
                    healthy_since: Some(since),
                    remaining_seconds: Some(ceil_seconds(soak_duration - elapsed)),
                    evidence: Vec::new(),
                }
            };
        }

        self.state.healthy_since = None;
        let signal = if unconverged.is_empty() {
            unhealthy.items[0].signal
        } else {
            Signal::NotConverged
        };
        let first = unconverged
            .first_server()
            .or_else(|| unhealthy.first_server());
        let mut reasons = unconverged;
        reasons.extend(unhealthy);
        let elapsed = now.duration_since(input.wave_started_at);
        let deadline = self.config.wave_deadline_seconds;
        if elapsed >= jiff::SignedDuration::from_secs(i64::try_from(deadline).unwrap_or(i64::MAX)) {
            let mut evidence = Evidences::default();
            evidence.push(|| Evidence {
                observed: Some(u64::try_from(elapsed.as_secs()).unwrap_or(0)),
                band_top: Some(deadline),
                detail: Some(format!(
                    "wave {} incomplete {}s after its start: {}",
                    input.wave,
                    elapsed.as_secs(),
                    signal
                )),
                ..Evidence::new(first.as_deref().unwrap_or(""), Signal::WaveDeadlineExceeded)
            });
            evidence.extend(reasons);
            return Verdict {
                verdict: VerdictKind::HardStop,
                signal: Some(Signal::WaveDeadlineExceeded),
                server_id: first,
                healthy_since: None,
                remaining_seconds: None,
                evidence: evidence.items,
            };
        }
        Verdict {
            verdict: VerdictKind::Soak,
            signal: Some(signal),
            server_id: first,
            healthy_since: None,
            remaining_seconds: None,
            evidence: reasons.items,
        }
    }

    /// The server's effective baseline: the remembered one when it belongs
    /// to this capture, else the captured counters; lowered by a fresh
    /// sample below it. It is remembered in the state while it differs from
    /// the captured one (the second value says whether it is).
    fn effective_for(
        &mut self,
        server: &ServerInput,
        baseline: &Baseline,
        now: Timestamp,
    ) -> (BaselineCounters, bool) {
        let kept = self.state.effective_baselines.get_mut(&server.id);
        let mut effective = match &kept {
            Some(kept)
                if kept.captured_at == baseline.captured_at
                    && kept.captured == baseline.counters =>
            {
                kept.effective.clone()
            }
            _ => baseline.counters.clone(),
        };
        if let Some(health) = server.health.as_ref()
            && freshness(Some(health), now, &self.config) == Freshness::Fresh
        {
            lower_on_reset(&mut effective, health);
        }
        if effective == baseline.counters {
            if kept.is_some() {
                self.state.effective_baselines.remove(&server.id);
            }
            return (effective, false);
        }
        let entry = EffectiveBaseline {
            captured_at: baseline.captured_at,
            captured: baseline.counters.clone(),
            effective: effective.clone(),
        };
        match kept {
            Some(kept) => *kept = entry,
            None => {
                self.state
                    .effective_baselines
                    .insert(server.id.clone(), entry);
            }
        }
        (effective, true)
    }

    /// Moves the server's backlog runs for this tick (the drain rule):
    /// the kept ones when they belong to this baseline capture, else none;
    /// kept in the state while there is one. Returns them as moved.
    fn follow_runs(
        &mut self,
        server: &ServerInput,
        baseline: &Baseline,
        effective: &BaselineCounters,
        now: Timestamp,
    ) -> BacklogRuns {
        let mut runs = match self.state.backlog_runs.get(&server.id) {
            Some(kept) if kept.captured_at == baseline.captured_at => kept.runs(),
            _ => BacklogRuns::default(),
        };
        follow_backlogs(
            &mut runs,
            server.health.as_ref(),
            effective,
            now,
            &self.config,
        );
        if runs.is_empty() {
            self.forget_runs(&server.id);
        } else {
            self.state.backlog_runs.insert(
                server.id.clone(),
                ServerBacklogRuns {
                    captured_at: baseline.captured_at,
                    outbox: runs.outbox.clone(),
                    replication_lag: runs.replication_lag.clone(),
                },
            );
        }
        runs
    }

    fn forget_runs(&mut self, id: &str) {
        if !self.state.backlog_runs.is_empty() {
            self.state.backlog_runs.remove(id);
        }
    }

    fn forget_baseline(&mut self, id: &str) {
        if !self.state.effective_baselines.is_empty() {
            self.state.effective_baselines.remove(id);
        }
    }
}

/// Evidence entries, capped at [`MAX_EVIDENCE`]; `count` counts them all.
#[derive(Default)]
struct Evidences {
    items: Vec<Evidence>,
    count: usize,
}

impl Evidences {
    fn push(&mut self, make: impl FnOnce() -> Evidence) {
        if self.items.len() < MAX_EVIDENCE {
            self.items.push(make());
        }
        self.count += 1;
    }

    fn extend(&mut self, other: Evidences) {
        let dropped = other.count - other.items.len();
        for item in other.items {
            self.push(|| item);
        }
        self.count += dropped;
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn first_server(&self) -> Option<String> {
        self.items.first().map(|e| e.server.clone())
    }
}

/// The evidence collected for the hard-stop server check `signal`.
/// `server_stops` holds every hard stop of the signal home, so a hard
/// stop the checks return always has its place; should it not (a signal
/// both hard stop and not a server check), a collection is added for it
/// last.
fn stop_of(server_stops: &mut Vec<(Signal, Evidences)>, signal: Signal) -> &mut Evidences {
    let at = match server_stops.iter().position(|(s, _)| *s == signal) {
        Some(at) => at,
        None => {
            server_stops.push((signal, Evidences::default()));
            server_stops.len() - 1
        }
    };
    &mut server_stops[at].1
}

/// Convenience for callers building inputs: a soak-eligible server of
/// `wave`, converged, with `health` as both baseline (captured at
/// `captured_at`) and current aggregate.
pub fn steady_server(
    id: &str,
    wave: u32,
    health: HealthView,
    captured_at: Timestamp,
    config: &GateConfig,
) -> ServerInput {
    ServerInput {
        id: id.to_owned(),
        wave,
        converged: true,
        deployment: Some(Deployment::Succeeded),
        status: ServerStatus::Active,
        baseline: Some(Baseline::capture(Some(&health), captured_at, config)),
        health: Some(health),
    }
}
