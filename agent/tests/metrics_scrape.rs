//! Loopback scrape: the agent loop (static targets, memory sink) polls
//! simulated pods, the debug server on 127.0.0.1 serves `/metrics`, and the
//! scrape carries the per-instance series of every instance with the values
//! the pods report; an instance taken out of the targets leaves `/metrics`
//! after the next reconcile instead of staying frozen.
//!
//! With `KURA_SCRAPE_OUT=FILE` the scrape with both instances is written to FILE
//! (scripts/obs-check.sh lints it with promtool and checks the dashboard's
//! metric names against it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::model::InstanceInfo;
use kura_agent::model::SystemClock;
use kura_agent::model::{InstanceTarget, PodTarget};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::MemorySink;
use kura_agent::runner::StaticTargets;
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig};
use kura_agent::view::FleetView;
use kura_sim::{Addressing, SimPodSpec, Simulator};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod support {
    #[allow(dead_code)] // this test needs only the chunked decoding
    pub mod http;
    pub mod sim;
}
use support::sim::PollTargets;

const IMAGE: &str = "ghcr.io/tuist/kura:0.6.0";
/// Every wait in this test ends by then.
const DEADLINE: Duration = Duration::from_secs(20);

/// The agent records through the global `metrics` recorder from its own
/// tasks, so the agent-level series need one installed; this test binary
/// is its own process and installs it once.
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

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the Prometheus text format strictly enough for this test: every
/// line is a comment or `name{k="v",...} value`; a malformed line fails.
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|e| panic!("value of {line:?}: {e}"));
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = BTreeMap::new();
                // Label values in these tests hold no `",`.
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label pair");
                    labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                }
                (name, labels)
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line:?}"
        );
        out.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    out
}

struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// The value of `name` for instance `kura/<instance>` with the extra
    /// labels `extra`; `None` when absent. Panics on duplicates.
    fn of(&self, name: &str, instance: &str, extra: &[(&str, &str)]) -> Option<f64> {
        let hits: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.get("kura_namespace").map(String::as_str) == Some("kura")
                    && s.labels.get("kura_instance").map(String::as_str) == Some(instance)
                    && s.labels.len() == 2 + extra.len()
                    && extra
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .collect();
        assert!(hits.len() <= 1, "{name} {instance} {extra:?}: {hits:?}");
        hits.first().copied()
    }

    /// A series without `kura_namespace`/`kura_instance` labels.
    fn global(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    fn mentions(&self, instance: &str) -> bool {
        self.samples
            .iter()
            .any(|s| s.labels.get("kura_instance").map(String::as_str) == Some(instance))
    }
}

async fn scrape(addr: SocketAddr) -> Scrape {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    // The streamed scrape is chunked.
    let body = support::http::body_of(head, body).expect("well-formed chunks");
    Scrape {
        samples: parse(&body),
        text: body,
    }
}

