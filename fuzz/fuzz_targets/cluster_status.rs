//! The `/status/cluster` parser over arbitrary bytes. Only a link's `kind`
//! (a string) and `lag_entries` (a count) decide a body's verdict; every
//! other key, at the top level or in a link, is informational
//! (contract/node-report.md). Properties:
//! - no panic; the full parse and the poller's lag-only read give the same
//!   verdict and lag;
//! - an accepted body's lag is a count the API server can store, the
//!   (saturating) sum of its `replica` links alone;
//! - wherever the body decodes strictly (no repeated key, nothing a JSON
//!   tree cannot hold), the verdict is a model's that reads `kind` and
//!   `lag_entries` only, and the document path (`kura-agent aggregate`)
//!   gives exactly the wire's result;
//! - replacing every informational value by `null` or by a value of another
//!   type, and adding informational keys (null ones included), changes
//!   neither the verdict (the lag, or the key an error names) nor any
//!   link's `kind` and `lag_entries`.
#![no_main]

use kura_schemas::api_int::API_INT_MAX;
use kura_schemas::cluster::{
    ClusterError, ClusterStatus, cluster_from_value, parse_cluster_lag_limited,
    parse_cluster_status, parse_cluster_status_limited,
};
use kura_schemas::report::DEFAULT_BODY_LIMIT;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let full = parse_cluster_status(data);
    let lag = parse_cluster_lag_limited(data, DEFAULT_BODY_LIMIT);
    assert_eq!(lag, verdict(&full), "the lag-only read agrees");
    if let Ok(status) = &full {
        let lag = status.replication_lag_entries();
        assert_eq!(lag.is_some(), status.sync_links.is_some());
        if let (Some(lag), Some(links)) = (lag, status.sync_links.as_ref()) {
            assert!(lag <= API_INT_MAX, "an accepted body holds {lag}");
            let replica: u128 = links
                .iter()
                .filter(|l| l.kind.as_str() == kura_schemas::cluster::REPLICA_KIND)
                .map(|l| u128::from(l.lag_entries))
                .sum();
            assert_eq!(u128::from(lag), replica.min(u128::from(API_INT_MAX)));
        }
    }
    if data.len() > DEFAULT_BODY_LIMIT {
        return;
    }
    let Ok(value) = kura_schemas::strict_json::from_slice(data) else {
        return;
    };
    assert_eq!(cluster_from_value(&value), full, "the document path agrees");
    assert_eq!(
        lag.as_ref().map_err(|_| ()).copied(),
        model(&value),
        "only kind and lag_entries decide"
    );
    let seed = data.iter().fold(0usize, |a, b| {
        a.wrapping_mul(31).wrapping_add(usize::from(*b))
    });
    for round in 0..3 {
        let variant = spoil(&value, seed.wrapping_add(round));
        let body = serde_json::to_vec(&variant).expect("a JSON value serializes");
        let again = parse_cluster_status_limited(&body, usize::MAX);
        assert_eq!(
            outcome(&verdict(&again)),
            outcome(&lag),
            "informational values changed the verdict: {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(reader_keys(&again), reader_keys(&full));
    }
});

/// The lag, or the error, of a full parse.
fn verdict(full: &Result<ClusterStatus, ClusterError>) -> Result<Option<u64>, ClusterError> {
    full.as_ref()
        .map(ClusterStatus::replication_lag_entries)
        .map_err(Clone::clone)
}

/// A verdict without the reason's text: the lag, or the kind of error and
/// the key it names. (Re-serializing a long number can move its last digit:
/// serde_json's float parsing is not exactly round-trip, so
/// "9.777777777777779e+112 is not an integer" may come back as
/// "9.77777777777778e+112 ...": the same verdict; see
/// testdata/cluster/hostile-lag-long-number.json.)
fn outcome(v: &Result<Option<u64>, ClusterError>) -> Result<Option<u64>, String> {
    v.as_ref().copied().map_err(|e| match e {
        ClusterError::Invalid { field, .. } => field.clone(),
        other => format!("{other}"),
    })
}

/// Each link's `kind` and `lag_entries`, of an accepted body.
fn reader_keys(full: &Result<ClusterStatus, ClusterError>) -> Option<Vec<(String, u64)>> {
    let links = full.as_ref().ok()?.sync_links.as_ref()?;
    Some(
        links
            .iter()
            .map(|l| (l.kind.as_str().to_owned(), l.lag_entries))
            .collect(),
    )
}

/// The rule, from the contract alone: `sync_links` absent or null is no
/// lag; a list of objects each with a string `kind` and a count
/// `lag_entries` is the sum of the `replica` ones; anything else is
/// invalid.
fn model(v: &Value) -> Result<Option<u64>, ()> {
    let o = v.as_object().ok_or(())?;
    let rows = match o.get("sync_links") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(rows)) => rows,
        Some(_) => return Err(()),
    };
    let mut sum: u64 = 0;
    for row in rows {
        let link = row.as_object().ok_or(())?;
        let kind = link.get("kind").and_then(Value::as_str).ok_or(())?;
        let lag = link
            .get("lag_entries")
            .and_then(Value::as_u64)
            .filter(|n| *n <= API_INT_MAX)
            .ok_or(())?;
        if kind == "replica" {
            sum = sum.saturating_add(lag).min(API_INT_MAX);
        }
    }
    Ok(Some(sum))
}

/// `v` with every informational value replaced (chosen by `seed`) and
/// informational keys added: at the top level, every key but `sync_links`;
/// in each link object, every key but `kind` and `lag_entries`.
fn spoil(v: &Value, seed: usize) -> Value {
    let odd = [
        Value::Null,
        json!(true),
        json!(-1),
        json!(1.5),
        json!(""),
        json!("x"),
        json!([]),
        json!({}),
        json!([null, 1]),
        json!({"a": null}),
        json!(18_446_744_073_709_551_615u64),
    ];
    let pick = |i: usize| odd[seed.wrapping_add(i) % odd.len()].clone();
    let Value::Object(top) = v else {
        return v.clone();
    };
    let mut top = top.clone();
    for (i, (key, value)) in top.iter_mut().enumerate() {
        if key != "sync_links" {
            *value = pick(i);
        }
    }
    for (i, key) in [
        "gateway_grpc_port",
        "feed",
        "members",
        "tenant_id",
        "region",
    ]
    .into_iter()
    .enumerate()
    {
        top.entry(key).or_insert_with(|| pick(i + 3));
    }
    if let Some(Value::Array(links)) = top.get_mut("sync_links") {
        for (j, link) in links.iter_mut().enumerate() {
            let Value::Object(link) = link else { continue };
            for (i, (key, value)) in link.iter_mut().enumerate() {
                if key != "kind" && key != "lag_entries" {
                    *value = pick(i + j);
                }
            }
            for (i, key) in ["frontier_ms", "frontier", "settled", "phase", "peer"]
                .into_iter()
                .enumerate()
            {
                link.entry(key).or_insert_with(|| pick(i + j + 1));
            }
        }
    }
    Value::Object(top)
}
