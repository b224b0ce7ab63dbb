//! The baseline document: one poll of the node set written down before an
//! upgrade (`kura-agent baseline`), judged against after it
//! (`kura-agent check --baseline FILE`).
//!
//! ```json
//! {"kind": "KuraRolloutBaseline", "schemaVersion": 1,
//!  "takenAt": "2026-07-21T10:00:00Z", "agentVersion": "0.1.0",
//!  "expectedPods": 2,
//!  "nodes": [
//!    {"url": "http://kura-0.kura:4000/status/rollout", "sampled": true,
//!     "incarnation": "9f2c…", "ready": true, "state": "serving",
//!     "outboxMessages": 0, "fdTimeoutCount": 10, "peerConnectionFailures": 1},
//!    {"url": "http://kura-1.kura:4000/status/rollout", "sampled": false,
//!     "error": "connection refused"}],
//!  "aggregate": {"sampledPods": 1, "soakEligible": false,
//!                "outboxMessages": 0, "fdTimeoutCount": 10,
//!                "peerConnectionFailures": 1}}
//! ```
//!
//! - `nodes`: per node URL (normal form) the raw per-process counters and
//!   the identity (`incarnation`, when the node reports one) of the poll,
//!   or why it was not sampled. They seed the per-node reset clamping of
//!   `check --baseline`: a node whose incarnation changed or whose counter
//!   dropped since the baseline restarted, so its counter before the
//!   upgrade is kept (a reset, never an improvement) and growth after it
//!   still counts.
//! - `aggregate`: the node set's counters as the gate compares them, and
//!   whether the set was healthy enough to be a reference (soak
//!   eligibility, contract/gate.md); when not, `check` compares no
//!   counters, as without a file.
//!
//! Parsing is strict: unknown fields, another `kind` or `schemaVersion`
//! are refused.

use std::collections::BTreeSet;
use std::path::Path;

use http::Uri;
use jiff::{SignedDuration, Timestamp};
use kura_schemas::health::ROLLOUT_HEALTH_SCHEMA_VERSION;
use kura_schemas::{BaselineCounters, PodHealth, RolloutHealth};
use serde::{Deserialize, Serialize};

use crate::model::{PodSample, SampleResult};

use super::url::node_report_url;

/// The `kind` of a baseline document.
pub const BASELINE_KIND: &str = "KuraRolloutBaseline";
/// The `schemaVersion` this agent writes and reads.
pub const BASELINE_SCHEMA_VERSION: u32 = 1;
/// The largest baseline document read, in bytes.
pub const MAX_BASELINE_BYTES: u64 = 1024 * 1024;

/// A baseline document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineDocument {
    /// Always [`BASELINE_KIND`].
    pub kind: String,
    /// Always [`BASELINE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the poll was judged.
    pub taken_at: Timestamp,
    /// The version of the agent that took it.
    pub agent_version: String,
    /// The pods the set had to have sampled.
    pub expected_pods: u32,
    /// One entry per node, in `--node` order.
    pub nodes: Vec<BaselineNode>,
    /// The set's counters and soak eligibility.
    pub aggregate: BaselineAggregate,
}

/// One node of a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineNode {
    /// The node's report URL (normal form).
    pub url: String,
    /// Whether the node answered with a valid report.
    pub sampled: bool,
    /// Why not, when not sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The process's incarnation, when the node reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// The node's own `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The node's own `state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `outbox_messages` (a backlog; absent when the node does not report it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox_messages: Option<u64>,
    /// Replication lag from `/status/cluster` (pull-sync nodes; absent
    /// when not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag_entries: Option<u64>,
    /// Raw `fd_timeout_count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_timeout_count: Option<u64>,
    /// Raw `peer_connection_failure_count` (absent when not reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_connection_failures: Option<u64>,
}

