//! A rough load figure: sweeps of 1,000 simulated pods (or
//! `KURA_LOAD_PODS`), first and second sweep (the second reuses
//! kept-alive connections when the open-file limit allows keep-alive).
//! `cargo test -p kura-agent --test poll_load -- --ignored --nocapture`

use kura_agent::cli::raise_fd_limit;
use kura_agent::model::SampleResult;
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::Simulator;
use std::time::Instant;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "load figure, run on demand"]
async fn sweep_of_a_thousand_pods() {
    let n: usize = std::env::var("KURA_LOAD_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Listener, server side and client side of a connection per pod.
    let limit = raise_fd_limit(3 * n as u64 + 256).unwrap();
    let t = Instant::now();
    let sim = Simulator::healthy("load", n).await.unwrap();
    // Kept-alive connections cost two descriptors per pod on top of its
    // listener; without enough, measure one connection per poll.
    let keep_alive = limit >= 3 * n as u64 + 256;
    sim.set_keep_alive(keep_alive);
    println!(
        "started {n} pods in {:?} (open-file limit {limit})",
        t.elapsed()
    );
    let poller = Poller::new(PollConfig::default());
    let targets = sim.targets();
    println!("keep-alive: {keep_alive}");
    for round in ["first", "second"] {
        let t = Instant::now();
        let samples = poller.poll_pods(&targets).await;
        let took = t.elapsed();
        let ok = samples
            .iter()
            .filter(|s| matches!(s.result, SampleResult::Report(_)))
            .count();
        println!("sweep {round}: {ok}/{n} reports in {took:?}");
        let mut errors = std::collections::BTreeMap::new();
        for s in &samples {
            if let SampleResult::Error(e) = &s.result {
                *errors.entry(e.as_str()).or_insert(0) += 1;
            }
        }
        println!("errors: {errors:?}");
        if let Some(i) = samples
            .iter()
            .position(|s| matches!(s.result, SampleResult::Error(_)))
        {
            println!(
                "probe {}: {:?}",
                targets[i].1,
                tokio::net::TcpStream::connect(targets[i].1).await
            );
        }
        assert_eq!(ok, n);
    }
}
