//! The shadow gate configuration (`run --shadow-gate-config`, issue 33
//! item 4) writes nothing: an engine with a shadow that disagrees
//! publishes, on the same samples, exactly what an engine without one
//! publishes (the status fields, the conditions, the transitions that
//! become Events), and a sweep puts the shadow verdict in the fleet view
//! only, never in the sink the write queue reads.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kura_agent::engine::{EngineConfig, InstanceEngine};
use kura_agent::model::{
    DesiredStatus, InstanceInfo, InstanceKey, InstanceTarget, PodIdentity, PodTarget, SystemClock,
    WriteRecord,
};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{MemorySink, SweepEnds, SweepWatch, sweep};
use kura_agent::view::FleetView;
use kura_agent::write::conditions::{ConditionSet, conditions_for, marks};
use kura_agent::write::transitions::{WriteChange, transitions};
use kura_gate::GateConfig;
use kura_schemas::{AgentVerdict, ShadowConfigSource, Signal};
use kura_sim::{SimPodHandle, Simulator};

#[allow(dead_code)]
mod support {
    pub mod sim;
}
use support::sim::PodIdentityOf;

const OLD: &str = "ghcr.io/tuist/kura:0.5.0";
const NEW: &str = "ghcr.io/tuist/kura:0.6.0";

fn info() -> InstanceInfo {
    InstanceInfo {
        namespace: "kura".into(),
        name: "acme-eu".into(),
        expected_pods: 2,
        generation: 3,
    }
}

/// Live band 0 on fd timeouts (the default); the shadow would allow 500.
fn config(shadow: bool) -> Arc<EngineConfig> {
    Arc::new(EngineConfig {
        agent: "agent-a".into(),
        shadow: shadow.then(|| GateConfig {
            fd_timeout_band: 500,
            ..GateConfig::default()
        }),
        ..EngineConfig::default()
    })
}

fn pod_target(pod: &SimPodHandle, image: &str) -> PodTarget {
    PodTarget {
        identity: std::sync::Arc::new(PodIdentity {
            image: Some(image.into()),
            ..pod.identity()
        }),
        addr: Ok(pod.addr()),
    }
}

fn target(sim: &Simulator, spec: &str, pods_on: &str) -> InstanceTarget {
    InstanceTarget {
        info: info(),
        spec_image: spec.to_owned(),
        pods: sim.pods().iter().map(|p| pod_target(p, pods_on)).collect(),
        pods_dropped: 0,
        node_local_network: false,
        previous_status: None,
        status_warnings: Vec::new(),
        gate_config: None,
        traits: Default::default(),
    }
}

