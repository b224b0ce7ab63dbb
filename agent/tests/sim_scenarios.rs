//! The scenario files under testdata/sim/ load, serve, and run their
//! timelines (compressed with a small time scale).

use kura_agent::poll::{PollConfig, Poller};
use kura_schemas::NodeReport;
use kura_schemas::report::{BackfillCycle, NodeState};
use kura_sim::{Scenario, Simulator};
use std::path::PathBuf;
use std::time::Duration;

mod support {
    pub mod sim;
}
use support::sim::{PodIdentityOf, PollTargets};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/sim")
}

fn poller() -> Poller {
    Poller::new(PollConfig {
        timeout: Duration::from_millis(500),
        retries: 0,
        ..PollConfig::default()
    })
}

async fn reports(sim: &Simulator) -> Vec<Result<NodeReport, String>> {
    let p = poller();
    let mut out = Vec::new();
    for (pod, addr) in sim.targets() {
        out.push(p.poll_result(&pod, addr).await.map_err(|e| e.to_string()));
    }
    out
}

#[tokio::test]
async fn every_scenario_file_loads_and_serves() {
    let mut n = 0;
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let sc = Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // A huge time scale: the timeline never fires during this test.
        let sim = Simulator::from_scenario(&sc, Some(1e6)).await.unwrap();
        assert_eq!(sim.pods().len(), sc.pod_specs().len());
        let healthy = sim
            .pods()
            .iter()
            .find(|p| p.behaviour() == Default::default())
            .unwrap();
        poller()
            .poll_result(&healthy.identity(), healthy.addr())
            .await
            .unwrap();
        n += 1;
    }
    assert!(n >= 5, "only {n} scenario files");
}

