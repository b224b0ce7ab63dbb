//! Fault suite, loopback part of "agent killed and restarted mid-rollout":
//! an [`InstanceEngine`] sweeps simulated pods through an image change,
//! its published `rolloutHealth` + `rolloutGate` go through JSON as the
//! status holds them, the engine is dropped (the agent dies), a pod restarts
//! meanwhile, and a new engine restored from that status continues. No
//! counter ever goes backwards over the whole run, the pod restart is
//! counted as a reset, and the gate's baseline and `healthySince` carry
//! over. (The API-server side of this is tested elsewhere.)

use jiff::Timestamp;
use kura_agent::engine::{EngineConfig, InstanceEngine};
use kura_agent::model::InstanceInfo;
use kura_agent::poll::{PollConfig, Poller};
use kura_schemas::{AgentVerdict, KuraInstanceStatus, RolloutGate, RolloutHealth};
use kura_sim::Simulator;
use std::sync::Arc;
use std::time::Duration;

mod support {
    pub mod sim;
}
use support::sim::PollTargets;

const OLD: &str = "ghcr.io/tuist/kura:0.5.0";
const NEW: &str = "ghcr.io/tuist/kura:0.6.0";

/// Every counter the aggregate publishes, instance-wide and per pod.
fn counters(h: &RolloutHealth) -> Vec<(String, Option<u64>)> {
    let mut out = vec![
        ("fdTimeoutCount".to_owned(), Some(h.fd_timeout_count)),
        (
            "peerConnectionFailures".to_owned(),
            h.peer_connection_failures,
        ),
        ("counterResets".to_owned(), Some(h.counter_resets)),
    ];
    for p in &h.pods {
        out.push((format!("{}.fdTimeoutCount", p.name), p.fd_timeout_count));
        out.push((
            format!("{}.peerConnectionFailures", p.name),
            p.peer_connection_failures,
        ));
    }
    out
}

fn assert_not_backwards(prev: &RolloutHealth, next: &RolloutHealth, sweep: usize) {
    for ((name, before), (name2, after)) in counters(prev).into_iter().zip(counters(next)) {
        assert_eq!(name, name2);
        if let Some(before) = before {
            let after = after.unwrap_or_else(|| panic!("sweep {sweep}: {name} vanished"));
            assert!(
                after >= before,
                "sweep {sweep}: {name} went back from {before} to {after}"
            );
        }
    }
}

struct Run {
    sim: Simulator,
    poller: Poller,
    info: InstanceInfo,
    engine: Arc<EngineConfig>,
    history: Vec<RolloutHealth>,
}

impl Run {
    async fn sweep(
        &mut self,
        engine: &mut InstanceEngine,
        image: &str,
    ) -> (RolloutHealth, RolloutGate) {
        let mut samples = self.poller.poll_pods(&self.sim.targets()).await;
        // The pods run the image the spec names (replaced at once): the
        // agent holds a verdict at not_converged while a pod runs another.
        for s in &mut samples {
            Arc::make_mut(&mut s.pod).image = Some(image.into());
        }
        let judged = engine.step(&self.info, image, &samples, Timestamp::now());
        let (h, g) = ((*judged.health).clone(), (*judged.gate).clone());
        if let Some(prev) = self.history.last() {
            assert_not_backwards(prev, &h, self.history.len());
        }
        self.history.push(h.clone());
        (h, g)
    }

    /// Before the rollout, counters grow on every pod between sweeps.
    fn grow(&self) {
        for pod in self.sim.pods() {
            pod.update(|n| {
                n.fd_timeout_count += 1;
                n.peer_connection_failure_count += 2;
            });
        }
    }

    /// During the rollout, one peer failure more between sweeps, inside
    /// the gate's band (fd timeouts have no band: they stay put).
    fn trickle(&self) {
        self.sim.pods()[0].update(|n| n.peer_connection_failure_count += 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restored_engine_continues_from_the_published_status() {
    tokio::time::timeout(Duration::from_secs(20), run())
        .await
        .unwrap();
}

async fn run() {
    let sim = Simulator::healthy("kura", 3).await.unwrap();
    let mut run = Run {
        sim,
        poller: Poller::new(PollConfig {
            timeout: Duration::from_secs(1),
            ..PollConfig::default()
        }),
        info: InstanceInfo {
            namespace: "kura".into(),
            name: "acme-eu".into(),
            expected_pods: 3,
            generation: 2,
        },
        engine: Arc::new(EngineConfig {
            agent: "agent-a".into(),
            ..EngineConfig::default()
        }),
        history: Vec::new(),
    };

    // The first agent: two sweeps on the old image, then the rollout
    // starts (the spec names the new image) and the pods stay healthy.
    let mut engine = InstanceEngine::new(Arc::clone(&run.engine));
    run.sweep(&mut engine, OLD).await;
    run.grow();
    // The last sweep on the old image is the baseline the rollout is
    // judged against.
    run.sweep(&mut engine, OLD).await;
    let mut last = None;
    for _ in 0..3 {
        last = Some(run.sweep(&mut engine, NEW).await);
        run.trickle();
    }
    let (health, gate) = last.unwrap();
    assert_eq!(gate.target_image, NEW);
    assert_eq!(gate.baseline_image.as_deref(), Some(OLD));
    assert!(gate.baseline_captured_at.is_some());
    assert_eq!(gate.verdict, AgentVerdict::Healthy, "{gate:?}");
    let healthy_since = gate.healthy_since.expect("healthy, so healthySince is set");

    // What the status holds, through JSON; then the agent dies.
    let published = KuraInstanceStatus {
        rollout_health: Some(health.clone()),
        rollout_gate: Some(gate.clone()),
        ..KuraInstanceStatus::default()
    };
    let json = serde_json::to_string(&published).unwrap();
    drop(engine);

    // While no agent runs, one pod restarts (its counters start over) and
    // the others keep counting.
    run.sim.pods()[1].restart();
    run.trickle();

    let status: KuraInstanceStatus = serde_json::from_str(&json).unwrap();
    let mut engine = InstanceEngine::restore(Some(&status), Arc::clone(&run.engine));
    assert_eq!(
        engine.health(),
        Some(&health),
        "restored aggregate is the published one"
    );
    assert_eq!(
        engine.gate(),
        Some(&gate),
        "restored verdict is the published one"
    );

    for i in 0..3 {
        let (h, g) = run.sweep(&mut engine, NEW).await;
        run.trickle();
        assert_eq!(g.target_image, NEW, "sweep {i} after restore");
        assert_eq!(
            g.baseline_image, gate.baseline_image,
            "baseline image carried over"
        );
        assert_eq!(
            g.baseline_captured_at, gate.baseline_captured_at,
            "baseline time carried over"
        );
        assert_eq!(g.baseline, gate.baseline, "baseline counters carried over");
        assert_eq!(g.verdict, AgentVerdict::Healthy, "{g:?}");
        assert_eq!(
            g.healthy_since,
            Some(healthy_since),
            "soak clock carried over"
        );
        assert_eq!(
            h.counter_resets,
            health.counter_resets + 1,
            "the pod restart is one reset"
        );
    }
    assert_eq!(run.history.len(), 8);
}
