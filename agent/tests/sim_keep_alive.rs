//! Keep-alive on the simulated pods: kept-alive connections stay open
//! between sweeps (two descriptors per pod in one process); without
//! keep-alive every poll closes its connection. One test per file: it
//! counts this process's open descriptors.

use kura_agent::model::SampleResult;
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::Simulator;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_stay_open_only_with_keep_alive() {
    let sim = Simulator::healthy("ka", 50).await.unwrap();
    let poller = Poller::new(PollConfig::default());
    let idle = open_fds();
    let ok = |s: Vec<kura_agent::model::PodSample>| {
        s.iter()
            .all(|s| matches!(s.result, SampleResult::Report(_)))
    };
    assert!(ok(poller.poll_pods(&sim.targets()).await));
    let kept = open_fds();
    assert_eq!(sim.stats().connections(), 50, "one connection per pod");
    assert!(ok(poller.poll_pods(&sim.targets()).await));
    assert_eq!(open_fds(), kept, "the second sweep reuses the connections");
    assert_eq!(sim.stats().connections(), 50, "and opens none");
    assert!(
        kept >= idle + 100,
        "{idle} -> {kept}: connections were not kept"
    );
    drop(poller);

    sim.set_keep_alive(false);
    let poller = Poller::new(PollConfig::default());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let idle = open_fds();
    assert!(ok(poller.poll_pods(&sim.targets()).await));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(open_fds(), idle, "connections closed after each answer");
}
