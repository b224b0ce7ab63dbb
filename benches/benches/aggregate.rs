//! Aggregation cost per pod sample: one `InstanceAggregator::fold` over a
//! 3-pod and a 32-pod instance, counters advancing every sweep (so the
//! clamping path runs), every 16th sweep with one restarted pod and one
//! failed sample. Throughput is reported in pod samples per second.
//!
//! Scaling (issue 15, "quadratic aggregation"): one sweep of n pods never
//! seen before, listed in reverse name order, through a fresh aggregator
//! (`new_pods_reverse`), and `kura-agent aggregate`'s whole path over a
//! document of one such sweep (`document_reverse`: strict read, parse, run).
//! The time per pod must stay flat as n grows (it grew linearly: 40,000 pods
//! took 9.1 s).

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator, input};
use kura_agent::model::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use kura_schemas::{NodeReport, parse_report};
use std::hint::black_box;

const G4: &[u8] = br#"{"generation":3,"ready":true,"state":"serving","ring_members":3,
 "ring_fingerprint":"9f2c01ab77e4d310","initial_discovery_completed":true,
 "writer_lock_owned":true,"http_inflight_requests":2,"grpc_inflight_requests":0,
 "memory_pressure_state":0,"fd_timeout_count":0,"peer_connection_failure_count":4,
 "backfill_initial_cycle":"complete","backfill_backfilling_peers":0,
 "backfill_budget_exhausted_real_peers":0,"backfill_budget_exhausted_capability_peers":0,
 "backfill_ring_fullness_percent":100,
 "serving_authority":{"identity":{"pod_uid":"u","incarnation":"01J3ZK8Q4W"}}}"#;

/// The samples of `sweeps` consecutive sweeps of an instance of `pods` pods.
fn sweeps(pods: usize, sweeps: usize) -> Vec<(Timestamp, Vec<PodSample>)> {
    let template: NodeReport = match parse_report(G4) {
        Ok(r) => r,
        Err(e) => panic!("benchmark report: {e}"),
    };
    let start: Timestamp = "2026-07-21T10:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH);
    (0..sweeps)
        .map(|s| {
            let now = start + SignedDuration::from_secs(10 * s as i64);
            let samples = (0..pods)
                .map(|p| {
                    let mut r = template.clone();
                    let restarted = s % 16 == 15 && p == 0;
                    r.fd_timeout_count = if restarted { 0 } else { (s * 3 + p) as u64 };
                    r.peer_connection_failure_count = Some((s + p) as u64);
                    let result = if s % 16 == 7 && p == pods - 1 {
                        SampleResult::Error("timeout".into())
                    } else {
                        SampleResult::Report(Box::new(r))
                    };
                    PodSample {
                        replication_lag_entries: None,
                        pod: std::sync::Arc::new(PodIdentity {
                            name: format!("acme-eu-{p}").into(),
                            uid: format!("0f6e2a9c-1b3d-4c5e-8f7a-9b0c1d2e3f{p:02}").into(),
                            restart_count: 0,
                            image: Some("ghcr.io/tuist/kura:0.6.0".into()),
                            ip: Some(format!("10.0.{p}.10").into()),
                        }),
                        received_at: now,
                        result,
                    }
                })
                .collect();
            (now, samples)
        })
        .collect()
}

fn aggregate(c: &mut Criterion) {
    let mut group = c.benchmark_group("aggregate_sweep");
    for pods in [3usize, 32] {
        let instance = InstanceInfo {
            namespace: "kura".into(),
            name: "acme-eu".into(),
            expected_pods: pods as u32,
            generation: 4,
        };
        let data = sweeps(pods, 64);
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::new("pods", pods), &data, |b, data| {
            let mut agg = InstanceAggregator::new(AggregateConfig::default());
            let mut i = 0usize;
            b.iter(|| {
                let (now, samples) = &data[i % data.len()];
                i += 1;
                black_box(agg.fold(&instance, black_box(samples), *now, "kura-agent-0"))
            });
        });
    }
    group.finish();
}

/// One sweep of `pods` pods, names in reverse order.
fn reverse_sweep(pods: usize, at: Timestamp) -> Vec<PodSample> {
    let report: NodeReport = match parse_report(G4) {
        Ok(r) => r,
        Err(e) => panic!("benchmark report: {e}"),
    };
    (0..pods)
        .rev()
        .map(|p| PodSample {
            replication_lag_entries: None,
            pod: std::sync::Arc::new(PodIdentity {
                name: format!("acme-eu-{p:06}").into(),
                uid: format!("uid-{p}").into(),
                restart_count: 0,
                image: None,
                ip: None,
            }),
            received_at: at,
            result: SampleResult::Report(Box::new(report.clone())),
        })
        .collect()
}

/// An aggregate document of one sweep of `pods` pods in reverse order.
fn reverse_document(pods: usize) -> Vec<u8> {
    let report = String::from_utf8_lossy(G4).replace('\n', "");
    let entries: Vec<String> = (0..pods)
        .rev()
        .map(|p| {
            format!(
                r#"{{"name":"acme-eu-{p:06}","uid":"uid-{p}","restartCount":0,"report":{report}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"instance":{{"namespace":"kura","name":"acme-eu","expectedPods":{pods},"generation":3}},
"sweeps":[{{"at":"2026-07-21T10:00:00Z","pods":[{}]}}]}}"#,
        entries.join(",")
    )
    .into_bytes()
}

fn scaling(c: &mut Criterion) {
    let at: Timestamp = "2026-07-21T10:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let mut group = c.benchmark_group("aggregate_new_pods_reverse");
    group.sample_size(10);
    for pods in [1_000usize, 10_000, 40_000] {
        let instance = InstanceInfo {
            namespace: "kura".into(),
            name: "acme-eu".into(),
            expected_pods: pods as u32,
            generation: 3,
        };
        let samples = reverse_sweep(pods, at);
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::new("pods", pods), &samples, |b, samples| {
            b.iter_batched(
                || InstanceAggregator::new(AggregateConfig::default()),
                |mut agg| black_box(agg.fold(&instance, black_box(samples), at, "kura-agent-0")),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();

    let mut group = c.benchmark_group("aggregate_document_reverse");
    group.sample_size(10);
    for pods in [1_000usize, 10_000, 40_000] {
        let doc = reverse_document(pods);
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::new("pods", pods), &doc, |b, doc| {
            b.iter(|| {
                let parsed = match input::parse_input(black_box(doc)) {
                    Ok(d) => d,
                    Err(e) => panic!("benchmark document: {e}"),
                };
                black_box(input::run(
                    &parsed,
                    AggregateConfig::default(),
                    "kura-agent",
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, aggregate, scaling);
criterion_main!(benches);
