//! The pure half of `kura-agent check`: the node set is one synthetic
//! instance; each poll's samples go through the agent's aggregation and the
//! gate's per-instance judge, and the run's soak, hard stop and timeout
//! rules turn the result into a verdict. Time is an argument.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::{GateConfig, VerdictKind, judge_instance};
use kura_schemas::{AgentVerdict, BaselineCounters, Evidence, RolloutGate, RolloutHealth, Signal};
use serde::Serialize;

use crate::aggregate::{AggregateConfig, InstanceAggregator};
use crate::model::{InstanceInfo, PodSample};

use super::baseline_document::BaselineDocument;

/// The name of the synthetic instance, as evidence names the server.
pub const SERVER: &str = "nodes";
/// Written to the aggregate's `agent` field.
pub const AGENT: &str = "kura-agent-check";
/// The image label of the state at start (the baseline).
const START_IMAGE: &str = "at-start";
/// The image label of every later poll.
const CHECK_IMAGE: &str = "under-check";

/// What a check run is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSettings {
    /// `expectedPods` of the synthetic instance.
    pub expected_pods: u32,
    /// Continuous health needed to pass.
    pub soak: Duration,
    /// Time from the first poll after which the run fails.
    pub timeout: Duration,
    /// The gate's bands and sample-age limits.
    pub gate: GateConfig,
}

/// The verdict and evidence of one poll: one JSON line with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PollReport {
    /// Poll number, from 0 (the baseline poll).
    pub poll: u64,
    /// When the poll was judged.
    pub at: Timestamp,
    /// Seconds since the first poll.
    pub elapsed_seconds: f64,
    /// `pass`, `soak` or `hard_stop`.
    pub verdict: VerdictKind,
    /// `soaking`, a server signal, `memory_pressure_critical` or
    /// `wave_deadline_exceeded` (the timeout); null for `pass`.
    pub signal: Option<Signal>,
    /// Whether the run ends with this poll.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Since when the set has been healthy without a break.
    pub healthy_since: Option<Timestamp>,
    /// Seconds of soak left while soaking healthy.
    pub soak_remaining_seconds: Option<u64>,
    /// Seconds until the timeout (rounded up).
    pub timeout_remaining_seconds: u64,
    /// The most recent failing signal of the run, if any poll failed.
    pub last_failing_signal: Option<Signal>,
    /// Whether the set was healthy at start; when not, the counter checks
    /// (outbox, fd timeouts, peer failures) are skipped.
    pub baseline_eligible: bool,
    /// Where the baseline comes from: `first_poll` (taken when the check
    /// started) or `file` (`--baseline`, taken before the upgrade).
    pub baseline_source: BaselineSource,
    /// When the baseline was taken.
    pub baseline_taken_at: Timestamp,
    /// The counters captured at start.
    pub baseline: BaselineCounters,
    /// The baseline after counter resets lowered it.
    pub effective_baseline: BaselineCounters,
    /// Node URLs behind the signal, when the aggregate tells which.
    pub nodes: Vec<String>,
    /// Why (the gate's evidence; for the timeout, the deadline entry first,
    /// then the last failure).
    pub evidence: Vec<Evidence>,
    /// This poll's aggregate (`rolloutHealth` of the synthetic instance).
    pub health: RolloutHealth,
}

/// Where a check's baseline comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineSource {
    /// The check's first poll (no `--baseline`).
    FirstPoll,
    /// A baseline document (`--baseline FILE`).
    File,
}

/// One check run's state between polls.
#[derive(Debug, Clone)]
pub struct CheckRun {
    settings: CheckSettings,
    info: InstanceInfo,
    aggregator: InstanceAggregator,
    gate: Option<RolloutGate>,
    baseline_health: Option<RolloutHealth>,
    baseline_source: BaselineSource,
    started_at: Option<Timestamp>,
    polls: u64,
    last_failure: Option<Evidence>,
    finished: bool,
}

impl CheckRun {
    /// A run that has not polled yet.
    pub fn new(settings: CheckSettings) -> Self {
        CheckRun {
            info: InstanceInfo {
                namespace: "check".to_owned(),
                name: SERVER.to_owned(),
                expected_pods: settings.expected_pods,
                generation: 0,
            },
            settings,
            aggregator: InstanceAggregator::new(AggregateConfig::default()),
            gate: None,
            baseline_health: None,
            baseline_source: BaselineSource::FirstPoll,
            started_at: None,
            polls: 0,
            last_failure: None,
            finished: false,
        }
    }

