//! The fleet and instance pages over real TCP, fed by the real engine
//! (aggregation and gate) through the fleet view: order (hard stops first),
//! verdict words and evidence, the verdict sentence, the gated-signal
//! table, the history chart (band line, points, verdict strip), the pods,
//! filters and sorting without script, a fleet shown whole when it fits
//! the window and as a window when it does not, the CSP and escaping.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kura_agent::debug::{DebugServer, DebugState};
use kura_agent::engine::{EngineConfig, InstanceEngine};
use kura_agent::model::{Clock, InstanceInfo, InstanceKey, PodIdentity, PodSample, SampleResult};
use kura_agent::view::{FleetView, HISTORY_BUCKETS, SweepRecord};
use kura_sim::SimNode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const START: i64 = 1_780_000_000;
const OLD: &str = "ghcr.io/tuist/kura:0.41.2";
const NEW: &str = "ghcr.io/tuist/kura:0.42.0";

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(START + s).expect("ts")
}

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

/// One simulated instance: its pods' nodes and its engine.
struct Sim {
    key: InstanceKey,
    info: InstanceInfo,
    nodes: Vec<SimNode>,
    answering: bool,
    image: &'static str,
    engine: InstanceEngine,
}

impl Sim {
    fn new(name: &str, pods: usize) -> Sim {
        let info = InstanceInfo {
            namespace: "kura".into(),
            name: name.into(),
            expected_pods: u32::try_from(pods).expect("pods"),
            generation: 1,
        };
        Sim {
            key: InstanceKey::of(&info),
            info,
            nodes: (0..pods)
                .map(|i| SimNode {
                    fd_timeout_count: 4 + i as u64,
                    peer_connection_failure_count: 2,
                    ring_members: pods as u64,
                    ..SimNode::default()
                })
                .collect(),
            answering: true,
            image: OLD,
            engine: InstanceEngine::new(Arc::new(EngineConfig::default())),
        }
    }

    fn sweep(&mut self, view: &FleetView, at: Timestamp) {
        let samples: Vec<PodSample> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| PodSample {
                replication_lag_entries: None,
                pod: std::sync::Arc::new(PodIdentity {
                    name: format!("{}-{i}", self.info.name).into(),
                    uid: format!("uid-{}-{i}", self.info.name).into(),
                    restart_count: 0,
                    image: Some(self.image.into()),
                    ip: Some(format!("10.0.0.{i}").into()),
                }),
                received_at: at,
                result: if self.answering {
                    SampleResult::Report(Box::new(node.report()))
                } else {
                    SampleResult::Error("HTTP 500".into())
                },
            })
            .collect();
        let names: Vec<String> = samples.iter().map(|s| s.pod.name.to_string()).collect();
        let judged = self.engine.step(&self.info, self.image, &samples, at);
        let (health, gate) = (judged.health, judged.gate);
        view.record_sweep(
            &self.key,
            SweepRecord {
                spec_image: self.image,
                current_pods: &names,
                samples: &samples,
                health: Some(health),
                gate: Some(gate),
                notes: if self.info.name == "silent" {
                    vec!["1 pod(s) beyond the per-instance limit are not polled".into()]
                } else {
                    Vec::new()
                },
                limits: self.engine.limits(),
                at,
            },
        );
    }
}

/// 40 simulated minutes, a sweep every 10 s: every instance starts on the
/// old image; at 10 min three move to the new one; `drift`'s fd timeouts
/// grow from 15 min; `stopped` also reaches memory pressure 2 at 30 min;
/// `silent` stops answering at 20 min.
fn story(view: &FleetView) -> Timestamp {
    let mut fleet = vec![
        Sim::new("calm", 2),
        Sim::new("drift", 3),
        Sim::new("stopped", 2),
        Sim::new("silent", 1),
    ];
    let mut t = 0;
    while t <= 2400 {
        if t == 600 {
            for s in fleet.iter_mut().filter(|s| s.info.name != "silent") {
                s.image = NEW;
            }
        }
        if t >= 900 && t % 60 == 0 {
            fleet[1].nodes[0].fd_timeout_count += 1;
            fleet[2].nodes[1].fd_timeout_count += 1;
        }
        if t == 1800 {
            fleet[2].nodes[1].memory_pressure_state = 2;
        }
        if t == 1200 {
            fleet[3].answering = false;
        }
        for s in &mut fleet {
            s.sweep(view, ts(t));
        }
        t += 10;
    }
    ts(t)
}

async fn start() -> (SocketAddr, FleetView, tokio::sync::oneshot::Sender<()>) {
    let view = FleetView::new();
    let end = story(&view);
    let (addr, stop) = serve(&view, end).await;
    (addr, view, stop)
}

