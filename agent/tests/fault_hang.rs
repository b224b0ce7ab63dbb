//! Fault suite: a hanging pod (accepts, never answers) does not stretch its
//! instance's sweep — poll and aggregation — past the poll timeout, is not
//! retried, and does not delay the other instances polled alongside.
//! Loopback only, bounded in time.

use jiff::Timestamp;
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
use kura_agent::model::{InstanceInfo, SampleResult};
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::{Addressing, Behaviour, SimPodSpec, Simulator};
use std::time::{Duration, Instant};

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

const TIMEOUT: Duration = Duration::from_millis(600);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(400);
const INSTANCES: usize = 8;
const PODS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_pod_costs_its_instance_at_most_one_timeout() {
    tokio::time::timeout(Duration::from_secs(20), run())
        .await
        .unwrap();
}

async fn run() {
    // Instance 0 has a hanging pod in the middle; the others are healthy.
    let specs = (0..INSTANCES * PODS)
        .map(|i| {
            let mut spec = SimPodSpec::new(format!("i{}-p{}", i / PODS, i % PODS));
            if i == 1 {
                spec.behaviour = Behaviour::Hang;
            }
            spec
        })
        .collect();
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let targets = sim.targets();
    let poller = Poller::new(PollConfig {
        timeout: TIMEOUT,
        // Retries are for connection failures only: a hang must not be
        // retried, or it would cost several timeouts.
        retries: 3,
        retry_delay: Duration::from_millis(50),
        ..PollConfig::default()
    });

    let start = Instant::now();
    let sweeps = targets.chunks(PODS).enumerate().map(|(i, pods)| {
        let poller = poller.clone();
        async move {
            let info = InstanceInfo {
                namespace: "kura".into(),
                name: format!("i{i}"),
                expected_pods: PODS as u32,
                generation: 1,
            };
            let mut agg = InstanceAggregator::new(AggregateConfig::default());
            let samples = poller.poll_pods(pods).await;
            let health = agg.fold(&info, &samples, Timestamp::now(), "test-agent");
            (start.elapsed(), samples, health)
        }
    });
    let results = futures::future::join_all(sweeps).await;

    let (took, samples, health) = &results[0];
    assert!(
        *took >= TIMEOUT && *took < TIMEOUT + SLACK,
        "instance with the hung pod took {took:?} (timeout {TIMEOUT:?})"
    );
    assert_eq!(samples[1].result, SampleResult::Error("timeout".into()));
    assert!(matches!(samples[0].result, SampleResult::Report(_)));
    assert!(matches!(samples[2].result, SampleResult::Report(_)));
    assert_eq!(health.sampled_pods, 2);
    assert_eq!(
        health
            .pods
            .iter()
            .find(|p| &*p.name == "i0-p1")
            .unwrap()
            .error
            .as_deref(),
        Some("timeout")
    );
    assert_eq!(
        sim.pod("i0-p1").unwrap().stats().requests(),
        1,
        "a hang is not retried"
    );
    for (i, (took, samples, health)) in results.iter().enumerate().skip(1) {
        assert!(
            *took < SLACK,
            "instance {i} took {took:?} next to the hung pod"
        );
        assert!(
            samples
                .iter()
                .all(|s| matches!(s.result, SampleResult::Report(_)))
        );
        assert_eq!(health.sampled_pods, PODS as u32);
    }
}
