//! `--gate-config FILE` end to end through the `kura-agent` binary against
//! simulated nodes on loopback: every key of the document changes what
//! `check` decides (a band widened in the file turns a failure into a
//! pass; a tighter sample age turns a pass into a failure; the soak and the
//! deadline come from the file; the future skew limits a baseline taken by
//! a clock ahead), and an invalid file or value stops `check`
//! and `run` at start-up with exit 2 and one line naming the file, the key
//! and the reason.
//!
//! Each counter case takes a baseline (`kura-agent baseline`), then moves
//! the nodes, then checks against that baseline with and without the file:
//! the same movement, two verdicts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kura_sim::{Behaviour, ReportGeneration, SimNode, Simulator};
use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kura-agent"))
}

/// Runs the binary off the runtime's threads: exit code, stdout, stderr.
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

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kura-gate-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// One counter case: nodes set up by `before`, a baseline, the nodes moved
/// by `after`, then `check --baseline` with and without `gate_file`.
struct Case {
    name: &'static str,
    before: fn(&mut [SimNode]),
    after: fn(&mut [SimNode]),
    gate_file: &'static str,
    /// A file given to the run "without" the case's file (empty: none):
    /// the outbox cases judge the backlog by its band alone
    /// (`backlogDrainWindowSeconds: 0`) in both runs, since a check of a
    /// few seconds never outlasts the default drain window.
    common_file: &'static str,
    /// The signal the check fails with without the file.
    fails_with: &'static str,
}

/// Runs a case: (exit code and lines without the file, with it).
async fn run_case(case: &Case, dir: &Path) -> ((i32, Vec<Value>), (i32, Vec<Value>)) {
    let sim = Simulator::healthy(case.name, 2).await.unwrap();
    for (i, pod) in sim.pods().iter().enumerate() {
        pod.update(|n| {
            let mut nodes = vec![n.clone(), n.clone()];
            (case.before)(&mut nodes);
            *n = nodes[i].clone();
        });
    }
    let baseline = dir.join(format!("{}.baseline.json", case.name));
    let mut args = vec!["baseline".to_owned(), "--out".to_owned()];
    args.push(baseline.to_string_lossy().into_owned());
    args.extend(node_args(&sim));
    let (code, out, err) = run(args).await;
    assert_eq!(code, 0, "{}: baseline: {out}{err}", case.name);
    for (i, pod) in sim.pods().iter().enumerate() {
        pod.update(|n| {
            let mut nodes = vec![n.clone(), n.clone()];
            (case.after)(&mut nodes);
            *n = nodes[i].clone();
        });
    }
    let gate = write(dir, &format!("{}.gate.yaml", case.name), case.gate_file);
    let common = (!case.common_file.is_empty())
        .then(|| write(dir, &format!("{}.common.yaml", case.name), case.common_file));
    let check = |with_file: bool| {
        let mut args: Vec<String> = [
            "check",
            "--json",
            "--soak",
            "1s",
            "--interval",
            "200ms",
            "--timeout",
            "3s",
            "--baseline",
        ]
        .map(String::from)
        .to_vec();
        args.push(baseline.to_string_lossy().into_owned());
        if with_file {
            args.extend(["--gate-config".to_owned(), gate.clone()]);
        } else if let Some(common) = &common {
            args.extend(["--gate-config".to_owned(), common.clone()]);
        }
        args.extend(node_args(&sim));
        args
    };
    let (without, with) = tokio::join!(run(check(false)), run(check(true)));
    (
        (without.0, json_lines(&without.1)),
        (with.0, json_lines(&with.1)),
    )
}