/// The node set's part of a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineAggregate {
    /// Nodes with a valid report.
    pub sampled_pods: u32,
    /// Whether the set was a reference: every node sampled, ready, serving,
    /// one ring, memory pressure below critical.
    pub soak_eligible: bool,
    /// Sum of `outbox_messages`; null when no node reports it.
    pub outbox_messages: Option<u64>,
    /// Sum of the nodes' replication lag; null when none was measured
    /// (absent in documents of earlier versions: null).
    #[serde(default)]
    pub replication_lag_entries: Option<u64>,
    /// Sum of `fd_timeout_count`.
    pub fd_timeout_count: Option<u64>,
    /// Sum of `peer_connection_failure_count`; null when no node reports it.
    pub peer_connection_failures: Option<u64>,
}

/// Why a baseline document cannot be used: a usage error of `check`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaselineError {
    /// Unreadable, not JSON, or not a baseline of this version.
    #[error("baseline {path}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Taken of another node set.
    #[error("baseline {path} was taken of other nodes than --node: {difference}")]
    OtherNodes {
        /// The file.
        path: String,
        /// Which URLs are only in the baseline, which only in `--node`.
        difference: String,
    },
    /// Too old to say how the nodes were before this upgrade.
    #[error(
        "baseline {path} was taken at {taken_at}, {age} ago: older than --baseline-max-age {max_age}; take a new one before upgrading"
    )]
    TooOld {
        /// The file.
        path: String,
        /// When it was taken.
        taken_at: Timestamp,
        /// How old it is.
        age: String,
        /// The limit.
        max_age: String,
    },
    /// Taken in the future (a clock set wrong, or a forged file).
    #[error("baseline {path} was taken at {taken_at}, in the future (now {now})")]
    Future {
        /// The file.
        path: String,
        /// When it claims to be taken.
        taken_at: Timestamp,
        /// Now.
        now: Timestamp,
    },
}

impl BaselineDocument {
    /// The document of a baseline poll judged at `taken_at`: its `samples`
    /// (one per node, in `--node` order), the aggregate `health` they made,
    /// and the baseline a check's first poll captures from it (`counters`,
    /// `soak_eligible`; see [`CheckRun`](super::CheckRun)).
    pub fn from_poll(
        samples: &[PodSample],
        taken_at: Timestamp,
        health: &RolloutHealth,
        counters: &BaselineCounters,
        soak_eligible: bool,
    ) -> Self {
        let nodes = samples
            .iter()
            .map(|s| match &s.result {
                SampleResult::Report(r) => BaselineNode {
                    url: s.pod.name.to_string(),
                    sampled: true,
                    error: None,
                    incarnation: r.incarnation().map(str::to_owned),
                    ready: Some(r.ready),
                    state: Some(r.state.as_str().to_owned()),
                    outbox_messages: r.outbox_messages,
                    replication_lag_entries: s.replication_lag_entries,
                    fd_timeout_count: Some(r.fd_timeout_count),
                    peer_connection_failures: r.peer_connection_failure_count,
                },
                SampleResult::Error(e) => BaselineNode {
                    url: s.pod.name.to_string(),
                    sampled: false,
                    error: Some(e.clone()),
                    incarnation: None,
                    ready: None,
                    state: None,
                    outbox_messages: None,
                    replication_lag_entries: None,
                    fd_timeout_count: None,
                    peer_connection_failures: None,
                },
            })
            .collect();
        BaselineDocument {
            kind: BASELINE_KIND.to_owned(),
            schema_version: BASELINE_SCHEMA_VERSION,
            taken_at,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            expected_pods: health.expected_pods,
            nodes,
            aggregate: BaselineAggregate {
                sampled_pods: health.sampled_pods,
                soak_eligible,
                outbox_messages: counters.outbox_messages,
                replication_lag_entries: counters.replication_lag_entries,
                fd_timeout_count: counters.fd_timeout_count,
                peer_connection_failures: counters.peer_connection_failures,
            },
        }
    }

    /// The nodes that were not sampled, with why.
    pub fn unsampled(&self) -> impl Iterator<Item = (&str, &str)> {
        self.nodes.iter().filter(|n| !n.sampled).map(|n| {
            (
                n.url.as_str(),
                n.error.as_deref().unwrap_or("no valid report"),
            )
        })
    }

