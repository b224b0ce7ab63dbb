//! A rough load figure: one sweep of 1,000 simulated pods.
//! `cargo test --release -p kura-agent --test poll_load -- --ignored --nocapture`

use kura_agent::poll::{PollConfig, Poller};
use kura_agent::sample::SampleResult;
use kura_agent::sim::{Simulator, raise_fd_limit};
use std::time::Instant;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "load figure, run on demand"]
async fn sweep_of_a_thousand_pods() {
    raise_fd_limit(8192).unwrap();
    let t = Instant::now();
    let sim = Simulator::healthy("load", 1000).await.unwrap();
    println!("started 1000 pods in {:?}", t.elapsed());
    let poller = Poller::new(PollConfig::default());
    let targets = sim.targets();
    for round in ["cold (new connections)", "warm (keep-alive)"] {
        let t = Instant::now();
        let samples = poller.sweep(&targets).await;
        let took = t.elapsed();
        let ok = samples
            .iter()
            .filter(|s| matches!(s.result, SampleResult::Report(_)))
            .count();
        println!("sweep {round}: {ok}/1000 reports in {took:?}");
        assert_eq!(ok, 1000);
    }
}
