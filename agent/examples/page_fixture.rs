//! A simulated fleet with a hard stop, for looking at the agent's pages in
//! a browser (`scripts/browser-check.sh` drives it).
//!
//! ```text
//! cargo run -p kura-agent --example page_fixture -- [--listen 127.0.0.1:0] [--time-scale 60] [--serve-for 300]
//! ```
//!
//! It runs the real agent loop (poller, aggregation, per-instance gate,
//! fleet view with its history) and the real debug server over simulated
//! Kura pods on 127.41.0.x, and plays 20 simulated minutes: every instance
//! on the old image; at 4 min most instances move to the new image
//! (baselines captured, pods restart one by one); then
//!
//! - `kura/umbrella-us-east`: fd timeouts grow and memory pressure reaches
//!   2 at 15 min: **hard stop** (`memory_pressure_critical`);
//! - `kura/globex-eu-west`: fd timeouts grow past the band:
//!   **unhealthy** (`fd_timeouts_regressed`);
//! - `payments/initech-us-east`: its pod answers 500 from 12 min: **no
//!   sample** (`sample_stale`);
//! - the others stay healthy, one with a hostile name (markup) that must
//!   come out escaped.
//!
//! It prints `page: http://ADDR/` first and `ready: http://ADDR/` when the
//! story is over, then keeps serving (the clock slowed to real time) for
//! `--serve-for` real seconds or until killed.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::engine::EngineConfig;
use kura_agent::model::{Clock, InstanceInfo, InstanceTarget, PodIdentity, PodTarget, ScaledClock};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig, MemorySink, StaticTargets};
use kura_agent::view::FleetView;
use kura_sim::{
    Addressing, Behaviour, ReportGeneration, SimNode, SimPodHandle, SimPodSpec, Simulator,
};

const OLD: &str = "ghcr.io/tuist/kura:0.41.2";
const NEW: &str = "ghcr.io/tuist/kura:0.42.0";
/// A name full of markup: the pages must escape it (and the CSP would
/// block the image if they did not).
const HOSTILE: &str = "<img src=http://192.0.2.1/x.png>";

struct Fixture {
    namespace: &'static str,
    name: &'static str,
    replicas: usize,
    generation: ReportGeneration,
    upgrade: bool,
}

const FLEET: [Fixture; 7] = [
    Fixture {
        namespace: "kura",
        name: "acme-eu-west",
        replicas: 2,
        generation: ReportGeneration::G4,
        upgrade: true,
    },
    Fixture {
        namespace: "kura",
        name: "acme-us-east",
        replicas: 1,
        generation: ReportGeneration::G4,
        upgrade: false,
    },
    Fixture {
        namespace: "kura",
        name: "globex-eu-west",
        replicas: 3,
        generation: ReportGeneration::G4,
        upgrade: true,
    },
    Fixture {
        namespace: "kura",
        name: "umbrella-us-east",
        replicas: 2,
        generation: ReportGeneration::G4,
        upgrade: true,
    },
    Fixture {
        namespace: "kura",
        name: HOSTILE,
        replicas: 1,
        generation: ReportGeneration::G4,
        upgrade: false,
    },
    Fixture {
        namespace: "payments",
        name: "initech-eu-west",
        replicas: 2,
        generation: ReportGeneration::G3,
        upgrade: true,
    },
    Fixture {
        namespace: "payments",
        name: "initech-us-east",
        replicas: 1,
        generation: ReportGeneration::G3,
        upgrade: true,
    },
];

fn pod_name(f: &Fixture, i: usize) -> String {
    // Pod names stay plain even for the hostile instance.
    if f.name == HOSTILE {
        format!("hostile-{i}")
    } else {
        format!("{}-{i}", f.name)
    }
}

fn pod_target(pod: &SimPodHandle, image: &str) -> PodTarget {
    PodTarget {
        identity: std::sync::Arc::new(PodIdentity {
            name: pod.name().into(),
            uid: pod.uid().into(),
            restart_count: pod.restarts(),
            image: Some(image.into()),
            ip: Some(pod.addr().ip().to_string().into()),
        }),
        addr: Ok(pod.addr()),
    }
}