    /// Parses a document strictly; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, BaselineError> {
        let invalid = |reason: String| BaselineError::Invalid {
            path: path.to_owned(),
            reason: reason.replace(['\n', '\r'], " "),
        };
        let doc: BaselineDocument = serde_json::from_str(text)
            .map_err(|e| invalid(format!("not a baseline document: {e}")))?;
        if doc.kind != BASELINE_KIND {
            return Err(invalid(format!(
                "kind {:?} is not {BASELINE_KIND:?}",
                doc.kind
            )));
        }
        if doc.schema_version != BASELINE_SCHEMA_VERSION {
            return Err(invalid(format!(
                "schemaVersion {} is not {BASELINE_SCHEMA_VERSION} (taken by kura-agent {})",
                doc.schema_version, doc.agent_version
            )));
        }
        let mut seen = BTreeSet::new();
        for node in &doc.nodes {
            if !seen.insert(node.url.as_str()) {
                return Err(invalid(format!("node {} appears twice", node.url)));
            }
            if node.sampled != node.error.is_none() {
                return Err(invalid(format!(
                    "node {}: a sampled node has no error, an unsampled one says why",
                    node.url
                )));
            }
        }
        Ok(doc)
    }

    /// Reads and parses the document in `path` (at most
    /// [`MAX_BASELINE_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, BaselineError> {
        use std::io::Read as _;
        let name = path.display().to_string();
        let invalid = |reason: String| BaselineError::Invalid {
            path: name.clone(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| invalid(format!("cannot read: {e}")))?;
        let mut text = String::new();
        file.take(MAX_BASELINE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| invalid(format!("cannot read: {e}")))?;
        if text.len() as u64 > MAX_BASELINE_BYTES {
            return Err(invalid(format!("larger than {MAX_BASELINE_BYTES} bytes")));
        }
        Self::parse(&name, &text)
    }

    /// Checks that this baseline may judge the nodes `urls` (normal form,
    /// in `--node` order) at `now`: the same node set, taken at most
    /// `max_age` ago and no more than `future_skew` in the future.
    pub fn check_usable(
        &self,
        path: &str,
        urls: &[Uri],
        now: Timestamp,
        max_age: SignedDuration,
        future_skew: SignedDuration,
    ) -> Result<(), BaselineError> {
        let ours: BTreeSet<String> = self
            .nodes
            .iter()
            .map(|n| node_report_url(&n.url).map_or_else(|_| n.url.clone(), |u| u.to_string()))
            .collect();
        let theirs: BTreeSet<String> = urls.iter().map(Uri::to_string).collect();
        if ours != theirs {
            let list = |s: Vec<&String>| {
                if s.is_empty() {
                    "none".to_owned()
                } else {
                    s.iter().map(|u| u.as_str()).collect::<Vec<_>>().join(", ")
                }
            };
            return Err(BaselineError::OtherNodes {
                path: path.to_owned(),
                difference: format!(
                    "only in the baseline: {}; only in --node: {}",
                    list(ours.difference(&theirs).collect()),
                    list(theirs.difference(&ours).collect())
                ),
            });
        }
        let age = now.duration_since(self.taken_at);
        if age > max_age {
            return Err(BaselineError::TooOld {
                path: path.to_owned(),
                taken_at: self.taken_at,
                age: friendly(age),
                max_age: friendly(max_age),
            });
        }
        if -age > future_skew {
            return Err(BaselineError::Future {
                path: path.to_owned(),
                taken_at: self.taken_at,
                now,
            });
        }
        Ok(())
    }

    /// The baseline's counters as the gate compares them.
    pub fn counters(&self) -> BaselineCounters {
        BaselineCounters {
            replication_lag_entries: self.aggregate.replication_lag_entries,
            outbox_messages: self.aggregate.outbox_messages,
            fd_timeout_count: self.aggregate.fd_timeout_count,
            peer_connection_failures: self.aggregate.peer_connection_failures,
        }
    }

    /// The aggregate the node set's counter state continues from: one pod
    /// entry per sampled node (named by its URL, as `check` names it) with
    /// its raw counters and incarnation, so the per-node reset clamping of
    /// the first poll after the upgrade compares with the state before it.
    /// `agent` names the writer, as the check's aggregates do.
    pub fn seed(&self, agent: &str) -> RolloutHealth {
        let pods: Vec<PodHealth> = self
            .nodes
            .iter()
            .filter(|n| n.sampled)
            .map(|n| {
                let name =
                    node_report_url(&n.url).map_or_else(|_| n.url.clone(), |u| u.to_string());
                let name: std::sync::Arc<str> = name.into();
                PodHealth {
                    uid: name.clone(),
                    name,
                    incarnation: n.incarnation.as_deref().map(Into::into),
                    sampled_at: Some(self.taken_at),
                    ready: n.ready,
                    state: n.state.as_deref().map(Into::into),
                    outbox_messages: n.outbox_messages,
                    replication_lag_entries: n.replication_lag_entries,
                    fd_timeout_count: n.fd_timeout_count,
                    fd_timeout_count_raw: n.fd_timeout_count,
                    peer_connection_failures: n.peer_connection_failures,
                    peer_connection_failures_raw: n.peer_connection_failures,
                    ..PodHealth::default()
                }
            })
            .collect();
        let fd = pods
            .iter()
            .filter_map(|p| p.fd_timeout_count)
            .fold(0u64, u64::saturating_add);
        let peers = pods
            .iter()
            .filter_map(|p| p.peer_connection_failures)
            .reduce(u64::saturating_add);
        RolloutHealth {
            replication_lag_entries: self.aggregate.replication_lag_entries,
            serving_authority: None,
            schema_version: ROLLOUT_HEALTH_SCHEMA_VERSION,
            observed_at: self.taken_at,
            sampled_at: Some(self.taken_at),
            observed_generation: 0,
            expected_pods: self.expected_pods,
            sampled_pods: self.aggregate.sampled_pods,
            ready: false,
            serving: false,
            writer_lock_owned: false,
            initial_discovery_completed: false,
            generation_consistent: false,
            ring_consistent: false,
            ring_members: 0,
            bootstrap_inflight_peers: None,
            backfill_initial_cycle: String::new(),
            backfilling_peers: None,
            backfill_degraded: false,
            backfill_budget_exhausted_peers: None,
            outbox_messages: self.aggregate.outbox_messages,
            fd_timeout_count: fd,
            peer_connection_failures: peers,
            memory_pressure_state: 0,
            inflight_requests: 0,
            counter_resets: 0,
            pods: pods.into_iter().map(std::sync::Arc::new).collect(),
            retired_counters: Default::default(),
            agent: agent.to_owned(),
            suspended: false,
            update_paused: None,
        }
    }
}

