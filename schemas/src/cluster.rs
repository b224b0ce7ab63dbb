//! The body a pull-sync Kura node answers on `GET /status/cluster`
//! (contract/node-report.md, "Replication lag on pull-sync nodes"), and its
//! one parser. Only `sync_links` is read; every other key is informational
//! and skipped.
//!
//! Strict where the contract says: a `sync_links` entry with a known key of
//! the wrong type (a negative or fractional `lag_entries`, a non-string
//! `kind`, `peer`, `region`, `phase` or `frontier`, a non-boolean `settled`,
//! a `frontier_ms` that is not a count) makes the body invalid, and so does
//! `sync_links` given twice or a key repeated anywhere inside it. The other
//! keys are skipped unread (no tree is built of them: a body lists every
//! member and consumer URL, and the agent reads one per pull-sync pod per
//! sweep), as the report parser skips unknown keys.
//! Lenient elsewhere: unknown keys are ignored, an unknown `kind` or `phase`
//! is kept verbatim (bounded) and not summed.
//!
//! Where the contract is silent, this parser decides for the operator of a
//! gate (never for a pass by default):
//! - a body without `sync_links` reports no lag: the pod's lag is absent
//!   ("not measured"), never 0;
//! - a `replica` link without `lag_entries`, or an entry without `kind`,
//!   makes the body invalid: summing the other links would undercount the
//!   backlog and could pass a regression;
//! - a body with `sync_links` but no `replica` link (a single-pod instance)
//!   measures a lag of 0: there is no sibling to be behind.

use crate::api_int::{self, API_INT_MAX};
use crate::report::{DEFAULT_BODY_LIMIT, MAX_TEXT_LEN};
use crate::strict_json::{self, StrictJsonError, StrictValue};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserializer as _, Serialize};
use serde_json::{Map, Value};
use std::cell::RefCell;

/// The path a pull-sync Kura node serves its cluster status on.
pub const CLUSTER_PATH: &str = "/status/cluster";

/// The `kind` of a link whose lag is summed: a sibling of the same instance.
pub const REPLICA_KIND: &str = "replica";

/// One row of `sync_links`: a link this node pulls from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncLink {
    /// `kind`: `replica`, `region`, or a value a newer Kura adds (kept
    /// verbatim, at most [`MAX_TEXT_LEN`] bytes).
    pub kind: String,
    /// `phase`: `bootstrapping`, `forward`, `retrying` or a newer value;
    /// `None` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `lag_entries`: feed entries this node is behind the peer; `None` when
    /// absent (allowed only on links that are not summed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_entries: Option<u64>,
}

/// A parsed `/status/cluster` body: what the agent reads of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// `sync_links`, in body order; `None` when the body has no such key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_links: Option<Vec<SyncLink>>,
}

impl ClusterStatus {
    /// The node's replication lag: the sum of `lag_entries` over its links
    /// of kind `replica` (saturating at 2^63−1), `None` when the body has no
    /// `sync_links` (not measured, never 0).
    pub fn replication_lag_entries(&self) -> Option<u64> {
        let links = self.sync_links.as_ref()?;
        Some(api_int::saturating_sum(
            links
                .iter()
                .filter(|l| l.kind == REPLICA_KIND)
                .filter_map(|l| l.lag_entries),
        ))
    }
}