/// A debug server over `view` whose clock stands at `at`, until the
/// sender is used or dropped.
async fn serve(view: &FleetView, at: Timestamp) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let server = DebugServer::bind(
        "127.0.0.1:0".parse().expect("addr"),
        DebugState::new(view.clone(), recorder.handle(), Arc::new(Fixed(at))),
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

struct Reply {
    status: u16,
    headers: String,
    body: String,
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    Reply {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status"),
        headers: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

/// The `<tbody>` rows of the fleet table, in order.
fn rows(body: &str) -> Vec<&str> {
    let tbody = body
        .split("<tbody id=\"rows\" data-live>")
        .nth(1)
        .and_then(|b| b.split("</tbody>").next())
        .expect("fleet tbody");
    tbody.split("<tr ").skip(1).collect()
}

/// The CSP header's `directive` sources.
fn csp_sources<'a>(headers: &'a str, directive: &str) -> Vec<&'a str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .expect("a CSP header")
        .split(';')
        .map(str::trim)
        .find_map(|d| d.strip_prefix(directive).and_then(|d| d.strip_prefix(' ')))
        .map(|d| d.split_whitespace().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_fleet_page_lists_hard_stops_first_with_words_and_evidence() {
    let (addr, _view, _stop) = start().await;
    let r = get(addr, "/").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers
            .contains("content-security-policy: default-src 'none';"),
        "{}",
        r.headers
    );
    // Inline style and script only by hash: one of each, each the page's.
    let style = csp_sources(&r.headers, "style-src");
    let script = csp_sources(&r.headers, "script-src");
    assert_eq!(style.len(), 1, "{style:?}");
    assert_eq!(script.len(), 1, "{script:?}");
    assert!(style[0].starts_with("'sha256-") && script[0].starts_with("'sha256-"));
    assert_ne!(style, script);
    assert!(csp_sources(&r.headers, "img-src").is_empty(), "no images");
    assert!(r.body.contains("<style>") && r.body.contains("<script>"));
    assert_eq!(r.body.matches("<script").count(), 1, "one inline script");
    assert!(
        !r.body.contains(" style=\""),
        "no style attributes (the CSP forbids them)"
    );
    assert!(!r.body.contains("http://") && !r.body.contains("https://"));

    let order: Vec<&str> = rows(&r.body)
        .iter()
        .map(|row| {
            row.split("data-k=\"kura/")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .expect("instance key")
        })
        .collect();
    assert_eq!(order, ["stopped", "drift", "silent", "calm"], "worst first");
    let first = rows(&r.body)[0];
    assert!(first.contains(">hard stop</span>"), "{first}");
    assert!(first.contains("memory_pressure_critical"), "{first}");
    assert!(
        first.contains("memory pressure 2 (critical), limit 1"),
        "{first}"
    );
    assert!(
        first.contains("href=\"/instances/kura/stopped\""),
        "{first}"
    );
    let drift = rows(&r.body)[1];
    assert!(drift.contains(">unhealthy</span>") && drift.contains("fd_timeouts_regressed"));
    assert!(
        drift.contains("fd timeouts 41, band top 15, baseline 15"),
        "{drift}"
    );
    assert!(
        drift.contains(OLD) && drift.contains(NEW),
        "target and baseline image"
    );
    assert!(rows(&r.body)[2].contains(">no sample</span>"));
    assert!(rows(&r.body)[3].contains(">healthy</span>"));
    // Counts on top, with their words.
    for (n, word) in [
        (1, "hard stop"),
        (1, "unhealthy"),
        (1, "no sample"),
        (1, "healthy"),
    ] {
        assert!(
            r.body.contains(&format!(
                "<span class=\"n\">{n}</span><span class=\"w\">{word}</span>"
            )),
            "{word}"
        );
    }
    // Every table has header cells.
    assert!(r.body.contains("<th scope=\"col\""));
    assert!(r.body.contains("<th scope=\"row\""));
}

#[tokio::test]
async fn filters_and_sorting_work_without_script() {
    let (addr, _view, _stop) = start().await;
    let r = get(addr, "/?verdict=unhealthy").await;
    let visible: Vec<&str> = rows(&r.body)
        .into_iter()
        .filter(|row| {
            !row.split('>')
                .next()
                .unwrap_or_default()
                .contains(" hidden")
        })
        .collect();
    assert_eq!(visible.len(), 1);
    assert!(visible[0].contains("kura/drift"));
    assert!(r.body.contains("showing 1 of 4"));
    let r = get(addr, "/?q=PRESSURE").await;
    assert!(
        r.body.contains("showing 1 of 4"),
        "text filter is case-insensitive"
    );
    let r = get(addr, "/?sort=instance&dir=asc").await;
    let first = rows(&r.body)[0];
    assert!(first.contains("kura/calm"), "{first}");
    assert!(r.body.contains("data-sort=\"instance\" data-dir=\"asc\""));
    assert!(r.body.contains("aria-sort=\"ascending\""));
    // A fleet that fits the window is shown whole (an offset changes
    // nothing); a smaller window makes it a window of the fleet.
    let r = get(addr, "/?offset=2").await;
    assert_eq!(rows(&r.body).len(), 4);
    assert!(
        r.body
            .contains("<div id=\"shown\" data-live>showing 4 of 4</div>")
    );
    let r = get(addr, "/?limit=3&verdict=healthy").await;
    assert_eq!(rows(&r.body).len(), 1, "filtered before the window");
    assert!(rows(&r.body)[0].contains("kura/calm"));
    assert!(
        r.body.contains(
            "<div id=\"shown\" data-live data-window>showing 1 of 1 matching of 4 instances<nav"
        ),
        "{}",
        r.body
    );
    let r = get(addr, "/?limit=3&offset=3").await;
    let last = rows(&r.body);
    assert_eq!(last.len(), 1);
    assert!(last[0].contains("kura/calm") && !last[0].contains(" hidden"));
    // Without script the page refreshes itself, and a link pauses it.
    assert!(r.body.contains("<noscript><meta http-equiv=\"refresh\""));
    let r = get(addr, "/?refresh=off").await;
    assert!(!r.body.contains("http-equiv=\"refresh\""));
    assert!(r.body.contains("auto-refresh paused"));
}

#[tokio::test]
async fn the_instance_page_tells_the_story() {
    let (addr, _view, _stop) = start().await;
    let r = get(addr, "/instances/kura/drift").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.headers
            .contains("content-security-policy: default-src 'none';")
    );
    let sentence = r
        .body
        .split("id=\"sentence\" data-live>")
        .nth(1)
        .and_then(|s| s.split("</p>").next())
        .expect("sentence");
    // unhealthy since <time>: fd timeouts 41, band top 15, baseline 15 captured <time> on OLD
    assert!(
        sentence.starts_with("<strong>unhealthy</strong> since <time"),
        "{sentence}"
    );
    assert!(
        sentence.contains(": fd timeouts 41, band top 15, baseline 15 captured <time"),
        "{sentence}"
    );
    assert!(
        sentence.ends_with(&format!("on <span class=\"img\">{OLD}</span>")),
        "{sentence}"
    );
    // The drift began at 15 min + one sweep: the first fd timeout above the band.
    let since = ts(900).strftime("%H:%M:%S").to_string();
    assert!(
        sentence.contains(&format!(">{since}</time>")),
        "{since} in {sentence}"
    );

    // Every gated signal, one row each; only the verdict's fails.
    let signals = r
        .body
        .split("id=\"signals\" data-live>")
        .nth(1)
        .and_then(|s| s.split("</table>").next())
        .expect("signals table");
    assert_eq!(signals.matches("<tr").count(), 18, "header + 17 checks");
    assert_eq!(signals.matches("result fail").count(), 1);
    assert!(signals.contains(
        "<tr class=\"failing\"><td>14</td><th scope=\"row\"><code>fd_timeouts_regressed</code>"
    ));
    assert!(
        signals.contains(">15</td><td class=\"num\">≤ 15</td><td class=\"num\">41</td>"),
        "{signals}"
    );

    // The chart: four panels (the replication lag next to the outbox) with
    // points and a band line, the strip, and the strip's runs in words.
    let history = r
        .body
        .split("id=\"history\" data-live>")
        .nth(1)
        .expect("history");
    assert_eq!(history.matches("<figure class=\"chart\"").count(), 4);
    assert!(
        history.matches("<polyline class=\"band\"").count() >= 2,
        "fd and peer bands"
    );
    // 40 minutes of sweeps fill 80 of the 120 buckets, for fd timeouts and
    // peer failures (G4 nodes report no outbox).
    let points = history.matches("<circle class=\"pt\"").count();
    assert!((160..=162).contains(&points), "{points} points");
    assert!(
        history.contains("not reported in the last hour"),
        "the outbox panel says so"
    );
    assert_eq!(
        history.matches("<rect class=\"st-").count(),
        HISTORY_BUCKETS
    );
    assert!(history.contains("<rect class=\"st-unhealthy\""));
    assert!(history.contains("<li class=\"unhealthy\">unhealthy "));
    assert!(history.contains("band top 15"));

    // Pods with raw and clamped counters; links to JSON and the series.
    assert!(r.body.contains("<th scope=\"row\">drift-0</th>"));
    assert!(r.body.contains("30 → 30"), "raw → clamped");
    assert!(r.body.contains("href=\"/debug/instances/kura/drift\""));
    assert!(r.body.contains("href=\"/instances/kura/drift/metrics\""));
    assert!(
        r.body.contains(
            "href=\"/api/v1/instances/kura/drift/timeline\" download=\"kura.drift.timeline.json\">download this rollout</a>"
        ),
        "the timeline link"
    );

    let m = get(addr, "/instances/kura/drift/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.body.contains(
            "kura_instance_fd_timeouts{kura_namespace=\"kura\",kura_instance=\"drift\"} 41"
        ),
        "{}",
        m.body
    );
    assert!(
        !m.body.contains("kura_instance=\"calm\""),
        "only this instance"
    );
}

