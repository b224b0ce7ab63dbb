//! The poller's global concurrency bound, seen from the pods' side.

use kura_agent::model::SampleResult;
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::{Addressing, Behaviour, SimPodSpec, Simulator};
use std::time::Duration;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_pods_at_concurrency_eight_never_exceed_eight_in_flight() {
    let specs = (0..200)
        .map(|i| SimPodSpec {
            behaviour: Behaviour::slow(Duration::from_millis(20)),
            ..SimPodSpec::new(format!("c-{i}"))
        })
        .collect();
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let poller = Poller::new(PollConfig {
        concurrency: 8,
        ..PollConfig::default()
    });
    // Two clones share one bound: sweep half the pods through each at once.
    let targets = sim.targets();
    let (a, b) = targets.split_at(100);
    let other = poller.clone();
    let (sa, sb) = tokio::join!(poller.poll_pods(a), other.poll_pods(b));
    for s in sa.iter().chain(&sb) {
        assert!(
            matches!(s.result, SampleResult::Report(_)),
            "{:?}",
            s.result
        );
    }
    // Each pod (pull sync) answers its report and then its cluster status,
    // both under one permit.
    assert_eq!(sim.stats().requests(), 400);
    let max = sim.stats().max_in_flight();
    println!("at most {max} requests in flight");
    assert!(max <= 8, "{max} requests in flight");
    assert!(
        max >= 4,
        "only {max} in flight: the sweep did not run concurrently"
    );
}
