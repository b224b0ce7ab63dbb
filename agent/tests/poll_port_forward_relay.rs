//! The port-forward path without an API server: a [`PortForwardRelay`]
//! (here the simulator's kubelet) names the local address of a node-local
//! pod's port, and the poller reaches real loopback HTTP pods only that
//! way. The targets carry an unroutable pod IP (TEST-NET-1), so a poll by
//! pod IP could not answer. The same bound on open streams, timeout, body
//! limit and parsers as through the API server; a failure is named
//! `port-forward:` and counted as `kura_agent_polls_total{result=
//! "port_forward"}`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_agent::model::{PodIdentity, PodSample, SampleResult};
use kura_agent::poll::{PollConfig, Poller, PortForwardRelay};
use kura_sim::{Addressing, Behaviour, ReportGeneration, SimKubelet, SimPodSpec, Simulator};

const NAMESPACE: &str = "edge";

/// The simulated kubelet as the poller's relay, for one namespace.
#[derive(Debug)]
struct Kubelet(SimKubelet);

impl PortForwardRelay for Kubelet {
    fn resolve(&self, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr> {
        (namespace == NAMESPACE)
            .then(|| self.0.forward_addr(pod, port))
            .flatten()
    }
}

/// A target as discovery lists a node-local pod: its pod IP is in
/// TEST-NET-1 (192.0.2.0/24), which no route leads to; the port is the
/// pod's status port.
fn target(name: &str, uid: &str, octet: u8, port: u16) -> (Arc<PodIdentity>, SocketAddr) {
    let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, octet));
    let identity = PodIdentity {
        name: name.into(),
        uid: uid.into(),
        restart_count: 0,
        image: None,
        ip: Some(ip.to_string().into()),
    };
    (Arc::new(identity), SocketAddr::new(ip, port))
}

fn error_of(sample: &PodSample) -> &str {
    match &sample.result {
        SampleResult::Error(e) => e,
        other => panic!("{}: not an error: {other:?}", sample.pod.name),
    }
}

fn scrape(handle: &metrics_exporter_prometheus::PrometheusHandle, series: &str) -> u64 {
    handle
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// One test, so the process's metrics are this test's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_local_pods_are_polled_through_the_relay_never_by_pod_ip() {
    let recorder = kura_agent::telemetry::prometheus_builder()
        .unwrap()
        .build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();

    let mut g3 = SimPodSpec::new("edge-1");
    g3.node.report_generation = ReportGeneration::G3;
    g3.node.outbox_messages = 12;
    let mut slow = SimPodSpec::new("slow-0");
    slow.behaviour = Behaviour::slow(Duration::from_millis(150));
    let mut hang = SimPodSpec::new("hang-0");
    hang.behaviour = Behaviour::Hang;
    let mut big = SimPodSpec::new("big-0");
    big.behaviour = Behaviour::Oversized { bytes: 200_000 };
    let specs = vec![
        SimPodSpec::new("edge-0"),
        g3,
        SimPodSpec::new("gone-0"),
        slow.clone(),
        SimPodSpec {
            name: "slow-1".to_owned(),
            uid: "uid-slow-1".to_owned(),
            ..slow.clone()
        },
        SimPodSpec {
            name: "slow-2".to_owned(),
            uid: "uid-slow-2".to_owned(),
            ..slow
        },
        hang,
        big,
    ];
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let port = sim.pods()[0].addr().port();
    sim.pod("gone-0").unwrap().stop().await;
    let names: Vec<&str> = sim.pods().iter().map(|p| p.name()).collect();
    let kubelet = sim.kubelet(&names);
    let config = PollConfig {
        timeout: Duration::from_millis(800),
        ..PollConfig::default()
    };
    let poller =
        Poller::with_port_forward_relay(config.clone(), Arc::new(Kubelet(kubelet.clone())));

    // A G4 pod (its report, then /status/cluster on the same stream), a
    // G3 pod (its outbox, no cluster read), a pod that stopped listening
    // and a pod the kubelet does not know.
    let targets = vec![
        target("edge-0", "uid-edge-0", 10, port),
        target("edge-1", "uid-edge-1", 11, port),
        target("gone-0", "uid-gone-0", 12, port),
        target("stranger-0", "uid-stranger-0", 13, port),
    ];
    let samples = poller.poll_pods_port_forward(NAMESPACE, &targets).await;
    let names: Vec<&str> = samples.iter().map(|s| &*s.pod.name).collect();
    assert_eq!(names, ["edge-0", "edge-1", "gone-0", "stranger-0"]);
    let SampleResult::Report(report) = &samples[0].result else {
        panic!("edge-0: {:?}", samples[0].result);
    };
    assert_eq!(report.outbox_messages, None, "G4");
    assert_eq!(
        samples[0].replication_lag_entries,
        Some(0),
        "its cluster read"
    );
    assert_eq!(sim.pod("edge-0").unwrap().stats().requests(), 2);
    let SampleResult::Report(report) = &samples[1].result else {
        panic!("edge-1: {:?}", samples[1].result);
    };
    assert_eq!(report.outbox_messages, Some(12));
    assert_eq!(sim.pod("edge-1").unwrap().stats().requests(), 1);
    let gone = error_of(&samples[2]);
    assert!(
        gone.starts_with(&format!(
            "port-forward: error forwarding port {port} to pod edge/gone-0:"
        )),
        "{gone}"
    );
    assert_eq!(
        error_of(&samples[3]),
        "port-forward: 404 NotFound: pods \"stranger-0\" not found"
    );
    assert_eq!(kubelet.forwards(), 3, "one port-forward per known pod");
    assert_eq!(
        scrape(&metrics, "kura_agent_polls_total{result=\"ok\"}"),
        2,
        "{}",
        metrics.render()
    );
    assert_eq!(
        scrape(&metrics, "kura_agent_polls_total{result=\"port_forward\"}"),
        2
    );
    assert_eq!(
        scrape(&metrics, "kura_agent_cluster_reads_total{result=\"ok\"}"),
        1
    );
    assert_eq!(poller.idle_connections(), 0, "nothing kept between sweeps");

    // The poll timeout bounds a pod that never answers; the body limit
    // holds through the relay (the IP path's error, not a port-forward's).
    let started = Instant::now();
    let samples = poller
        .poll_pods_port_forward(
            NAMESPACE,
            &[
                target("hang-0", "uid-hang-0", 20, port),
                target("big-0", "uid-big-0", 21, port),
            ],
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(error_of(&samples[0]), "port-forward: timeout");
    assert_eq!(
        error_of(&samples[1]),
        format!("body exceeds {} bytes", config.body_limit)
    );

    // At most `port_forward_streams` open at once: with one, three slow
    // pods are polled one after the other.
    let one = Poller::with_port_forward_relay(
        PollConfig {
            port_forward_streams: 1,
            ..config
        },
        Arc::new(Kubelet(kubelet)),
    );
    sim.stats().reset();
    let started = Instant::now();
    let samples = one
        .poll_pods_port_forward(
            NAMESPACE,
            &[
                target("slow-0", "uid-slow-0", 30, port),
                target("slow-1", "uid-slow-1", 31, port),
                target("slow-2", "uid-slow-2", 32, port),
            ],
        )
        .await;
    assert!(
        samples
            .iter()
            .all(|s| matches!(s.result, SampleResult::Report(_))),
        "{samples:?}"
    );
    assert_eq!(sim.stats().max_in_flight(), 1);
    assert!(started.elapsed() >= Duration::from_millis(450));
}
