//! `kura-agent check` against every report shape of contract/node-report.md,
//! served byte for byte from testdata/reports/ by real HTTP servers on
//! loopback, and against a simulated newest node whose initial catch-up is
//! still pending while it is ready and serving.

use std::convert::Infallible;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kura_sim::Simulator;
use serde_json::Value;

fn fixture(name: &str) -> Bytes {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/reports")
        .join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A node on 127.0.0.1 that answers `/status/rollout` (and every other path
/// but `/status/cluster`) with `body`, and `/status/cluster` with `cluster`
/// (HTTP 404 when `None`), as a Kura node does.
struct FixtureNode {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl FixtureNode {
    async fn start(body: Bytes) -> FixtureNode {
        FixtureNode::start_with_cluster(body, None).await
    }

    async fn start_with_cluster(body: Bytes, cluster: Option<Bytes>) -> FixtureNode {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new((body, cluster));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (report, cluster) = &*shared;
                        let answer = if req.uri().path() == "/status/cluster" {
                            cluster.clone()
                        } else {
                            Some(report.clone())
                        };
                        async move {
                            let Some(body) = answer else {
                                let mut r = Response::new(Full::new(Bytes::from_static(b"no")));
                                *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                return Ok::<_, Infallible>(r);
                            };
                            let mut r = Response::new(Full::new(body));
                            r.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FixtureNode { url, task }
    }
}

impl Drop for FixtureNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `kura-agent check --json` off the runtime's threads; the exit code
/// and the JSON lines.
async fn check(nodes: &[&str], extra: &[&str]) -> (i32, Vec<Value>, String) {
    let mut args = vec!["check".to_owned(), "--json".to_owned()];
    for n in nodes {
        args.extend(["--node".to_owned(), (*n).to_owned()]);
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
            .args(&args)
            .output()
            .unwrap();
        let lines = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (
            out.status.code().unwrap_or(-1),
            lines,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Every healthy shape in the contract, one node each, passes `check`:
/// none is refused (the newest builds' empty identity included), and every
/// poll sampled the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_contract_shape_is_sampled_and_passes() {
    let shapes = [
        "g1-bootstrap.json",
        "g2-backfill-flag.json",
        "g2-no-flag.json",
        "g3-fingerprint.json",
        "g3-outbox-capacity.json",
        "g3-fullness-above-100.json",
        "g4-pull-sync.json",
        "newest-unfenced.json",
        "kura-g4-sibling-predates-pull.json",
        "kura-newest-fenced-quiescing-source.json",
    ];
    for shape in shapes {
        let node = FixtureNode::start(fixture(shape)).await;
        let (code, lines, err) = check(
            &[&node.url],
            &["--soak", "400ms", "--interval", "100ms", "--timeout", "20s"],
        )
        .await;
        assert_eq!(code, 0, "{shape}: {lines:?} {err}");
        assert!(lines.len() >= 3, "{shape}: {lines:?}");
        for line in &lines {
            assert_eq!(line["health"]["sampledPods"], 1, "{shape}: {line}");
        }
        assert_eq!(lines.last().unwrap()["verdict"], "pass", "{shape}");
    }
}

/// A newest node that latched ready and serving while its initial catch-up
/// is still pending (a warm volume after a restart) holds `check` until the
/// cycle completes; the soak only starts then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_serving_node_with_a_pending_cycle_holds_check_until_it_completes() {
    let node = FixtureNode::start(fixture("newest-catching-up.json")).await;
    let (code, lines, _) = check(
        &[&node.url],
        &[
            "--soak",
            "200ms",
            "--interval",
            "100ms",
            "--timeout",
            "1500ms",
        ],
    )
    .await;
    assert_eq!(code, 1, "a pending cycle never passes: {lines:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["signal"], "wave_deadline_exceeded");
    assert_eq!(last["lastFailingSignal"], "backfill_pending");
    let pending = lines
        .iter()
        .flat_map(|l| l["evidence"].as_array().cloned().unwrap_or_default())
        .find(|e| e["signal"] == "backfill_pending")
        .expect("evidence of backfill_pending");
    assert!(
        pending["detail"].as_str().unwrap().contains("pending"),
        "the evidence names the observed cycle value: {pending}"
    );
    for line in &lines {
        assert_eq!(line["health"]["ready"], true);
        assert_eq!(line["health"]["serving"], true);
    }

    // The simulated newest node: pending, then complete after a while.
    let sim = Simulator::healthy("catchup", 2).await.unwrap();
    sim.pods()[1].update(|n| n.backfill_initial_cycle = "pending".into());
    let nodes: Vec<String> = sim.pods().iter().map(|p| p.url()).collect();
    let completer = {
        let pod = sim.pods()[1].clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            pod.update(|n| n.backfill_initial_cycle = "complete".into());
        })
    };
    let refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let (code, lines, err) = check(
        &refs,
        &["--soak", "500ms", "--interval", "100ms", "--timeout", "20s"],
    )
    .await;
    completer.await.unwrap();
    assert_eq!(code, 0, "{lines:?} {err}");
    let first_soaking = lines
        .iter()
        .position(|l| l["signal"] == "soaking")
        .expect("a soak after the cycle completed");
    assert!(first_soaking > 0, "held at first: {:?}", lines[0]);
    for line in &lines[..first_soaking] {
        assert_eq!(line["signal"], "backfill_pending", "{line}");
    }
    assert_eq!(lines.last().unwrap()["verdict"], "pass");
    drop(node);
}

/// The fenced-serving shapes of contract/examples against `check` on
/// loopback nodes: the grant in `Fencing` (every pod ready and serving) is
/// the hard stop `serving_fenced`; a lone standby (no valid writer) holds
/// on `no_valid_writer` until the deadline; a node that reports
/// `enabled: true` without `valid` is no writer either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_shapes_stop_or_hold_check() {
    for (shape, hard) in [
        ("kura-newest-fenced-fencing-no-valid-writer.json", true),
        ("newest-fenced.json", true),
        ("kura-newest-fenced-standby.json", false),
        ("kura-newest-fenced-revoked-source.json", false),
        ("g4-serving-authority.json", false),
    ] {
        let node = FixtureNode::start(fixture(shape)).await;
        let (code, lines, err) = check(
            &[&node.url],
            &[
                "--soak",
                "200ms",
                "--interval",
                "100ms",
                "--timeout",
                "1200ms",
            ],
        )
        .await;
        assert_eq!(code, 1, "{shape}: {lines:?} {err}");
        let last = lines.last().unwrap();
        for line in &lines {
            assert_eq!(line["health"]["ready"], true, "{shape}: still ready");
            assert_eq!(line["health"]["serving"], true, "{shape}: still serving");
        }
        if hard {
            assert_eq!(last["signal"], "serving_fenced", "{shape}: {last}");
            let e = &last["evidence"][0];
            assert_eq!(e["fence"]["phase"], "Fencing", "{shape}: {e}");
            assert!(
                e["detail"].as_str().unwrap().contains("grant phase"),
                "{shape}: {e}"
            );
        } else {
            assert_eq!(last["signal"], "wave_deadline_exceeded", "{shape}: {last}");
            assert_eq!(
                last["lastFailingSignal"], "no_valid_writer",
                "{shape}: {last}"
            );
        }
    }
}

/// A pull-sync node's replication lag comes from `/status/cluster` (the
/// contract's example body: 3 on its replica link, the region link not
/// summed); a node without the route has no lag (null, never 0), and a
/// cluster body that is not valid fails every sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_the_lag_of_pull_sync_nodes() {
    let cluster = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/cluster/kura-cluster-status-pull-sync.json"),
    )
    .unwrap();
    let with_route =
        FixtureNode::start_with_cluster(fixture("g4-pull-sync.json"), Some(cluster.into())).await;
    let without = FixtureNode::start_with_cluster(fixture("g4-pull-sync.json"), None).await;
    let (code, lines, err) = check(
        &[&with_route.url, &without.url],
        &["--soak", "300ms", "--interval", "100ms", "--timeout", "5s"],
    )
    .await;
    assert_eq!(code, 0, "{:?} {err}", lines.last());
    for line in &lines {
        assert_eq!(line["health"]["replicationLagEntries"], 3, "{line}");
    }
    let broken = FixtureNode::start_with_cluster(
        fixture("g4-pull-sync.json"),
        Some(Bytes::from_static(
            br#"{"sync_links":[{"kind":"replica","lag_entries":-1}]}"#,
        )),
    )
    .await;
    let (code, lines, _) = check(
        &[&broken.url],
        &[
            "--soak",
            "200ms",
            "--interval",
            "100ms",
            "--timeout",
            "800ms",
        ],
    )
    .await;
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines[0]["health"]["sampledPods"], 0, "{}", lines[0]);
}