    /// A run judged against `baseline` (taken before the upgrade) instead
    /// of its first poll: the baseline's counters and soak eligibility are
    /// the reference, and its per-node raw counters and incarnations seed
    /// the reset clamping, so a node restarted by the upgrade counts its
    /// counter from before the upgrade on top of what it counts since.
    /// The caller checked that the baseline is of the same nodes
    /// ([`BaselineDocument::check_usable`]).
    pub fn from_baseline(settings: CheckSettings, baseline: &BaselineDocument) -> Self {
        let seed = baseline.seed(AGENT);
        let counters = baseline.counters();
        let gate = RolloutGate {
            target_image: CHECK_IMAGE.to_owned(),
            baseline_image: Some(START_IMAGE.to_owned()),
            baseline_captured_at: Some(baseline.taken_at),
            baseline: counters.clone(),
            effective_baseline: counters,
            soak_eligible: baseline.aggregate.soak_eligible,
            verdict: AgentVerdict::Unhealthy,
            signal: None,
            healthy_since: None,
            evaluated_at: baseline.taken_at,
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        };
        let mut run = CheckRun::new(settings);
        run.aggregator = InstanceAggregator::restore(&seed, AggregateConfig::default());
        run.gate = Some(gate);
        run.baseline_health = Some(seed);
        run.baseline_source = BaselineSource::File;
        run
    }

    /// Starts the run's clock at `now` (before its first poll, so that the
    /// timeout bounds the first poll too); without it the first
    /// [`CheckRun::observe`] starts it.
    pub fn start(&mut self, now: Timestamp) {
        self.started_at.get_or_insert(now);
    }

    /// When the run times out (known once started).
    pub fn deadline(&self) -> Option<Timestamp> {
        let timeout = SignedDuration::try_from(self.settings.timeout).ok()?;
        self.started_at?.checked_add(timeout).ok()
    }

    /// The aggregate of the first poll (the baseline's source).
    pub fn baseline_health(&self) -> Option<&RolloutHealth> {
        self.baseline_health.as_ref()
    }

    /// Whether a final verdict was given.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Folds one poll's samples (one per node, answered or not) judged at
    /// `now`. The first poll captures the baseline and is judged too.
    pub fn observe(&mut self, samples: &[PodSample], now: Timestamp) -> PollReport {
        let health = self.aggregator.fold(&self.info, samples, now, AGENT);
        let config = &self.settings.gate;
        if self.started_at.is_none() {
            self.started_at = Some(now);
        }
        let gate = match self.gate.take() {
            None => {
                self.baseline_health = Some(health.clone());
                // The per-instance judge captures a baseline when the image
                // changes: judge the first aggregate under a start label,
                // then under the check label with itself as the source.
                let start =
                    judge_instance(SERVER, None, START_IMAGE, None, Some(&health), now, config);
                judge_instance(
                    SERVER,
                    Some(&start),
                    CHECK_IMAGE,
                    Some(&health),
                    Some(&health),
                    now,
                    config,
                )
            }
            Some(previous) => judge_instance(
                SERVER,
                Some(&previous),
                CHECK_IMAGE,
                None,
                Some(&health),
                now,
                config,
            ),
        };
        let started_at = self.started_at.unwrap_or(now);
        let elapsed = now.duration_since(started_at);
        let timeout =
            SignedDuration::try_from(self.settings.timeout).unwrap_or(SignedDuration::MAX);
        let soak = SignedDuration::try_from(self.settings.soak).unwrap_or(SignedDuration::MAX);
        let timed_out = elapsed >= timeout;
        if gate.verdict != AgentVerdict::Healthy
            && let Some(first) = gate.evidence.first()
        {
            self.last_failure = Some(first.clone());
        }

        let mut report = PollReport {
            poll: self.polls,
            at: now,
            elapsed_seconds: elapsed.as_secs_f64(),
            verdict: VerdictKind::Soak,
            signal: gate.signal,
            is_final: false,
            healthy_since: gate.healthy_since,
            soak_remaining_seconds: None,
            timeout_remaining_seconds: ceil_secs(timeout - elapsed),
            last_failing_signal: self.last_failure.as_ref().map(|e| e.signal),
            baseline_eligible: gate.soak_eligible,
            baseline_source: self.baseline_source,
            baseline_taken_at: gate.baseline_captured_at.unwrap_or(started_at),
            baseline: gate.baseline.clone(),
            effective_baseline: gate.effective_baseline.clone(),
            nodes: Vec::new(),
            evidence: gate.evidence.clone(),
            health,
        };
        match gate.verdict {
            AgentVerdict::HardStop => {
                report.verdict = VerdictKind::HardStop;
                report.is_final = true;
            }
            AgentVerdict::Healthy => {
                let since = gate.healthy_since.unwrap_or(now);
                let healthy_for = now.duration_since(since);
                if healthy_for >= soak {
                    report.verdict = VerdictKind::Pass;
                    report.signal = None;
                    report.is_final = true;
                } else if timed_out {
                    report.soak_remaining_seconds = Some(ceil_secs(soak - healthy_for));
                    self.time_out(&mut report, elapsed, Signal::Soaking);
                } else {
                    report.signal = Some(Signal::Soaking);
                    report.soak_remaining_seconds = Some(ceil_secs(soak - healthy_for));
                }
            }
            // `check` polls plain node URLs: no instance to suspend. Were a
            // verdict ever `suspended`, it is no pass: wait, as unhealthy.
            AgentVerdict::Unhealthy | AgentVerdict::Suspended => {
                if timed_out {
                    let cause = gate.signal.unwrap_or(Signal::SampleMissing);
                    self.time_out(&mut report, elapsed, cause);
                }
            }
        }
        let culprit_signal = match report.signal {
            Some(Signal::WaveDeadlineExceeded) => report.last_failing_signal,
            other => other,
        };
        if let Some(signal) = culprit_signal {
            report.nodes = culprits(signal, &report.health, self.baseline_health.as_ref());
        }
        self.polls += 1;
        self.finished = report.is_final;
        self.gate = Some(gate);
        report
    }

