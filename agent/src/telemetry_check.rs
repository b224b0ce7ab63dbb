//! The metric vocabulary held against the code: every `kura_agent_*` name
//! the agent records is one of [`telemetry::METRICS`], described exactly
//! once, and every label value documented there is one the code records
//! (and no other). Reads the crate's own sources for the recording sites
//! (`counter!`, `gauge!`, `histogram!`); label values the code computes are
//! enumerated from the types that compute them.

use std::collections::{BTreeMap, BTreeSet};

use crate::poll::PollError;
use crate::source_files::product_sources;
use crate::telemetry::{self, METRICS, label};
use crate::write::{WriteError, WriteOutcome};
use std::path::Path;

/// One `counter!`/`gauge!`/`histogram!` call in the product code.
#[derive(Debug)]
struct Site {
    file: String,
    /// The name argument as written (`telemetry::POLLS_TOTAL`).
    name: String,
    /// The label, as written: its name and value expression.
    label: Option<(String, String)>,
}

/// The arguments of a macro call starting right after its `(`, split at
/// top-level commas, up to the matching `)`.
fn arguments(code: &str) -> Vec<String> {
    let mut args = vec![String::new()];
    let mut depth = 0usize;
    let mut in_string = false;
    for c in code.chars() {
        match c {
            '"' => in_string = !in_string,
            '(' | '[' | '{' if !in_string => depth += 1,
            ')' | ']' | '}' if !in_string => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            }
            ',' if !in_string && depth == 0 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(c);
        }
    }
    args.into_iter()
        .map(|a| a.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|a| !a.is_empty())
        .collect()
}

fn sites() -> Vec<Site> {
    let mut out = Vec::new();
    for (file, code) in product_sources() {
        for mac in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in code.match_indices(mac) {
                // `describe_counter!(` and the like are not recordings.
                if code[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
                {
                    continue;
                }
                let args = arguments(&code[at + mac.len()..]);
                let label = args.get(1).map(|l| {
                    let (k, v) = l
                        .split_once("=>")
                        .unwrap_or_else(|| panic!("{file}: label `k => v` expected, got {l:?}"));
                    (k.trim().trim_matches('"').to_owned(), v.trim().to_owned())
                });
                out.push(Site {
                    file: file.clone(),
                    name: args.first().cloned().unwrap_or_default(),
                    label,
                });
            }
        }
    }
    out
}

/// `CONST` → `kura_agent_...` for every name constant in telemetry.rs.
fn name_constants() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/telemetry.rs");
    let text = std::fs::read_to_string(path).expect("telemetry.rs");
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("pub const ")?;
            let (ident, value) = rest.split_once(": &str = \"")?;
            let value = value.strip_suffix("\";")?;
            value
                .starts_with("kura_agent_")
                .then(|| (ident.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `CONST` → value for every constant of `telemetry::label`.
fn label_constants() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/telemetry.rs");
    let text = std::fs::read_to_string(path).expect("telemetry.rs");
    let (_, module) = text
        .split_once("pub mod label {")
        .expect("telemetry::label");
    let (module, _) = module
        .split_once("\n}")
        .expect("the end of telemetry::label");
    module
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("pub const ")?;
            let (ident, value) = rest.split_once(": &str = \"")?;
            Some((ident.to_owned(), value.strip_suffix("\";")?.to_owned()))
        })
        .collect()
}

/// The metric name a site records, through the telemetry constants.
fn site_metric(site: &Site, constants: &BTreeMap<String, String>) -> String {
    let ident = site.name.strip_prefix("telemetry::").unwrap_or(&site.name);
    constants.get(ident).cloned().unwrap_or_else(|| {
        panic!(
            "{}: `{}` is not a telemetry name constant: record through telemetry::*",
            site.file, site.name
        )
    })
}