/// Scrapes until `done` holds, or panics at the deadline with the last
/// scrape.
async fn scrape_until(
    addr: SocketAddr,
    started: tokio::time::Instant,
    what: &str,
    done: impl Fn(&Scrape) -> bool,
) -> Scrape {
    loop {
        let s = scrape(addr).await;
        if done(&s) {
            return s;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "timed out waiting for {what}; last scrape:\n{}",
            s.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn target(name: &str, sim: &Simulator, expected_pods: u32) -> InstanceTarget {
    let pods = sim
        .targets()
        .into_iter()
        .filter(|(p, _)| p.name.starts_with(&format!("{name}-")))
        .map(|(identity, addr)| {
            let mut identity = std::sync::Arc::unwrap_or_clone(identity);
            identity.image = Some(IMAGE.into());
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
            expected_pods,
            generation: 1,
        },
        spec_image: IMAGE.into(),
        pods,
        pods_dropped: 0,
        node_local_network: false,
        previous_status: None,
        status_warnings: vec![],
        gate_config: None,
        traits: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_has_every_instance_and_drops_a_removed_one() {
    let started = tokio::time::Instant::now();
    let handle = recorder();
    let mut critical = SimPodSpec::new("beta-0");
    critical.node.memory_pressure_state = 2;
    let specs = vec![
        SimPodSpec::new("acme-0"),
        SimPodSpec::new("acme-1"),
        critical,
    ];
    let sim = Simulator::start(specs, &Addressing::default())
        .await
        .expect("simulator");
    let acme = target("acme", &sim, 2);
    // beta expects 2 pods but has only 1: it is unsampled as well as
    // critical, and memory pressure (check 1) is what names the signal.
    let beta = target("beta", &sim, 2);
    let pod_ips: Vec<String> = sim
        .pods()
        .iter()
        .map(|p| p.addr().ip().to_string())
        .collect();
    let targets = StaticTargets::new(vec![acme, beta]);

    let view = FleetView::new();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        DebugState::new(
            view.clone(),
            handle,
            std::sync::Arc::new(kura_agent::model::SystemClock),
        ),
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
        Arc::new(targets.clone()),
        Arc::new(MemorySink::new()),
        view,
        Arc::new(SystemClock),
    );
    let mut stopped_loop = stopped;
    let agent = tokio::spawn(agent_loop.run(async move {
        let _ = stopped_loop.wait_for(|s| *s).await;
    }));

    let s = scrape_until(addr, started, "both instances judged", |s| {
        ["acme", "beta"].iter().all(|i| {
            s.of("kura_instance_gate_verdict", i, &[("verdict", "healthy")])
                .is_some()
        })
    })
    .await;

    // acme: two healthy pods.
    let acme = |name: &str| s.of(name, "acme", &[]);
    assert_eq!(acme("kura_instance_ready"), Some(1.0));
    assert_eq!(acme("kura_instance_serving"), Some(1.0));
    assert_eq!(acme("kura_instance_ring_consistent"), Some(1.0));
    assert_eq!(acme("kura_instance_sampled_pods"), Some(2.0));
    assert_eq!(acme("kura_instance_expected_pods"), Some(2.0));
    assert_eq!(acme("kura_instance_memory_pressure_state"), Some(0.0));
    assert_eq!(acme("kura_instance_fd_timeouts"), Some(0.0));
    assert_eq!(acme("kura_instance_converged"), Some(1.0));
    let age = acme("kura_instance_sample_age_seconds").expect("sample age");
    assert!((0.0..5.0).contains(&age), "sample age {age}");
    for (verdict, want) in [("healthy", 1.0), ("unhealthy", 0.0), ("hard_stop", 0.0)] {
        assert_eq!(
            s.of(
                "kura_instance_gate_verdict",
                "acme",
                &[("verdict", verdict)]
            ),
            Some(want),
            "acme {verdict}"
        );
    }
    assert!(
        !s.samples
            .iter()
            .any(|x| x.name == "kura_instance_gate_signal"
                && x.labels.get("kura_instance").map(String::as_str) == Some("acme")),
        "a healthy instance has no signal"
    );
    // No image change seen: no baseline, so no baseline series (absent, not 0).
    assert_eq!(acme("kura_instance_baseline_fd_timeouts"), None);

    // beta: one of two pods, at critical memory pressure.
    let beta = |name: &str| s.of(name, "beta", &[]);
    assert_eq!(beta("kura_instance_memory_pressure_state"), Some(2.0));
    assert_eq!(beta("kura_instance_sampled_pods"), Some(1.0));
    assert_eq!(beta("kura_instance_expected_pods"), Some(2.0));
    assert_eq!(beta("kura_instance_ready"), Some(0.0));
    assert_eq!(
        s.of(
            "kura_instance_gate_verdict",
            "beta",
            &[("verdict", "hard_stop")]
        ),
        Some(1.0)
    );
    assert_eq!(
        s.of(
            "kura_instance_gate_signal",
            "beta",
            &[("signal", "memory_pressure_critical")]
        ),
        Some(1.0)
    );

    // Fleet-wide.
    assert_eq!(
        s.global("kura_instances_running", &[("image", IMAGE)]),
        Some(2.0)
    );
    assert_eq!(s.global("kura_instances_mixed_images", &[]), Some(0.0));

    // Nothing of unbounded cardinality: no pod name or IP in any label.
    for x in &s.samples {
        for v in x.labels.values() {
            assert!(
                !pod_ips.contains(v) && !v.starts_with("acme-") && !v.starts_with("beta-"),
                "{x:?}"
            );
        }
    }

    // The agent's own series come through the same endpoint.
    let s = scrape_until(addr, started, "agent-level series", |s| {
        s.global("kura_agent_instances_tracked", &[]) == Some(2.0)
            && s.global("kura_agent_judged_instances", &[("verdict", "hard_stop")]) == Some(1.0)
    })
    .await;
    let ok_polls = s
        .global("kura_agent_polls_total", &[("result", "ok")])
        .expect("ok polls");
    assert!(ok_polls >= 3.0, "{ok_polls}");
    assert!(
        s.text
            .contains("kura_agent_sweep_duration_seconds_bucket{le=")
    );
    assert!(s.text.contains("# TYPE kura_instance_ready gauge"));
    if let Some(path) = std::env::var_os("KURA_SCRAPE_OUT") {
        std::fs::write(&path, &s.text).expect("write scrape");
    }

    // Remove beta: after the next reconcile its series are gone, acme's stay.
    targets.update(|t| t.retain(|t| t.info.name != "beta"));
    let s = scrape_until(addr, started, "beta's series to go", |s| {
        !s.mentions("beta")
    })
    .await;
    assert!(!s.text.contains("kura_instance=\"beta\""), "{}", s.text);
    assert_eq!(s.of("kura_instance_ready", "acme", &[]), Some(1.0));
    assert_eq!(
        s.global("kura_instances_running", &[("image", IMAGE)]),
        Some(1.0)
    );
    // It stays gone (no task of beta's left to bring it back).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = scrape(addr).await;
    assert!(!s.mentions("beta"), "{}", s.text);
    assert_eq!(s.global("kura_agent_instances_tracked", &[]), Some(1.0));

    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(5), agent)
        .await
        .expect("agent loop stops")
        .expect("agent loop");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops")
        .expect("server");
    assert!(started.elapsed() < DEADLINE);
}
