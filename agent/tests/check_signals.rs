//! `kura-agent check` as a library against real simulated nodes on
//! loopback: a healthy set passes after its soak, each regression fails
//! with its own signal, critical pressure stops at once, and every run ends
//! within bounded time.

use std::time::Duration;

use kura_agent::poll::{PollConfig, Poller};
use kura_agent::tools::check::{CheckNode, CheckRun, CheckSettings, PollReport, run_check};
use kura_gate::{GateConfig, VerdictKind};
use kura_schemas::Signal;
use kura_sim::{Addressing, ReportGeneration, SimNode, SimPodSpec, Simulator};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const INTERVAL: Duration = Duration::from_millis(100);

/// Three healthy nodes of the given report generation with non-zero
/// counters (a set that has run for a while).
async fn nodes(generation: ReportGeneration) -> Simulator {
    let specs = (0..3)
        .map(|i| SimPodSpec {
            node: SimNode {
                report_generation: generation,
                fd_timeout_count: 4 + i,
                peer_connection_failure_count: 10,
                outbox_messages: 100,
                ..SimNode::default()
            },
            ..SimPodSpec::new(format!("node-{i}"))
        })
        .collect();
    Simulator::start(specs, &Addressing::default())
        .await
        .unwrap()
}

struct Running {
    reports: mpsc::UnboundedReceiver<PollReport>,
    task: JoinHandle<PollReport>,
}

fn start(sim: &Simulator, soak: Duration, timeout: Duration) -> Running {
    let nodes: Vec<CheckNode> = sim
        .pods()
        .iter()
        .map(|p| CheckNode::new(p.url().parse().unwrap()))
        .collect();
    let settings = CheckSettings {
        expected_pods: 3,
        soak,
        timeout,
        // The backlogs judged by their band alone: a check of seconds
        // never outlasts the default drain window (900 s).
        gate: GateConfig {
            backlog_drain_window_seconds: 0,
            ..GateConfig::default()
        },
    };
    let (tx, reports) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let poller = Poller::new(PollConfig {
            timeout: Duration::from_millis(500),
            retry_delay: Duration::from_millis(20),
            ..PollConfig::default()
        });
        run_check(
            &poller,
            &nodes,
            CheckRun::new(settings),
            INTERVAL,
            move |r| {
                let _ = tx.send(r.clone());
            },
        )
        .await
    });
    Running { reports, task }
}

impl Running {
    /// The baseline poll, which must be healthy and soak-eligible.
    async fn baseline(&mut self) -> PollReport {
        let first = self.reports.recv().await.unwrap();
        assert_eq!(first.poll, 0);
        assert!(first.baseline_eligible, "{first:?}");
        assert_eq!(first.verdict, VerdictKind::Soak);
        assert_eq!(first.signal, Some(Signal::Soaking));
        first
    }

    /// The final report (bounded wait) and every report before it.
    async fn finish(mut self, bound: Duration) -> (PollReport, Vec<PollReport>) {
        let last = tokio::time::timeout(bound, self.task)
            .await
            .expect("the check ends within its bound")
            .unwrap();
        let mut all = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            all.push(r);
        }
        (last, all)
    }
}

