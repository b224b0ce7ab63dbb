//! The surfaces that name signals, held against the signal home
//! (`kura_schemas::SIGNALS`): the metric labels `signal="…"` the agent
//! declares, and what the README, `docs/` and the chart (its alert rules,
//! their tests, the dashboard, the Argo CD health checks' test data) name:
//! `signal="NAME"`, `signal: NAME` and "`NAME` (check N" / "check N
//! (`NAME`" in prose. A name the home does not list, or a check number the
//! home gives another signal, fails here. The debug page's check table has
//! its own test beside it (`debug::signals`), the wave judge's hard stops
//! theirs in kura-gate (`tests/wave.rs`).

use std::path::{Path, PathBuf};

use kura_schemas::Signal;

use crate::telemetry::{INSTANCES_BY_SIGNAL, METRICS};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| {
            ["md", "yaml", "yml", "json", "lua", "txt"]
                .iter()
                .any(|x| e == *x)
        }) {
            out.push(path);
        }
    }
}

/// The text after `at` up to the first character that cannot be part of a
/// signal's name.
fn name_at(text: &str, at: usize) -> &str {
    let rest = &text[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// A number at the start of `text`, if any.
fn number_at(text: &str) -> Option<u8> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// Every signal named in `text`, with the check number the prose gives it.
fn named(text: &str) -> Vec<(String, Option<u8>)> {
    let mut out = Vec::new();
    for marker in ["signal=\"", "signal=\\\""] {
        for (at, _) in text.match_indices(marker) {
            let name = name_at(text, at + marker.len());
            if !name.is_empty() {
                out.push((name.to_owned(), None));
            }
        }
    }
    for line in text.lines() {
        if let Some(value) = line.trim().strip_prefix("signal: ")
            && !value.is_empty()
            && name_at(value, 0) == value
        {
            out.push((value.to_owned(), None));
        }
    }
    // Prose wraps: one space for every run of whitespace.
    let prose = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for marker in ["` (check ", "` (gate check "] {
        for (at, _) in prose.match_indices(marker) {
            let Some(open) = prose[..at].rfind('`') else {
                continue;
            };
            let name = &prose[open + 1..at];
            if name.contains('_') && name_at(name, 0) == name {
                out.push((name.to_owned(), number_at(&prose[at + marker.len()..])));
            }
        }
    }
    for (at, _) in prose.match_indices("check ") {
        let rest = &prose[at + "check ".len()..];
        let Some(number) = number_at(rest) else {
            continue;
        };
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        let rest = rest.strip_prefix(" (`").or_else(|| rest.strip_prefix(" `"));
        if let Some(rest) = rest {
            let name = name_at(rest, 0);
            if name.contains('_') && rest[name.len()..].starts_with('`') {
                out.push((name.to_owned(), Some(number)));
            }
        }
    }
    out
}

#[test]
fn the_metric_labels_are_the_signal_homes() {
    let metric = METRICS
        .iter()
        .find(|m| m.name == INSTANCES_BY_SIGNAL)
        .expect("the signal metric");
    let label = metric.label.as_ref().expect("its label");
    let values = (label.values)();
    let mut home: Vec<&str> = Signal::ALL.iter().map(|s| s.as_str()).collect();
    home.push(crate::telemetry::NO_SIGNAL);
    assert_eq!(values, home);
}

#[test]
fn the_docs_and_the_chart_name_only_signals_of_the_home() {
    let root = repo_root();
    let mut paths = vec![root.join("README.md")];
    files(&root.join("docs"), &mut paths);
    files(&root.join("charts"), &mut paths);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (name, check) in named(&text) {
            checked += 1;
            match Signal::from_name(&name) {
                None => wrong.push(format!(
                    "{}: `{name}` is no signal of kura_schemas::SIGNALS",
                    path.display()
                )),
                Some(signal) if check.is_some() && check != signal.check() => {
                    wrong.push(format!(
                        "{}: `{name}` called check {check:?}, the home says {:?}",
                        path.display(),
                        signal.check()
                    ));
                }
                Some(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The scan finds what it is meant to find.
    assert!(checked > 20, "only {checked} signal names found");
}

#[test]
fn the_scanner_finds_each_form() {
    let text = "a `serving_fenced` (check 16, hard stop); gate check 19 `update_paused`;\n\
                check 17\n(`no_valid_writer`) and {signal=\"not_ready\"} and\n  signal: ring_skew\n";
    assert_eq!(
        named(text),
        [
            ("not_ready".to_owned(), None),
            ("ring_skew".to_owned(), None),
            ("serving_fenced".to_owned(), Some(16)),
            ("update_paused".to_owned(), Some(19)),
            ("no_valid_writer".to_owned(), Some(17)),
        ]
    );
}
