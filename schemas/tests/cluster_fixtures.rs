//! Every `/status/cluster` fixture in testdata/cluster/ with its exact
//! outcome (testdata/cluster/cases.json): the replication lag it measures
//! (null: not measured), or the field its error names.

use kura_schemas::cluster::{ClusterError, parse_cluster_status};
use serde_json::Value;
use std::path::PathBuf;

struct Case {
    file: String,
    note: String,
    /// `Some(None)`: the lag is null (not measured).
    lag: Option<Option<u64>>,
    error: Option<String>,
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
    for case in &cases {
        let body = std::fs::read(dir().join(&case.file)).unwrap();
        let got = parse_cluster_status(&body);
        match (&case.lag, &case.error) {
            (Some(lag), None) => {
                let status = got.unwrap_or_else(|e| panic!("{} ({}): {e}", case.file, case.note));
                assert_eq!(
                    status.replication_lag_entries(),
                    *lag,
                    "{} ({})",
                    case.file,
                    case.note
                );
            }
            (None, Some(field)) => match got {
                Err(ClusterError::Invalid { field: f, .. }) => {
                    assert_eq!(&f, field, "{} ({})", case.file, case.note)
                }
                Err(ClusterError::Malformed(_)) => {
                    assert_eq!(field, "malformed", "{} ({})", case.file, case.note)
                }
                other => panic!("{} ({}): {other:?}", case.file, case.note),
            },
            _ => panic!("{}: a case has either lag or error", case.file),
        }
    }
}