/// Runs a check, applies `regress` right after the baseline poll, and
/// asserts the run fails at its timeout with `signal` as the cause, named
/// on every poll after the change.
async fn fails_at_timeout_with(
    generation: ReportGeneration,
    signal: Signal,
    regress: impl AsyncFnOnce(&Simulator),
) {
    let sim = nodes(generation).await;
    let mut run = start(&sim, Duration::from_secs(2), Duration::from_secs(3));
    run.baseline().await;
    regress(&sim).await;
    let (last, all) = run.finish(Duration::from_secs(10)).await;
    assert_eq!(last.verdict, VerdictKind::HardStop, "{last:?}");
    assert_eq!(last.signal, Some(Signal::WaveDeadlineExceeded));
    assert_eq!(last.last_failing_signal, Some(signal));
    assert_eq!(last.evidence[0].signal, Signal::WaveDeadlineExceeded);
    assert_eq!(last.evidence[1].signal, signal, "{:?}", last.evidence);
    assert!(last.elapsed_seconds >= 3.0 && last.elapsed_seconds < 5.0);
    // Every poll after the first failing one names the signal (the
    // regression holds), so the soak never completed.
    let first_fail = all
        .iter()
        .position(|r| r.signal == Some(signal))
        .expect("the signal was reported");
    assert!(first_fail <= 3, "detected within a few polls: {first_fail}");
    for r in &all[first_fail..all.len() - 1] {
        assert_eq!((r.verdict, r.signal), (VerdictKind::Soak, Some(signal)));
    }
    assert!(!last.nodes.is_empty() || signal == Signal::NotServing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_set_passes_after_its_soak() {
    let sim = nodes(ReportGeneration::G4).await;
    let mut run = start(&sim, Duration::from_secs(1), Duration::from_secs(10));
    let first = run.baseline().await;
    assert_eq!(first.baseline.fd_timeout_count, Some(4 + 5 + 6));
    assert_eq!(
        first.baseline.outbox_messages, None,
        "G4: absent is never 0"
    );
    let (last, all) = run.finish(Duration::from_secs(8)).await;
    assert_eq!(last.verdict, VerdictKind::Pass);
    assert_eq!(last.signal, None);
    assert!(last.elapsed_seconds >= 1.0 && last.elapsed_seconds < 3.0);
    assert!(
        all[..all.len() - 1]
            .iter()
            .all(|r| r.signal == Some(Signal::Soaking))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_mid_check_still_passes() {
    let sim = nodes(ReportGeneration::G4).await;
    let mut run = start(&sim, Duration::from_secs(1), Duration::from_secs(10));
    run.baseline().await;
    // The upgrade restarts a process: its counters fall back to 0; the
    // aggregation clamps the reset instead of reading it as a drop.
    sim.pods()[1].restart();
    let (last, _) = run.finish(Duration::from_secs(8)).await;
    assert_eq!(last.verdict, VerdictKind::Pass, "{last:?}");
    assert_eq!(last.health.fd_timeout_count, 4 + 5 + 6);
    assert!(last.health.counter_resets >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fd_timeout_growth_fails_with_fd_timeouts_regressed() {
    fails_at_timeout_with(
        ReportGeneration::G4,
        Signal::FdTimeoutsRegressed,
        async |sim| {
            // Growth after a restart: the clamped sum still grows.
            sim.pods()[2].restart();
            sim.pods()[2].update(|n| n.fd_timeout_count = 1);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_growth_fails_with_outbox_regressed() {
    fails_at_timeout_with(ReportGeneration::G3, Signal::OutboxRegressed, async |sim| {
        // Baseline 300: band top 300 + max(30, 50) = 350.
        sim.pods()[0].update(|n| n.outbox_messages = 151);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_failure_growth_fails_with_peer_connection_failures_regressed() {
    fails_at_timeout_with(
        ReportGeneration::G4,
        Signal::PeerConnectionFailuresRegressed,
        async |sim| {
            // Baseline 30: band top 30 + max(3, 25) = 55.
            sim.pods()[1].update(|n| n.peer_connection_failure_count = 36);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_ready_fails_with_not_ready() {
    fails_at_timeout_with(ReportGeneration::G4, Signal::NotReady, async |sim| {
        sim.pods()[0].update(|n| n.ready = false);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_fails_with_pods_unsampled() {
    fails_at_timeout_with(ReportGeneration::G4, Signal::PodsUnsampled, async |sim| {
        sim.pods()[2].stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_memory_pressure_stops_at_once() {
    let sim = nodes(ReportGeneration::G4).await;
    let mut run = start(&sim, Duration::from_secs(5), Duration::from_secs(30));
    run.baseline().await;
    sim.pods()[1].update(|n| n.memory_pressure_state = 2);
    let (last, _) = run.finish(Duration::from_secs(3)).await;
    assert_eq!(last.verdict, VerdictKind::HardStop);
    assert_eq!(last.signal, Some(Signal::MemoryPressureCritical));
    assert!(
        last.elapsed_seconds < 2.0,
        "at once: {}",
        last.elapsed_seconds
    );
    assert_eq!(last.nodes, vec![sim.pods()[1].url()]);
    assert_eq!(last.evidence[0].observed, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_sick_at_start_is_not_eligible_and_skips_the_counter_checks() {
    let sim = nodes(ReportGeneration::G4).await;
    sim.pods()[0].update(|n| n.ready = false);
    let mut run = start(&sim, Duration::from_secs(1), Duration::from_secs(10));
    let first = run.reports.recv().await.unwrap();
    assert!(!first.baseline_eligible);
    assert_eq!(first.signal, Some(Signal::NotReady));
    // It heals, and its fd timeouts grow: with no usable baseline only the
    // absolute checks hold, so the set passes once healthy for the soak.
    sim.pods()[0].update(|n| {
        n.ready = true;
        n.fd_timeout_count += 3;
    });
    let (last, _) = run.finish(Duration::from_secs(8)).await;
    assert_eq!(last.verdict, VerdictKind::Pass, "{last:?}");
    assert!(!last.baseline_eligible);
}