    /// Turns `report` into the timeout's hard stop: the deadline entry
    /// first, then what still failed (`cause`).
    fn time_out(&self, report: &mut PollReport, elapsed: SignedDuration, cause: Signal) {
        let timeout_secs = self.settings.timeout.as_secs();
        let mut evidence = vec![Evidence {
            fence: None,
            run: None,
            update_paused: None,
            server: SERVER.to_owned(),
            signal: Signal::WaveDeadlineExceeded,
            observed: Some(u64::try_from(elapsed.as_secs()).unwrap_or(0)),
            band_top: Some(timeout_secs),
            baseline: None,
            detail: Some(match cause {
                Signal::Soaking => format!(
                    "timed out while soaking: healthy for less than the {}s soak",
                    self.settings.soak.as_secs()
                ),
                other => format!("timed out; still failing: {other}"),
            }),
        }];
        evidence.append(&mut report.evidence);
        report.evidence = evidence;
        report.verdict = VerdictKind::HardStop;
        report.signal = Some(Signal::WaveDeadlineExceeded);
        report.is_final = true;
    }
}

/// The nodes behind a failing signal, as far as the per-pod part of the
/// aggregate tells (pod names are the node URLs).
pub fn culprits(
    signal: Signal,
    health: &RolloutHealth,
    baseline: Option<&RolloutHealth>,
) -> Vec<String> {
    let at_start = |name: &str| baseline.and_then(|b| b.pods.iter().find(|p| &*p.name == name));
    health
        .pods
        .iter()
        .filter(|p| match signal {
            Signal::PodsUnsampled | Signal::SampleStale => p.error.is_some(),
            Signal::NotReady => p.ready == Some(false),
            Signal::NotServing => p.state.as_deref().is_some_and(|s| s != "serving"),
            Signal::MemoryPressureCritical => p.memory_pressure_state.is_some_and(|m| m >= 2),
            Signal::SampleInvalid => p.error.is_none() && p.memory_pressure_state.is_none(),
            Signal::FdTimeoutsRegressed => grew(
                p.fd_timeout_count,
                at_start(&p.name).and_then(|b| b.fd_timeout_count),
            ),
            Signal::PeerConnectionFailuresRegressed => grew(
                p.peer_connection_failures,
                at_start(&p.name).and_then(|b| b.peer_connection_failures),
            ),
            Signal::OutboxRegressed => grew(
                p.outbox_messages,
                at_start(&p.name).and_then(|b| b.outbox_messages),
            ),
            Signal::ReplicationLagRegressed => grew(
                p.replication_lag_entries,
                at_start(&p.name).and_then(|b| b.replication_lag_entries),
            ),
            // The pods that saw the grant in `Fencing`.
            Signal::ServingFenced => p
                .fence
                .as_ref()
                .is_some_and(|f| f.phase.as_deref() == Some(kura_schemas::health::FENCING_PHASE)),
            _ => false,
        })
        .map(|p| p.name.to_string())
        .collect()
}

