//! What the integration recipes of docs/integrations.md read, from a real
//! agent loop over simulated pods on loopback: the verdict endpoint
//! (`/api/v1/instances/{ns}/{name}/verdict`) and `/metrics`, for an
//! instance in each state a recipe must tell apart:
//!
//! | instance | state | `rolloutHealthy` |
//! |---|---|---|
//! | `healthy` | every check passes, every pod on `spec.image` | True |
//! | `rolling` | checks pass, the pods still run the old image (verdict not_converged) | Unknown (NotConverged) |
//! | `held` | a pod not ready | False (NotReady) |
//! | `stopped` | memory pressure 2 | False, and `rolloutHardStopped` True |
//! | `flapping` | a pod ready for 0.6 s, then not ready for 0.7 s, by the wall clock | True, then False (NotReady), ...; `healthySince` never more than about 0.6 s old |
//!
//! Before it writes or serves anything, the `healthy` instance has been
//! healthy without a break for at least [`HEALTHY_FOR`] (its verdict's
//! `evaluatedAt` minus `healthySince`), so a recipe's soak, shortened to
//! less than that, is met in every document.
//!
//! The test checks the documents itself; with `KURA_INTEGRATIONS_OUT=DIR`
//! it also writes them (`verdict-<instance>.json`, `metrics.txt`) for
//! scripts/integrations-check.sh, which runs the recipes' jsonPath,
//! conditions and PromQL over them with the tools the integrations use.
//! With `KURA_INTEGRATIONS_SERVE=FILE` it then keeps serving (the address
//! in FILE) until FILE is removed: scripts/argo-rollouts-check.sh points
//! the real Argo Rollouts controllers at it.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::model::{InstanceInfo, InstanceTarget, PodTarget, SystemClock};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig, MemorySink, StaticTargets};
use kura_agent::view::FleetView;
use kura_sim::{Addressing, SimPodSpec, Simulator};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::Value;

#[allow(dead_code)]
mod support {
    pub mod http;
    pub mod sim;
}
use support::http::http_get;
use support::sim::PollTargets;

const OLD: &str = "ghcr.io/tuist/kura:1.0.0";
const NEW: &str = "ghcr.io/tuist/kura:1.1.0";
const DEADLINE: Duration = Duration::from_secs(20);
/// How long the `healthy` instance has been healthy, at least, in what the
/// test writes and serves.
const HEALTHY_FOR: Duration = Duration::from_secs(2);
/// The `flapping` instance's pod is ready for the first [`FLAP_READY`] of
/// every [`FLAP`] of the wall clock: a period no whole number of seconds,
/// so that measurements 1 s apart see both phases (not always the same).
const FLAP: Duration = Duration::from_millis(1300);
const FLAP_READY: Duration = Duration::from_millis(600);
/// The longest the test serves with `KURA_INTEGRATIONS_SERVE` (the harness
/// removes the file when done: this only bounds a forgotten run). An hour:
/// scripts/argo-rollouts-check.sh takes 4-7 minutes, but a machine paused
/// for measurements (SIGSTOP) lets the wall clock run on, and a 20-minute
/// limit ended the serving under a 27-minute pause.
const SERVE_LIMIT: Duration = Duration::from_secs(3600);

fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = kura_agent::telemetry::prometheus_builder()
                .expect("buckets")
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).expect("first recorder of this process");
            kura_agent::telemetry::describe();
            handle
        })
        .clone()
}

