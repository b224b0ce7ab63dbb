//! Every scenario under testdata/aggregate/ through the aggregation, compared
//! with its reviewed expected output; every invalid document through the
//! binary, which must exit 2 with the expected one-line error.

use kura_agent::aggregate::AggregateConfig;
use kura_agent::aggregate::input::{parse_input, run};
use kura_agent::tools::aggregate::DEFAULT_AGENT;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/aggregate")
}

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

fn expected_lines(scenario: &Path) -> Vec<Value> {
    let path = scenario.with_extension("expected.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn scenarios() -> Vec<PathBuf> {
    let all = files(&dir(), ".json");
    assert!(all.len() >= 10, "scenarios missing: {all:?}");
    all
}

#[test]
fn scenarios_match_their_expected_output() {
    for scenario in scenarios() {
        let input = parse_input(&std::fs::read(&scenario).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", scenario.display()));
        let got: Vec<Value> = run(&input, AggregateConfig::default(), DEFAULT_AGENT)
            .iter()
            .map(|h| serde_json::to_value(h).unwrap())
            .collect();
        let want = expected_lines(&scenario);
        assert_eq!(got.len(), input.sweeps.len(), "{}", scenario.display());
        assert_eq!(got.len(), want.len(), "{}", scenario.display());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{} sweep {i}", scenario.display());
        }
    }
}

#[test]
fn the_binary_prints_the_same_json_lines() {
    for scenario in scenarios() {
        let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
            .arg("aggregate")
            .arg(&scenario)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", scenario.display());
        let got: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got, expected_lines(&scenario), "{}", scenario.display());
    }
}

#[test]
fn invalid_documents_exit_2_naming_sweep_pod_and_field() {
    let invalid = files(&dir().join("invalid"), ".json");
    assert!(invalid.len() >= 4);
    for doc in invalid {
        let out = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
            .arg("aggregate")
            .arg(&doc)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", doc.display());
        assert!(out.stdout.is_empty(), "{}", doc.display());
        let want = std::fs::read_to_string(doc.with_extension("expected-error.txt")).unwrap();
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            want,
            "{}",
            doc.display()
        );
        assert_eq!(want.lines().count(), 1);
        assert!(
            want.contains("sweep ") && want.contains("field `"),
            "{want}"
        );
    }
}

#[test]
fn agent_restart_continues_like_an_uninterrupted_agent() {
    let first = parse_input(&std::fs::read(dir().join("container-restart.json")).unwrap()).unwrap();
    let second = parse_input(&std::fs::read(dir().join("agent-restart.json")).unwrap()).unwrap();
    let restored = run(&second, AggregateConfig::default(), DEFAULT_AGENT);
    let mut whole = first.clone();
    whole.sweeps.extend(second.sweeps.iter().cloned());
    let uninterrupted = run(&whole, AggregateConfig::default(), DEFAULT_AGENT);
    assert_eq!(
        restored,
        uninterrupted[first.sweeps.len()..],
        "restoring from the published aggregate must lose nothing"
    );
}

#[test]
fn standard_input_is_read_with_a_dash() {
    use std::io::Write;
    let scenario = dir().join("pod-missing.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .args(["aggregate", "-", "--agent", "agent-7"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&scenario).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), expected_lines(&scenario).len());
    assert!(lines.iter().all(|l| l["agent"] == "agent-7"));
}