#[tokio::test]
async fn hard_stops_healthy_and_silent_instances_read_right() {
    let (addr, _view, _stop) = start().await;
    let r = get(addr, "/instances/kura/stopped").await;
    assert!(
        r.body.contains("<strong>hard stop</strong> since"),
        "{}",
        r.body
    );
    assert!(r.body.contains("memory pressure 2 (critical), limit 1"));
    assert!(r.body.contains("<li class=\"hard_stop\">hard stop "));
    let r = get(addr, "/instances/kura/calm").await;
    assert!(
        r.body.contains(&format!(
            ": every gated signal passes on <span class=\"img\">{NEW}</span>; baseline captured"
        )),
        "{}",
        r.body
    );
    let r = get(addr, "/instances/kura/silent").await;
    assert!(
        r.body.contains("<strong>no sample</strong> since"),
        "{}",
        r.body
    );
    assert!(r.body.contains("HTTP 500"), "the pod's last error");
    assert!(
        r.body.contains("beyond the per-instance limit"),
        "discovery notes"
    );
    let r = get(addr, "/instances/kura/nope").await;
    assert_eq!(r.status, 404);
    assert!(r.headers.contains("content-type: text/html"));
    // Names are percent-decoded, and escaped where shown.
    let r = get(addr, "/instances/kura/%3Cscript%3E").await;
    assert_eq!(r.status, 404);
    assert!(r.body.contains("kura/&lt;script&gt;"));
    assert_eq!(
        r.body.matches("<script").count(),
        1,
        "only the page's own script"
    );
}