/// Every PollError, one of each variant (the match below fails to compile
/// when a variant is added, so this list cannot fall behind).
fn every_poll_error() -> Vec<PollError> {
    let invalid = kura_schemas::parse_report(b"{}").expect_err("an empty object is no report");
    let all = vec![
        PollError::Timeout,
        PollError::ConnectTimeout,
        PollError::Refused,
        PollError::Connect,
        PollError::Closed,
        PollError::HttpStatus(503),
        PollError::TooLarge { limit: 1 },
        PollError::Body,
        PollError::Protocol,
        PollError::TransferCoding,
        PollError::InvalidReport(invalid),
        PollError::IdentityMismatch,
        PollError::NoAddress,
        PollError::PortForward(String::new()),
        PollError::InvalidCluster(
            kura_schemas::parse_cluster_status(b"[]").expect_err("an array is no cluster body"),
        ),
    ];
    for e in &all {
        match e {
            PollError::Timeout
            | PollError::ConnectTimeout
            | PollError::Refused
            | PollError::Connect
            | PollError::Closed
            | PollError::HttpStatus(_)
            | PollError::TooLarge { .. }
            | PollError::Body
            | PollError::Protocol
            | PollError::TransferCoding
            | PollError::InvalidReport(_)
            | PollError::IdentityMismatch
            | PollError::InvalidCluster(_)
            | PollError::NoAddress
            | PollError::PortForward(_) => {}
        }
    }
    all
}

/// Every write result, one of each variant (exhaustive as above).
fn every_write_result() -> Vec<Result<WriteOutcome, WriteError>> {
    let all = vec![
        Ok(WriteOutcome::Applied),
        Ok(WriteOutcome::Pruned { missing: vec![] }),
        Err(WriteError::Conflict(String::new())),
        Err(WriteError::NotFound(String::new())),
        Err(WriteError::Forbidden(String::new())),
        Err(WriteError::NotDeclared {
            missing: vec![],
            message: String::new(),
        }),
        Err(WriteError::Other(String::new())),
        Err(WriteError::Fenced(String::new())),
        Err(WriteError::Contested(String::new())),
    ];
    for r in &all {
        match r {
            Ok(WriteOutcome::Applied | WriteOutcome::Pruned { .. })
            | Err(
                WriteError::Conflict(_)
                | WriteError::NotFound(_)
                | WriteError::Forbidden(_)
                | WriteError::NotDeclared { .. }
                | WriteError::Other(_)
                | WriteError::Fenced(_)
                | WriteError::Contested(_),
            ) => {}
        }
    }
    all
}

/// The values a computed label expression takes, from the code that
/// computes it.
fn computed_values(metric: &str, expr: &str) -> Option<Vec<&'static str>> {
    let values = match (metric, expr) {
        // `poller::result_label` is `ok` or the error's reason (pinned by
        // its unit test), `cluster_label` likewise with `not_measured`.
        (telemetry::POLLS_TOTAL, "result_label(result)") => {
            let mut v = vec![label::OK];
            v.extend(every_poll_error().iter().map(PollError::reason));
            v
        }
        (telemetry::CLUSTER_READS_TOTAL, "cluster_label(&read)") => {
            let mut v = vec![label::OK, label::NOT_MEASURED];
            v.extend(
                every_poll_error()
                    .iter()
                    // A report-only failure cannot come out of a cluster read.
                    .filter(|e| !matches!(e, PollError::InvalidReport(_)))
                    .map(PollError::reason),
            );
            v
        }
        // `apply::result_label`: the outcome's label or the error's kind
        // (pinned by its unit test).
        (telemetry::STATUS_WRITES_TOTAL, "result_label(&result)") => every_write_result()
            .iter()
            .map(|r| match r {
                Ok(WriteOutcome::Applied) => label::APPLIED,
                Ok(WriteOutcome::Pruned { .. }) => label::PRUNED,
                Err(e) => e.kind(),
            })
            .collect(),
        // Discovery's watches are named by these constants (the companion
        // watch in companion mode only).
        (telemetry::WATCH_ERRORS_TOTAL, "self.resource") => vec![
            label::KURAINSTANCES,
            label::PODS,
            label::KURAINSTANCEHEALTHS,
        ],
        // `announce`'s match over PublicationTarget::ALL.
        (telemetry::PUBLICATION_TARGET, "name") => vec![label::INSTANCE, label::COMPANION],
        // The loop over CONTROLLER_FIELDS.
        (telemetry::CONTROLLER_DISAGREEMENTS, "field") => telemetry::CONTROLLER_FIELDS.to_vec(),
        // The loop over (gained, GAINED), (lost, LOST).
        (telemetry::OWNERSHIP_CHANGES_TOTAL, "change") => vec![label::GAINED, label::LOST],
        (telemetry::SWEEP_INTERVAL_SECONDS, "label") => {
            use crate::runner::cadence::{IMAGE_CHANGE, Phase, Why};
            // `label` is a phase's label or the image-change one.
            vec![
                Phase::Rollout(Why::NoVerdict).label(),
                Phase::Steady.label(),
                IMAGE_CHANGE,
            ]
        }
        (telemetry::SWEEP_OVERRUNS_TOTAL, "phase.label()") => {
            use crate::runner::cadence::{Phase, Why};
            vec![
                Phase::Rollout(Why::NoVerdict).label(),
                Phase::Steady.label(),
            ]
        }
        (telemetry::INSTANCES_BY_SIGNAL, "signal") => telemetry::count_by_signal([])
            .0
            .into_iter()
            .map(|(l, _)| l)
            .collect(),
        (telemetry::INSTANCES_BY_VERDICT, "verdict") => telemetry::count_by_signal([])
            .1
            .into_iter()
            .map(|(l, _)| l)
            .collect(),
        _ => return None,
    };
    Some(values)
}