#[tokio::test]
async fn broken_scenario_fails_each_pod_its_own_way() {
    let sc = Scenario::load(&dir().join("broken.json")).unwrap();
    let sim = Simulator::from_scenario(&sc, Some(1e6)).await.unwrap();
    let p = poller();
    let mut got = Vec::new();
    for (pod, addr) in sim.targets() {
        let reason = p.poll_result(&pod, addr).await.err().map(|e| e.reason());
        got.push((pod.name.clone(), reason.unwrap_or("ok")));
    }
    let want = [
        ("healthy", "ok"),
        ("slow", "timeout"),
        ("hang", "timeout"),
        ("http-500", "http_status"),
        ("refused", "refused"),
        ("malformed", "invalid_report"),
        ("oversized", "too_large"),
        ("wrong-type", "invalid_report"),
        ("redirect", "http_status"),
        ("identity-mismatch", "identity_mismatch"),
        ("flapping", "ok"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(n, r)| (std::sync::Arc::<str>::from(*n), *r))
        .collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn regressions_timeline_runs_compressed() {
    let sc = Scenario::load(&dir().join("regressions.json")).unwrap();
    // 5 s becomes 1 s; 15 s becomes 3 s. (At 0.01 the first read had to
    // land within 50 ms of the start: a loaded CI machine missed it.)
    let sim = Simulator::from_scenario(&sc, Some(0.2)).await.unwrap();
    let before = reports(&sim).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = reports(&sim).await;
    let get = |v: &[Result<NodeReport, String>], name: &str| {
        let i = sim.pods().iter().position(|p| p.name() == name).unwrap();
        v[i].clone().unwrap()
    };
    let (b, a) = (get(&before, "outbox-growth"), get(&after, "outbox-growth"));
    assert!(a.outbox_messages.unwrap() > b.outbox_messages.unwrap());
    assert_eq!(
        get(&after, "healthy").outbox_messages,
        None,
        "G4 has no outbox"
    );
    assert!(get(&after, "fd-timeout-growth").fd_timeout_count > 0);
    assert!(
        get(&after, "peer-failure-growth")
            .peer_connection_failure_count
            .unwrap()
            > 0
    );
    assert_eq!(get(&after, "memory-pressure").memory_pressure_state, 2);
    let (b, a) = (get(&before, "restart"), get(&after, "restart"));
    assert_eq!((b.fd_timeout_count, a.fd_timeout_count), (40, 0));
    assert_ne!(b.incarnation(), a.incarnation());
    assert_eq!(sim.pod("restart").unwrap().restarts(), 1);
    let d = get(&after, "draining");
    assert_eq!((d.state, d.ready), (NodeState::Draining, false));
    assert_ne!(
        get(&after, "ring-skew").ring_fingerprint,
        get(&after, "healthy").ring_fingerprint
    );
    assert_eq!(
        get(&before, "backfill").backfill_initial_cycle,
        Some(BackfillCycle::Pending)
    );
    let bf = get(&after, "backfill");
    assert_eq!(bf.backfill_initial_cycle, Some(BackfillCycle::Degraded));
    assert_eq!(bf.backfill_budget_exhausted_real_peers, Some(1));
}

#[tokio::test]
async fn mixed_generations_upgrade_into_g4() {
    let sc = Scenario::load(&dir().join("mixed-generations.json")).unwrap();
    let sim = Simulator::from_scenario(&sc, Some(0.005)).await.unwrap();
    let shapes = |v: Vec<Result<NodeReport, String>>| -> Vec<u8> {
        v.into_iter()
            .map(|r| r.unwrap().shape_generation())
            .collect()
    };
    assert_eq!(shapes(reports(&sim).await), [1, 2, 1, 3, 4]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(sim.timeline_done());
    assert_eq!(shapes(reports(&sim).await), [4, 4, 1, 4, 4]);
}

/// The fenced-serving scenario through the real poller, aggregation and
/// gate (compressed 20 times): healthy with one writer, `no_valid_writer`
/// while the handover revokes the source, healthy again (the soak clock
/// starts afresh) once the destination holds the grant at epoch 4, and the
/// hard stop `serving_fenced` after the primary restarted, every pod still
/// ready and serving. The pull-sync lag scenario: the lag from
/// `/status/cluster`, the pod without the route adding nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_serving_scenario_holds_then_stops_the_gate() {
    use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
    use kura_agent::model::InstanceInfo;
    use kura_schemas::{AgentVerdict, Signal};

    let sc = Scenario::load(&dir().join("fenced-serving.json")).unwrap();
    let sim = Simulator::from_scenario(&sc, Some(0.05)).await.unwrap();
    let instance = InstanceInfo {
        namespace: "kura".into(),
        name: "fenced".into(),
        expected_pods: 3,
        generation: 1,
    };
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    let p = poller();
    let config = kura_gate::GateConfig::default();
    let mut seen: Vec<(Option<Signal>, AgentVerdict, u32, u64)> = Vec::new();
    let started = std::time::Instant::now();
    let mut gate = None;
    while started.elapsed() < Duration::from_millis(1600) {
        let now = jiff::Timestamp::now();
        let samples = p.poll_pods(&sim.targets()).await;
        let h = agg.fold(&instance, &samples, now, "test");
        assert!(h.ready && h.serving, "ready and serving throughout: {h:?}");
        let g = kura_gate::judge_instance(
            "kura/fenced",
            gate.as_ref(),
            "img:1",
            None,
            Some(&h),
            now,
            &config,
        );
        let a = h.serving_authority.clone().expect("fenced serving");
        let step = (g.signal, g.verdict, a.valid_writers, a.epoch);
        if seen.last() != Some(&step) {
            seen.push(step);
        }
        gate = Some(g);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let signals: Vec<Option<Signal>> = seen.iter().map(|s| s.0).collect();
    let healthy_at = |epoch: u64| {
        seen.iter()
            .position(|s| s.1 == AgentVerdict::Healthy && s.2 == 1 && s.3 == epoch)
    };
    let first = healthy_at(3).expect("healthy with the epoch-3 writer first");
    let held = signals
        .iter()
        .position(|s| *s == Some(Signal::NoValidWriter))
        .expect("held during the handover");
    let again = healthy_at(4).expect("healthy again with the epoch-4 writer");
    let fenced = signals
        .iter()
        .position(|s| *s == Some(Signal::ServingFenced))
        .expect("the fence");
    assert!(first < held && held < again && again < fenced, "{seen:?}");
    assert_eq!(seen[fenced].1, AgentVerdict::HardStop);

    let sc = Scenario::load(&dir().join("pull-sync-lag.json")).unwrap();
    let sim = Simulator::from_scenario(&sc, Some(1.0)).await.unwrap();
    let samples = p.poll_pods(&sim.targets()).await;
    let lags: Vec<Option<u64>> = samples.iter().map(|s| s.replication_lag_entries).collect();
    assert_eq!(lags, [Some(3), Some(5), None]);
}

/// The live path end to end over loopback HTTP (the poller, its
/// `/status/cluster` read and parser) against pods that serve Kura's newest
/// cluster bodies (testdata/sim/multi-region-gateway.json): a gateway with
/// a region link whose `frontier_ms` is null for its whole life, a replica
/// link still bootstrapping and one abandoned (`frontier_ms` null too).
/// Every pod samples (a null informational value never fails a body), each
/// lag its replica link's alone, read on the same connection as its report.
#[tokio::test]
async fn gateway_and_unsettled_links_sample_through_the_poller() {
    use kura_agent::model::SampleResult;
    let sc = Scenario::load(&dir().join("multi-region-gateway.json")).unwrap();
    // A huge time scale: the timeline never fires; the link settles below.
    let sim = Simulator::from_scenario(&sc, Some(1e6)).await.unwrap();
    let gateway = sim.pod("gateway").unwrap();
    let served = gateway.node().cluster_json().unwrap();
    let served: serde_json::Value = serde_json::from_slice(&served).unwrap();
    assert_eq!(served["gateway"], true);
    assert_eq!(served["sync_links"][1]["kind"], "region");
    assert_eq!(
        served["sync_links"][1]["frontier_ms"],
        serde_json::Value::Null
    );
    let bootstrapping = sim.pod("bootstrapping").unwrap().node().cluster_json();
    let bootstrapping: serde_json::Value = serde_json::from_slice(&bootstrapping.unwrap()).unwrap();
    assert_eq!(
        bootstrapping["sync_links"][0]["frontier_ms"],
        serde_json::Value::Null
    );

    let p = poller();
    let samples = p.poll_pods(&sim.targets()).await;
    for s in &samples {
        match &s.result {
            SampleResult::Report(r) => assert_eq!(r.outbox_messages, None, "{}", s.pod.name),
            SampleResult::Error(e) => panic!("{}: {e}", s.pod.name),
        }
    }
    let lags: Vec<Option<u64>> = samples.iter().map(|s| s.replication_lag_entries).collect();
    assert_eq!(lags, [Some(4), Some(30), Some(17)]);
    for pod in sim.pods() {
        assert_eq!(
            pod.stats().requests(),
            2,
            "{}: report, then cluster",
            pod.name()
        );
        assert_eq!(pod.stats().connections(), 1, "{}", pod.name());
    }

    sim.pod("bootstrapping").unwrap().update(|n| {
        n.replica_frontier = "reported".into();
        n.replication_lag_entries = Some(0);
    });
    let lags: Vec<Option<u64>> = p
        .poll_pods(&sim.targets())
        .await
        .iter()
        .map(|s| s.replication_lag_entries)
        .collect();
    assert_eq!(lags, [Some(4), Some(0), Some(17)]);
}
