//! A status write and its echo, per instance: what the agent spends on
//! the API server's side of each of the about 106 status writes a second
//! of a 10,000-pod fleet at rest (benches/PERFORMANCE.md).
//!
//! The fixture, testdata/cluster-load/instance-echo.json, is one
//! KuraInstance as a real kube-apiserver returned it during
//! `scripts/cluster-load.sh --instances 3334` (three pods, the agent's
//! status, every manager's `managedFields`): the body of both a status
//! write's answer and the watch event that brings the write back.
//!
//! - `echo/read`: the watch event's object as discovery reads it
//!   (`InstanceObject`) and its entry for a released instance (the
//!   agent's own fields not read), what every echo costs;
//! - `echo/read_with_status`: the same, its stored status read too (an
//!   instance this replica does not sweep, or at start-up);
//! - `write/body`: the server-side apply body from the aggregate;
//! - `write/check`: the answer's status compared with the body (the
//!   pruning check every write runs).
//!
//! `cargo bench -p kura-benches --bench status_io`

use criterion::{Criterion, criterion_group, criterion_main};
use kura_agent::cluster::{InstanceObject, entry_reading};
use kura_agent::model::{DesiredStatus, PublicationTarget};
use kura_agent::write::{WriteOutcome, apply_body, check_returned};
use kura_schemas::{RolloutGate, RolloutHealth};
use serde_json::Value;
use std::hint::black_box;
use std::path::PathBuf;

fn fixture() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/cluster-load/instance-echo.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => panic!("fixture {}: {e}", path.display()),
    }
}

fn status_io(c: &mut Criterion) {
    let text = fixture();
    let object: Value = serde_json::from_str(&text).expect("fixture JSON");
    let status = &object["status"];
    let health: RolloutHealth =
        serde_json::from_value(status["rolloutHealth"].clone()).expect("rolloutHealth");
    let gate: RolloutGate =
        serde_json::from_value(status["rolloutGate"].clone()).expect("rolloutGate");
    let conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> =
        serde_json::from_value(status["conditions"].clone()).expect("conditions");
    let desired = DesiredStatus::new(health, gate);

    let mut echo = c.benchmark_group("echo");
    echo.bench_function("read", |b| {
        b.iter(|| {
            let obj: InstanceObject = serde_json::from_str(black_box(&text)).expect("object");
            entry_reading(&obj, PublicationTarget::Instance, false)
        })
    });
    echo.bench_function("read_with_status", |b| {
        b.iter(|| {
            let obj: InstanceObject = serde_json::from_str(black_box(&text)).expect("object");
            entry_reading(&obj, PublicationTarget::Instance, true)
        })
    });
    echo.finish();

    let mut write = c.benchmark_group("write");
    write.bench_function("body", |b| {
        b.iter(|| {
            apply_body(
                black_box(&desired),
                &conditions,
                PublicationTarget::Instance,
                0,
            )
        })
    });
    let body = apply_body(&desired, &conditions, PublicationTarget::Instance, 0).expect("body");
    let returned = serde_json::json!({ "status": status });
    assert_eq!(
        check_returned(&body, &returned),
        WriteOutcome::Applied,
        "the fixture's status is what the body sends"
    );
    write.bench_function("check", |b| {
        b.iter(|| check_returned(black_box(&body), black_box(&returned)))
    });
    write.finish();
}

criterion_group!(benches, status_io);
criterion_main!(benches);