struct Args {
    listen: SocketAddr,
    time_scale: f64,
    serve_for: Duration,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        time_scale: 60.0,
        serve_for: Duration::from_secs(300),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => a.listen = value.parse().map_err(|e| format!("--listen: {e}"))?,
            "--time-scale" => {
                a.time_scale = value.parse().map_err(|e| format!("--time-scale: {e}"))?
            }
            "--serve-for" => {
                a.serve_for =
                    Duration::from_secs(value.parse().map_err(|e| format!("--serve-for: {e}"))?)
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn pods_of<'a>(sim: &'a Simulator, f: &Fixture) -> Vec<&'a SimPodHandle> {
    (0..f.replicas)
        .filter_map(|i| sim.pod(&pod_name(f, i)))
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("page_fixture: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("page_fixture: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut specs = Vec::new();
    for (k, f) in FLEET.iter().enumerate() {
        for i in 0..f.replicas {
            let mut spec = SimPodSpec::new(pod_name(f, i));
            spec.node = SimNode {
                report_generation: f.generation,
                ring_members: f.replicas as u64,
                ring_fingerprint: format!("{:016x}", 0x5eed_0000_u64 + k as u64),
                fd_timeout_count: 3 + (k as u64 * 5 + i as u64) % 7,
                peer_connection_failure_count: (k as u64 * 3 + i as u64) % 5,
                outbox_messages: 40 + (k as u64 * 7 + i as u64 * 3) % 30,
                outbox_capacity: (f.generation == ReportGeneration::G3).then_some(10_000),
                ..SimNode::default()
            };
            specs.push(spec);
        }
    }
    let sim = Simulator::start(
        specs,
        &Addressing::Loopback {
            first_ip: Ipv4Addr::new(127, 41, 0, 1),
            port: 0,
        },
    )
    .await?;
    let targets = StaticTargets::new(
        FLEET
            .iter()
            .map(|f| InstanceTarget {
                info: InstanceInfo {
                    namespace: f.namespace.to_owned(),
                    name: f.name.to_owned(),
                    expected_pods: f.replicas as u32,
                    generation: 1,
                },
                spec_image: OLD.to_owned(),
                pods: pods_of(&sim, f)
                    .into_iter()
                    .map(|p| pod_target(p, OLD))
                    .collect(),
                pods_dropped: 0,
                node_local_network: false,
                previous_status: None,
                status_warnings: if f.name == "initech-us-east" {
                    vec![
                        "pod initech-us-east-1 is pending: no pod IP yet (a discovery note)"
                            .to_owned(),
                    ]
                } else {
                    Vec::new()
                },
                gate_config: None,
                traits: Default::default(),
            })
            .collect(),
    );
    let start = Timestamp::now() - SignedDuration::from_secs(1200);
    let clock = Arc::new(ScaledClock::new(start, args.time_scale));
    let view = FleetView::new();
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let server = DebugServer::bind(
        args.listen,
        DebugState::new(view.clone(), recorder.handle(), clock.clone()),
    )
    .await?;
    let url = format!("http://{}/", server.local_addr()?);
    println!("page: {url}");
    let serving = tokio::spawn(server.serve(std::future::pending::<()>()));
    let agent = AgentLoop::new(
        LoopConfig {
            cadence: Cadence::fixed(Duration::from_secs(10)),
            reconcile_every: Duration::from_millis(50),
            engine: EngineConfig {
                agent: "kura-agent-fixture".to_owned(),
                ..EngineConfig::default()
            },
        },
        Poller::new(PollConfig::default()),
        Arc::new(targets.clone()),
        Arc::new(MemorySink::new()),
        view,
        clock.clone(),
    );
    let looping = tokio::spawn(agent.run(std::future::pending::<()>()));

    // The story, in simulated seconds from the start.
    let at = |s: i64| start + SignedDuration::from_secs(s);
    let sleep_until = |t: Timestamp| {
        let clock = clock.clone();
        async move {
            let now = clock.now();
            if t > now {
                let d = Duration::try_from(t.duration_since(now)).unwrap_or_default();
                tokio::time::sleep(clock.to_real(d)).await;
            }
        }
    };
    sleep_until(at(240)).await;
    let upgraded: Vec<&Fixture> = FLEET.iter().filter(|f| f.upgrade).collect();
    targets.update(|ts| {
        for t in ts.iter_mut() {
            if upgraded.iter().any(|f| f.name == t.info.name) {
                t.spec_image = NEW.to_owned();
            }
        }
    });
    // Pods restart on the new image one by one, 20 s apart per instance.
    for round in 0..3 {
        sleep_until(at(260 + 20 * round)).await;
        for f in &upgraded {
            let pods = pods_of(&sim, f);
            if let Some(pod) = pods.get(round as usize) {
                pod.restart();
                let target = pod_target(pod, NEW);
                targets.update(|ts| {
                    for t in ts.iter_mut().filter(|t| t.info.name == f.name) {
                        for p in t
                            .pods
                            .iter_mut()
                            .filter(|p| p.identity.name == target.identity.name)
                        {
                            *p = target.clone();
                        }
                    }
                });
            }
        }
    }
    let grow = |name: &str| sim.pod(name).map(|p| p.update(|n| n.fd_timeout_count += 2));
    let mut s = 420;
    while s <= 1200 {
        sleep_until(at(s)).await;
        grow("globex-eu-west-0");
        if s % 60 == 0 {
            grow("umbrella-us-east-1");
        }
        if let Some(p) = sim.pod("initech-eu-west-0") {
            p.update(|n| n.outbox_messages = 40 + (s as u64 / 30) % 25);
        }
        if s == 720
            && let Some(p) = sim.pod("initech-us-east-0")
        {
            p.set(Behaviour::error_500()).await?;
        }
        if s == 900
            && let Some(p) = sim.pod("umbrella-us-east-1")
        {
            p.update(|n| n.memory_pressure_state = 2);
        }
        s += 30;
    }
    // Two more sweeps, then slow down so the page holds still.
    sleep_until(at(1230)).await;
    clock.set_scale(1.0);
    println!("ready: {url}");
    tokio::time::sleep(args.serve_for).await;
    looping.abort();
    serving.abort();
    Ok(())
}