#[test]
fn every_recorded_name_is_described_exactly_once() {
    let constants = name_constants();
    let mut described: BTreeMap<&str, usize> = BTreeMap::new();
    for m in METRICS {
        *described.entry(m.name).or_default() += 1;
    }
    for (name, n) in &described {
        assert_eq!(*n, 1, "{name} is in METRICS {n} times");
    }
    for name in constants.values() {
        assert!(
            described.contains_key(name.as_str()),
            "{name} has a constant but no METRICS entry"
        );
    }
    // No name spelled anywhere but in telemetry.rs.
    for (file, code) in product_sources() {
        if file != "telemetry.rs" {
            assert!(
                !code.contains("\"kura_agent_"),
                "{file} spells a metric name: use the telemetry constant"
            );
        }
    }
    let sites = sites();
    let recorded: BTreeSet<String> = sites.iter().map(|s| site_metric(s, &constants)).collect();
    let documented: BTreeSet<String> = described.keys().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        recorded, documented,
        "every described metric is recorded and every recorded one described"
    );

    // describe() hands each description to the recorder exactly once.
    let recorder = telemetry::prometheus_builder()
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        telemetry::describe();
        for m in METRICS {
            match m.kind {
                telemetry::Kind::Counter => metrics::counter!(m.name).increment(1),
                telemetry::Kind::Gauge => metrics::gauge!(m.name).set(1.0),
                telemetry::Kind::Histogram => metrics::histogram!(m.name).record(0.1),
            }
        }
    });
    let text = handle.render();
    for m in METRICS {
        let help = format!("# HELP {} {}", m.name, m.help);
        assert_eq!(
            text.lines().filter(|l| *l == help).count(),
            1,
            "{help:?} in\n{text}"
        );
    }
}

#[test]
fn every_documented_label_value_is_recorded() {
    let constants = name_constants();
    let labels = label_constants();
    let mut recorded: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut unlabelled: BTreeSet<String> = BTreeSet::new();
    for site in sites() {
        let metric = site_metric(&site, &constants);
        let Some((label, expr)) = &site.label else {
            unlabelled.insert(metric);
            continue;
        };
        assert!(
            !expr.starts_with('"'),
            "{}: label value {expr} of {metric} spelled in place: use a telemetry::label constant",
            site.file
        );
        let constant = expr.rsplit("::").next().and_then(|c| labels.get(c));
        let values: Vec<String> = match constant {
            Some(value) => vec![value.clone()],
            None => computed_values(&metric, expr)
                .map(|v| v.into_iter().map(str::to_owned).collect())
                .unwrap_or_else(|| {
                    panic!(
                        "{}: the values of label {label} = `{expr}` of {metric} are not enumerated \
                     here: add them to computed_values",
                        site.file
                    )
                }),
        };
        let entry = recorded
            .entry(metric.clone())
            .or_insert_with(|| (label.clone(), BTreeSet::new()));
        assert_eq!(&entry.0, label, "{metric} is recorded with two label names");
        entry.1.extend(values);
    }
    for m in METRICS {
        match m.label {
            Some(doc) => {
                let (label, values) = recorded.get(m.name).unwrap_or_else(|| {
                    panic!("{} is documented with a label, recorded without", m.name)
                });
                assert_eq!(label, doc.name, "{}", m.name);
                let documented: BTreeSet<String> =
                    (doc.values)().into_iter().map(str::to_owned).collect();
                assert_eq!(
                    &documented, values,
                    "{}: documented label values vs. the values recorded",
                    m.name
                );
                assert!(
                    !unlabelled.contains(m.name),
                    "{} is also recorded without its label",
                    m.name
                );
            }
            None => assert!(
                !recorded.contains_key(m.name),
                "{} is recorded with a label it does not document",
                m.name
            ),
        }
    }
}
