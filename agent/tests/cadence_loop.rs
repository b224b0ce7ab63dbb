//! The run loop applies the rollout-aware cadence (`runner::cadence`) to
//! real sweeps of simulated pods on loopback: an instance at rest waits its
//! steady interval; a `spec.image` change is swept at once (the baseline
//! taken then) and the instance is swept at the rollout interval until it
//! has been healthy for the settle period; pods that start running two
//! images cut a steady wait short. The intervals are scaled down (rollout
//! 100 ms, steady 5 s, settle 1 s) and every check leaves a wide margin:
//! what is checked is which cadence applies, not how fast the machine is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_agent::model::{InstanceInfo, InstanceKey, InstanceTarget, PodTarget, SystemClock};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig, MemorySink, StaticTargets};
use kura_agent::view::FleetView;
use kura_schemas::AgentVerdict;
use kura_sim::Simulator;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

const V1: &str = "ghcr.io/tuist/kura:1.0.0";
const V2: &str = "ghcr.io/tuist/kura:1.1.0";

fn target(sim: &Simulator, spec_image: &str, pod_images: &[&str]) -> InstanceTarget {
    InstanceTarget {
        info: InstanceInfo {
            namespace: "kura".into(),
            name: "acme".into(),
            expected_pods: 2,
            generation: 1,
        },
        spec_image: spec_image.into(),
        pods: sim
            .targets()
            .into_iter()
            .zip(pod_images)
            .map(|((identity, addr), image)| {
                let mut identity = std::sync::Arc::unwrap_or_clone(identity);
                identity.image = Some((*image).into());
                PodTarget {
                    identity: std::sync::Arc::new(identity),
                    addr: Ok(addr),
                }
            })
            .collect(),
        pods_dropped: 0,
        node_local_network: false,
        previous_status: None,
        status_warnings: Vec::new(),
        gate_config: None,
        traits: Default::default(),
    }
}

/// Sweeps published so far.
fn sweeps(sink: &MemorySink) -> u64 {
    sink.get(&InstanceKey::new("kura", "acme"))
        .map_or(0, |(_, n)| n)
}

async fn until(what: &str, within: Duration, cond: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cadence_follows_the_rollout() {
    let sim = Simulator::healthy("acme", 2).await.expect("simulator");
    let targets = StaticTargets::new(vec![target(&sim, V1, &[V1, V1])]);
    let sink = MemorySink::new();
    let cadence = Cadence {
        rollout_interval: Duration::from_millis(100),
        steady_interval: Duration::from_secs(5),
        settle: Duration::from_secs(1),
        ..Cadence::default()
    };
    let agent_loop = AgentLoop::new(
        LoopConfig {
            cadence,
            reconcile_every: Duration::from_millis(50),
            ..LoopConfig::default()
        },
        Poller::new(PollConfig::default()),
        Arc::new(targets.clone()),
        Arc::new(sink.clone()),
        FleetView::new(),
        Arc::new(SystemClock),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent_loop.run(async {
        let _ = stopped.await;
    }));
    let key = InstanceKey::new("kura", "acme");

    // No verdict yet: the first sweep comes within one rollout interval;
    // then healthy on one image, never upgraded: at rest.
    until("the first sweep", Duration::from_secs(5), || {
        sweeps(&sink) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        sweeps(&sink),
        1,
        "at rest: the next sweep is 4.5 s to 5.5 s away"
    );

    // The upgrade: swept at once, long before the steady wait is over, and
    // the baseline is taken by that sweep.
    targets.update(|t| t[0].spec_image = V2.into());
    let took = until(
        "the sweep at the image change",
        Duration::from_secs(2),
        || sweeps(&sink) == 2,
    )
    .await;
    let (status, _) = sink.get(&key).expect("a status");
    assert_eq!(status.gate.target_image, V2);
    assert_eq!(status.gate.baseline_image.as_deref(), Some(V1));
    // The pods still run V1: held at not_converged until they run V2.
    assert_eq!(status.gate.verdict, AgentVerdict::Unhealthy);
    assert_eq!(status.gate.signal, Some(kura_schemas::Signal::NotConverged));
    println!("image change swept after {took:?}");
    targets.update(|t| t[0] = target(&sim, V2, &[V2, V2]));

    // Settling: swept every 100 ms until healthy for 1 s, then at rest.
    let changed = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let settled = sweeps(&sink);
    assert!(
        settled >= 2 + 6,
        "{settled} sweeps: the rollout cadence did not apply while settling"
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(
        sweeps(&sink),
        settled,
        "settled {:?} after the change: at rest again",
        changed.elapsed()
    );

    // A pod rolls to another image (spec.image unchanged): the steady wait
    // is cut short and the rollout cadence applies again.
    targets.update(|t| t[0] = target(&sim, V2, &[V2, V1]));
    until(
        "the rollout cadence for pods on two images",
        Duration::from_secs(2),
        || sweeps(&sink) >= settled + 3,
    )
    .await;

    let _ = stop.send(());
    let _ = running.await;
}