/// Every band key of the file widens its band: the movement that fails the
/// check with the defaults passes with the file. And the reverse for the
/// sample age: a slow node passes by default and fails with a limit below
/// its delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_band_key_of_the_file_changes_the_verdict_of_check() {
    let dir = scratch("bands");
    let cases = [
        Case {
            name: "fdband",
            before: |_| {},
            after: |n| n[0].fd_timeout_count += 2,
            gate_file: "fdTimeoutBand: 2\n",
            common_file: "",
            fails_with: "fd_timeouts_regressed",
        },
        Case {
            name: "outmin",
            before: |n| {
                // Nodes that still report their outbox (G3; G4 does not).
                n.iter_mut()
                    .for_each(|n| n.report_generation = ReportGeneration::G3);
                n[0].outbox_messages = 100;
            },
            after: |n| n[0].outbox_messages = 160,
            gate_file: "backlogDrainWindowSeconds: 0\noutboxBandMinimum: 60\n",
            common_file: "backlogDrainWindowSeconds: 0\n",
            fails_with: "outbox_regressed",
        },
        Case {
            name: "outpct",
            before: |n| {
                n.iter_mut()
                    .for_each(|n| n.report_generation = ReportGeneration::G3);
                n[0].outbox_messages = 1000;
            },
            after: |n| n[0].outbox_messages = 1150,
            gate_file: "backlogDrainWindowSeconds: 0\noutboxBandPercent: 15\n",
            common_file: "backlogDrainWindowSeconds: 0\n",
            fails_with: "outbox_regressed",
        },
        Case {
            name: "peermin",
            before: |_| {},
            after: |n| n[1].peer_connection_failure_count = 30,
            gate_file: "peerFailureBandMinimum: 30\n",
            common_file: "",
            fails_with: "peer_connection_failures_regressed",
        },
        Case {
            name: "peerpct",
            before: |n| n[1].peer_connection_failure_count = 1000,
            after: |n| n[1].peer_connection_failure_count = 1150,
            gate_file: "peerFailureBandPercent: 15\n",
            common_file: "",
            fails_with: "peer_connection_failures_regressed",
        },
    ];
    let results = futures::future::join_all(cases.iter().map(|c| run_case(c, &dir))).await;
    for (case, ((code, lines), (code_file, lines_file))) in cases.iter().zip(results) {
        let last = lines.last().unwrap();
        assert_eq!(code, 1, "{}: defaults: {last}", case.name);
        assert_eq!(
            last["lastFailingSignal"], case.fails_with,
            "{}: {last}",
            case.name
        );
        let last = lines_file.last().unwrap();
        assert_eq!(
            code_file, 0,
            "{}: with {:?}: {last}",
            case.name, case.gate_file
        );
        assert_eq!(last["verdict"], "pass", "{}", case.name);
        assert_eq!(last["lastFailingSignal"], Value::Null, "{}", case.name);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_age_limit_of_the_file_makes_a_slow_node_stale() {
    let dir = scratch("age");
    let sim = Simulator::healthy("age", 2).await.unwrap();
    sim.pods()[1]
        .set(Behaviour::slow(Duration::from_millis(1500)))
        .await
        .unwrap();
    let gate = write(&dir, "gate.json", r#"{"maxSampleAgeSeconds": 1}"#);
    let check = |file: Option<&str>| {
        let mut args: Vec<String> = [
            "check",
            "--json",
            "--soak",
            "1s",
            "--interval",
            "100ms",
            "--timeout",
            // The whole run (since issue 32, item 9): polls of 1.5 s, a 1 s
            // soak and room for a loaded machine.
            "8s",
        ]
        .map(String::from)
        .to_vec();
        if let Some(file) = file {
            args.extend(["--gate-config".to_owned(), file.to_owned()]);
        }
        args.extend(node_args(&sim));
        args
    };
    let ((code, out, _), (code_file, out_file, _)) =
        tokio::join!(run(check(None)), run(check(Some(&gate))));
    assert_eq!(
        code, 0,
        "a 1.5 s old sample is fresh by default (180 s): {out}"
    );
    assert_eq!(code_file, 1, "{out_file}");
    let lines = json_lines(&out_file);
    assert_eq!(lines[0]["signal"], "sample_stale", "{}", lines[0]);
    // The run's last poll may be cut by its deadline (`--timeout` bounds
    // the whole run): the node is then unsampled, not stale.
    let last = lines.last().unwrap()["lastFailingSignal"].clone();
    assert!(last == "sample_stale" || last == "pods_unsampled", "{last}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `soakSeconds` and `waveDeadlineSeconds` of the file are the defaults of
/// `--soak` and `--timeout`; the flags still win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_and_deadline_come_from_the_file_unless_flags_say_otherwise() {
    let dir = scratch("soak");
    let sim = Simulator::healthy("soakfile", 2).await.unwrap();
    let soak_file = write(
        &dir,
        "soak.yaml",
        "soakSeconds: [2, 300]\nwaveDeadlineSeconds: 6\n",
    );
    let mut args: Vec<String> = ["check", "--json", "--interval", "200ms", "--gate-config"]
        .map(String::from)
        .to_vec();
    args.push(soak_file.clone());
    args.extend(node_args(&sim));
    let (code, out, err) = run(args.clone()).await;
    assert_eq!(code, 0, "{out}{err}");
    let lines = json_lines(&out);
    assert_eq!(lines[0]["soakRemainingSeconds"], 2, "{}", lines[0]);
    assert_eq!(lines[0]["timeoutRemainingSeconds"], 6, "{}", lines[0]);
    let last = lines.last().unwrap();
    assert_eq!(last["verdict"], "pass");
    let elapsed = last["elapsedSeconds"].as_f64().unwrap();
    assert!((2.0..5.0).contains(&elapsed), "passed after {elapsed} s");

    // The flag wins over the file.
    let mut flagged = args.clone();
    flagged.extend(["--soak".to_owned(), "1s".to_owned()]);
    let (code, out, _) = run(flagged).await;
    assert_eq!(code, 0);
    assert_eq!(json_lines(&out)[0]["soakRemainingSeconds"], 1);

    // Without the file, a 6 s timeout and the default 120 s soak cannot
    // pass: refused as a usage error.
    let mut no_file: Vec<String> = ["check", "--timeout", "6s"].map(String::from).to_vec();
    no_file.extend(node_args(&sim));
    let (code, _, err) = run(no_file).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("--soak (120s) is longer than --timeout (6s)"),
        "{err}"
    );

    // The deadline of the file fails a set that never gets healthy.
    sim.pods()[0].update(|n| n.ready = false);
    let deadline_file = write(
        &dir,
        "deadline.json",
        r#"{"soakSeconds": [1], "waveDeadlineSeconds": 2}"#,
    );
    let mut args: Vec<String> = ["check", "--json", "--interval", "200ms", "--gate-config"]
        .map(String::from)
        .to_vec();
    args.push(deadline_file);
    args.extend(node_args(&sim));
    let (code, out, _) = run(args).await;
    assert_eq!(code, 1);
    let last = json_lines(&out).pop().unwrap();
    assert_eq!(last["signal"], "wave_deadline_exceeded");
    assert_eq!(last["lastFailingSignal"], "not_ready");
    let elapsed = last["elapsedSeconds"].as_f64().unwrap();
    assert!((2.0..4.0).contains(&elapsed), "failed after {elapsed} s");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Unknown key, wrong type, empty soak list, a band percent over 1000, a
/// maximum sample age of 0, broken syntax, a missing file: exit 2 before
/// any poll, one line on standard error naming the file, the key and the
/// reason; the same for `check` and for `run` (which stops before it
/// looks for a cluster), and through `KURA_AGENT_GATE_CONFIG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_or_value_exits_2_at_start_with_one_line() {
    let dir = scratch("invalid");
    let cases = [
        (
            "unknown.yaml",
            "fdTimeoutBands: 3\n",
            "key fdTimeoutBands: unknown key",
        ),
        (
            "type.json",
            r#"{"outboxBandMinimum": "fifty"}"#,
            "key outboxBandMinimum: expected a non-negative integer, got \"fifty\"",
        ),
        (
            "soak.yaml",
            "soakSeconds: []\n",
            "key soakSeconds: must list at least one value",
        ),
        (
            "percent.yaml",
            "peerFailureBandPercent: 1001\n",
            "key peerFailureBandPercent: 1001 is above the limit of 1000",
        ),
        (
            "age.json",
            r#"{"maxSampleAgeSeconds": 0}"#,
            "key maxSampleAgeSeconds: must be at least 1",
        ),
        (
            "syntax.json",
            r#"{"fdTimeoutBand": 2"#,
            "not valid JSON: EOF while parsing",
        ),
    ];
    for (name, text, reason) in cases {
        let path = write(&dir, name, text);
        let want = format!("gate config {path}: {reason}");
        for command in ["check", "run"] {
            let mut args = vec![command.to_owned(), "--gate-config".to_owned(), path.clone()];
            if command == "check" {
                args.extend(["--node".to_owned(), "http://127.0.0.1:9".to_owned()]);
            }
            let (code, out, err) = run(args).await;
            assert_eq!(code, 2, "{command} {name}: {out}{err}");
            assert!(out.is_empty(), "{command} {name}: nothing polled: {out}");
            let lines: Vec<&str> = err.lines().collect();
            assert_eq!(lines.len(), 1, "{command} {name}: one line: {err}");
            assert!(
                lines[0].contains(&want),
                "{command} {name}: {err}\nwanted: {want}"
            );
        }
    }
    // Through the environment, and a file that is not there.
    let missing = dir.join("missing.yaml").to_string_lossy().into_owned();
    let out = tokio::task::spawn_blocking(move || {
        bin()
            .args(["check", "--node", "http://127.0.0.1:9"])
            .env("KURA_AGENT_GATE_CONFIG", &missing)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("missing.yaml: cannot read:"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `futureSkewSeconds` of the file is how far in the future a `--baseline`
/// may have been taken (a clock ahead of this one): 30 s ahead is within
/// the default 60 s and the check runs; with `futureSkewSeconds: 10` the
/// same document is refused before any poll (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_future_skew_of_the_file_limits_a_baseline_from_the_future() {
    let dir = scratch("skew");
    let sim = Simulator::healthy("skewfile", 2).await.unwrap();
    let baseline = dir.join("b.json");
    let mut args = vec!["baseline".to_owned(), "--out".to_owned()];
    args.push(baseline.to_string_lossy().into_owned());
    args.extend(node_args(&sim));
    let (code, out, err) = run(args).await;
    assert_eq!(code, 0, "baseline: {out}{err}");
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&baseline).unwrap()).unwrap();
    let ahead = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(30))
        .unwrap();
    doc["takenAt"] = Value::String(ahead.to_string());
    let ahead_file = write(&dir, "ahead.json", &doc.to_string());
    let gate = write(&dir, "gate.yaml", "futureSkewSeconds: 10\n");
    let check = |file: Option<&str>| {
        let mut args: Vec<String> = [
            "check",
            "--json",
            "--soak",
            "1s",
            "--interval",
            "200ms",
            "--timeout",
            "3s",
            "--baseline",
        ]
        .map(String::from)
        .to_vec();
        args.push(ahead_file.clone());
        if let Some(file) = file {
            args.extend(["--gate-config".to_owned(), file.to_owned()]);
        }
        args.extend(node_args(&sim));
        args
    };
    let ((code, out, err), (code_file, out_file, err_file)) =
        tokio::join!(run(check(None)), run(check(Some(&gate))));
    assert_eq!(code, 0, "30 s ahead is within the default 60 s: {out}{err}");
    assert_eq!(json_lines(&out)[0]["baselineSource"], "file");
    assert_eq!(code_file, 2, "{out_file}{err_file}");
    assert!(out_file.is_empty(), "nothing polled: {out_file}");
    assert!(err_file.contains("in the future"), "{err_file}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 44 item 9: control characters of a key (an escape sequence, a
/// bell, a bidirectional override) reach the terminal escaped from every
/// command that reads a gate configuration file, `demo
/// --shadow-gate-config` included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_of_a_key_are_printed_escaped_by_every_command() {
    let dir = scratch("escapes");
    let path = write(
        &dir,
        "evil.json",
        r#"{"\u001b[2J\u001b[31mfdTimeoutBand\u0007\u202e": 1}"#,
    );
    for args in [
        vec!["demo", "--shadow-gate-config", &path],
        vec!["run", "--shadow-gate-config", &path],
        vec!["run", "--gate-config", &path],
        vec![
            "check",
            "--gate-config",
            &path,
            "--node",
            "http://127.0.0.1:9",
        ],
    ] {
        let (code, _, err) = run(args.iter().map(|a| (*a).to_owned()).collect()).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        let line = err.strip_suffix('\n').unwrap_or(&err);
        assert!(
            !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{args:?}: raw control characters reach the terminal: {err:?}"
        );
        assert!(
            line.contains(r"\u{1b}[2J\u{1b}[31mfdTimeoutBand\u{7}\u{202e}"),
            "{args:?}: {err:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
