//! Every verdict the agent published is reproducible offline (issue 33):
//! a real agent loop over simulated pods on loopback takes three instances
//! through an upgrade (one soaks healthy, one holds on fd timeouts that
//! grew, one hard-stops on memory pressure), its debug server exports
//! each instance's timeline, and the agent's own judge
//! (`kura_gate::instance::judge_instance`) run over the exported
//! document gives, tick for tick, the verdict and signal published. A
//! window that starts mid-timeline reproduces too. Then `kura-agent
//! timelines` fetches the whole fleet from the same server into files.
//!
//! (`kura-gate replay --agent-view` does the same from the command line;
//! the real-API-server case is in e2e_apiserver.rs.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::model::{
    InstanceInfo, InstanceKey, InstanceTarget, PodTarget, StoredInstance, StoredStatusSource,
    SystemClock,
};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig, MemorySink, StaticTargets};
use kura_agent::tools::timelines::{TimelinesArgs, fetch_all, timeline_file};
use kura_agent::view::FleetView;
use kura_schemas::{AgentVerdict, InstanceTimeline, Signal};
use kura_sim::{Addressing, SimPodSpec, Simulator};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::Value;

#[allow(dead_code)]
mod support {
    pub mod http;
    pub mod sim;
    pub mod timeline;
}
use support::http::http_get;
use support::sim::PollTargets;
use support::timeline::{published, reproduce};

const OLD: &str = "ghcr.io/tuist/kura:1.0.0";
const NEW: &str = "ghcr.io/tuist/kura:1.1.0";
const DEADLINE: Duration = Duration::from_secs(30);

fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = kura_agent::telemetry::prometheus_builder()
                .expect("buckets")
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).expect("first recorder of this process");
            handle
        })
        .clone()
}

/// Instance `name` of the simulated pods `name-*`, `spec.image` and every
/// pod on `image`.
fn target(name: &str, sim: &Simulator, image: &str) -> InstanceTarget {
    let pods: Vec<PodTarget> = sim
        .targets()
        .into_iter()
        .filter(|(p, _)| p.name.starts_with(&format!("{name}-")))
        .map(|(identity, addr)| {
            let mut identity = std::sync::Arc::unwrap_or_clone(identity);
            identity.image = Some(image.into());
            PodTarget {
                identity: std::sync::Arc::new(identity),
                addr: Ok(addr),
            }
        })
        .collect();
    InstanceTarget {
        info: InstanceInfo {
            namespace: "kura".into(),
            name: name.into(),
            expected_pods: pods.len() as u32,
            generation: 1,
        },
        spec_image: image.into(),
        pods,
        pods_dropped: 0,
        node_local_network: false,
        previous_status: None,
        status_warnings: vec![],
        gate_config: None,
        traits: Default::default(),
    }
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = http_get(addr, path).await.expect("answer");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
    )
}

async fn timeline(addr: SocketAddr, name: &str, query: &str) -> InstanceTimeline {
    let (status, value) = get_json(
        addr,
        &format!("/api/v1/instances/kura/{name}/timeline{query}"),
    )
    .await;
    assert_eq!(status, 200, "{value}");
    serde_json::from_value(value).expect("a timeline document, read strictly")
}

