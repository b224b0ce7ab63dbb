//! The fleet page at fleet scale (issue 28): a fleet larger than the window
//! is shown a window at a time, worst first across windows, the filters
//! applied to the whole fleet before the window, the counts of the whole
//! fleet, links to the neighbouring windows, and the window's size bounded
//! whatever the query asks. Over real TCP against the real server, fed by
//! the real engine through the fleet view.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::engine::{EngineConfig, InstanceEngine};
use kura_agent::model::{Clock, InstanceInfo, InstanceKey, PodIdentity, PodSample, SampleResult};
use kura_agent::view::{FleetView, Standing, SweepRecord};
use kura_sim::SimNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OLD: &str = "ghcr.io/tuist/kura:0.41.2";
const NEW: &str = "ghcr.io/tuist/kura:0.42.0";
/// More than the largest window (500), so that no query shows it whole.
const INSTANCES: usize = 620;
const PODS: usize = 3;

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

/// 8 sweeps 30 s apart; from the fifth every third instance is on the new
/// image, every 40th has fd timeouts growing (unhealthy), every 51st
/// memory pressure 2 (hard stop) and every 97th no pod answering (no
/// sample).
fn story(view: &FleetView) -> Timestamp {
    let start = Timestamp::from_second(1_780_000_000).expect("start");
    let config = Arc::new(EngineConfig::default());
    let mut fleet: Vec<(InstanceInfo, InstanceEngine, Vec<SimNode>)> = (0..INSTANCES)
        .map(|i| {
            let info = InstanceInfo {
                namespace: format!("tenant-{}", i % 7),
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
    for s in 0..8 {
        at = start + SignedDuration::from_secs(30 * s);
        let upgraded = s >= 4;
        for (i, (info, engine, nodes)) in fleet.iter_mut().enumerate() {
            let image = if upgraded && i % 3 == 0 { NEW } else { OLD };
            if upgraded && i % 40 == 0 {
                nodes[0].fd_timeout_count += 2;
            }
            if upgraded && i % 51 == 0 {
                nodes[1].memory_pressure_state = 2;
            }
            let samples: Vec<PodSample> = nodes
                .iter()
                .enumerate()
                .map(|(p, node)| PodSample {
                    pod: std::sync::Arc::new(PodIdentity {
                        name: format!("{}-{p}", info.name).into(),
                        uid: format!("uid-{}-{p}", info.name).into(),
                        restart_count: 0,
                        image: Some(image.into()),
                        ip: Some(format!("10.{}.{}.{p}", i / 250, i % 250).into()),
                    }),
                    received_at: at,
                    result: if upgraded && i % 97 == 0 {
                        SampleResult::Error("HTTP 500".into())
                    } else {
                        SampleResult::Report(Box::new(node.report()))
                    },
                    replication_lag_entries: None,
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

async fn start() -> (SocketAddr, FleetView, tokio::sync::oneshot::Sender<()>) {
    let view = FleetView::new();
    let end = story(&view);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        DebugState::new(view.clone(), recorder.handle(), Arc::new(Fixed(end))),
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    (addr, view, stop)
}

/// The body of `GET path` (200 asserted).
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_owned()
}

/// One row of the fleet table: `namespace/name`, its standing, hidden.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: String,
    standing: String,
    hidden: bool,
}

fn rows(body: &str) -> Vec<Row> {
    let tbody = body
        .split("<tbody id=\"rows\" data-live>")
        .nth(1)
        .and_then(|b| b.split("</tbody>").next())
        .expect("fleet tbody");
    tbody
        .split("<tr ")
        .skip(1)
        .map(|row| {
            let open = row.split('>').next().expect("tr");
            let attr = |text: &str, name: &str| {
                text.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .expect(name)
                    .to_owned()
            };
            let th = row.split("<th scope=\"row\"").nth(1).expect("row header");
            Row {
                id: attr(th, "data-k"),
                standing: attr(open, "data-standing"),
                hidden: open.contains(" hidden"),
            }
        })
        .collect()
}

/// The `#shown` line (count and links), as markup.
fn shown(body: &str) -> &str {
    body.split("<div id=\"shown\"")
        .nth(1)
        .and_then(|s| s.split("</div>").next())
        .expect("#shown")
}

/// Every instance with its standing, in the page's default order: worst
/// first, then by `namespace/name`.
fn worst_first(view: &FleetView) -> Vec<(String, Standing)> {
    let mut all: Vec<(String, Standing)> = view
        .snapshot()
        .iter()
        .map(|v| {
            (
                format!("{}/{}", v.namespace, v.name),
                Standing::of(v.gate.as_deref()),
            )
        })
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all
}

fn ids(rows: &[Row]) -> Vec<String> {
    rows.iter().map(|r| r.id.clone()).collect()
}

#[tokio::test]
async fn the_default_window_is_200_rows_worst_first_with_a_link_to_the_next() {
    let (addr, view, _stop) = start().await;
    let expected = worst_first(&view);
    let standings: BTreeMap<Standing, usize> = expected.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.1).or_default() += 1;
        m
    });
    assert!(
        standings.len() == 4,
        "the story has every standing: {standings:?}"
    );
    let body = get(addr, "/").await;
    let page = rows(&body);
    assert_eq!(page.len(), 200, "the default window");
    assert!(
        page.iter().all(|r| !r.hidden),
        "a window has no hidden rows"
    );
    let want: Vec<String> = expected.iter().take(200).map(|e| e.0.clone()).collect();
    assert_eq!(ids(&page), want, "the 200 worst, in order");
    assert!(
        body.len() < 300_000,
        "a window, not the fleet: {} bytes",
        body.len()
    );
    let line = shown(&body);
    assert!(line.contains("data-window"), "{line}");
    assert!(line.contains("showing 1–200 of 620 instances"), "{line}");
    assert!(
        line.contains(
            "<a rel=\"next\" href=\"/?sort=verdict&amp;dir=desc&amp;offset=200\">next 200</a>"
        ),
        "{line}"
    );
    assert!(!line.contains("rel=\"prev\""), "no previous window: {line}");
    // The counts are of the whole fleet, not of the window.
    assert!(body.contains("620 instances, 1860 pods"));
    for (standing, n) in &standings {
        assert!(
            body.contains(&format!(
                "<span class=\"n\">{n}</span><span class=\"w\">{}</span>",
                standing.word()
            )),
            "{standing:?}: {n}"
        );
    }
}

#[tokio::test]
async fn windows_follow_one_another_worst_first_across_the_fleet() {
    let (addr, view, _stop) = start().await;
    let expected: Vec<String> = worst_first(&view).into_iter().map(|e| e.0).collect();
    let mut walked = Vec::new();
    let mut path = "/".to_owned();
    for window in 0.. {
        let body = get(addr, &path).await;
        let page = rows(&body);
        assert!(page.len() <= 200);
        walked.extend(ids(&page));
        let line = shown(&body).to_owned();
        match line
            .split("<a rel=\"next\" href=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
        {
            Some(next) => path = next.replace("&amp;", "&"),
            None => {
                assert_eq!(window, 3, "620 rows in windows of 200: {line}");
                assert!(line.contains("showing 601–620 of 620 instances"), "{line}");
                assert!(
                    line.contains("<a rel=\"prev\" href=\"/?sort=verdict&amp;dir=desc&amp;offset=400\">previous 200</a>"),
                    "{line}"
                );
                assert!(
                    line.contains(
                        "<a rel=\"first\" href=\"/?sort=verdict&amp;dir=desc\">first</a>"
                    ),
                    "{line}"
                );
                break;
            }
        }
        assert!(window < 4, "the next links end");
    }
    assert_eq!(walked, expected, "every instance once, worst first");
    // Another sort, windowed on the server: by name, from row 100.
    let body = get(addr, "/?sort=instance&dir=asc&limit=50&offset=100").await;
    let mut by_name = expected.clone();
    by_name.sort();
    assert_eq!(ids(&rows(&body)), by_name[100..150].to_vec());
    assert!(shown(&body).contains("showing 101–150 of 620 instances"));
    // Past the end: no rows, and a way back.
    let body = get(addr, "/?offset=5000").await;
    assert!(rows(&body).is_empty());
    let line = shown(&body);
    assert!(line.contains("showing none of 620 instances"), "{line}");
    assert!(line.contains("offset=600\">previous 200</a>"), "{line}");
}

#[tokio::test]
async fn filters_apply_to_the_whole_fleet_before_the_window() {
    let (addr, view, _stop) = start().await;
    let expected = worst_first(&view);
    let healthy: Vec<String> = expected
        .iter()
        .filter(|e| e.1 == Standing::Healthy)
        .map(|e| e.0.clone())
        .collect();
    assert!(healthy.len() > 500, "more healthy than any window");
    let body = get(addr, "/?verdict=healthy&limit=30&offset=30").await;
    let page = rows(&body);
    assert_eq!(ids(&page), healthy[30..60].to_vec());
    assert!(page.iter().all(|r| r.standing == "healthy"));
    let line = shown(&body);
    assert!(
        line.contains(&format!(
            "showing 31–60 of {} matching of 620 instances",
            healthy.len()
        )),
        "{line}"
    );
    assert!(
        line.contains("href=\"/?verdict=healthy&amp;sort=verdict&amp;dir=desc&amp;limit=30&amp;offset=60\">next 30</a>"),
        "the links keep the filter and the window size: {line}"
    );
    // Counts stay those of the whole fleet under a filter.
    let unhealthy = expected
        .iter()
        .filter(|e| e.1 == Standing::Unhealthy)
        .count();
    assert!(body.contains(&format!(
        "<span class=\"n\">{unhealthy}</span><span class=\"w\">unhealthy</span>"
    )));
    // The text filter searches every instance, not the window.
    let wanted: Vec<String> = expected
        .iter()
        .filter(|e| e.0.contains("cache-0061"))
        .map(|e| e.0.clone())
        .collect();
    assert_eq!(wanted.len(), 10);
    let body = get(addr, "/?q=CACHE-0061&limit=4").await;
    assert_eq!(ids(&rows(&body)), wanted[..4].to_vec());
    assert!(shown(&body).contains("showing 1–4 of 10 matching of 620 instances"));
    // A namespace.
    let body = get(addr, "/?ns=tenant-3").await;
    let page = rows(&body);
    let in_ns = expected
        .iter()
        .filter(|e| e.0.starts_with("tenant-3/"))
        .count();
    assert_eq!(page.len(), in_ns);
    assert!(page.iter().all(|r| r.id.starts_with("tenant-3/")));
    assert!(
        !shown(&body).contains("rel=\"next\""),
        "one window holds them"
    );
}

#[tokio::test]
async fn the_window_is_bounded_whatever_the_query_asks() {
    let (addr, _view, _stop) = start().await;
    let body = get(addr, "/?limit=100000").await;
    assert_eq!(rows(&body).len(), 500, "at most 500 rows");
    assert!(shown(&body).contains("showing 1–500 of 620 instances"));
    assert!(shown(&body).contains("next 120</a>"));
    let body = get(addr, "/?limit=0").await;
    assert_eq!(rows(&body).len(), 1, "at least one row");
    // Sort links start at the top and keep the window's size; the pause
    // link (and the page's own refresh, of the same URL) keeps the window.
    let body = get(addr, "/?limit=50&offset=150").await;
    assert!(body.contains("href=\"/?sort=instance&amp;dir=asc&amp;limit=50\""));
    assert!(body.contains(
        "href=\"/?sort=verdict&amp;dir=desc&amp;limit=50&amp;offset=150&amp;refresh=off\""
    ));
    assert!(body.contains("<input type=\"hidden\" name=\"limit\" value=\"50\">"));
}