/// Instance `name` with the simulated pods `name-*`, which run `pod_image`
/// while `spec.image` is `NEW`.
fn target(name: &str, sim: &Simulator, pod_image: &str) -> InstanceTarget {
    let pods: Vec<PodTarget> = sim
        .targets()
        .into_iter()
        .filter(|(p, _)| p.name.starts_with(&format!("{name}-")))
        .map(|(identity, addr)| {
            let mut identity = std::sync::Arc::unwrap_or_clone(identity);
            identity.image = Some(pod_image.into());
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
            generation: 2,
        },
        spec_image: NEW.into(),
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
    (status, serde_json::from_str(&body).expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verdict_endpoint_and_metrics_in_every_state_a_recipe_reads() {
    let handle = recorder();
    let mut not_ready = SimPodSpec::new("held-1");
    not_ready.node.ready = false;
    let mut critical = SimPodSpec::new("stopped-0");
    critical.node.memory_pressure_state = 2;
    let specs = vec![
        SimPodSpec::new("healthy-0"),
        SimPodSpec::new("healthy-1"),
        SimPodSpec::new("rolling-0"),
        SimPodSpec::new("held-0"),
        not_ready,
        critical,
        SimPodSpec::new("flapping-0"),
        SimPodSpec::new("flapping-1"),
    ];
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .expect("simulator");
    let targets = StaticTargets::new(vec![
        target("healthy", &sim, NEW),
        target("rolling", &sim, OLD),
        target("held", &sim, NEW),
        target("stopped", &sim, NEW),
        target("flapping", &sim, NEW),
    ]);
    // The flap follows the wall clock (not a sleep of its own), so that a
    // paused process resumes in the phase the clock says, not in a healthy
    // phase stretched by the pause.
    let flapping = sim.pod("flapping-1").expect("flapping pod").clone();
    let flapper = tokio::spawn(async move {
        loop {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis();
            let ready = ms % FLAP.as_millis() < FLAP_READY.as_millis();
            if flapping.node().ready != ready {
                flapping.update(|n| n.ready = ready);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let view = FleetView::new();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        DebugState::new(view.clone(), handle, Arc::new(SystemClock)),
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
            cadence: Cadence::fixed(Duration::from_millis(200)),
            reconcile_every: Duration::from_millis(50),
            ..LoopConfig::default()
        },
        Poller::new(PollConfig {
            timeout: Duration::from_secs(1),
            retries: 0,
            ..PollConfig::default()
        }),
        Arc::new(targets),
        Arc::new(MemorySink::new()),
        view,
        Arc::new(SystemClock),
    );
    let mut stopped_loop = stopped;
    let agent = tokio::spawn(agent_loop.run(async move {
        let _ = stopped_loop.wait_for(|s| *s).await;
    }));

    let names = ["healthy", "rolling", "held", "stopped"];
    let started = tokio::time::Instant::now();
    // The healthy instance, healthy for HEALTHY_FOR without a break.
    loop {
        let (status, v) = get_json(addr, "/api/v1/instances/kura/healthy/verdict").await;
        let at = |k: &str| {
            v[k].as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        };
        if status == 200
            && let (Some(since), Some(at)) = (at("healthySince"), at("evaluatedAt"))
            && at.duration_since(since)
                >= jiff::SignedDuration::try_from(HEALTHY_FOR).expect("span")
        {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "healthy for {HEALTHY_FOR:?}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut verdicts = Vec::new();
    for name in names {
        let path = format!("/api/v1/instances/kura/{name}/verdict");
        let v = loop {
            // Without a cluster watch (static targets) an instance exists
            // for the endpoint once its first sweep is recorded.
            let (status, v) = get_json(addr, &path).await;
            if status == 200 && v["verdict"].is_string() {
                break v;
            }
            assert!(started.elapsed() < DEADLINE, "{name} judged: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        verdicts.push((name, v));
    }
    let by = |name: &str| {
        &verdicts
            .iter()
            .find(|(n, _)| *n == name)
            .expect("instance")
            .1
    };
    let cond = |name: &str, which: &str| {
        let c = &by(name)[which];
        (
            c["status"].as_str().unwrap_or_default().to_owned(),
            c["reason"].as_str().unwrap_or_default().to_owned(),
        )
    };
    assert_eq!(
        cond("healthy", "rolloutHealthy"),
        ("True".into(), "Healthy".into())
    );
    assert_eq!(
        cond("rolling", "rolloutHealthy"),
        ("Unknown".into(), "NotConverged".into())
    );
    assert_eq!(
        (&by("rolling")["verdict"], &by("rolling")["signal"]),
        (
            &serde_json::json!("unhealthy"),
            &serde_json::json!("not_converged")
        ),
        "the checks pass on the old pods, but the agent never calls the new image healthy while a pod runs another"
    );
    assert_eq!(
        cond("held", "rolloutHealthy"),
        ("False".into(), "NotReady".into())
    );
    assert_eq!(cond("held", "rolloutHardStopped").0, "False");
    assert_eq!(
        cond("stopped", "rolloutHardStopped"),
        ("True".into(), "MemoryPressureCritical".into())
    );
    for (name, v) in &verdicts {
        assert_eq!(v["schemaVersion"], 1);
        assert_eq!(v["namespace"], "kura");
        assert_eq!(v["name"], *name);
        assert_eq!(v["observedGeneration"], 2);
        assert_eq!(v["generation"], 2);
        assert_eq!(v["targetImage"], NEW);
        assert_eq!(v["source"], "live");
        assert_eq!(v["ownedBy"], "kura-agent", "the engine's agent name");
        assert!(v["evaluatedAt"].is_string());
    }
    assert!(by("held")["evidence"][0]["signal"] == "not_ready");
    let (status, missing) = get_json(addr, "/api/v1/instances/kura/nope/verdict").await;
    assert_eq!(status, 404, "{missing}");

    // Every instance's series in one scrape.
    let (status, metrics) = loop {
        let (status, body) = http_get(addr, "/metrics").await.expect("metrics");
        if names.iter().all(|n| {
            body.contains(&format!(
                "kura_instance_converged{{kura_namespace=\"kura\",kura_instance=\"{n}\"}}"
            ))
        }) {
            break (status, body);
        }
        assert!(started.elapsed() < DEADLINE, "every instance in /metrics");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200);

    // The flapping instance flaps: RolloutHealthy True and False within a
    // few flaps, never healthy for much longer than one flap.
    let mut seen = std::collections::BTreeSet::new();
    let mut longest = jiff::SignedDuration::ZERO;
    let flapping_since = tokio::time::Instant::now();
    while flapping_since.elapsed() < 3 * FLAP {
        let (_, v) = get_json(addr, "/api/v1/instances/kura/flapping/verdict").await;
        if let Some(status) = v["rolloutHealthy"]["status"].as_str() {
            seen.insert(status.to_owned());
        }
        let at = |k: &str| {
            v[k].as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        };
        if let (Some(since), Some(at)) = (at("healthySince"), at("evaluatedAt")) {
            longest = longest.max(at.duration_since(since));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen.contains("True") && seen.contains("False"),
        "the flapping instance flaps: {seen:?}"
    );
    assert!(
        longest < jiff::SignedDuration::from_millis(900),
        "the flapping instance was healthy for {longest:?} without a break"
    );

    if let Ok(dir) = std::env::var("KURA_INTEGRATIONS_OUT") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("output dir");
        for (name, v) in &verdicts {
            std::fs::write(
                dir.join(format!("verdict-{name}.json")),
                serde_json::to_vec_pretty(v).expect("json"),
            )
            .expect("write verdict");
        }
        std::fs::write(dir.join("metrics.txt"), &metrics).expect("write metrics");
        println!("wrote the verdicts and metrics.txt to {}", dir.display());
    }

    // KURA_INTEGRATIONS_SERVE=FILE keeps the agent loop and its verdict API
    // up for scripts/argo-rollouts-check.sh, which runs the real Argo
    // Rollouts controllers against them: the address goes to FILE, and the
    // test serves until FILE is removed (at most SERVE_LIMIT).
    if let Ok(file) = std::env::var("KURA_INTEGRATIONS_SERVE") {
        let file = std::path::PathBuf::from(file);
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, format!("http://{addr}\n")).expect("write address");
        std::fs::rename(&tmp, &file).expect("publish address");
        println!(
            "serving the verdict API on http://{addr} until {} is removed",
            file.display()
        );
        let serving = std::time::Instant::now();
        while file.exists() && serving.elapsed() < SERVE_LIMIT {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            !file.exists(),
            "served for {SERVE_LIMIT:?}; nobody removed {}",
            file.display()
        );
    }

    flapper.abort();
    let _ = stop.send(true);
    let _ = agent.await;
    let _ = server.await;
}
