//! Fault suite: 1,000 pods answering with 10 MiB bodies do not push the
//! agent's memory past its bound. The poller stops reading each body at the
//! body limit (64 KiB), so what it holds at once is about
//! `concurrency × (body limit + read buffer)` = 64 × 66 KiB ≈ 4 MiB. The
//! bound asserted on the growth of the peak RSS (VmHWM) over the RSS before
//! the sweep is 64 MiB: generous for the allocator, the simulator's own
//! connections (it runs in this process) and hyper's buffers, yet ten times
//! below what buffering even one 10 MiB body per request in flight would
//! cost (64 × 10 MiB = 640 MiB), and far below reading every body (10 GiB).
//!
//! Alone in its test binary so no other test's memory counts.

use kura_agent::model::SampleResult;
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::{Addressing, Behaviour, SimPodSpec, Simulator};
use std::time::Duration;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

const PODS: usize = 1000;
const BODY: u64 = 10 * 1024 * 1024;
const BOUND: u64 = 64 * 1024 * 1024;

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} not in /proc/self/status"));
    let kb: u64 = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_pods_with_ten_mib_bodies_stay_under_the_memory_bound() {
    tokio::time::timeout(Duration::from_secs(60), run())
        .await
        .unwrap();
}

async fn run() {
    let specs = (0..PODS)
        .map(|i| SimPodSpec {
            behaviour: Behaviour::Oversized { bytes: BODY },
            ..SimPodSpec::new(format!("big-{i}"))
        })
        .collect();
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .unwrap();
    let config = PollConfig::default();
    let limit = config.body_limit;
    let poller = Poller::new(config);
    let targets = sim.targets();
    let before = status_bytes("VmRSS");

    let samples = poller.poll_pods(&targets).await;

    let peak = status_bytes("VmHWM");
    let want = format!("body exceeds {limit} bytes");
    for s in &samples {
        assert_eq!(
            s.result,
            SampleResult::Error(want.clone()),
            "{}",
            s.pod.name
        );
    }
    let growth = peak.saturating_sub(before);
    let sent: u64 = sim.pods().iter().map(|p| p.body_bytes_sent()).sum();
    println!(
        "RSS before {} MiB, peak {} MiB, growth {} MiB; bodies handed to the sockets {} MiB of {} MiB offered (kernel buffers included)",
        before >> 20,
        peak >> 20,
        growth >> 20,
        sent >> 20,
        (BODY * PODS as u64) >> 20
    );
    assert!(
        growth < BOUND,
        "peak RSS grew by {} MiB (bound {} MiB)",
        growth >> 20,
        BOUND >> 20
    );
    // What left the simulated pods says little about what the agent read:
    // loopback socket buffers autotune to several MiB per connection
    // (tcp_rmem max 32 MiB here), so the memory bound above is the check.
}