/// A fenced-serving instance whose grant went to `Fencing` (issue 29): the
/// fleet page names the grant's state beside ready / serving, the instance
/// page the fence state of each pod, and the verdict is the hard stop.
#[tokio::test]
async fn a_fenced_instance_in_fencing_shows_the_grant_on_both_pages() {
    let view = FleetView::new();
    let mut fenced = Sim::new("fenced", 2);
    let mut plain = Sim::new("plain", 2);
    for (i, node) in fenced.nodes.iter_mut().enumerate() {
        node.report_generation = kura_sim::ReportGeneration::G4;
        node.serving_authority = true;
        node.fenced_serving = true;
        node.fence_phase = "Serving".into();
        node.fence_valid = i == 0;
        node.fence_epoch = if i == 0 { 7 } else { 0 };
    }
    for node in &mut plain.nodes {
        node.report_generation = kura_sim::ReportGeneration::G4;
        node.serving_authority = true;
    }
    let mut t = 0;
    while t <= 120 {
        if t == 60 {
            // The primary restarted: every pod reports Fencing, none valid.
            fenced.image = NEW;
            for node in &mut fenced.nodes {
                node.fence_phase = "Fencing".into();
                node.fence_valid = false;
                node.fence_epoch = 0;
            }
        }
        fenced.sweep(&view, ts(t));
        plain.sweep(&view, ts(t));
        t += 10;
    }
    let (addr, stop) = serve(&view, ts(t)).await;

    let verdict = get(addr, "/api/v1/instances/kura/fenced/verdict").await;
    assert_eq!(verdict.status, 200);
    assert!(
        verdict.body.contains("\"serving_fenced\""),
        "{}",
        verdict.body
    );

    let fleet = get(addr, "/").await;
    let fenced_row = rows(&fleet.body)
        .into_iter()
        .find(|r| r.contains("kura/fenced"))
        .expect("the fenced instance's row");
    assert!(
        fenced_row.contains("grant phase Fencing, 2 pods with fenced serving, 0 valid writers"),
        "{fenced_row}"
    );
    let plain_row = rows(&fleet.body)
        .into_iter()
        .find(|r| r.contains("kura/plain"))
        .expect("the plain instance's row");
    assert!(!plain_row.contains("grant phase"), "{plain_row}");

    let page = get(addr, "/instances/kura/fenced").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Fencing · epoch 0 · valid no"),
        "the fence state of each pod"
    );
    let page = get(addr, "/instances/kura/plain").await;
    assert!(
        page.body.contains("not fenced"),
        "a pod without fenced serving"
    );
    let _ = stop.send(());
}