/// Why a `/status/cluster` body is not usable. Every variant about a key
/// names it (`sync_links[i].key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The body is larger than the limit; it was not parsed.
    #[error("body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size seen.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// Not JSON, a repeated key, or a byte-order mark.
    #[error("body is not valid JSON: {0}")]
    Malformed(#[from] StrictJsonError),
    /// JSON, but not an object.
    #[error("body is JSON but not an object")]
    NotAnObject,
    /// A key has the wrong type or an impossible value.
    #[error("field `{field}` {reason}")]
    Invalid {
        /// The key, e.g. `sync_links[0].lag_entries`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// Parse a `/status/cluster` body with the default size limit.
pub fn parse_cluster_status(body: &[u8]) -> Result<ClusterStatus, ClusterError> {
    parse_cluster_status_limited(body, DEFAULT_BODY_LIMIT)
}

/// Parse a `/status/cluster` body, refusing bodies over `limit` bytes before
/// parsing.
pub fn parse_cluster_status_limited(
    body: &[u8],
    limit: usize,
) -> Result<ClusterStatus, ClusterError> {
    if body.len() > limit {
        return Err(ClusterError::TooLarge {
            size: body.len(),
            limit,
        });
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        // Not an object: say what it is instead.
        return Err(match strict_json::from_slice(body) {
            Ok(_) => ClusterError::NotAnObject,
            Err(e) => ClusterError::Malformed(e),
        });
    }
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = de
        .deserialize_map(SyncLinksOnly {
            duplicate: &duplicate,
        })
        .and_then(|links| de.end().map(|()| links));
    match read {
        Ok(links) => links_from(links.as_ref()),
        Err(e) => Err(ClusterError::Malformed(match duplicate.into_inner() {
            Some(key) => StrictJsonError::DuplicateKey {
                key,
                line: e.line(),
                column: e.column(),
            },
            None => StrictJsonError::Syntax {
                message: e.to_string(),
                line: e.line(),
                column: e.column(),
            },
        })),
    }
}

/// Reads a body's top-level object, keeping only `sync_links` (strictly:
/// a key repeated inside it is recorded in `duplicate`) and skipping every
/// other key unread.
struct SyncLinksOnly<'a> {
    duplicate: &'a RefCell<Option<String>>,
}

impl<'de> Visitor<'de> for SyncLinksOnly<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a cluster status object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let mut links = None;
        while let Some(is_links) = map.next_key_seed(IsSyncLinks)? {
            if !is_links {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if links.is_some() {
                self.duplicate
                    .borrow_mut()
                    .get_or_insert_with(|| "sync_links".to_owned());
                return Err(de::Error::custom(
                    "key \"sync_links\" appears more than once",
                ));
            }
            links = Some(map.next_value_seed(StrictValue {
                duplicate: self.duplicate,
            })?);
        }
        Ok(links)
    }
}

/// Whether an object key is `sync_links`, read without allocating.
struct IsSyncLinks;

impl<'de> DeserializeSeed<'de> for IsSyncLinks {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for IsSyncLinks {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == "sync_links")
    }
}

/// Validate an already-decoded JSON value as a `/status/cluster` body (the
/// `cluster` of a `kura-agent aggregate` input document).
pub fn cluster_from_value(value: &Value) -> Result<ClusterStatus, ClusterError> {
    let obj = value.as_object().ok_or(ClusterError::NotAnObject)?;
    links_from(obj.get("sync_links"))
}