fn grew(now: Option<u64>, at_start: Option<u64>) -> bool {
    match (now, at_start) {
        (Some(n), Some(s)) => n > s,
        (Some(n), None) => n > 0,
        _ => false,
    }
}

/// Whole seconds of a duration, rounded up; 0 when negative.
fn ceil_secs(d: SignedDuration) -> u64 {
    if d.is_negative() {
        return 0;
    }
    let whole = u64::try_from(d.as_secs()).unwrap_or(0);
    if d.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PodIdentity, SampleResult};
    use kura_sim::SimNode;

    fn settings(soak: u64, timeout: u64) -> CheckSettings {
        CheckSettings {
            expected_pods: 2,
            soak: Duration::from_secs(soak),
            timeout: Duration::from_secs(timeout),
            gate: GateConfig::default(),
        }
    }

    fn samples(nodes: &[SimNode], at: Timestamp) -> Vec<PodSample> {
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| PodSample {
                replication_lag_entries: None,
                pod: std::sync::Arc::new(PodIdentity {
                    name: format!("http://n{i}/status/rollout").into(),
                    uid: format!("http://n{i}/status/rollout").into(),
                    ..PodIdentity::default()
                }),
                received_at: at,
                result: SampleResult::Report(Box::new(n.report())),
            })
            .collect()
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn passes_once_healthy_for_the_soak_and_a_failure_restarts_the_clock() {
        let mut nodes = vec![SimNode::default(), SimNode::default()];
        let mut run = CheckRun::new(settings(10, 100));
        let r = run.observe(&samples(&nodes, t(0)), t(0));
        assert_eq!(
            (r.verdict, r.signal),
            (VerdictKind::Soak, Some(Signal::Soaking))
        );
        assert_eq!(r.soak_remaining_seconds, Some(10));
        nodes[1].ready = false;
        let r = run.observe(&samples(&nodes, t(5)), t(5));
        assert_eq!(r.signal, Some(Signal::NotReady));
        assert_eq!(r.nodes, vec!["http://n1/status/rollout".to_owned()]);
        nodes[1].ready = true;
        let r = run.observe(&samples(&nodes, t(6)), t(6));
        assert_eq!(r.soak_remaining_seconds, Some(10), "the clock restarted");
        let r = run.observe(&samples(&nodes, t(15)), t(15));
        assert_eq!(r.verdict, VerdictKind::Soak);
        let r = run.observe(&samples(&nodes, t(16)), t(16));
        assert_eq!(
            (r.verdict, r.signal, r.is_final),
            (VerdictKind::Pass, None, true)
        );
        assert_eq!(r.last_failing_signal, Some(Signal::NotReady));
    }

    #[test]
    fn times_out_with_the_deadline_first_and_the_cause_second() {
        let mut nodes = vec![SimNode::default(), SimNode::default()];
        let mut run = CheckRun::new(settings(10, 20));
        run.observe(&samples(&nodes, t(0)), t(0));
        nodes[0].fd_timeout_count += 1;
        let r = run.observe(&samples(&nodes, t(19)), t(19));
        assert_eq!(r.signal, Some(Signal::FdTimeoutsRegressed));
        assert_eq!(r.timeout_remaining_seconds, 1);
        let r = run.observe(&samples(&nodes, t(20)), t(20));
        assert_eq!(r.verdict, VerdictKind::HardStop);
        assert_eq!(r.signal, Some(Signal::WaveDeadlineExceeded));
        let signals: Vec<Signal> = r.evidence.iter().map(|e| e.signal).collect();
        assert_eq!(
            signals,
            vec![Signal::WaveDeadlineExceeded, Signal::FdTimeoutsRegressed]
        );
        assert_eq!(r.evidence[0].observed, Some(20));
        assert_eq!(r.evidence[1].baseline, Some(0));
        assert!(run.finished());
    }

    /// The two-step flow at the judge: a baseline of `before`, then the
    /// nodes as `after` (one restarted by the upgrade), judged by a run
    /// from the baseline and by a run without it; each run's verdicts of
    /// three polls, 5 s apart, soaking 10 s.
    fn two_step(before: &[SimNode], after: &[SimNode]) -> (Vec<PollReport>, Vec<PollReport>) {
        let mut taking = CheckRun::new(settings(10, 100));
        let baseline_samples = samples(before, t(0));
        let first = taking.observe(&baseline_samples, t(0));
        let doc = BaselineDocument::from_poll(
            &baseline_samples,
            first.at,
            &first.health,
            &first.baseline,
            first.baseline_eligible,
        );
        let mut with = CheckRun::from_baseline(settings(10, 100), &doc);
        let mut without = CheckRun::new(settings(10, 100));
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..3 {
            let at = t(60 + 5 * i);
            a.push(with.observe(&samples(after, at), at));
            b.push(without.observe(&samples(after, at), at));
        }
        (a, b)
    }

    #[test]
    fn a_restart_during_the_upgrade_is_a_reset_never_an_improvement() {
        let before = vec![
            SimNode {
                fd_timeout_count: 10,
                ..SimNode::default()
            },
            SimNode::default(),
        ];
        // Node 0 restarts on the new version (counter back to 0, new
        // incarnation), then times out 15 times before the check starts.
        let mut after = before.clone();
        after[0].restart();
        after[0].fd_timeout_count = 15;
        let (with, without) = two_step(&before, &after);
        let r = &with[0];
        assert_eq!(r.baseline_source, BaselineSource::File);
        assert_eq!(r.baseline_taken_at, t(0));
        assert_eq!(r.baseline.fd_timeout_count, Some(10));
        assert_eq!(r.signal, Some(Signal::FdTimeoutsRegressed), "{r:?}");
        assert_eq!(
            r.health.fd_timeout_count, 25,
            "10 before the restart + 15 since"
        );
        assert_eq!(r.evidence[0].observed, Some(25));
        assert_eq!(r.evidence[0].baseline, Some(10));
        assert_eq!(r.nodes, vec!["http://n0/status/rollout".to_owned()]);
        assert!(
            with.iter()
                .all(|r| r.signal == Some(Signal::FdTimeoutsRegressed))
        );
        // Without the baseline the damage is the baseline: it passes.
        assert_eq!(without[0].baseline_source, BaselineSource::FirstPoll);
        assert_eq!(without[0].baseline.fd_timeout_count, Some(15));
        assert_eq!(without[2].verdict, VerdictKind::Pass, "{:?}", without[2]);

        // The same upgrade with a healthy node: back to 0 and staying there.
        let mut healthy = before.clone();
        healthy[0].restart();
        let (with, _) = two_step(&before, &healthy);
        assert_eq!(with[0].signal, Some(Signal::Soaking), "{:?}", with[0]);
        assert_eq!(
            with[0].health.fd_timeout_count, 10,
            "a reset, not an improvement"
        );
        assert_eq!(with[0].effective_baseline.fd_timeout_count, Some(10));
        assert_eq!(with[2].verdict, VerdictKind::Pass);
    }

    #[test]
    fn a_node_without_incarnation_that_restarted_below_its_old_count_is_still_caught() {
        let old = |fd| SimNode {
            report_generation: kura_sim::ReportGeneration::G3,
            fd_timeout_count: fd,
            ..SimNode::default()
        };
        let before = vec![old(10), old(0)];
        // Restarted (no incarnation to tell) and grew to 8: below the 10
        // of before, so a reset, and 10 + 8 is above the baseline.
        let after = vec![old(8), old(0)];
        let (with, without) = two_step(&before, &after);
        assert_eq!(
            with[0].signal,
            Some(Signal::FdTimeoutsRegressed),
            "{:?}",
            with[0]
        );
        assert_eq!(with[0].health.fd_timeout_count, 18);
        assert_eq!(without[2].verdict, VerdictKind::Pass);
    }

    #[test]
    fn a_baseline_that_was_no_reference_compares_no_counters() {
        let mut before = vec![SimNode::default(), SimNode::default()];
        before[1].ready = false;
        let mut after = before.clone();
        after[1].ready = true;
        after[0].fd_timeout_count = 4;
        let (with, _) = two_step(&before, &after);
        assert!(!with[0].baseline_eligible);
        assert_eq!(with[0].signal, Some(Signal::Soaking), "{:?}", with[0]);
    }

    #[test]
    fn critical_pressure_is_final_at_once() {
        let mut nodes = vec![SimNode::default(), SimNode::default()];
        let mut run = CheckRun::new(settings(10, 100));
        run.observe(&samples(&nodes, t(0)), t(0));
        nodes[1].memory_pressure_state = 2;
        let r = run.observe(&samples(&nodes, t(1)), t(1));
        assert_eq!(
            (r.verdict, r.signal, r.is_final),
            (
                VerdictKind::HardStop,
                Some(Signal::MemoryPressureCritical),
                true
            )
        );
    }
}