/// Waits until `name`'s timeline satisfies `done`.
async fn wait_for(
    addr: SocketAddr,
    name: &str,
    what: &str,
    done: impl Fn(&InstanceTimeline) -> bool,
) -> InstanceTimeline {
    let started = tokio::time::Instant::now();
    loop {
        let (status, value) =
            get_json(addr, &format!("/api/v1/instances/kura/{name}/timeline")).await;
        if status == 200 {
            let doc: InstanceTimeline = serde_json::from_value(value).expect("timeline");
            if done(&doc) {
                return doc;
            }
        }
        assert!(started.elapsed() < DEADLINE, "{name}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Stored;

impl StoredStatusSource for Stored {
    fn stored_instances(&self) -> Vec<StoredInstance> {
        vec![StoredInstance {
            key: InstanceKey::new("kura", "elsewhere"),
            generation: 1,
            spec_image: NEW.into(),
            status: None,
            notes: vec![],
        }]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_published_verdict_replays_from_the_exported_timeline() {
    let handle = recorder();
    let specs = vec![
        SimPodSpec::new("soak-0"),
        SimPodSpec::new("soak-1"),
        SimPodSpec::new("hold-0"),
        SimPodSpec::new("stop-0"),
    ];
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .expect("simulator");
    let names = ["soak", "hold", "stop"];
    let targets = Arc::new(StaticTargets::new(
        names.iter().map(|n| target(n, &sim, OLD)).collect(),
    ));
    let view = FleetView::new();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        DebugState::new(view.clone(), handle, Arc::new(SystemClock))
            .with_identity("replica-a")
            .with_stored(Arc::new(Stored)),
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut stopped_server = stopped.clone();
    let server = tokio::spawn(server.serve(async move {
        let _ = stopped_server.wait_for(|s| *s).await;
    }));
    let agent_loop = AgentLoop::new(
        LoopConfig {
            cadence: Cadence::fixed(Duration::from_millis(100)),
            reconcile_every: Duration::from_millis(50),
            ..LoopConfig::default()
        },
        Poller::new(PollConfig {
            timeout: Duration::from_secs(1),
            retries: 0,
            ..PollConfig::default()
        }),
        targets.clone(),
        Arc::new(MemorySink::new()),
        view,
        Arc::new(SystemClock),
    );
    let mut stopped_loop = stopped;
    let agent = tokio::spawn(agent_loop.run(async move {
        let _ = stopped_loop.wait_for(|s| *s).await;
    }));

    // On the old image, no baseline yet.
    for name in names {
        let doc = wait_for(addr, name, "ticks on the old image", |d| d.ticks.len() >= 3).await;
        assert_eq!(doc.instance.baseline_image, None);
        assert_eq!(doc.ticks[0].servers[0].baseline, None);
        assert_eq!(
            reproduce(&doc),
            published(&doc),
            "{name} before the upgrade"
        );
    }
    // The upgrade: a new baseline (the last aggregate on the old image)
    // and a timeline that starts with it.
    targets.update(|all| {
        for t in all.iter_mut() {
            *t = target(&t.info.name, &sim, NEW);
        }
    });
    for name in names {
        wait_for(addr, name, "the new baseline", |d| {
            d.instance.baseline_image.as_deref() == Some(OLD) && !d.ticks.is_empty()
        })
        .await;
    }
    sim.pod("hold-0")
        .expect("pod")
        .update(|n| n.fd_timeout_count += 5);
    sim.pod("stop-0")
        .expect("pod")
        .update(|n| n.memory_pressure_state = 2);

    let said = |doc: &InstanceTimeline, verdict: AgentVerdict| {
        doc.ticks
            .iter()
            .filter(|t| t.servers[0].published.verdict == verdict)
            .count()
    };
    let soak = wait_for(addr, "soak", "healthy ticks", |d| {
        said(d, AgentVerdict::Healthy) >= 5
    })
    .await;
    let hold = wait_for(addr, "hold", "held ticks", |d| {
        said(d, AgentVerdict::Unhealthy) >= 5
    })
    .await;
    let stopped_doc = wait_for(addr, "stop", "hard-stop ticks", |d| {
        said(d, AgentVerdict::HardStop) >= 5
    })
    .await;
    assert_eq!(
        said(&soak, AgentVerdict::Healthy),
        soak.ticks.len(),
        "soaks"
    );
    assert!(
        hold.ticks
            .iter()
            .any(|t| t.servers[0].published.signal == Some(Signal::FdTimeoutsRegressed))
    );
    assert!(
        stopped_doc
            .ticks
            .iter()
            .any(|t| t.servers[0].published.signal == Some(Signal::MemoryPressureCritical))
    );
    for doc in [&soak, &hold, &stopped_doc] {
        let name = &doc.instance.name;
        let server = &doc.ticks[0].servers[0];
        assert_eq!(server.id, format!("kura/{name}"));
        assert!(server.converged, "{name}");
        let baseline = server.baseline.as_ref().expect("baseline");
        assert!(baseline.soak_eligible, "{name}");
        assert_eq!(doc.ticks[0].wave_started_at, baseline.captured_at);
        assert!(doc.window.complete, "{name}");
        assert_eq!(doc.window.dropped_ticks, 0);
        assert_eq!(reproduce(doc), published(doc), "{name}: every tick replays");
        // A window that starts mid-timeline still reproduces.
        let third = doc.ticks[2].now;
        let since = format!("?since={}&limit=2", third.to_string().replace('+', "%2B"));
        let part = timeline(addr, name, &since).await;
        assert_eq!(part.ticks.len(), 2);
        assert!(part.ticks[0].now >= third);
        assert!(!part.window.complete);
        assert_eq!(reproduce(&part), published(&part), "{name}: a window");
    }

    // docs/tuning-the-gate.md's what-if: the held rollout's export judged
    // with the demo's looser fd-timeout band. The default band holds on
    // the fd timeouts that grew; the candidate would have let every tick
    // through, and says so tick by tick and in its summary.
    let candidate_file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/demo/shadow-loose-fd.json");
    let candidate = kura_gate::config_file::load(&candidate_file)
        .expect("a valid candidate")
        .config;
    let text = serde_json::to_string(&hold).expect("serialise");
    let what_if = kura_gate::what_if::what_if(&text, &candidate, kura_gate::what_if::View::Agent)
        .expect("the export replays");
    let held = published(&hold)
        .iter()
        .filter(|(v, _)| *v == AgentVerdict::Unhealthy)
        .count();
    assert_eq!(what_if.differences.len(), held, "every held tick differs");
    let hold_signal = what_if
        .summary
        .document
        .first_hold
        .as_ref()
        .map(|m| m.signal);
    assert_eq!(hold_signal, Some(Some(Signal::FdTimeoutsRegressed)));
    assert!(what_if.summary.candidate.first_hold.is_none());
    assert!(what_if.summary.candidate.first_hard_stop.is_none());
    // The same candidate changes nothing for the rollout that soaked.
    let soaked = serde_json::to_string(&soak).expect("serialise");
    let same = kura_gate::what_if::what_if(&soaked, &candidate, kura_gate::what_if::View::Agent)
        .expect("the export replays");
    assert!(same.differences.is_empty());

    // A malformed query, an instance swept elsewhere, one unknown.
    let (status, bad) = get_json(addr, "/api/v1/instances/kura/soak/timeline?limit=0").await;
    assert_eq!(status, 400);
    assert!(bad["error"].as_str().unwrap().contains("limit"), "{bad}");
    let (status, elsewhere) = get_json(addr, "/api/v1/instances/kura/elsewhere/timeline").await;
    assert_eq!(status, 404);
    assert_eq!(elsewhere["ownedBy"], "replica-a", "{elsewhere}");
    let (status, unknown) = get_json(addr, "/api/v1/instances/kura/nope/timeline").await;
    assert_eq!(status, 404);
    assert_eq!(unknown["error"], "no such instance");

    // `kura-agent timelines`: the whole fleet in one command.
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("timelines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let args = TimelinesArgs {
        from: format!("http://{addr}"),
        out: out.clone(),
        namespace: Some("kura".into()),
        concurrency: 2,
        timeout: Duration::from_secs(10),
        body_limit: 64 * 1024 * 1024,
    };
    let fetched = fetch_all(&args).await.expect("fetched");
    assert_eq!(
        (fetched.written, fetched.elsewhere, fetched.failed),
        (3, 1, 0),
        "{:?}",
        fetched.lines
    );
    assert!(
        fetched
            .lines
            .iter()
            .any(|l| l.starts_with("not here kura/elsewhere: swept by replica-a")),
        "{:?}",
        fetched.lines
    );
    for name in names {
        let text = std::fs::read_to_string(timeline_file(&out, "kura", name)).expect("file");
        let doc: InstanceTimeline = serde_json::from_str(&text).expect("a timeline");
        assert_eq!(doc.instance.name, name);
        assert_eq!(reproduce(&doc), published(&doc), "{name}: from the file");
    }
    // Another namespace: nothing; a body limit too small: every fetch fails.
    let none = fetch_all(&TimelinesArgs {
        namespace: Some("other".into()),
        ..args.clone()
    })
    .await
    .expect("fetched");
    assert_eq!((none.written, none.failed), (0, 0));
    let small = fetch_all(&TimelinesArgs {
        body_limit: 2_000,
        ..args.clone()
    })
    .await;
    match small {
        Err(e) => assert!(e.to_string().contains("--body-limit"), "{e}"),
        Ok(f) => assert!(f.failed > 0, "{:?}", f.lines),
    }
    let _ = std::fs::remove_dir_all(&out);

    let _ = stop.send(true);
    let _ = agent.await;
    let _ = server.await;
}
