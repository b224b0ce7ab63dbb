//! The debug server over real TCP on 127.0.0.1: every route's status code,
//! content type and shape, HTML escaping, 405 and 404.

use jiff::Timestamp;
use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::model::InstanceKey;
use kura_agent::model::{LastWrite, WriteRecord};
use kura_agent::model::{PodIdentity, PodSample, SampleResult};
use kura_agent::view::{FleetView, SweepRecord};
use kura_schemas::{AgentVerdict, RetiredCounters, RolloutGate, RolloutHealth, Signal};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn health(ready: bool) -> RolloutHealth {
    RolloutHealth {
        replication_lag_entries: None,
        serving_authority: None,
        schema_version: 1,
        observed_at: ts("2026-07-21T10:00:10Z"),
        sampled_at: Some(ts("2026-07-21T10:00:09Z")),
        observed_generation: 1,
        expected_pods: 2,
        sampled_pods: 1,
        ready,
        serving: true,
        writer_lock_owned: true,
        initial_discovery_completed: true,
        generation_consistent: true,
        ring_consistent: true,
        ring_members: 2,
        bootstrap_inflight_peers: None,
        backfill_initial_cycle: String::new(),
        backfilling_peers: None,
        backfill_degraded: false,
        backfill_budget_exhausted_peers: None,
        outbox_messages: None,
        fd_timeout_count: 0,
        peer_connection_failures: None,
        memory_pressure_state: 1,
        inflight_requests: 0,
        counter_resets: 0,
        pods: vec![],
        retired_counters: RetiredCounters::default(),
        agent: "agent-0".into(),
        suspended: false,
        update_paused: None,
    }
}

fn gate() -> RolloutGate {
    RolloutGate {
        target_image: "img:2".into(),
        baseline_image: None,
        baseline_captured_at: None,
        baseline: Default::default(),
        effective_baseline: Default::default(),
        soak_eligible: false,
        verdict: AgentVerdict::Unhealthy,
        signal: Some(Signal::PodsUnsampled),
        healthy_since: None,
        evaluated_at: ts("2026-07-21T10:00:10Z"),
        evidence: vec![],
        config_error: None,
        backlog_runs: Default::default(),
    }
}

struct Fixture {
    addr: SocketAddr,
    view: FleetView,
    pending: Arc<Mutex<Vec<String>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start() -> Fixture {
    start_with(|state| state).await
}

/// The fixture's server, its state completed by `complete` (stored
/// statuses, members).
async fn start_with(complete: impl FnOnce(DebugState) -> DebugState) -> Fixture {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!(kura_agent::telemetry::STATUS_WRITES_TOTAL, "result" => "applied")
            .increment(3);
    });
    let view = FleetView::new();
    let pending = Arc::new(Mutex::new(vec!["pods#0".to_owned()]));
    let p = pending.clone();

    let key = InstanceKey::new("kura", "acme-eu");
    let pods = ["acme-eu-0".to_owned(), "acme-eu-1".to_owned()];
    let samples = [PodSample {
        replication_lag_entries: None,
        pod: std::sync::Arc::new(PodIdentity {
            name: "acme-eu-1".into(),
            uid: "u-1".into(),
            restart_count: 0,
            image: Some("img:2".into()),
            ip: Some("10.0.0.2".into()),
        }),
        received_at: ts("2026-07-21T10:00:09Z"),
        result: SampleResult::Error("timeout".into()),
    }];
    view.record_sweep(
        &key,
        SweepRecord {
            spec_image: "img:2",
            current_pods: &pods,
            samples: &samples,
            health: Some(std::sync::Arc::new(health(false))),
            gate: Some(std::sync::Arc::new(gate())),
            notes: vec!["1 pod(s) beyond the per-instance limit are not polled".into()],
            limits: None,
            at: ts("2026-07-21T10:00:10Z"),
        },
    );
    // A hostile name: must come out escaped in the HTML.
    let hostile = InstanceKey::new("kura", "<script>alert('x')</script>");
    view.record_sweep(
        &hostile,
        SweepRecord {
            spec_image: "img:2",
            current_pods: &[],
            samples: &[],
            health: None,
            gate: None,
            notes: Vec::new(),
            limits: None,
            at: ts("2026-07-21T10:00:10Z"),
        },
    );

    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        complete(
            DebugState::new(
                view.clone(),
                handle,
                std::sync::Arc::new(kura_agent::model::SystemClock),
            )
            .with_sync_probe(Arc::new(move || {
                p.lock().map(|g| g.clone()).unwrap_or_default()
            })),
        ),
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    Fixture {
        addr,
        view,
        pending,
        _stop: stop,
    }
}

