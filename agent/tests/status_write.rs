//! The status writer's exact request, pinned against a mock API server
//! (tower-test), and how responses become outcomes.

use http::{Request, Response};
use jiff::Timestamp;
use kube::client::Body;
use kura_agent::model::DesiredStatus;
use kura_agent::model::InstanceKey;
use kura_agent::write::{StatusWriter, WriteError, WriteOutcome};
use kura_schemas::{AgentVerdict, PodHealth, RetiredCounters, RolloutGate, RolloutHealth, Signal};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tower_test::mock;

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn desired() -> DesiredStatus {
    DesiredStatus::new(
        RolloutHealth {
            replication_lag_entries: None,
            serving_authority: None,
            suspended: false,
            update_paused: None,
            schema_version: 1,
            observed_at: ts("2026-07-21T10:00:10Z"),
            sampled_at: Some(ts("2026-07-21T10:00:09Z")),
            observed_generation: 4,
            expected_pods: 2,
            sampled_pods: 1,
            ready: false,
            serving: false,
            writer_lock_owned: false,
            initial_discovery_completed: true,
            generation_consistent: false,
            ring_consistent: false,
            ring_members: 3,
            bootstrap_inflight_peers: None,
            backfill_initial_cycle: "complete".into(),
            backfilling_peers: Some(0),
            backfill_degraded: false,
            backfill_budget_exhausted_peers: None,
            outbox_messages: None,
            fd_timeout_count: 7,
            peer_connection_failures: Some(2),
            memory_pressure_state: 1,
            inflight_requests: 5,
            counter_resets: 1,
            pods: vec![std::sync::Arc::new(PodHealth {
                name: "acme-eu-0".into(),
                uid: "u-0".into(),
                restart_count: 1,
                image: Some("ghcr.io/tuist/kura:0.6.0".into()),
                ip: Some("10.0.0.1".into()),
                incarnation: Some("inc-1".into()),
                sampled_at: Some(ts("2026-07-21T10:00:09Z")),
                ready: Some(true),
                fd_timeout_count: Some(7),
                fd_timeout_count_raw: Some(3),
                ..PodHealth::default()
            })],
            retired_counters: RetiredCounters::default(),
            agent: "kura-health-agent-0".into(),
        },
        RolloutGate {
            target_image: "ghcr.io/tuist/kura:0.6.0".into(),
            baseline_image: Some("ghcr.io/tuist/kura:0.5.2".into()),
            baseline_captured_at: Some(ts("2026-07-21T09:59:00Z")),
            baseline: Default::default(),
            effective_baseline: Default::default(),
            soak_eligible: true,
            verdict: AgentVerdict::Unhealthy,
            signal: Some(Signal::PodsUnsampled),
            healthy_since: None,
            evaluated_at: ts("2026-07-21T10:00:10Z"),
            evidence: vec![],
            config_error: None,
            backlog_runs: Default::default(),
        },
    )
}

struct Captured {
    method: http::Method,
    path: String,
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    body: Value,
}

/// Runs one write against a mock that answers with `respond(request body)`.
async fn write_once(
    status: u16,
    respond: impl FnOnce(&Value) -> Value + Send + 'static,
) -> (Result<WriteOutcome, WriteError>, Captured) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let writer = StatusWriter::new(client);
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("one request");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let body: Value = serde_json::from_slice(&bytes).expect("request body is JSON");
        let reply = respond(&body);
        send.send_response(
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&reply).expect("encode")))
                .expect("response"),
        );
        Captured {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts
                .uri
                .query()
                .unwrap_or_default()
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            content_type: parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body,
        }
    });
    let key = InstanceKey::new("kura", "acme-eu");
    let conditions = kura_agent::write::conditions::conditions_for(
        &desired(),
        &[],
        kura_agent::write::conditions::ConditionSet::default(),
    );
    let result = writer.write(&key, &desired(), &conditions).await;
    let captured = server.await.expect("mock server");
    (result, captured)
}