/// The body's `sync_links` value (absent: `None`) as links.
fn links_from(links: Option<&Value>) -> Result<ClusterStatus, ClusterError> {
    let sync_links = match links {
        None => None,
        Some(Value::Array(rows)) => Some(
            rows.iter()
                .enumerate()
                .map(|(i, row)| sync_link(i, row))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(invalid("sync_links".into(), "must be an array")),
    };
    Ok(ClusterStatus { sync_links })
}

fn invalid(field: String, reason: impl Into<String>) -> ClusterError {
    ClusterError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn sync_link(i: usize, row: &Value) -> Result<SyncLink, ClusterError> {
    let key = |k: &str| format!("sync_links[{i}].{k}");
    let obj: &Map<String, Value> = row
        .as_object()
        .ok_or_else(|| invalid(format!("sync_links[{i}]"), "must be an object"))?;
    let text = |k: &str, required: bool| -> Result<Option<String>, ClusterError> {
        match obj.get(k) {
            None if required => Err(invalid(key(k), "is missing")),
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() || s.len() > MAX_TEXT_LEN => Err(invalid(
                key(k),
                format!("must be 1 to {MAX_TEXT_LEN} bytes, not {}", s.len()),
            )),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(invalid(key(k), "must be a string")),
        }
    };
    let kind = text("kind", true)?.unwrap_or_default();
    let phase = text("phase", false)?;
    // Known keys that are not kept are still held to their type.
    for k in ["peer", "region", "frontier"] {
        if obj.get(k).is_some_and(|v| !v.is_string()) {
            return Err(invalid(key(k), "must be a string"));
        }
    }
    if obj.get("settled").is_some_and(|v| !v.is_boolean()) {
        return Err(invalid(key("settled"), "must be a boolean"));
    }
    if let Some(v) = obj.get("frontier_ms") {
        count(v).map_err(|reason| invalid(key("frontier_ms"), reason))?;
    }
    let lag_entries = match obj.get("lag_entries") {
        None if kind == REPLICA_KIND => {
            return Err(invalid(
                key("lag_entries"),
                "is missing on a replica link (its lag would go uncounted)",
            ));
        }
        None => None,
        Some(v) => Some(count(v).map_err(|reason| invalid(key("lag_entries"), reason))?),
    };
    Ok(SyncLink {
        kind,
        phase,
        lag_entries,
    })
}

/// A count: an integer in 0..=2^63−1, or why not.
fn count(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(u) if api_int::fits(u) => Ok(u),
            Some(u) => Err(format!("{u} is out of range: above 2^63-1 ({API_INT_MAX})")),
            None if n.is_i64() => Err(format!("negative count {n}")),
            None => Err(format!("{n} is not an integer")),
        },
        _ => Err("must be a non-negative integer".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag(body: &str) -> Result<Option<u64>, ClusterError> {
        parse_cluster_status(body.as_bytes()).map(|c| c.replication_lag_entries())
    }

    #[test]
    fn sums_replica_links_only() {
        let body = r#"{"status":"ok","sync_links":[
            {"kind":"replica","lag_entries":3,"phase":"forward"},
            {"kind":"replica","lag_entries":4,"phase":"retrying"},
            {"kind":"region","lag_entries":900,"phase":"forward"},
            {"kind":"mirror","lag_entries":70,"phase":"sideways"}]}"#;
        assert_eq!(lag(body), Ok(Some(7)));
    }

    #[test]
    fn absent_links_are_not_measured_and_no_replica_is_zero() {
        assert_eq!(lag(r#"{"status":"ok"}"#), Ok(None));
        assert_eq!(lag(r#"{"sync_links":[]}"#), Ok(Some(0)));
        assert_eq!(
            lag(r#"{"sync_links":[{"kind":"region","phase":"forward"}]}"#),
            Ok(Some(0))
        );
    }

    #[test]
    fn wrong_types_in_links_make_the_body_invalid() {
        for (body, field) in [
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":-1}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":1.5}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":"3"}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"region","lag_entries":0},{"kind":7,"lag_entries":1}]}"#,
                "sync_links[1].kind",
            ),
            (
                r#"{"sync_links":[{"kind":"replica"}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"lag_entries":1}]}"#,
                "sync_links[0].kind",
            ),
            (r#"{"sync_links":[3]}"#, "sync_links[0]"),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":1,"settled":"yes"}]}"#,
                "sync_links[0].settled",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":1,"peer":4}]}"#,
                "sync_links[0].peer",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":1,"frontier_ms":-4}]}"#,
                "sync_links[0].frontier_ms",
            ),
            (r#"{"sync_links":{}}"#, "sync_links"),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":9223372036854775808}]}"#,
                "sync_links[0].lag_entries",
            ),
        ] {
            match lag(body) {
                Err(ClusterError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn not_json_not_an_object_duplicates_and_size_are_refused() {
        assert!(matches!(lag("<html>"), Err(ClusterError::Malformed(_))));
        assert_eq!(lag("[1]"), Err(ClusterError::NotAnObject));
        assert!(matches!(
            lag(r#"{"sync_links":[{"kind":"replica","lag_entries":1,"lag_entries":0}]}"#),
            Err(ClusterError::Malformed(
                StrictJsonError::DuplicateKey { .. }
            ))
        ));
        assert!(matches!(
            parse_cluster_status_limited(b"{}", 1),
            Err(ClusterError::TooLarge { size: 2, limit: 1 })
        ));
        assert!(matches!(
            lag(r#"{"sync_links":[],"sync_links":[]}"#),
            Err(ClusterError::Malformed(
                StrictJsonError::DuplicateKey { .. }
            ))
        ));
        assert!(matches!(
            lag(r#"{"sync_links":[]} x"#),
            Err(ClusterError::Malformed(_))
        ));
        assert!(matches!(lag("\u{feff}{}"), Err(ClusterError::Malformed(_))));
        // A key repeated outside sync_links is skipped unread, as the
        // report parser skips unknown keys.
        assert_eq!(lag(r#"{"node":1,"node":2,"sync_links":[]}"#), Ok(Some(0)));
    }

    #[test]
    fn unknown_keys_and_informational_values_are_ignored() {
        let body = r#"{"feed":{"head":"not a number"},"members":7,"node":null,
            "sync_links":[{"kind":"replica","lag_entries":5,"frontier":"pending",
            "frontier_ms":12,"settled":true,"region":"eu","cursor":{"x":[1]}}]}"#;
        assert_eq!(lag(body), Ok(Some(5)));
    }
}
