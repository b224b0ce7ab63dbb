//! `kura-agent demo` in its compressed form: the whole story through the
//! real agent loop and the real wave judge, its final verdicts asserted
//! (with the instances apart from the usual case: a suspension in wave 1,
//! a held update outside the waves, a node-local instance polled through
//! the simulated kubelet), the debug endpoint served while it runs, and
//! the binary's exit code.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use kura_agent::tools::demo::{Demo, DemoConfig, InstanceOutcome, NEW_IMAGE};
use kura_gate::VerdictKind;
use kura_schemas::{AgentVerdict, Signal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plain HTTP/1.1 GET; the whole response as text.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

/// The held update's instance (outside the waves): a hard stop on
/// `update_paused` with the pause as evidence while its operator holds
/// both pods, then healthy once they were deleted and the hold lifted.
fn assert_held_update_played(held: &InstanceOutcome, text: &str) {
    assert_eq!(held.wave, None, "outside the waves");
    let at = held
        .verdicts
        .iter()
        .position(|c| c.verdict == AgentVerdict::HardStop && c.signal == Some(Signal::UpdatePaused))
        .unwrap_or_else(|| panic!("never held on update_paused: {:?}\n{text}", held.verdicts));
    let stop = &held.verdicts[at];
    assert_eq!(stop.evidence.len(), 1, "{stop:?}");
    let e = &stop.evidence[0];
    assert_eq!(
        (e.server.as_str(), e.signal),
        ("kura/hooli-eu-west", Signal::UpdatePaused)
    );
    let paused = e.update_paused.as_ref().expect("the pause as evidence");
    assert_eq!(paused.strategy, "OnDelete");
    assert_eq!(paused.template_image.as_deref(), Some(NEW_IMAGE));
    assert_eq!(paused.held_pods, ["hooli-eu-west-1", "hooli-eu-west-0"]);
    let detail = e.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("OnDelete"), "{detail}");
    // It left the hard stop for good and ended healthy on the new image.
    let after = &held.verdicts[at + 1..];
    assert!(!after.is_empty(), "the hold was never lifted\n{text}");
    assert!(
        after
            .iter()
            .all(|c| c.signal != Some(Signal::UpdatePaused) && c.verdict != AgentVerdict::HardStop),
        "{after:?}"
    );
    assert_eq!(held.verdict, Some(AgentVerdict::Healthy), "{text}");
    assert_eq!(held.spec_image, NEW_IMAGE);
    assert_eq!(held.sampled_pods, Some(2));
    assert!(held.counter_resets.unwrap() >= 2, "both pods deleted");
    assert!(held.was_held_on_update_paused());
    assert!(held.played_its_part());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_passes_the_canary_and_stops_the_regression_with_evidence() {
    let config = DemoConfig {
        time_scale: 150.0,
        listen: "127.0.0.1:0".parse().unwrap(),
        ..DemoConfig::default()
    };
    let soaks = (config.gate.soak_for(0), config.gate.soak_for(1));
    let demo = Demo::start(config).await.unwrap();
    let addr = demo.debug_addr();
    let started = Instant::now();
    let mut out = Vec::new();
    let (outcome, (page, instances, verdict)) = tokio::join!(demo.play(&mut out), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        (
            get(addr, "/").await,
            get(addr, "/debug/instances").await,
            get(addr, "/api/v1/instances/kura/acme-eu-west/verdict").await,
        )
    });
    let outcome = outcome.unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "{text}");
    assert!(outcome.played_as_designed(), "{text}");

    // Final verdicts per wave, in the gate's own words.
    let verdicts: Vec<(u32, VerdictKind)> = outcome
        .waves
        .iter()
        .map(|w| (w.wave, w.verdict.verdict))
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (0, VerdictKind::Pass),
            (1, VerdictKind::Pass),
            (2, VerdictKind::HardStop)
        ],
        "{text}"
    );
    assert_eq!(outcome.waves[0].servers, vec!["kura/acme-eu-west"]);
    for (wave, soak) in [(0, soaks.0), (1, soaks.1)] {
        let w = &outcome.waves[wave];
        let soaked = w.ended_at.duration_since(w.started_at).as_secs();
        assert!(
            soaked >= i64::try_from(soak).unwrap(),
            "wave {wave}: {soaked}s"
        );
    }
    let stop = &outcome.waves[2].verdict;
    assert_eq!(stop.signal, Some(Signal::WaveDeadlineExceeded));
    assert_eq!(stop.server_id.as_deref(), Some("kura/umbrella-us-east"));
    let regressing = outcome
        .instances
        .iter()
        .find(|i| i.id == "kura/umbrella-us-east")
        .unwrap();
    let fd = stop
        .evidence
        .iter()
        .find(|e| e.signal == Signal::FdTimeoutsRegressed)
        .unwrap();
    assert_eq!(fd.server, "kura/umbrella-us-east");
    assert_eq!(fd.baseline, regressing.baseline_fd_timeout_count);
    assert!(fd.observed > fd.baseline && fd.band_top == fd.baseline);

    // The agent's own per-instance verdicts in the in-memory status store.
    assert_eq!(outcome.instances.len(), 9);
    for i in &outcome.instances {
        assert_eq!(i.spec_image, NEW_IMAGE, "{}", i.id);
        match i.id.as_str() {
            "kura/umbrella-us-east" => {
                assert_eq!(i.verdict, Some(AgentVerdict::Unhealthy));
                assert_eq!(i.signal, Some(Signal::FdTimeoutsRegressed));
            }
            "kura/globex-us-east" => {
                // Suspended by its operator in the middle of wave 1.
                assert_eq!(i.verdict, Some(AgentVerdict::Suspended), "{text}");
                assert_eq!(i.signal, Some(Signal::InstanceSuspended));
                assert_eq!(i.sampled_pods, Some(0));
                let last = i.verdicts.last().unwrap();
                assert_eq!(last.evidence[0].signal, Signal::InstanceSuspended);
                assert!(
                    i.verdicts
                        .iter()
                        .any(|c| c.verdict != AgentVerdict::Suspended),
                    "judged before its suspension: {:?}",
                    i.verdicts
                );
            }
            "kura/hooli-eu-west" => assert_held_update_played(i, &text),
            _ => {
                assert_eq!(i.verdict, Some(AgentVerdict::Healthy), "{}", i.id);
                // Every pod restarted; the clamped count kept its baseline.
                assert!(i.counter_resets.unwrap() >= 1, "{}", i.id);
                assert_eq!(i.fd_timeout_count, i.baseline_fd_timeout_count, "{}", i.id);
            }
        }
    }

    // Wave 1 passed although one of its servers was suspended mid-upgrade:
    // the wave judge left it out of scope (it never converged, and the
    // pass carries no evidence about it).
    assert_eq!(
        outcome.waves[1].servers,
        [
            "kura/acme-us-east",
            "kura/globex-eu-west",
            "kura/globex-us-east"
        ]
    );
    assert!(outcome.waves[1].verdict.evidence.is_empty());
    assert!(
        outcome.waves[2]
            .verdict
            .evidence
            .iter()
            .all(|e| e.server != "kura/globex-us-east" && e.server != "kura/hooli-eu-west"),
        "neither the suspended nor the pinned instance is in wave 2's scope"
    );

    // The node-local instance was sampled, and only through the simulated
    // kubelet's port-forwards: its pod IP is in TEST-NET-1, where nothing
    // answers.
    let local = outcome
        .instances
        .iter()
        .find(|i| i.id == "kura/acme-us-east")
        .unwrap();
    assert!(local.node_local);
    assert_eq!(local.sampled_pods, Some(1));
    assert_eq!(local.pod_ips.len(), 1);
    assert!(
        local.pod_ips[0].starts_with("192.0.2."),
        "{:?}",
        local.pod_ips
    );
    assert_eq!(local.verdict, Some(AgentVerdict::Healthy));
    // One port-forward per sweep of it: more than a handful over the story.
    assert!(outcome.port_forwards >= 10, "{}", outcome.port_forwards);

    // A readable timeline, not a line per sweep.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() < 120, "{} lines", lines.len());
    assert!(
        lines[0].contains("open the fleet page at")
            && lines[0].contains(&format!("http://{addr}/")),
        "the page's address comes first: {}",
        lines[0]
    );
    for needle in [
        "wave 0 (canary): soak (soaking)",
        "wave 0 (canary): pass",
        "wave 1           kura/acme-us-east (node-local), kura/globex-eu-west, kura/globex-us-east",
        "node-local: kura/acme-us-east: its pod IPs (192.0.2.",
        "operator: suspends kura/globex-us-east (spec.suspended: true) in the middle of its upgrade, 1/2 pods",
        "agent: kura/globex-us-east status.rolloutGate suspended (instance_suspended)",
        "wave 1: pass",
        "operator: moves kura/hooli-eu-west (outside the waves) to 0.42.0 by hand with updateStrategy OnDelete: \
         Kura's controller holds hooli-eu-west-1, hooli-eu-west-0 on 0.41.2",
        "agent: kura/hooli-eu-west status.rolloutGate hard_stop (update_paused): server kura/hooli-eu-west: update_paused",
        "operator: deletes held pod hooli-eu-west-1 of kura/hooli-eu-west: it comes back on 0.42.0; still held: hooli-eu-west-0",
        "operator: deletes held pod hooli-eu-west-0 of kura/hooli-eu-west: it comes back on 0.42.0; none left to hold",
        "agent: kura/hooli-eu-west status.rolloutGate healthy (none)",
        "wave 2: soak (fd_timeouts_regressed)",
        "wave 2: hard_stop (wave_deadline_exceeded) held by kura/umbrella-us-east",
        "evidence: server kura/umbrella-us-east: fd_timeouts_regressed",
        "suspended kura/globex-us-east: suspended (instance_suspended); out of wave 1's scope",
        "held update kura/hooli-eu-west: hard_stop (update_paused) from +03:",
        "node-local kura/acme-us-east: 1/1 pods sampled through the simulated kubelet's port-forwards",
        "the story played as designed",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // The suspension and the hold come in the story's order: the hold
    // and its lifting during the canary's soak, the suspension in wave 1.
    let at = |needle: &str| text.find(needle).unwrap();
    assert!(at("status.rolloutGate hard_stop (update_paused)") < at("wave 0 (canary): pass"));
    assert!(at("kura/hooli-eu-west status.rolloutGate healthy") < at("wave 0 (canary): pass"));
    assert!(at("wave 1 scheduled") < at("operator: suspends kura/globex-us-east (spec.suspended"));
    assert!(at("operator: suspends kura/globex-us-east (spec.suspended") < at("wave 1: pass"));

    // The debug endpoint served the fleet while the story ran.
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("kura/acme-eu-west") && page.contains("kura/umbrella-us-east"));
    let json = instances.split("\r\n\r\n").nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value.as_array().map(Vec::len), Some(9), "{value}");
    // The demo's agent serves the verdict endpoint too.
    assert!(verdict.starts_with("HTTP/1.1 200"), "{verdict}");
    let json = verdict.split("\r\n\r\n").nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value["name"], "acme-eu-west", "{value}");
    assert_eq!(value["source"], "live");
    assert!(value["verdict"].is_string(), "{value}");
    assert!(value["rolloutHealthy"]["status"].is_string(), "{value}");
    assert!(
        value.get("shadow").is_none(),
        "no shadow configuration: no key"
    );

    // The pages stay up after the story (the demo is not dropped yet):
    // the stopped wave's instance first on the fleet page, and its own
    // page with the evidence as a sentence and the chart's band.
    let page = get(addr, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let first_row = page
        .split("<tbody id=\"rows\" data-live>")
        .nth(1)
        .and_then(|b| b.split("</tr>").next())
        .unwrap_or_else(|| panic!("no fleet table in {page}"));
    assert!(first_row.contains("kura/umbrella-us-east"), "{first_row}");
    assert!(first_row.contains("fd_timeouts_regressed"), "{first_row}");
    let page = get(addr, "/instances/kura/umbrella-us-east").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("<strong>unhealthy</strong> since"), "{page}");
    assert!(page.contains(": fd timeouts "), "{page}");
    assert!(page.contains("<polyline class=\"band\""), "the band line");
    assert!(page.contains("<circle class=\"pt\""), "the chart's points");
    drop(demo);
}

