//! The self-hoster's two steps through the `kura-agent` binary against
//! simulated nodes on loopback: `kura-agent baseline` before the upgrade,
//! `kura-agent check --baseline FILE` after it.
//!
//! The upgrade is simulated on the nodes: one node restarts (its counters
//! back to 0, a new incarnation) and, on the new version, times out more
//! than it had in total before, all before the check starts. Against the
//! baseline that is a regression; a check that takes its baseline when it
//! starts would have passed it.

use std::path::{Path, PathBuf};
use std::process::Command;

use kura_sim::Simulator;
use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kura-agent"))
}

async fn run(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = bin().args(&args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

fn node_args(sim: &Simulator) -> Vec<String> {
    sim.pods()
        .iter()
        .flat_map(|p| ["--node".to_owned(), format!("http://{}", p.addr())])
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kura-baseline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `kura-agent baseline --out FILE` of `sim`; its exit code and the
/// document.
async fn take_baseline(sim: &Simulator, file: &Path) -> (i32, Value, String, String) {
    let mut a = args(&["baseline", "--out"]);
    a.push(path(file));
    a.extend(node_args(sim));
    let (code, out, err) = run(a).await;
    let doc = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    (code, doc, out, err)
}

/// `check --json` of `sim`, with `extra` flags; exit code and the lines.
async fn check(sim: &Simulator, extra: &[String]) -> (i32, Vec<Value>, String) {
    let mut a = args(&[
        "check",
        "--json",
        "--soak",
        "1s",
        "--interval",
        "200ms",
        "--timeout",
        "3s",
    ]);
    a.extend(extra.iter().cloned());
    a.extend(node_args(sim));
    let (code, out, err) = run(a).await;
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (code, lines, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_baseline_document_names_every_node_with_its_counters_and_identity() {
    let dir = scratch("doc");
    let sim = Simulator::healthy("bdoc", 2).await.unwrap();
    sim.pods()[0].update(|n| {
        n.fd_timeout_count = 10;
        n.peer_connection_failure_count = 3;
    });
    let file = dir.join("b.json");
    let (code, doc, out, err) = take_baseline(&sim, &file).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(doc["kind"], "KuraRolloutBaseline");
    assert_eq!(doc["schemaVersion"], 1);
    assert_eq!(doc["agentVersion"], env!("CARGO_PKG_VERSION"));
    assert!(
        doc["takenAt"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{doc}"
    );
    assert_eq!(doc["expectedPods"], 2);
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let n0 = &nodes[0];
    assert_eq!(n0["url"], format!("{}", sim.pods()[0].url()));
    assert_eq!(n0["sampled"], true);
    assert_eq!(n0["fdTimeoutCount"], 10);
    assert_eq!(n0["peerConnectionFailures"], 3);
    assert!(n0["incarnation"].is_string(), "{n0}");
    assert!(n0.get("error").is_none());
    let agg = &doc["aggregate"];
    assert_eq!(agg["sampledPods"], 2);
    assert_eq!(agg["soakEligible"], true);
    assert_eq!(agg["fdTimeoutCount"], 10);
    assert_eq!(agg["peerConnectionFailures"], 3);
    assert!(agg["outboxMessages"].is_null(), "G4 nodes report no outbox");
    assert!(out.contains("baseline of 2/2 nodes written to"), "{out}");
    assert!(
        !dir.read_dir()
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().contains(".tmp-") })
    );

    // Without --out the document is standard output.
    let mut a = args(&["baseline"]);
    a.extend(node_args(&sim));
    let (code, out, _) = run(a).await;
    assert_eq!(code, 0);
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["nodes"], doc["nodes"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_not_sampled_is_exit_1_naming_it_and_why() {
    let dir = scratch("down");
    let sim = Simulator::healthy("bdown", 2).await.unwrap();
    sim.pods()[1]
        .set(kura_sim::Behaviour::Refused)
        .await
        .unwrap();
    let file = dir.join("b.json");
    let (code, doc, _, err) = take_baseline(&sim, &file).await;
    assert_eq!(code, 1, "{err}");
    let url = sim.pods()[1].url();
    assert!(err.contains(&format!("{url}: not sampled:")), "{err}");
    assert_eq!(doc["nodes"][1]["sampled"], false);
    assert!(doc["nodes"][1]["error"].is_string());
    assert_eq!(doc["aggregate"]["soakEligible"], false);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2_and_write_nothing() {
    let dir = scratch("usage");
    let file = path(&dir.join("b.json"));
    for case in [
        vec![],
        args(&["--node", "http://127.0.0.1:99999"]),
        args(&[
            "--node",
            "http://127.0.0.2:4100",
            "--node",
            "http://127.0.0.2:04100",
        ]),
        args(&[
            "--node",
            "http://localhost:4100",
            "--node",
            "http://127.0.0.1:4100",
        ]),
        args(&["--node", "http://127.0.0.1:4100", "--expected-pods", "0"]),
    ] {
        let mut a = args(&["baseline", "--out", &file]);
        a.extend(case.clone());
        let (code, out, err) = run(a).await;
        assert_eq!(code, 2, "{case:?}: {out}{err}");
        assert!(!err.is_empty());
        assert!(!Path::new(&file).exists(), "{case:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The upgrade restarts node 0 and it then times out 15 times, more than
/// its 10 before: `check --baseline` fails it (10 + 15 = 25 against 10); a
/// check without the baseline starts at 15 and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regression_before_the_check_starts_is_caught_only_with_the_baseline() {
    let dir = scratch("flow");
    let sim = Simulator::healthy("flow", 2).await.unwrap();
    sim.pods()[0].update(|n| n.fd_timeout_count = 10);
    let file = dir.join("b.json");
    let (code, _, out, err) = take_baseline(&sim, &file).await;
    assert_eq!(code, 0, "{out}{err}");
    // The upgrade: a restart, then growth past the total before it.
    sim.pods()[0].restart();
    sim.pods()[0].update(|n| n.fd_timeout_count = 15);

    let with = vec!["--baseline".to_owned(), path(&file)];
    let ((code, lines, err), (code_without, lines_without, _)) =
        tokio::join!(check(&sim, &with), check(&sim, &[]));
    assert_eq!(code, 1, "{err}");
    let first = &lines[0];
    assert_eq!(first["baselineSource"], "file");
    assert_eq!(first["baseline"]["fdTimeoutCount"], 10);
    assert_eq!(first["signal"], "fd_timeouts_regressed", "{first}");
    assert_eq!(first["health"]["fdTimeoutCount"], 25);
    assert_eq!(first["health"]["counterResets"], 1);
    let last = lines.last().unwrap();
    assert_eq!(last["signal"], "wave_deadline_exceeded");
    assert_eq!(last["lastFailingSignal"], "fd_timeouts_regressed");
    assert_eq!(last["evidence"][1]["observed"], 25);
    assert_eq!(last["evidence"][1]["baseline"], 10);
    assert_eq!(last["nodes"], serde_json::json!([sim.pods()[0].url()]));

    assert_eq!(
        code_without, 0,
        "without the baseline the damage is the reference"
    );
    assert_eq!(lines_without[0]["baselineSource"], "first_poll");
    assert_eq!(lines_without[0]["baseline"]["fdTimeoutCount"], 15);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same upgrade with healthy nodes: the restarted node's counter back
/// at 0 is a reset (10 stays 10), not an improvement, and the check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_upgrade_with_healthy_nodes_passes() {
    let dir = scratch("healthy");
    let sim = Simulator::healthy("fine", 2).await.unwrap();
    sim.pods()[0].update(|n| n.fd_timeout_count = 10);
    let file = dir.join("b.json");
    let (code, ..) = take_baseline(&sim, &file).await;
    assert_eq!(code, 0);
    sim.pods()[0].restart();
    let (code, lines, err) = check(&sim, &["--baseline".to_owned(), path(&file)]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines[0]["health"]["fdTimeoutCount"], 10);
    assert_eq!(lines[0]["effectiveBaseline"]["fdTimeoutCount"], 10);
    assert_eq!(lines.last().unwrap()["verdict"], "pass");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A baseline of other nodes, an old one, one from the future, or not a
/// baseline at all: exit 2 before any poll, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_that_does_not_fit_is_a_usage_error() {
    let dir = scratch("fit");
    let sim = Simulator::healthy("fit", 3).await.unwrap();
    let file = dir.join("b.json");
    let (code, doc, ..) = take_baseline(&sim, &file).await;
    assert_eq!(code, 0);
    let two = |sim: &Simulator| -> Vec<String> {
        sim.pods()[..2]
            .iter()
            .flat_map(|p| ["--node".to_owned(), format!("http://{}", p.addr())])
            .collect()
    };
    // Two of the three nodes.
    let mut a = args(&["check", "--baseline", &path(&file)]);
    a.extend(two(&sim));
    let (code, out, err) = run(a).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty());
    let third = sim.pods()[2].url();
    assert!(
        err.contains(&format!("was taken of other nodes than --node: only in the baseline: {third}; only in --node: none")),
        "{err}"
    );
    // Too old, and from the future.
    for (taken_at, want) in [
        (
            "2020-01-01T00:00:00Z",
            "older than --baseline-max-age 1h 0m 0s",
        ),
        ("2100-01-01T00:00:00Z", "in the future"),
    ] {
        let mut edited = doc.clone();
        edited["takenAt"] = Value::String(taken_at.to_owned());
        let f = dir.join("edited.json");
        std::fs::write(&f, edited.to_string()).unwrap();
        let mut a = args(&["check", "--baseline", &path(&f)]);
        a.extend(node_args(&sim));
        let (code, _, err) = run(a).await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{err}");
    }
    // --baseline-max-age is the limit.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut a = args(&[
        "check",
        "--baseline-max-age",
        "1s",
        "--baseline",
        &path(&file),
    ]);
    a.extend(node_args(&sim));
    let (code, _, err) = run(a).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("older than --baseline-max-age 1s"), "{err}");
    // Not a baseline.
    let f = dir.join("garbage.json");
    std::fs::write(&f, r#"{"kind": "KuraRolloutBaseline"}"#).unwrap();
    let mut a = args(&["check", "--baseline", &path(&f)]);
    a.extend(node_args(&sim));
    let (code, _, err) = run(a).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("not a baseline document: missing field"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A node on loopback that answers every request with `report` (a node
/// report body), for as long as the test runs.
fn hostile_node(report: String) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{report}",
                report.len()
            );
        }
    });
    addr
}

/// Issue 32 item 4: `baseline` printed a node's `incarnation` raw (escape
/// sequences, bell, a fake line), and error lines repeated control
/// characters and unbounded input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_text_is_escaped_and_bounded_on_the_terminal() {
    let dir = scratch("hostile");
    let report = serde_json::json!({
        "generation": 3, "ready": true, "state": "serving", "ring_members": 1,
        "ring_fingerprint": "9f2c01ab77e4d310", "initial_discovery_completed": true,
        "writer_lock_owned": true, "http_inflight_requests": 0, "grpc_inflight_requests": 0,
        "memory_pressure_state": 0, "fd_timeout_count": 0, "peer_connection_failure_count": 0,
        "backfill_initial_cycle": "complete", "backfill_backfilling_peers": 0,
        "backfill_budget_exhausted_real_peers": 0, "backfill_budget_exhausted_capability_peers": 0,
        "backfill_ring_fullness_percent": 100,
        "serving_authority": {"identity": {"pod_uid": "u-1",
            "incarnation": "7\u{1b}]0;pwned\u{7}\u{1b}[2J\nkura-agent baseline: all good\u{202e}"}}
    })
    .to_string();
    let node = hostile_node(report);
    let file = dir.join("baseline.json");
    let (code, out, err) = run(args(&[
        "baseline",
        "--node",
        &format!("http://{node}"),
        "--out",
        &path(&file),
    ]))
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "incarnation 7\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\nkura-agent baseline: all good\\u{202e}"
        ),
        "{out}"
    );
    for text in [&out, &err] {
        assert!(!text.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{text:?}");
    }
    assert_eq!(
        out.lines().count(),
        2,
        "one line per node and the summary: {out}"
    );

    // An error naming a 60 KB key full of escapes is one bounded line.
    let gate = dir.join("gate.json");
    let key = format!("\u{1b}[2J{}", "k".repeat(60_000));
    std::fs::write(&gate, serde_json::json!({ key: 1 }).to_string()).unwrap();
    let (code, _, err) = run(args(&[
        "check",
        "--node",
        &format!("http://{node}"),
        "--gate-config",
        &path(&gate),
    ]))
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.len() < 5_000, "{} bytes on stderr", err.len());
    assert!(err.contains("more bytes)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
