//! `kura-agent demo` in its compressed form: the whole story through the
//! real agent loop and the real wave judge, its final verdicts asserted,
//! the debug endpoint served while it runs, and the binary's exit code.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use kura_agent::cli::demo::{Demo, DemoConfig, NEW_IMAGE};
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
    for i in &outcome.instances {
        assert_eq!(i.spec_image, NEW_IMAGE, "{}", i.id);
        if i.id == "kura/umbrella-us-east" {
            assert_eq!(i.verdict, Some(AgentVerdict::Unhealthy));
            assert_eq!(i.signal, Some(Signal::FdTimeoutsRegressed));
        } else {
            assert_eq!(i.verdict, Some(AgentVerdict::Healthy), "{}", i.id);
            // Every pod restarted; the clamped count kept its baseline.
            assert!(i.counter_resets.unwrap() >= 1, "{}", i.id);
            assert_eq!(i.fd_timeout_count, i.baseline_fd_timeout_count, "{}", i.id);
        }
    }

    // A readable timeline, not a line per sweep.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() < 120, "{} lines", lines.len());
    assert!(
        lines[..10]
            .iter()
            .any(|l| l.contains(&format!("http://{addr}/"))),
        "the debug address comes first"
    );
    for needle in [
        "wave 0 (canary): soak (soaking)",
        "wave 0 (canary): pass",
        "wave 2: soak (fd_timeouts_regressed)",
        "wave 2: hard_stop (wave_deadline_exceeded) held by kura/umbrella-us-east",
        "evidence: fd_timeouts_regressed on kura/umbrella-us-east",
        "the story played as designed",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }

    // The debug endpoint served the fleet while the story ran.
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("kura/acme-eu-west") && page.contains("kura/umbrella-us-east"));
    let json = instances.split("\r\n\r\n").nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value.as_array().map(Vec::len), Some(8), "{value}");
    // The demo's agent serves the verdict endpoint too.
    assert!(verdict.starts_with("HTTP/1.1 200"), "{verdict}");
    let json = verdict.split("\r\n\r\n").nth(1).unwrap();
    let value: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(value["name"], "acme-eu-west", "{value}");
    assert_eq!(value["source"], "live");
    assert!(value["verdict"].is_string(), "{value}");
    assert!(value["rolloutHealthy"]["status"].is_string(), "{value}");
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
fn a_time_scale_below_1_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["demo", "--time-scale", "0.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