#[test]
fn the_binary_exits_0_when_the_story_plays_as_designed() {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["demo", "--time-scale", "200", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("wave 2           hard_stop  wave_deadline_exceeded"),
        "{text}"
    );
}

#[test]
fn keep_serving_keeps_the_page_up_after_the_story_until_ctrl_c() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args([
            "demo",
            "--time-scale",
            "200",
            "--listen",
            "127.0.0.1:0",
            "--keep-serving",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split("open the fleet page at ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address first: {first}"))
        .to_owned();
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut over = false;
    for line in lines.by_ref() {
        if line.unwrap().contains("the fleet page stays up at") {
            over = true;
            break;
        }
        assert!(Instant::now() < deadline, "the story did not end in 60 s");
    }
    assert!(over, "the story ended without keeping the page up");
    let rt = tokio::runtime::Runtime::new().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let page = rt.block_on(get(addr, "/"));
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("kura/umbrella-us-east"));
    assert!(child.try_wait().unwrap().is_none(), "still serving");
    // Ctrl-C ends it, with the story's exit code.
    let pid = i32::try_from(child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_time_scale_below_1_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["demo", "--time-scale", "0.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The shipped shadow file of the demo (`demo --shadow-gate-config`).
fn shadow_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/demo/shadow-loose-fd.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_configuration_that_would_pass_the_regression_is_shown_and_never_published() {
    let shadow = kura_agent::cli::gate_file::load(&shadow_file()).unwrap();
    let config = DemoConfig {
        time_scale: 150.0,
        listen: "127.0.0.1:0".parse().unwrap(),
        shadow_gate: Some(shadow.config),
        ..DemoConfig::default()
    };
    let demo = Demo::start(config).await.unwrap();
    let addr = demo.debug_addr();
    let mut out = Vec::new();
    let outcome = demo.play(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    // The live story is the same: the regression is held and stopped.
    assert!(outcome.played_as_designed(), "{text}");
    for i in &outcome.instances {
        if i.id == "kura/umbrella-us-east" {
            assert_eq!(i.verdict, Some(AgentVerdict::Unhealthy), "published");
            assert_eq!(i.signal, Some(Signal::FdTimeoutsRegressed));
            assert_eq!(i.shadow, Some((AgentVerdict::Healthy, None)), "{text}");
        } else if i.id == "kura/globex-us-east" {
            // Suspended: the shadow says so too.
            let suspended = (AgentVerdict::Suspended, Some(Signal::InstanceSuspended));
            assert_eq!(i.shadow, Some(suspended), "{}", i.id);
        } else {
            assert_eq!(i.shadow, Some((AgentVerdict::Healthy, None)), "{}", i.id);
        }
    }
    assert!(
        text.contains(
            "shadow verdicts (--shadow-gate-config, never published): 1 disagree: \
kura/umbrella-us-east healthy (none) where the live verdict is unhealthy (fd_timeouts_regressed)"
        ),
        "{text}"
    );

    // The fleet page lists the disagreement first, both evidences.
    let page = get(addr, "/").await;
    let section = page
        .split("<section id=\"shadow\" data-live>")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .unwrap_or_else(|| panic!("no shadow section in {page}"));
    assert!(
        section.contains("judges 1 of 9 instances differently"),
        "{section}"
    );
    let row = section
        .split("<tr class=\"shadow-disagrees\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no disagreement row in {section}"));
    assert!(row.contains("kura/umbrella-us-east"), "{row}");
    assert!(row.contains("<code>fd_timeouts_regressed</code>"), "{row}");
    assert!(row.contains("fd timeouts "), "the live evidence: {row}");
    assert!(
        row.contains("every gated signal passes"),
        "the shadow's: {row}"
    );
    assert!(
        page.find("id=\"shadow\"") < page.find("<tbody id=\"rows\""),
        "disagreements come before the fleet table"
    );

    // The instance page: both verdicts side by side, the bands apart.
    let page = get(addr, "/instances/kura/umbrella-us-east").await;
    assert!(
        page.contains("The shadow configuration disagrees"),
        "{page}"
    );
    let table = page
        .split("<table id=\"shadow-side-by-side\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no side-by-side table in {page}"));
    assert!(table.contains("live (published)") && table.contains("shadow (never published)"));
    let fd_band = table
        .split("fd timeouts band top</th>")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no fd band row in {table}"));
    let tops: Vec<u64> = fd_band
        .split("<td class=\"num\">")
        .skip(1)
        .map(|c| c.split('<').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(tops.len(), 2, "{fd_band}");
    assert_eq!(tops[1], tops[0] + 500, "the shadow's band is 500 wider");

    // The verdict API: the live verdict, and the shadow under its own key.
    let verdict = get(addr, "/api/v1/instances/kura/umbrella-us-east/verdict").await;
    let json = verdict.split("\r\n\r\n").nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value["verdict"], "unhealthy", "{value}");
    assert_eq!(value["signal"], "fd_timeouts_regressed");
    assert_eq!(value["shadow"]["verdict"], "healthy", "{value}");
    assert_eq!(value["shadow"]["agrees"], false);
    assert_eq!(value["shadow"]["configSource"], "file");
    assert_eq!(value["shadow"]["evidence"], serde_json::json!([]));

    // The metrics: the shadow's own series; the live one unchanged.
    let metrics = get(addr, "/metrics").await;
    assert!(
        metrics.contains(
            "kura_instance_shadow_disagrees{kura_namespace=\"kura\",kura_instance=\"umbrella-us-east\",config=\"shadow\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "kura_instance_gate_verdict{kura_namespace=\"kura\",kura_instance=\"umbrella-us-east\",verdict=\"unhealthy\"} 1"
    ));
    drop(demo);
}

#[test]
fn the_binary_plays_the_demo_with_a_shadow_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["demo", "--time-scale", "200", "--listen", "127.0.0.1:0"])
        .arg("--shadow-gate-config")
        .arg(shadow_file())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "1 disagree: kura/umbrella-us-east healthy (none) where the live verdict is unhealthy"
        ),
        "{text}"
    );
    // An unusable shadow file is a usage error, before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["demo", "--shadow-gate-config", "/nonexistent/shadow.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}
