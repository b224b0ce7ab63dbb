//! Exported timelines under testdata/timeline/ through `kura-gate replay`:
//! the agent's view reproduces the verdicts the timelines say the agent
//! published, a tampered one is caught (exit 1), and what-if against a
//! candidate configuration (`--gate-config`, `--diff`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn timeline(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../testdata/timeline/{name}"))
}

/// Runs `kura-gate replay ARGS`: exit code, JSON lines, standard error.
fn replay(args: &[&str]) -> (i32, Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (
        out.status.code().unwrap(),
        lines,
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn path(name: &str) -> String {
    timeline(name).to_str().unwrap().to_owned()
}

fn verdicts(lines: &[Value]) -> Vec<(String, Value)> {
    lines
        .iter()
        .map(|l| {
            (
                l["verdict"].as_str().unwrap().to_owned(),
                l["signal"].clone(),
            )
        })
        .collect()
}

#[test]
fn the_agent_view_reproduces_every_published_verdict() {
    for (name, ticks) in [
        ("soaks.json", 7),
        ("holds.json", 7),
        ("hard-stops.json", 4),
        ("reset-in-window.json", 5),
    ] {
        let (code, lines, err) = replay(&["--agent-view", &path(name)]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(lines.len(), ticks, "{name}: one line per tick (one server)");
        for (tick, line) in lines.iter().enumerate() {
            assert_eq!(line["tick"], tick);
            assert_eq!(line["serverId"], "kura/acme");
            assert!(line["published"].is_object(), "{name}: {line}");
            assert_eq!(line["agrees"], true, "{name}: {line}");
        }
    }
}

#[test]
fn the_agent_view_holds_hard_stops_and_follows_a_reset() {
    let (_, lines, _) = replay(&["--agent-view", &path("holds.json")]);
    let unhealthy = ("unhealthy".to_owned(), Value::from("outbox_regressed"));
    let healthy = ("healthy".to_owned(), Value::Null);
    assert_eq!(
        verdicts(&lines),
        [
            healthy.clone(),
            healthy.clone(),
            unhealthy.clone(),
            unhealthy,
            healthy.clone(),
            healthy.clone(),
            healthy.clone()
        ]
    );
    assert_eq!(lines[2]["evidence"][0]["observed"], 400);
    assert_eq!(lines[2]["evidence"][0]["bandTop"], 150);
    assert_eq!(lines[4]["healthySince"], "2026-07-21T10:04:00Z");

    let (_, lines, _) = replay(&["--agent-view", &path("hard-stops.json")]);
    assert_eq!(lines[2]["verdict"], "hard_stop");
    assert_eq!(lines[2]["signal"], "memory_pressure_critical");
    assert_eq!(lines[3]["verdict"], "healthy", "the agent does not latch");

    // The reset at tick 1 lowered the effective baseline to 3: 4 at tick 3
    // is over a band of 0 above it, and so is 80, below the captured 90.
    let (_, lines, _) = replay(&["--agent-view", &path("reset-in-window.json")]);
    assert_eq!(lines[2]["verdict"], "healthy");
    assert_eq!(lines[3]["signal"], "fd_timeouts_regressed");
    assert_eq!(lines[3]["evidence"][0]["baseline"], 3);
    assert_eq!(lines[4]["signal"], "fd_timeouts_regressed");
    assert_eq!(lines[4]["evidence"][0]["observed"], 80);
}

#[test]
fn a_tampered_published_verdict_exits_1_after_every_line() {
    let (code, lines, _) = replay(&["--agent-view", &path("tampered.json")]);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 7, "every line is printed");
    let disagreeing: Vec<_> = lines
        .iter()
        .filter(|l| l["agrees"] == false)
        .map(|l| l["tick"].clone())
        .collect();
    assert_eq!(disagreeing, [2]);
    assert_eq!(lines[2]["verdict"], "unhealthy");
    assert_eq!(lines[2]["published"]["verdict"], "healthy");
}

#[test]
fn the_wave_view_of_a_timeline_is_the_usual_output() {
    let (code, lines, err) = replay(&[&path("soaks.json")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 7);
    assert_eq!(lines[4]["verdict"], "soak");
    assert_eq!(lines[5]["verdict"], "pass");
    assert!(
        lines[0].get("published").is_none(),
        "no new keys by default"
    );
    let (_, lines, _) = replay(&[&path("hard-stops.json")]);
    assert_eq!(lines[2]["verdict"], "hard_stop");
    assert_eq!(lines[3]["verdict"], "hard_stop", "the wave judge latches");
}

/// `holds.json` with `edit` applied, written to a temporary file.
fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(timeline("holds.json")).unwrap()).unwrap();
    edit(&mut doc);
    let out =
        std::env::temp_dir().join(format!("kura-gate-timeline-{}-{name}", std::process::id()));
    std::fs::write(&out, doc.to_string()).unwrap();
    out
}

/// A change made to a copy of `holds.json`.
type Edit = Box<dyn FnOnce(&mut Value)>;

#[test]
fn the_timeline_keys_are_read_strictly() {
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "instance-key",
            Box::new(|d: &mut Value| d["instance"]["image"] = "x".into()),
            "field instance.image: unknown field",
        ),
        (
            "instance-baseline-missing",
            Box::new(|d: &mut Value| {
                d["instance"]
                    .as_object_mut()
                    .unwrap()
                    .remove("baselineImage");
            }),
            "field instance.baselineImage: missing",
        ),
        (
            "window-back",
            Box::new(|d: &mut Value| d["window"]["to"] = "2026-07-21T09:00:00Z".into()),
            "field window.to: 2026-07-21T09:00:00Z is before window.from 2026-07-21T09:59:30Z",
        ),
        (
            "window-dropped",
            Box::new(|d: &mut Value| d["window"]["droppedTicks"] = (-1).into()),
            "field window.droppedTicks: expected a non-negative integer, got -1",
        ),
        (
            "window-complete",
            Box::new(|d: &mut Value| d["window"]["complete"] = "yes".into()),
            "field window.complete: expected a boolean, got \"yes\"",
        ),
        (
            "verdict",
            Box::new(|d: &mut Value| {
                d["ticks"][0]["servers"][0]["published"]["verdict"] = "pass".into()
            }),
            "tick 0, server \"kura/acme\", field published.verdict: unknown value \"pass\" (healthy, unhealthy, hard_stop or suspended)",
        ),
        (
            "signal",
            Box::new(|d: &mut Value| {
                d["ticks"][0]["servers"][0]["published"] =
                    serde_json::json!({"verdict": "unhealthy", "signal": "bogus"})
            }),
            "tick 0, server \"kura/acme\", field published.signal: unknown signal \"bogus\"",
        ),
        (
            "healthy-with-signal",
            Box::new(|d: &mut Value| {
                d["ticks"][0]["servers"][0]["published"]["signal"] = "not_ready".into()
            }),
            "tick 0, server \"kura/acme\", field published.signal: must be null when the verdict is healthy",
        ),
        (
            "published-key",
            Box::new(|d: &mut Value| d["ticks"][0]["servers"][0]["published"]["at"] = 1.into()),
            "tick 0, server \"kura/acme\", field published.at: unknown field",
        ),
    ];
    for (name, edit, want) in cases {
        let file = edited(name, edit);
        let (code, lines, err) = replay(&["--agent-view", file.to_str().unwrap()]);
        std::fs::remove_file(&file).unwrap();
        assert_eq!((code, lines.len()), (2, 0), "{name}");
        assert_eq!(err.trim_end(), want, "{name}");
    }
    // A tick read on its own (the C ABI's tick document) has no published.
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(timeline("holds.json")).unwrap()).unwrap();
    let err = kura_gate::parse_tick_json(
        &doc["ticks"][0].to_string(),
        &kura_gate::GateConfig::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "server \"kura/acme\", field published: unknown field"
    );
}

