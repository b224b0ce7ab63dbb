//! Every `/status/cluster` fixture in testdata/cluster/ with its exact
//! outcome (testdata/cluster/cases.json): the replication lag it measures
//! (null: not measured), or the field its error names, and for some the
//! whole parsed body. The poller's lag-only read and the document path
//! (`kura-agent aggregate`) give the same outcome on every one.

use kura_schemas::cluster::{
    ClusterError, cluster_from_value, parse_cluster_lag_limited, parse_cluster_status,
};
use kura_schemas::report::DEFAULT_BODY_LIMIT;
use kura_schemas::strict_json;
use serde_json::Value;
use std::path::PathBuf;

struct Case {
    file: String,
    note: String,
    /// `Some(None)`: the lag is null (not measured).
    lag: Option<Option<u64>>,
    error: Option<String>,
    /// The parsed body as `ClusterStatus` serializes it.
    parsed: Option<Value>,
}

fn cases() -> Vec<Case> {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir().join("cases.json")).unwrap()).unwrap();
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            file: c["file"].as_str().unwrap().to_owned(),
            note: c["note"].as_str().unwrap().to_owned(),
            lag: c.get("lag").map(Value::as_u64),
            error: c.get("error").and_then(Value::as_str).map(str::to_owned),
            parsed: c.get("parsed").cloned(),
        })
        .collect()
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/cluster")
}

#[test]
fn every_cluster_fixture_has_its_exact_outcome() {
    let cases = cases();
    let files: usize = std::fs::read_dir(dir())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "cases.json")
        .count();
    assert_eq!(files, cases.len(), "every fixture is listed once");
    let (mut oks, mut errors, mut parsed) = (0, 0, 0);
    for case in &cases {
        let body = std::fs::read(dir().join(&case.file)).unwrap();
        let got = parse_cluster_status(&body);
        let what = format!("{} ({})", case.file, case.note);
        assert_eq!(
            parse_cluster_lag_limited(&body, DEFAULT_BODY_LIMIT),
            got.as_ref()
                .map(|s| s.replication_lag_entries())
                .map_err(Clone::clone),
            "{what}: the lag-only read agrees"
        );
        match (&case.lag, &case.error) {
            (Some(lag), None) => {
                let status = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(status.replication_lag_entries(), *lag, "{what}");
                if let Some(expected) = &case.parsed {
                    assert_eq!(&serde_json::to_value(&status).unwrap(), expected, "{what}");
                    parsed += 1;
                }
                oks += 1;
            }
            (None, Some(field)) => {
                match got {
                    Err(ClusterError::Invalid { field: f, .. }) => assert_eq!(&f, field, "{what}"),
                    Err(ClusterError::Malformed(_)) => assert_eq!(field, "malformed", "{what}"),
                    other => panic!("{what}: {other:?}"),
                }
                errors += 1;
            }
            _ => panic!("{}: a case has either lag or error", case.file),
        }
    }
    assert!(oks >= 12 && errors >= 15, "{oks} ok, {errors} errors");
    assert!(parsed >= 6, "{parsed} parsed bodies");
}

/// The document path (`cluster_from_value` over a strictly decoded body)
/// and the wire parser agree wherever the body decodes (a repeated key, as
/// in the duplicate fixtures, is refused by the document reader itself).
#[test]
fn wire_and_document_paths_agree_on_every_fixture() {
    let mut compared = 0;
    for case in cases() {
        let body = std::fs::read(dir().join(&case.file)).unwrap();
        let Ok(value) = strict_json::from_slice(&body) else {
            assert!(
                case.error.is_some() || case.file.starts_with("informational-key-repeated"),
                "{}",
                case.file
            );
            continue;
        };
        assert_eq!(
            cluster_from_value(&value),
            parse_cluster_status(&body),
            "{}",
            case.file
        );
        compared += 1;
    }
    assert!(compared >= 20, "compared {compared}");
}

/// Kura's own bodies keep every informational key they carry, except the
/// `null` of `frontier_ms`: nothing well-formed is dropped.
#[test]
fn kuras_own_bodies_keep_every_well_formed_key() {
    for file in [
        "kura-cluster-status-pull-sync.json",
        "kura-cluster-status-bootstrapping-and-abandoned.json",
    ] {
        let body = std::fs::read(dir().join(file)).unwrap();
        let status = parse_cluster_status(&body).unwrap();
        let kept = serde_json::to_value(&status).unwrap();
        let sent: Value = serde_json::from_slice(&body).unwrap();
        for (key, value) in sent.as_object().unwrap() {
            if key != "sync_links" {
                assert_eq!(&kept[key], value, "{file}: {key}");
            }
        }
        let links = sent["sync_links"].as_array().unwrap();
        assert_eq!(kept["sync_links"].as_array().unwrap().len(), links.len());
        for (i, link) in links.iter().enumerate() {
            for (key, value) in link.as_object().unwrap() {
                let expected = if value.is_null() { &Value::Null } else { value };
                assert_eq!(
                    &kept["sync_links"][i][key], expected,
                    "{file}: sync_links[{i}].{key}"
                );
            }
        }
    }
}