struct Reply {
    status: u16,
    headers: String,
    body: String,
}

async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    Reply {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

#[tokio::test]
async fn healthz_is_up_and_readyz_follows_lists_and_pruning() {
    let f = start().await;
    let r = request(f.addr, "GET", "/healthz").await;
    assert_eq!(r.status, 200);

    let r = request(f.addr, "GET", "/readyz").await;
    assert_eq!(r.status, 503);
    let v: Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(v["ready"], false);
    assert_eq!(v["reasons"][0], "initial list pending: pods#0");

    f.pending.lock().expect("lock").clear();
    assert_eq!(request(f.addr, "GET", "/readyz").await.status, 200);

    let key = InstanceKey::new("kura", "acme-eu");
    f.view.record_write(
        &key,
        LastWrite {
            at: ts("2026-07-21T10:00:11Z"),
            attempt: 0,
            priority: true,
            result: WriteRecord::Pruned {
                missing: vec!["status.rolloutGate".into()],
            },
        },
    );
    let r = request(f.addr, "GET", "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("status.rolloutGate"), "{}", r.body);
}

#[tokio::test]
async fn metrics_are_rendered_from_the_handle() {
    let f = start().await;
    let r = request(f.addr, "GET", "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.headers
    );
    assert!(
        r.body
            .contains("kura_agent_status_writes_total{result=\"applied\"} 3"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn instances_list_and_detail_have_the_documented_shape() {
    let f = start().await;
    let r = request(f.addr, "GET", "/debug/instances").await;
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: application/json"));
    let v: Value = serde_json::from_str(&r.body).expect("json");
    let list = v.as_array().expect("array");
    assert_eq!(list.len(), 2);
    let acme = list.iter().find(|i| i["name"] == "acme-eu").expect("acme");
    assert_eq!(acme["namespace"], "kura");
    assert_eq!(acme["health"]["sampledPods"], 1);
    assert_eq!(acme["gate"]["verdict"], "unhealthy");
    assert_eq!(acme["gate"]["signal"], "pods_unsampled");
    assert!(
        acme.get("pods").is_none(),
        "the list leaves per-pod samples to the detail"
    );

    let r = request(f.addr, "GET", "/debug/instances/kura/acme-eu").await;
    assert_eq!(r.status, 200);
    let d: Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(d["specImage"], "img:2");
    assert_eq!(d["pods"].as_array().map(Vec::len), Some(1));
    assert_eq!(d["pods"][0]["name"], "acme-eu-1");
    assert_eq!(d["pods"][0]["error"], "timeout");
    assert_eq!(
        d["notes"][0], "1 pod(s) beyond the per-instance limit are not polled",
        "discovery's notes reach the operator"
    );
    assert_eq!(d["lastWrite"], Value::Null);

    f.view.record_write(
        &InstanceKey::new("kura", "acme-eu"),
        LastWrite {
            at: ts("2026-07-21T10:00:11Z"),
            attempt: 2,
            priority: false,
            result: WriteRecord::Failed {
                kind: "forbidden".into(),
                message: "forbidden: no".into(),
            },
        },
    );
    let d: Value = serde_json::from_str(
        &request(f.addr, "GET", "/debug/instances/kura/acme-eu")
            .await
            .body,
    )
    .expect("json");
    assert_eq!(d["lastWrite"]["result"], "failed");
    assert_eq!(d["lastWrite"]["kind"], "forbidden");
    assert_eq!(d["lastWrite"]["attempt"], 2);

    assert_eq!(
        request(f.addr, "GET", "/debug/instances/kura/nope")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn the_overview_escapes_everything() {
    let f = start().await;
    let r = request(f.addr, "GET", "/").await;
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: text/html"));
    // Only the page's own script (allowed by its hash in the CSP), never
    // the instance name's.
    assert_eq!(r.body.matches("<script").count(), 1, "{}", r.body);
    assert!(!r.body.contains("alert('x')"), "{}", r.body);
    assert!(
        r.body
            .contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
        "{}",
        r.body
    );
    assert!(r.body.contains("kura/acme-eu"));
    assert!(r.body.contains("pods_unsampled"));
    assert!(r.body.contains("1/2"));
    assert!(
        !r.body.contains("http://") && !r.body.contains("https://"),
        "no external assets"
    );
}

#[tokio::test]
async fn only_get_and_head_are_allowed_and_unknown_paths_are_404() {
    let f = start().await;
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = request(f.addr, method, "/debug/instances").await;
        assert_eq!(r.status, 405, "{method}");
        assert!(r.headers.contains("allow: get, head"), "{}", r.headers);
    }
    let r = request(f.addr, "HEAD", "/healthz").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(request(f.addr, "GET", "/nope").await.status, 404);
    assert_eq!(
        request(f.addr, "GET", "/debug/instances/kura").await.status,
        404
    );
}

/// The pod rows of the instance endpoint show what real nodes add: the
/// outbox capacity beside the outbox, the ring fullness clamped to 100, and
/// the fence state of a pod that runs fenced serving (here `Fencing`).
#[tokio::test]
async fn pod_rows_show_outbox_capacity_fullness_and_fence_state() {
    let f = start().await;
    let report = |file: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/reports")
            .join(file);
        let report = kura_schemas::parse_report(&std::fs::read(path).expect("fixture"))
            .expect("a valid report");
        SampleResult::Report(Box::new(report))
    };
    let sample = |name: &str, result: SampleResult| PodSample {
        replication_lag_entries: None,
        pod: std::sync::Arc::new(PodIdentity {
            name: name.into(),
            uid: format!("u-{name}").into(),
            restart_count: 0,
            image: Some("img:3".into()),
            ip: Some("10.0.0.9".into()),
        }),
        received_at: ts("2026-07-21T10:00:09Z"),
        result,
    };
    let mut fuller = kura_schemas::parse_report(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../testdata/reports/g3-fullness-above-100.json"),
        )
        .expect("fixture"),
    )
    .expect("fullness above 100 is read");
    fuller.outbox_capacity = Some(64);
    let samples = [
        sample("shapes-0", report("g3-outbox-capacity.json")),
        sample("shapes-1", report("newest-fenced.json")),
        sample("shapes-2", report("newest-unfenced.json")),
        sample("shapes-3", SampleResult::Report(Box::new(fuller))),
    ];
    let names: Vec<String> = samples.iter().map(|s| s.pod.name.to_string()).collect();
    f.view.record_sweep(
        &InstanceKey::new("kura", "shapes"),
        SweepRecord {
            spec_image: "img:3",
            current_pods: &names,
            samples: &samples,
            health: None,
            gate: None,
            notes: Vec::new(),
            limits: None,
            at: ts("2026-07-21T10:00:10Z"),
        },
    );
    let r = request(f.addr, "GET", "/debug/instances/kura/shapes").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body).expect("json");
    let pods = v["pods"].as_array().expect("pods");
    assert_eq!(pods[0]["outboxMessages"], 35);
    assert_eq!(pods[0]["outboxCapacity"], 10_000);
    assert_eq!(pods[0]["fence"], Value::Null);
    assert_eq!(pods[1]["fence"]["phase"], "Fencing");
    assert_eq!(pods[1]["fence"]["epoch"], 7);
    assert_eq!(pods[1]["fence"]["valid"], true);
    assert_eq!(
        pods[1]["outboxCapacity"],
        Value::Null,
        "absent is unknown, not 0"
    );
    assert_eq!(
        pods[2]["fence"],
        Value::Null,
        "no fence shown without fenced serving"
    );
    assert_eq!(pods[3]["ringFullnessPercent"], 100, "clamped where shown");
    assert_eq!(pods[3]["outboxCapacity"], 64);

    // The instance page shows the same beside each pod.
    let page = request(f.addr, "GET", "/instances/kura/shapes").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("35 / 10000"),
        "outbox beside its capacity"
    );
    assert!(
        page.body.contains("Fencing · epoch 7 · valid yes"),
        "fence state"
    );
    assert!(
        page.body.contains("<td class=\"num\">100 %</td>"),
        "fullness clamped"
    );
    assert!(page.body.contains("not fenced"));
}

/// A replica answers for an instance it does not sweep from the status
/// stored in the cluster, naming the owner; the verdict endpoint says the
/// same whichever replica is asked, and treats a verdict about an older
/// generation as not current.
#[tokio::test]
async fn instances_another_replica_owns_are_answered_from_the_stored_status() {
    use kura_agent::model::members::OwnLeaseSnapshot;
    use kura_agent::model::{MembersSnapshot, MembersSource, StoredInstance, StoredStatusSource};
    use kura_schemas::KuraInstanceStatus;

    struct Stored(Mutex<Vec<StoredInstance>>);
    impl StoredStatusSource for Stored {
        fn stored_instances(&self) -> Vec<StoredInstance> {
            self.0.lock().map(|s| s.clone()).unwrap_or_default()
        }
    }
    struct Owners;
    impl MembersSource for Owners {
        fn members(&self, _: Timestamp) -> MembersSnapshot {
            MembersSnapshot {
                identity: "replica-a".into(),
                group: "g".into(),
                own_lease: OwnLeaseSnapshot {
                    current: true,
                    ..OwnLeaseSnapshot::default()
                },
                owned: vec!["kura/mine".into()],
                ..MembersSnapshot::default()
            }
        }
        fn owner_of(&self, key: &InstanceKey, _: Timestamp) -> Option<String> {
            Some(
                if &*key.name == "other" {
                    "replica-b"
                } else {
                    "replica-a"
                }
                .into(),
            )
        }
    }

    let stored = Arc::new(Stored(Mutex::new(Vec::new())));
    let f = {
        let stored = Arc::clone(&stored);
        start_with(move |state| state.with_stored(stored).with_members(Arc::new(Owners))).await
    };
    let mut other_health = health(true);
    other_health.observed_generation = 2;
    other_health.agent = "replica-b".into();
    let stored_status: KuraInstanceStatus = serde_json::from_value(serde_json::json!({
        "phase": "Running",
        "rolloutHealth": serde_json::to_value(&other_health).expect("health"),
        "rolloutGate": serde_json::to_value(gate()).expect("gate"),
        "conditions": [
            {"type": "RolloutHealthy", "status": "False", "reason": "PodsUnsampled",
             "message": "server kura/other: pods_unsampled: 1 of 2 pods sampled",
             "observedGeneration": 2, "lastTransitionTime": "2026-07-21T10:00:10Z"},
            {"type": "Ready", "status": "True", "reason": "Running", "message": "",
             "lastTransitionTime": "2026-07-21T09:00:00Z"}
        ]
    }))
    .expect("status");
    *stored.0.lock().expect("lock") = vec![StoredInstance {
        key: InstanceKey::new("kura", "other"),
        generation: 2,
        spec_image: "img:2".into(),
        status: Some(stored_status.clone()),
        notes: vec![],
    }];

    let r = request(f.addr, "GET", "/api/v1/instances/kura/other/verdict").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains("content-type: application/json"));
    let v: Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(v["source"], "cluster");
    assert_eq!(v["ownedBy"], "replica-b");
    assert_eq!(v["verdict"], "unhealthy");
    assert_eq!(v["signal"], "pods_unsampled");
    assert_eq!(v["observedGeneration"], 2);
    assert_eq!(v["generation"], 2);
    assert_eq!(v["rolloutHealthy"]["status"], "False");
    assert_eq!(
        v["rolloutHealthy"]["message"], "server kura/other: pods_unsampled: 1 of 2 pods sampled",
        "the owner's own condition"
    );

    // The instance this replica sweeps: its live view, itself the owner.
    let v: Value = serde_json::from_str(
        &request(f.addr, "GET", "/api/v1/instances/kura/acme-eu/verdict")
            .await
            .body,
    )
    .expect("json");
    assert_eq!(v["source"], "live");
    assert_eq!(v["ownedBy"], "replica-a");
    assert_eq!(v["rolloutHealthy"]["status"], "False");
    assert_eq!(v["rolloutHealthy"]["reason"], "PodsUnsampled");

    // The list has the stored instance too; its detail is the stored status.
    let list: Value =
        serde_json::from_str(&request(f.addr, "GET", "/debug/instances").await.body).expect("json");
    let other = list
        .as_array()
        .expect("array")
        .iter()
        .find(|i| i["name"] == "other")
        .expect("other listed");
    assert_eq!(other["source"], "cluster");
    assert_eq!(other["ownedBy"], "replica-b");
    assert_eq!(other["gate"]["verdict"], "unhealthy");
    let d: Value = serde_json::from_str(
        &request(f.addr, "GET", "/debug/instances/kura/other")
            .await
            .body,
    )
    .expect("json");
    assert_eq!(d["source"], "cluster");
    assert_eq!(d["status"]["phase"], "Running");
    assert_eq!(d["generation"], 2);

    // A newer generation the owner has not judged: not current.
    let mut newer = stored_status;
    newer.phase = Some("Updating".into());
    *stored.0.lock().expect("lock") = vec![StoredInstance {
        key: InstanceKey::new("kura", "other"),
        generation: 3,
        spec_image: "img:3".into(),
        status: Some(newer),
        notes: vec![],
    }];
    let v: Value = serde_json::from_str(
        &request(f.addr, "GET", "/api/v1/instances/kura/other/verdict")
            .await
            .body,
    )
    .expect("json");
    assert_eq!(v["generation"], 3);
    assert_eq!(v["rolloutHealthy"]["status"], "Unknown");
    assert_eq!(v["rolloutHealthy"]["reason"], "GenerationNotObserved");

    let r = request(f.addr, "GET", "/api/v1/instances/kura/nope/verdict").await;
    assert_eq!(r.status, 404);
    assert!(r.headers.contains("content-type: application/json"));
}

/// Issue 32 items 6 and 9: every route percent-decodes its path (the verdict
/// API answered 404 for `acme%2Deu` where the HTML route answered 200), and
/// a request target that is not a path (`GET *`) is a 400, not the fleet
/// page.
#[tokio::test]
async fn every_route_decodes_its_path_and_a_target_that_is_no_path_is_400() {
    let f = start().await;
    for path in [
        "/api/v1/instances/kura/acme%2Deu/verdict",
        "/api/v1/instances/%6Bura/acme-eu/verdict",
        "/debug/instances/kura/acme%2deu",
        "/instances/kura/acme%2Deu",
        "/instances/kura/acme%2Deu/metrics",
        "/h%65althz",
    ] {
        assert_eq!(request(f.addr, "GET", path).await.status, 200, "{path}");
    }
    let r = request(f.addr, "GET", "/api/v1/instances/kura/acme%2Deu/verdict").await;
    let v: Value = serde_json::from_str(&r.body).expect("json");
    assert_eq!(v["name"], "acme-eu", "{v}");
    // An encoded slash stays inside its segment.
    assert_eq!(
        request(f.addr, "GET", "/api/v1/instances/kura%2Facme-eu/x/verdict")
            .await
            .status,
        404
    );
    for method in ["GET", "HEAD"] {
        let r = request(f.addr, method, "*").await;
        assert_eq!(r.status, 400, "{method} *");
        assert!(!r.body.contains("<html"), "{}", r.body);
    }
}
