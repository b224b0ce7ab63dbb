//! Replay scenarios under testdata/gate/: `NAME.json` is a replay document,
//! `NAME.expected.jsonl` the expected output lines, or `NAME.expected.err`
//! the expected one-line error. Every scenario runs through the library and
//! through the `kura-gate replay` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use kura_gate::{Gate, GateState, VerdictKind, parse_replay, replay};
use serde_json::Value;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gate")
}

/// (name, input path, expected lines or expected error)
fn scenarios() -> Vec<(String, PathBuf, Result<Vec<Value>, String>)> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p.to_string_lossy().ends_with(".expected.json")
        })
        .collect();
    entries.sort();
    for input in entries {
        let name = input.file_stem().unwrap().to_string_lossy().into_owned();
        let lines = input.with_file_name(format!("{name}.expected.jsonl"));
        let err = input.with_file_name(format!("{name}.expected.err"));
        let expected = if lines.exists() {
            Ok(std::fs::read_to_string(&lines)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect())
        } else {
            Err(std::fs::read_to_string(&err)
                .unwrap_or_else(|_| panic!("{name}: no expected output"))
                .trim_end()
                .to_owned())
        };
        out.push((name, input, expected));
    }
    out
}

#[test]
fn every_scenario_replays_to_its_expected_output() {
    let all = scenarios();
    assert!(all.len() >= 20, "scenarios missing: {}", all.len());
    for (name, input, expected) in all {
        let text = std::fs::read_to_string(&input).unwrap();
        match (replay(&text), expected) {
            (Ok(lines), Ok(expected)) => {
                assert_eq!(lines.len(), expected.len(), "{name}: line count");
                for (line, want) in lines.iter().zip(&expected) {
                    let got = serde_json::to_value(line).unwrap();
                    assert_eq!(&got, want, "{name}: tick {}", line.tick);
                }
            }
            (Err(e), Err(want)) => assert_eq!(e.to_string(), want, "{name}"),
            (got, want) => panic!("{name}: got {got:?}, expected {want:?}"),
        }
    }
}

#[test]
fn the_binary_prints_one_line_per_tick_or_exits_2_with_one_line() {
    for (name, input, expected) in scenarios() {
        let run = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
            .arg("replay")
            .arg(&input)
            .output()
            .unwrap();
        let stdout = String::from_utf8(run.stdout).unwrap();
        let stderr = String::from_utf8(run.stderr).unwrap();
        match expected {
            Ok(lines) => {
                assert_eq!(run.status.code(), Some(0), "{name}: {stderr}");
                let got: Vec<Value> = stdout
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                assert_eq!(got, lines, "{name}");
                // The field order is the contract's.
                let first = stdout.lines().next().unwrap();
                assert!(
                    first.starts_with(r#"{"tick":0,"verdict":"#),
                    "{name}: {first}"
                );
                let order = [
                    "\"signal\"",
                    "\"serverId\"",
                    "\"healthySince\"",
                    "\"remainingSeconds\"",
                    "\"evidence\"",
                ];
                let positions: Vec<_> = order.iter().map(|k| first.find(k).unwrap()).collect();
                assert!(positions.windows(2).all(|w| w[0] < w[1]), "{name}: {first}");
            }
            Err(message) => {
                assert_eq!(run.status.code(), Some(2), "{name}");
                assert_eq!(stderr, format!("{message}\n"), "{name}");
                assert!(stdout.is_empty(), "{name}: {stdout}");
            }
        }
    }
}

#[test]
fn the_binary_reads_standard_input_for_a_dash() {
    use std::io::Write;
    let input = testdata().join("outbox-band.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
        .args(["replay", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&input).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let from_file = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
        .arg("replay")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.stdout, from_file.stdout);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
}

#[test]
fn the_binary_refuses_garbage_with_exit_2() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
        .args(["replay", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"<html>").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("input is not valid JSON"), "{stderr}");
}

/// Runs `ticks[..split]` in one gate, moves its state through JSON into a
/// new gate, runs the rest there, and returns every verdict.
fn replay_with_restore(name: &str, split: usize) -> (Vec<kura_gate::Verdict>, GateState) {
    let text = std::fs::read_to_string(testdata().join(format!("{name}.json"))).unwrap();
    let input = parse_replay(&text).unwrap();
    let mut first = Gate::new(input.config.clone()).unwrap();
    let mut verdicts = Vec::new();
    for tick in &input.ticks[..split] {
        verdicts.push(first.tick(tick).unwrap());
    }
    let stored = serde_json::to_string(first.state()).unwrap();
    let state: GateState = serde_json::from_str(&stored).unwrap();
    assert_eq!(&state, first.state());
    let mut second = Gate::restore(input.config.clone(), state.clone()).unwrap();
    for tick in &input.ticks[split..] {
        verdicts.push(second.tick(tick).unwrap());
    }
    (verdicts, state)
}

#[test]
fn a_state_restored_mid_soak_gives_the_same_verdicts_to_the_end() {
    let text = std::fs::read_to_string(testdata().join("soak-per-wave.json")).unwrap();
    let whole: Vec<_> = replay(&text)
        .unwrap()
        .into_iter()
        .map(|l| l.verdict)
        .collect();
    // Tick 1 is 899 s into wave 0's 900 s soak; tick 4 is inside wave 1's.
    for split in [2, 5] {
        let (restored, state) = replay_with_restore("soak-per-wave", split);
        assert!(state.healthy_since.is_some(), "split {split} is mid soak");
        assert_eq!(whole[split - 1].verdict, VerdictKind::Soak);
        assert_eq!(restored, whole, "split {split}");
    }
}

#[test]
fn a_state_restored_at_any_tick_of_any_scenario_changes_nothing() {
    for (name, input, expected) in scenarios() {
        if expected.is_err() {
            continue;
        }
        let text = std::fs::read_to_string(&input).unwrap();
        let whole: Vec<_> = replay(&text)
            .unwrap()
            .into_iter()
            .map(|l| l.verdict)
            .collect();
        for split in 0..=whole.len() {
            let (restored, _) = replay_with_restore(&name, split);
            assert_eq!(restored, whole, "{name} split at {split}");
        }
    }
}

#[test]
fn a_reset_lowered_baseline_survives_a_restore() {
    // fd-timeout-reset: tick 1 lowers the effective baseline from 90 to 3.
    let (verdicts, state) = replay_with_restore("fd-timeout-reset", 2);
    let kept = &state.effective_baselines["s1"];
    assert_eq!(kept.captured.fd_timeout_count, Some(90));
    assert_eq!(kept.effective.fd_timeout_count, Some(3));
    assert_eq!(verdicts[3].verdict, VerdictKind::Soak);
    assert_eq!(verdicts[3].evidence[0].baseline, Some(3));
}
