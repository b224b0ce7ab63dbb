//! Totals the API server can store: every integer of an aggregate stays at
//! or below 2^63-1 however large the pods' counts (one pod at the ceiling
//! must never make every status write of its instance fail), and the order
//! pods arrive in does not change the aggregate (new pods are merged in by
//! name, not inserted one by one).

use jiff::{SignedDuration, Timestamp};
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator};
use kura_agent::model::{InstanceInfo, PodIdentity, PodSample, SampleResult};
use kura_schemas::api_int::API_INT_MAX;
use kura_schemas::{NodeReport, RolloutHealth, parse_report};
use serde_json::Value;

fn t0() -> Timestamp {
    "2026-07-21T10:00:00Z".parse().expect("time")
}

fn instance() -> InstanceInfo {
    InstanceInfo {
        namespace: "kura".into(),
        name: "acme".into(),
        expected_pods: 3,
        generation: 1,
    }
}

fn report(count: u64) -> NodeReport {
    let mut r = parse_report(
        br#"{"generation":1,"ready":true,"state":"serving","ring_members":3,
            "writer_lock_owned":true,"memory_pressure_state":0,"fd_timeout_count":0,
            "peer_connection_failure_count":0}"#,
    )
    .expect("report");
    r.fd_timeout_count = count;
    r.peer_connection_failure_count = Some(count);
    r.http_inflight_requests = Some(count);
    r.grpc_inflight_requests = Some(count);
    r.bootstrap_inflight_peers = Some(count);
    r.backfill_backfilling_peers = Some(count);
    r.backfill_budget_exhausted_real_peers = Some(count);
    r.outbox_messages = Some(count);
    r
}

fn sample(name: &str, at: Timestamp, count: u64) -> PodSample {
    PodSample {
        replication_lag_entries: None,
        pod: std::sync::Arc::new(PodIdentity {
            name: name.into(),
            uid: format!("uid-{name}").into(),
            restart_count: 0,
            image: None,
            ip: None,
        }),
        received_at: at,
        result: SampleResult::Report(Box::new(report(count))),
    }
}

/// Every integer anywhere in the aggregate as the API server would read it.
fn integers(v: &Value, path: &str, out: &mut Vec<(String, u64)>) {
    match v {
        Value::Number(n) => {
            let shown = n.as_u64().unwrap_or(u64::MAX);
            assert!(n.is_u64() || n.is_i64(), "{path}: {n} is not an integer");
            out.push((path.to_owned(), shown));
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                integers(x, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                integers(x, &format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

fn assert_storable(h: &RolloutHealth) {
    let v = serde_json::to_value(h).expect("serialise");
    let mut all = Vec::new();
    integers(&v, "rolloutHealth", &mut all);
    for (path, n) in all {
        assert!(n <= API_INT_MAX, "{path} = {n} is above 2^63-1");
    }
}

#[test]
fn totals_saturate_at_what_the_api_server_stores() {
    let mut agg = InstanceAggregator::new(AggregateConfig::default());
    // Three pods at the ceiling: every sum would be 3 * (2^63-1).
    let mut samples: Vec<PodSample> = ["a", "b", "c"]
        .into_iter()
        .map(|n| sample(n, t0(), API_INT_MAX))
        .collect();
    let h = agg.fold(&instance(), &samples, t0(), "agent-0");
    assert_eq!(h.fd_timeout_count, API_INT_MAX);
    assert_eq!(h.peer_connection_failures, Some(API_INT_MAX));
    assert_eq!(h.inflight_requests, API_INT_MAX);
    assert_eq!(h.bootstrap_inflight_peers, Some(API_INT_MAX));
    assert_eq!(h.outbox_messages, Some(API_INT_MAX));
    assert_storable(&h);

    // Every pod resets and climbs to the ceiling again: the clamped
    // per-pod counters (offset + raw) would pass 2^63-1 too.
    let t1 = t0() + SignedDuration::from_secs(10);
    for s in &mut samples {
        *s = sample(&s.pod.name, t1, 1);
    }
    let h = agg.fold(&instance(), &samples, t1, "agent-0");
    assert_storable(&h);
    let t2 = t1 + SignedDuration::from_secs(10);
    for s in &mut samples {
        *s = sample(&s.pod.name, t2, API_INT_MAX);
    }
    let h = agg.fold(&instance(), &samples, t2, "agent-0");
    assert_eq!(h.fd_timeout_count, API_INT_MAX);
    assert_storable(&h);

    // A restore from that aggregate keeps it, and stays storable.
    let mut restored = InstanceAggregator::restore(&h, AggregateConfig::default());
    let t3 = t2 + SignedDuration::from_secs(10);
    for s in &mut samples {
        *s = sample(&s.pod.name, t3, API_INT_MAX);
    }
    let h = restored.fold(&instance(), &samples, t3, "agent-0");
    assert_eq!(h.fd_timeout_count, API_INT_MAX);
    assert_storable(&h);
}

#[test]
fn the_order_pods_arrive_in_does_not_change_the_aggregate() {
    let names: Vec<String> = (0..300).map(|i| format!("pod-{i:04}")).collect();
    let forward: Vec<PodSample> = names
        .iter()
        .enumerate()
        .map(|(i, n)| sample(n, t0(), i as u64))
        .collect();
    let mut reverse = forward.clone();
    reverse.reverse();
    // A duplicate listing later in the sweep is ignored either way.
    let mut with_duplicate = reverse.clone();
    with_duplicate.push(sample("pod-0007", t0(), 999_999));

    let run = |samples: &[PodSample]| {
        let mut agg = InstanceAggregator::new(AggregateConfig::default());
        let first = agg.fold(&instance(), samples, t0(), "agent-0");
        // A second sweep in the other order over the same tracked pods.
        let t1 = t0() + SignedDuration::from_secs(10);
        let mut again: Vec<PodSample> = samples
            .iter()
            .map(|s| sample(&s.pod.name, t1, 1_000))
            .collect();
        again.reverse();
        let second = agg.fold(&instance(), &again, t1, "agent-0");
        (
            serde_json::to_value(first).expect("json"),
            serde_json::to_value(second).expect("json"),
        )
    };
    let (f1, f2) = run(&forward);
    let (r1, r2) = run(&reverse);
    let (d1, d2) = run(&with_duplicate);
    assert_eq!(f1, r1);
    assert_eq!(f2, r2);
    assert_eq!(f1, d1);
    assert_eq!(f2, d2);
    let names_out: Vec<&str> = f1["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let mut sorted = names_out.clone();
    sorted.sort_unstable();
    assert_eq!(names_out, sorted, "pod entries are published by name");
}