fn echo(body: &Value) -> Value {
    // The fleet controller's condition sits among the agent's.
    let conditions: Vec<Value> = [
        json!({"type": "Ready", "status": "True", "reason": "Running",
        "message": "", "lastTransitionTime": "2026-07-21T10:00:00Z"}),
    ]
    .into_iter()
    .chain(
        body["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    )
    .collect();
    json!({
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": "acme-eu", "namespace": "kura", "generation": 4},
        "spec": {"image": "ghcr.io/tuist/kura:0.6.0", "replicas": 2},
        "status": {
            "phase": "Running",
            "rolloutHealth": body["status"]["rolloutHealth"].clone(),
            "rolloutGate": body["status"]["rolloutGate"].clone(),
            "conditions": conditions
        }
    })
}

#[tokio::test]
async fn the_request_is_a_forced_server_side_apply_of_the_agents_status_fields() {
    let (result, req) = write_once(200, echo).await;
    assert_eq!(result, Ok(WriteOutcome::Applied));
    assert_eq!(req.method, http::Method::PATCH);
    assert_eq!(
        req.path,
        "/apis/kura.tuist.dev/v1alpha1/namespaces/kura/kurainstances/acme-eu/status"
    );
    let expected_query: BTreeMap<String, String> =
        [("fieldManager", "kura-health-agent"), ("force", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    assert_eq!(req.query, expected_query);
    assert_eq!(
        req.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );

    let body = req.body.as_object().expect("object body");
    let mut keys: Vec<&str> = body.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["apiVersion", "kind", "status"],
        "nothing but the owned fields"
    );
    assert_eq!(body["apiVersion"], "kura.tuist.dev/v1alpha1");
    assert_eq!(body["kind"], "KuraInstance");
    let status = body["status"].as_object().expect("status object");
    let mut status_keys: Vec<&str> = status.keys().map(String::as_str).collect();
    status_keys.sort_unstable();
    assert_eq!(status_keys, ["conditions", "rolloutGate", "rolloutHealth"]);
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| c["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        ["RolloutHealthy", "RolloutHardStopped"],
        "only the agent's own condition types"
    );
    let d = desired();
    // Absent optional fields are left out, never sent as null: a real API
    // server rejects null for a nullable enum (agent/tests/e2e_apiserver.rs).
    let mut health = serde_json::to_value(&d.health).expect("health");
    kura_agent::write::strip_nulls(&mut health);
    let mut gate = serde_json::to_value(&d.gate).expect("gate");
    kura_agent::write::strip_nulls(&mut gate);
    assert_eq!(status["rolloutHealth"], health);
    assert_eq!(status["rolloutGate"], gate);
    assert!(
        status["rolloutHealth"].get("outboxMessages").is_none(),
        "absent is absent, never 0"
    );
    let back: kura_schemas::RolloutHealth =
        serde_json::from_value(status["rolloutHealth"].clone()).expect("reads back");
    assert_eq!(back, *d.health, "leaving nulls out loses nothing");
}

#[tokio::test]
async fn a_response_lacking_rollout_gate_is_pruned() {
    let (result, _) = write_once(200, |body| {
        let mut obj = echo(body);
        obj["status"]
            .as_object_mut()
            .expect("status")
            .remove("rolloutGate");
        obj
    })
    .await;
    assert_eq!(
        result,
        Ok(WriteOutcome::Pruned {
            missing: vec!["status.rolloutGate".into()]
        })
    );
}

#[tokio::test]
async fn a_response_that_lost_nested_fields_names_them() {
    let (result, _) = write_once(200, |body| {
        let mut obj = echo(body);
        let pod = obj["status"]["rolloutHealth"]["pods"][0]
            .as_object_mut()
            .expect("pod");
        pod.remove("incarnation");
        obj["status"]["rolloutHealth"]
            .as_object_mut()
            .expect("health")
            .remove("counterResets");
        obj
    })
    .await;
    assert_eq!(
        result,
        Ok(WriteOutcome::Pruned {
            missing: vec![
                "status.rolloutHealth.counterResets".into(),
                "status.rolloutHealth.pods[0].incarnation".into()
            ]
        })
    );
}

fn failure(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{reason} happened"), "reason": reason, "code": code})
}

#[tokio::test]
async fn api_errors_are_classified() {
    let (r, _) = write_once(404, |_| failure(404, "NotFound")).await;
    assert_eq!(r, Err(WriteError::NotFound("NotFound happened".into())));
    let (r, _) = write_once(403, |_| failure(403, "Forbidden")).await;
    assert_eq!(r, Err(WriteError::Forbidden("Forbidden happened".into())));
    let (r, _) = write_once(409, |_| failure(409, "Conflict")).await;
    assert_eq!(r, Err(WriteError::Conflict("Conflict happened".into())));
    let (r, _) = write_once(500, |_| failure(500, "InternalError")).await;
    assert!(
        matches!(r, Err(WriteError::Other(ref m)) if m.contains("500")),
        "{r:?}"
    );
}

async fn until(what: &str, cond: impl Fn() -> bool) {
    let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while !cond() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

fn reply(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("encode")))
        .expect("response")
}

async fn next_body(
    handle: &mut mock::Handle<Request<Body>, Response<Body>>,
) -> (Value, mock::SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.expect("request");
    let bytes = request.into_body().collect_bytes().await.expect("body");
    (serde_json::from_slice(&bytes).expect("json"), send)
}

/// The write loop end to end against the mock: a pruned write fails
/// readiness, a failed write is retried with the latest status, a full write
/// restores readiness.
#[tokio::test]
async fn the_write_loop_records_pruning_retries_and_recovery() {
    use kura_agent::model::WriteRecord;
    use kura_agent::view::{FleetView, SweepRecord};
    use kura_agent::write::{WriteHandle, WriteQueue, WriteQueueConfig, run_writes};

    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let writer = StatusWriter::new(kube::Client::new(service, "default"));
    let key = InstanceKey::new("kura", "acme-eu");
    let view = FleetView::new();
    view.record_sweep(
        &key,
        SweepRecord {
            spec_image: "img",
            current_pods: &[],
            samples: &[],
            health: None,
            gate: None,
            notes: Vec::new(),
            limits: None,
            at: Timestamp::now(),
        },
    );
    let queue = WriteQueue::new(WriteQueueConfig {
        min_backoff: std::time::Duration::from_millis(20),
        max_backoff: std::time::Duration::from_millis(100),
        jitter: false,
        ..WriteQueueConfig::default()
    });
    let writes = WriteHandle::new(queue);
    let recorded = view.clone();
    let task = tokio::spawn(run_writes(writes.clone(), writer, 4, move |key, report| {
        recorded.record_write(key, report.write)
    }));

    // 1. Pruned.
    writes.push(key.clone(), desired(), Timestamp::now());
    let (body, send) = next_body(&mut handle).await;
    let mut pruned = echo(&body);
    pruned["status"]
        .as_object_mut()
        .expect("status")
        .remove("rolloutGate");
    send.send_response(reply(200, &pruned));
    until("the pruned write to be recorded", || {
        view.instance(&key)
            .and_then(|v| v.last_write)
            .map(|w| w.result)
            == Some(WriteRecord::Pruned {
                missing: vec!["status.rolloutGate".into()],
            })
    })
    .await;
    assert!(!view.readiness().ready);

    // 2. A material change fails with 500, then is retried.
    let mut changed = desired();
    std::sync::Arc::make_mut(&mut changed.health).fd_timeout_count = 8;
    writes.push(key.clone(), changed.clone(), Timestamp::now());
    let (_, send) = next_body(&mut handle).await;
    send.send_response(reply(500, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "boom", "code": 500})));
    // A newer aggregate arrives during the backoff: the retry carries it.
    let mut newest = changed.clone();
    std::sync::Arc::make_mut(&mut newest.health).fd_timeout_count = 9;
    writes.push(key.clone(), newest, Timestamp::now());
    let (body, send) = next_body(&mut handle).await;
    assert_eq!(body["status"]["rolloutHealth"]["fdTimeoutCount"], 9);
    send.send_response(reply(200, &echo(&body)));
    until("the retried write to be applied", || {
        view.instance(&key)
            .and_then(|v| v.last_write)
            .map(|w| (w.attempt, w.result))
            == Some((1, WriteRecord::Applied))
    })
    .await;
    assert!(
        view.readiness().ready,
        "a full write clears the pruned detail"
    );
    assert_eq!(writes.pending(), 0);
    task.abort();
}
