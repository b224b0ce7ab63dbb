//! The debug server's pages at fleet scale (issues 18 and 28): `GET /` (the
//! fleet page as shipped: its default window of 200 rows, worst first)
//! with 1,000 and 5,000 instances of 3 pods, and `GET /instances/NS/NAME`
//! (the instance page, with an hour of history), over real TCP on loopback
//! against the real `DebugServer`, fed by the real engine (aggregation and
//! gate) through the fleet view. At 5,000 instances also the fleet page's
//! costlier queries: the largest window (`?limit=500`), the last window
//! (`?offset=4800`) and a text filter over the whole fleet (`?q=`). What is
//! measured is one whole request: routing, choosing the window, rendering
//! and the response. The page sizes are printed once per fleet size.
//!
//! The fleet: every 40th instance upgraded with fd timeouts growing past
//! the band (unhealthy), every 97th with a pod that stops answering (no
//! sample), the rest healthy; a sweep every 30 s (one history bucket).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::engine::{EngineConfig, InstanceEngine};
use kura_agent::model::{Clock, InstanceInfo, InstanceKey, PodIdentity, PodSample, SampleResult};
use kura_agent::view::{FleetView, HISTORY_BUCKETS, SweepRecord};
use kura_sim::SimNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OLD: &str = "ghcr.io/tuist/kura:0.41.2";
const NEW: &str = "ghcr.io/tuist/kura:0.42.0";
const PODS: usize = 3;

/// The pages' clock: fixed at the end of the story.
struct Fixed(Timestamp);

impl Clock for Fixed {
    fn now(&self) -> Timestamp {
        self.0
    }
    fn map_real(&self, real: Timestamp) -> Timestamp {
        real
    }
    fn to_real(&self, d: Duration) -> Duration {
        d
    }
}

/// Feeds `instances` instances through `sweeps` sweeps, 30 s apart, into
/// `view`; returns the time after the last.
fn story(view: &FleetView, instances: usize, sweeps: usize) -> Timestamp {
    let start = Timestamp::from_second(1_780_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
    let config = Arc::new(EngineConfig::default());
    let mut fleet: Vec<(InstanceInfo, InstanceEngine, Vec<SimNode>)> = (0..instances)
        .map(|i| {
            let info = InstanceInfo {
                namespace: format!("tenant-{}", i % 20),
                name: format!("cache-{i:05}"),
                expected_pods: PODS as u32,
                generation: 1,
            };
            let nodes = (0..PODS)
                .map(|p| SimNode {
                    fd_timeout_count: 4 + p as u64,
                    peer_connection_failure_count: 2,
                    ring_members: PODS as u64,
                    ..SimNode::default()
                })
                .collect();
            (info, InstanceEngine::new(config.clone()), nodes)
        })
        .collect();
    let mut at = start;
    for s in 0..sweeps {
        at = start + SignedDuration::from_secs(30 * s as i64);
        let upgraded = s >= sweeps / 2;
        for (i, (info, engine, nodes)) in fleet.iter_mut().enumerate() {
            let image = if upgraded && i % 3 == 0 { NEW } else { OLD };
            if upgraded && i % 40 == 0 {
                nodes[0].fd_timeout_count += 2;
            }
            let samples: Vec<PodSample> = nodes
                .iter()
                .enumerate()
                .map(|(p, node)| PodSample {
                    replication_lag_entries: None,
                    pod: std::sync::Arc::new(PodIdentity {
                        name: format!("{}-{p}", info.name).into(),
                        uid: format!("uid-{}-{p}", info.name).into(),
                        restart_count: 0,
                        image: Some(image.into()),
                        ip: Some(format!("10.{}.{}.{p}", i / 250, i % 250).into()),
                    }),
                    received_at: at,
                    result: if upgraded && i % 97 == 0 && p == 1 {
                        SampleResult::Error("HTTP 500".into())
                    } else {
                        SampleResult::Report(Box::new(node.report()))
                    },
                })
                .collect();
            let names: Vec<String> = samples.iter().map(|s| s.pod.name.to_string()).collect();
            let judged = engine.step(info, image, &samples, at);
            let (health, gate) = (judged.health, judged.gate);
            view.record_sweep(
                &InstanceKey::of(info),
                SweepRecord {
                    spec_image: image,
                    current_pods: &names,
                    samples: &samples,
                    health: Some(health),
                    gate: Some(gate),
                    notes: Vec::new(),
                    limits: engine.limits(),
                    at,
                },
            );
        }
    }
    at
}

/// One `GET path` on a new connection; the whole response's size.
async fn get(addr: SocketAddr, path: &str) -> usize {
    let mut stream = match TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) => panic!("connect: {e}"),
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
    if let Err(e) = stream.write_all(req.as_bytes()).await {
        panic!("send: {e}");
    }
    let mut raw = Vec::with_capacity(1 << 20);
    if let Err(e) = stream.read_to_end(&mut raw).await {
        panic!("read: {e}");
    }
    assert!(raw.starts_with(b"HTTP/1.1 200"), "{path}: not 200");
    raw.len()
}

fn pages(c: &mut Criterion) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let mut group = c.benchmark_group("pages");
    group.sample_size(20);
    for (instances, sweeps) in [(1_000, HISTORY_BUCKETS), (5_000, 8)] {
        let view = FleetView::new();
        let end = story(&view, instances, sweeps);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let (addr, stop) = rt.block_on(async {
            let server = match DebugServer::bind(
                "127.0.0.1:0"
                    .parse()
                    .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
                DebugState::new(view.clone(), recorder.handle(), Arc::new(Fixed(end))),
            )
            .await
            {
                Ok(s) => s,
                Err(e) => panic!("bind: {e}"),
            };
            let addr = match server.local_addr() {
                Ok(a) => a,
                Err(e) => panic!("addr: {e}"),
            };
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(server.serve(async move {
                let _ = stopped.await;
            }));
            (addr, stop)
        });
        let instance = "/instances/tenant-0/cache-00040";
        let fleet_bytes = rt.block_on(get(addr, "/"));
        let instance_bytes = rt.block_on(get(addr, instance));
        eprintln!(
            "pages: {instances} instances x {PODS} pods, {sweeps} sweeps: fleet page {fleet_bytes} bytes, instance page {instance_bytes} bytes"
        );
        group.bench_function(BenchmarkId::new("fleet", instances), |b| {
            b.iter(|| rt.block_on(get(addr, "/")))
        });
        group.bench_function(BenchmarkId::new("instance", instances), |b| {
            b.iter(|| rt.block_on(get(addr, instance)))
        });
        if instances == 5_000 {
            for (name, path) in [
                ("fleet_limit_500", "/?limit=500"),
                ("fleet_last_window", "/?offset=4800"),
                ("fleet_text_filter", "/?q=cache-004"),
            ] {
                let bytes = rt.block_on(get(addr, path));
                eprintln!("pages: {instances} instances: {path} {bytes} bytes");
                group.bench_function(BenchmarkId::new(name, instances), |b| {
                    b.iter(|| rt.block_on(get(addr, path)))
                });
            }
        }
        let _ = stop.send(());
    }
    group.finish();
}

criterion_group!(benches, pages);
criterion_main!(benches);