/// What a write of `sent` after `before` sends and reports: the status
/// fields as JSON, the conditions, the transitions (the Events).
fn written(before: Option<&DesiredStatus>, sent: &DesiredStatus) -> String {
    let previous = before.map_or_else(Box::default, |b| {
        marks(&conditions_for(b, &[], ConditionSet::default()))
    });
    let conditions = conditions_for(sent, &previous, ConditionSet::default());
    let events = transitions(&WriteChange {
        before,
        conditions_before: &previous,
        pruned_before: false,
        sent,
        conditions_sent: &conditions,
        record: &WriteRecord::Applied,
    });
    format!(
        "{}\n{}\n{conditions:?}\n{events:?}",
        serde_json::to_string(&*sent.health).unwrap(),
        serde_json::to_string(&*sent.gate).unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreeing_shadow_changes_nothing_that_is_published() {
    let sim = Simulator::healthy("acme-eu", 2).await.unwrap();
    let poller = Poller::new(PollConfig {
        timeout: Duration::from_secs(1),
        ..PollConfig::default()
    });
    let mut plain = InstanceEngine::new(config(false));
    let mut shadowed = InstanceEngine::new(config(true));
    let mut last: Option<DesiredStatus> = None;
    let mut disagreed = 0;
    for (i, spec) in [OLD, OLD, NEW, NEW, NEW].into_iter().enumerate() {
        if i == 3 {
            // After the upgrade one pod's fd timeouts grow: the live band
            // (0) holds the instance, the shadow's (500) would pass it.
            sim.pods()[0].update(|n| n.fd_timeout_count += 3);
        }
        // The first sweep on the new spec finds the pods still on the old
        // image (the baseline); they run the new one from then on.
        let pods_on = if i <= 2 { OLD } else { NEW };
        let samples = poller
            .poll_pods(&target(&sim, spec, pods_on).pollable())
            .await;
        let now = Timestamp::now();
        // The same samples for both engines.
        let judged = plain.step(&info(), spec, &samples, now);
        assert!(judged.shadow.is_none());
        let published_plain = DesiredStatus {
            health: judged.health,
            gate: judged.gate,
        };
        let judged = shadowed.step(&info(), spec, &samples, now);
        assert!(
            judged.shadow.is_some(),
            "the step hands over the shadow's verdict"
        );
        let published_shadowed = DesiredStatus {
            health: judged.health,
            gate: judged.gate,
        };
        assert_eq!(
            written(last.as_ref(), &published_shadowed),
            written(last.as_ref(), &published_plain),
            "sweep {i}: the shadow changed what is written"
        );
        let shadow = shadowed.shadow().expect("a shadow verdict every sweep");
        assert!(plain.shadow().is_none());
        if shadow.disagrees_with(Some(&published_shadowed.gate)) {
            disagreed += 1;
            assert_eq!(
                published_shadowed.gate.signal,
                Some(Signal::FdTimeoutsRegressed)
            );
            assert_eq!(shadow.gate.verdict, AgentVerdict::Healthy);
        }
        last = Some(published_plain);
    }
    assert!(disagreed >= 1, "the shadow never disagreed");
}

/// A watch that changes nothing.
struct Plain;
impl SweepWatch for Plain {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_shows_the_shadow_in_the_view_and_publishes_the_live_verdict_only() {
    let sim = Simulator::healthy("acme-eu", 2).await.unwrap();
    let sink = MemorySink::new();
    let view = FleetView::new();
    let ends = SweepEnds {
        poller: Poller::new(PollConfig {
            timeout: Duration::from_secs(1),
            ..PollConfig::default()
        }),
        view: view.clone(),
        sink: Arc::new(sink.clone()),
        clock: Arc::new(SystemClock),
    };
    let mut engine = InstanceEngine::new(config(true));
    for spec in [OLD, OLD, NEW] {
        sweep(&ends, &target(&sim, spec, OLD), &mut engine, &mut Plain)
            .await
            .expect("swept");
    }
    sim.pods()[0].update(|n| n.fd_timeout_count += 3);
    sweep(&ends, &target(&sim, NEW, NEW), &mut engine, &mut Plain)
        .await
        .expect("swept");

    let key = InstanceKey::new("kura", "acme-eu");
    let (published, writes) = sink.get(&key).expect("published");
    assert_eq!(writes, 4, "one publication per sweep, none for the shadow");
    assert_eq!(sink.all().len(), 1);
    assert_eq!(published.gate.verdict, AgentVerdict::Unhealthy);
    assert_eq!(published.gate.signal, Some(Signal::FdTimeoutsRegressed));

    let shown = view.instance(&key).expect("in the view");
    assert_eq!(
        shown.gate.as_deref(),
        Some(&*published.gate),
        "the live verdict"
    );
    let shadow = shown.shadow.as_ref().expect("the shadow verdict is shown");
    assert_eq!(shadow.gate.verdict, AgentVerdict::Healthy);
    assert_eq!(shadow.config_source, ShadowConfigSource::File);
    assert!(shown.shadow_disagrees());
    assert_eq!(shadow.gate.evaluated_at, published.gate.evaluated_at);

    // Without a shadow configuration the view has none.
    let view = FleetView::new();
    let ends = SweepEnds {
        view: view.clone(),
        ..ends
    };
    let mut engine = InstanceEngine::new(config(false));
    sweep(&ends, &target(&sim, NEW, OLD), &mut engine, &mut Plain)
        .await
        .expect("swept");
    assert!(view.instance(&key).expect("shown").shadow.is_none());
}