#[test]
fn what_if_a_looser_outbox_band_lets_the_held_rollout_through() {
    let (code, lines, err) = replay(&[
        "--gate-config",
        &path("looser-outbox.gate.json"),
        "--diff",
        &path("holds.json"),
    ]);
    assert_eq!(code, 1, "{err}");
    // Held at ticks 2 and 3 with its own band, and the failing ticks
    // restarted the soak clock; the candidate soaks on and passes at 5.
    let ticks: Vec<_> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l["tick"].clone())
        .collect();
    assert_eq!(ticks, [2, 3, 5, 6]);
    assert_eq!(lines[0]["document"]["signal"], "outbox_regressed");
    assert_eq!(lines[0]["candidate"]["signal"], "soaking");
    assert_eq!(lines[2]["document"]["signal"], "soaking");
    assert_eq!(lines[2]["candidate"]["verdict"], "pass");
    let summary = &lines[lines.len() - 1]["summary"];
    assert_eq!(summary["view"], "wave");
    assert_eq!(summary["ticks"], 7);
    assert_eq!(summary["differences"], 4);
    assert_eq!(summary["document"]["firstHold"]["tick"], 2);
    assert_eq!(summary["document"]["firstPass"], Value::Null);
    assert_eq!(summary["document"]["timeToPassSeconds"], Value::Null);
    assert_eq!(summary["candidate"]["firstHold"], Value::Null);
    assert_eq!(summary["candidate"]["firstPass"]["tick"], 5);
    assert_eq!(summary["candidate"]["timeToPassSeconds"], 300);
    assert_eq!(summary["candidate"]["hardStopTicks"], 0);

    let (code, lines, err) = replay(&[
        "--gate-config",
        &path("looser-outbox.gate.json"),
        "--diff",
        "--agent-view",
        &path("holds.json"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["serverId"], "kura/acme");
    assert_eq!(lines[0]["document"]["verdict"], "unhealthy");
    assert_eq!(lines[0]["candidate"]["verdict"], "healthy");
    let summary = &lines[2]["summary"];
    assert_eq!(summary["view"], "agent");
    // Healthy from 10:00, soaked 300 s at 10:05; the baseline was captured
    // at 09:59:30.
    assert_eq!(summary["candidate"]["firstPass"]["tick"], 5);
    assert_eq!(summary["candidate"]["timeToPassSeconds"], 330);
    assert_eq!(summary["document"]["firstHold"]["serverId"], "kura/acme");
    assert_eq!(summary["document"]["firstPass"], Value::Null);
}

#[test]
fn what_if_with_the_same_configuration_prints_only_the_summary() {
    let same = edited("same.json", |_| {});
    let config = std::env::temp_dir().join(format!("kura-gate-same-{}.json", std::process::id()));
    std::fs::write(
        &config,
        r#"{"soakSeconds": [300], "backlogDrainWindowSeconds": 0}"#,
    )
    .unwrap();
    let (code, lines, err) = replay(&[
        "--gate-config",
        config.to_str().unwrap(),
        "--diff",
        same.to_str().unwrap(),
    ]);
    std::fs::remove_file(&same).unwrap();
    std::fs::remove_file(&config).unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["summary"]["differences"], 0);
    assert_eq!(
        lines[0]["summary"]["document"],
        lines[0]["summary"]["candidate"]
    );
}