/// A duration like `1h 2m 3s` (whole seconds).
fn friendly(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m {s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn doc() -> BaselineDocument {
        BaselineDocument {
            kind: BASELINE_KIND.into(),
            schema_version: 1,
            taken_at: t(0),
            agent_version: "0.1.0".into(),
            expected_pods: 2,
            nodes: vec![
                BaselineNode {
                    replication_lag_entries: None,
                    url: "http://a:1/status/rollout".into(),
                    sampled: true,
                    error: None,
                    incarnation: Some("i-1".into()),
                    ready: Some(true),
                    state: Some("serving".into()),
                    outbox_messages: Some(3),
                    fd_timeout_count: Some(10),
                    peer_connection_failures: None,
                },
                BaselineNode {
                    replication_lag_entries: None,
                    url: "http://b:1/status/rollout".into(),
                    sampled: true,
                    error: None,
                    incarnation: None,
                    ready: Some(true),
                    state: Some("serving".into()),
                    outbox_messages: None,
                    fd_timeout_count: Some(2),
                    peer_connection_failures: Some(4),
                },
            ],
            aggregate: BaselineAggregate {
                replication_lag_entries: None,
                sampled_pods: 2,
                soak_eligible: true,
                outbox_messages: Some(3),
                fd_timeout_count: Some(12),
                peer_connection_failures: Some(4),
            },
        }
    }

    fn urls(list: &[&str]) -> Vec<Uri> {
        list.iter().map(|u| node_report_url(u).unwrap()).collect()
    }

    #[test]
    fn a_document_round_trips_and_strangers_are_refused() {
        let text = serde_json::to_string(&doc()).unwrap();
        assert_eq!(BaselineDocument::parse("f", &text).unwrap(), doc());
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["extra"] = serde_json::json!(1);
        let err = BaselineDocument::parse("f", &value.to_string()).unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
        for (key, bad, want) in [
            ("kind", serde_json::json!("Other"), "kind \"Other\" is not"),
            (
                "schemaVersion",
                serde_json::json!(2),
                "schemaVersion 2 is not 1",
            ),
        ] {
            let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
            value[key] = bad;
            let err = BaselineDocument::parse("f", &value.to_string()).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        let mut twice = doc();
        twice.nodes[1].url = twice.nodes[0].url.clone();
        let err =
            BaselineDocument::parse("f", &serde_json::to_string(&twice).unwrap()).unwrap_err();
        assert!(err.to_string().contains("appears twice"), "{err}");
        assert!(BaselineDocument::parse("f", "not json").is_err());
    }

    #[test]
    fn another_node_set_or_an_old_baseline_is_refused_naming_why() {
        let d = doc();
        let hour = SignedDuration::from_hours(1);
        let skew = SignedDuration::from_secs(60);
        // Spelled differently, the same nodes.
        assert_eq!(
            d.check_usable(
                "f",
                &urls(&["http://B:01", "http://a:1/"]),
                t(10),
                hour,
                skew
            ),
            Ok(())
        );
        let err = d
            .check_usable("f", &urls(&["http://a:1", "http://c:1"]), t(10), hour, skew)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("only in the baseline: http://b:1/status/rollout; only in --node: http://c:1/status/rollout"),
            "{err}"
        );
        let err = d
            .check_usable("f", &urls(&["http://a:1"]), t(10), hour, skew)
            .unwrap_err()
            .to_string();
        assert!(err.contains("only in --node: none"), "{err}");
        let both = urls(&["http://a:1", "http://b:1"]);
        assert_eq!(d.check_usable("f", &both, t(3600), hour, skew), Ok(()));
        let err = d
            .check_usable("f", &both, t(3601), hour, skew)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1h 0m 1s ago: older than --baseline-max-age 1h 0m 0s"),
            "{err}"
        );
        assert!(matches!(
            d.check_usable("f", &both, t(-61), hour, skew),
            Err(BaselineError::Future { .. })
        ));
    }

    #[test]
    fn the_seed_holds_each_nodes_raw_counters_and_identity() {
        let seed = doc().seed("test");
        assert_eq!(seed.fd_timeout_count, 12);
        assert_eq!(seed.peer_connection_failures, Some(4));
        assert_eq!(seed.pods.len(), 2);
        let a = &seed.pods[0];
        assert_eq!(&*a.name, "http://a:1/status/rollout");
        assert_eq!(a.incarnation.as_deref(), Some("i-1"));
        assert_eq!(
            (a.fd_timeout_count, a.fd_timeout_count_raw),
            (Some(10), Some(10))
        );
        assert_eq!(a.peer_connection_failures, None);
        let mut one_down = doc();
        one_down.nodes[1] = BaselineNode {
            sampled: false,
            error: Some("refused".into()),
            fd_timeout_count: None,
            peer_connection_failures: None,
            ..one_down.nodes[1].clone()
        };
        let seed = one_down.seed("test");
        assert_eq!(seed.pods.len(), 1, "an unsampled node starts fresh");
        assert_eq!(seed.peer_connection_failures, None);
        assert_eq!(
            one_down.unsampled().collect::<Vec<_>>(),
            [("http://b:1/status/rollout", "refused")]
        );
    }
}