#[test]
fn a_hard_stop_is_counted_in_the_summary() {
    let config = std::env::temp_dir().join(format!("kura-gate-hs-{}.json", std::process::id()));
    std::fs::write(&config, r#"{"soakSeconds": [60]}"#).unwrap();
    let (code, lines, err) = replay(&[
        "--gate-config",
        config.to_str().unwrap(),
        "--diff",
        &path("hard-stops.json"),
    ]);
    std::fs::remove_file(&config).unwrap();
    assert_eq!(code, 1, "{err}");
    let summary = &lines[lines.len() - 1]["summary"];
    // Own soak 300: stopped at tick 2, latched at 3. Soak 60: passed at 1.
    assert_eq!(summary["document"]["firstHardStop"]["tick"], 2);
    assert_eq!(
        summary["document"]["firstHardStop"]["signal"],
        "memory_pressure_critical"
    );
    assert_eq!(summary["document"]["hardStopTicks"], 2);
    assert_eq!(summary["candidate"]["firstPass"]["tick"], 1);
    assert_eq!(summary["candidate"]["timeToPassSeconds"], 60);
}

#[test]
fn a_refused_candidate_exits_2_naming_the_file_and_key() {
    let config = std::env::temp_dir().join(format!("kura-gate-bad-{}.json", std::process::id()));
    for (text, want) in [
        (
            r#"{"fdTimeoutBand": "3"}"#,
            "key fdTimeoutBand: expected a non-negative integer, got \"3\"",
        ),
        (r#"{"bogus": 1}"#, "key bogus: unknown key (the keys are "),
        (
            "null",
            "empty: expected an object of gate settings (write {} for the defaults)",
        ),
        (
            r#"{"fdTimeoutBand": 0, "fdTimeoutBand": 9}"#,
            "not valid JSON: ",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let (code, lines, err) = replay(&[
            "--gate-config",
            config.to_str().unwrap(),
            &path("holds.json"),
        ]);
        assert_eq!((code, lines.len()), (2, 0), "{text}");
        let prefix = format!("gate config {}: ", config.display());
        assert!(err.starts_with(&format!("{prefix}{want}")), "{text}: {err}");
    }
    std::fs::remove_file(&config).unwrap();
    let (code, _, err) = replay(&["--diff", &path("holds.json")]);
    assert_eq!(code, 2, "--diff needs --gate-config: {err}");
}

#[test]
fn what_if_the_drain_window_lets_a_draining_outbox_through() {
    // holds.json judges the outbox by its band alone (window 0); the
    // candidate has the default drain window (900 s): 400 then 300 is a
    // draining backlog, never a regression, in both views.
    let config = std::env::temp_dir().join(format!("kura-gate-drain-{}.json", std::process::id()));
    std::fs::write(&config, r#"{"soakSeconds": [300]}"#).unwrap();
    let (code, lines, err) = replay(&[
        "--gate-config",
        config.to_str().unwrap(),
        "--diff",
        &path("holds.json"),
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(lines[0]["tick"], 2);
    assert_eq!(lines[0]["document"]["signal"], "outbox_regressed");
    assert_eq!(lines[0]["candidate"]["signal"], "soaking");
    let summary = &lines[lines.len() - 1]["summary"];
    assert_eq!(summary["candidate"]["firstHold"], Value::Null);
    assert_eq!(summary["candidate"]["firstPass"]["tick"], 5);
    let (code, lines, err) = replay(&[
        "--gate-config",
        config.to_str().unwrap(),
        "--diff",
        "--agent-view",
        &path("holds.json"),
    ]);
    std::fs::remove_file(&config).unwrap();
    assert_eq!(code, 1, "{err}");
    assert_eq!(lines[0]["document"]["verdict"], "unhealthy");
    assert_eq!(lines[0]["candidate"]["verdict"], "healthy");
}
