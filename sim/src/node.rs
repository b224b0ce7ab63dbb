//! The generation-neutral state of one simulated Kura node, and how it is
//! rendered as a [`NodeReport`] of a chosen report generation.

use crate::SimError;
use kura_schemas::NodeReport;
use kura_schemas::report::{BackfillCycle, NodeState, ServingAuthority, ServingIdentity};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A report generation of contract/node-report.md (G1 oldest, G4 newest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub enum ReportGeneration {
    /// Bootstrap era: `bootstrap_*`, `outbox_messages`, no fingerprint.
    G1,
    /// G1 plus the `backfill_*` keys when the node runs with backfill enabled.
    G2,
    /// `ring_fingerprint`, `peer_connection_failure_count`, `backfill_*`; no
    /// `bootstrap_*`.
    G3,
    /// G3 without `outbox_messages` (pull sync), with `serving_authority` on
    /// the newest builds.
    G4,
}

impl TryFrom<u8> for ReportGeneration {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            1 => Ok(ReportGeneration::G1),
            2 => Ok(ReportGeneration::G2),
            3 => Ok(ReportGeneration::G3),
            4 => Ok(ReportGeneration::G4),
            other => Err(format!("report generation {other} is not 1–4")),
        }
    }
}

impl From<ReportGeneration> for u8 {
    fn from(g: ReportGeneration) -> u8 {
        match g {
            ReportGeneration::G1 => 1,
            ReportGeneration::G2 => 2,
            ReportGeneration::G3 => 3,
            ReportGeneration::G4 => 4,
        }
    }
}

/// Everything a simulated node can report, whatever its generation. Which
/// keys actually appear is decided by [`SimNode::report_generation`] in
/// [`SimNode::report`]. Field names are the wire names, so a scenario's `set`
/// uses the same spelling as a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimNode {
    /// Which generation's keys the report carries.
    pub report_generation: ReportGeneration,
    /// `generation`.
    pub generation: u64,
    /// `ready`.
    pub ready: bool,
    /// `state`.
    pub state: NodeState,
    /// `ring_members`.
    pub ring_members: u64,
    /// `ring_fingerprint` (G3+): 16 lowercase hex chars.
    pub ring_fingerprint: String,
    /// `initial_discovery_completed`.
    pub initial_discovery_completed: bool,
    /// `writer_lock_owned`.
    pub writer_lock_owned: bool,
    /// `bootstrap_known_peers` (G1, G2).
    pub bootstrap_known_peers: u64,
    /// `bootstrap_completed_peers` (G1, G2).
    pub bootstrap_completed_peers: u64,
    /// `bootstrap_inflight_peers` (G1, G2).
    pub bootstrap_inflight_peers: u64,
    /// `http_inflight_requests`.
    pub http_inflight_requests: u64,
    /// `grpc_inflight_requests`.
    pub grpc_inflight_requests: u64,
    /// `outbox_messages` (G1–G3; absent on G4).
    pub outbox_messages: u64,
    /// `memory_pressure_state`: 0, 1 or 2.
    pub memory_pressure_state: u8,
    /// `fd_timeout_count`.
    pub fd_timeout_count: u64,
    /// `peer_connection_failure_count` (G3+).
    pub peer_connection_failure_count: u64,
    /// Whether a G2 node runs with backfill enabled (G2 carries the
    /// `backfill_*` keys only then; G3+ always carry them).
    pub backfill_enabled: bool,
    /// `backfill_initial_cycle`: `pending`, `complete`, `degraded` (or any
    /// other text a newer Kura might send).
    pub backfill_initial_cycle: String,
    /// `backfill_backfilling_peers`.
    pub backfill_backfilling_peers: u64,
    /// `backfill_budget_exhausted_real_peers`.
    pub backfill_budget_exhausted_real_peers: u64,
    /// `backfill_budget_exhausted_capability_peers`.
    pub backfill_budget_exhausted_capability_peers: u64,
    /// `backfill_ring_fullness_percent`.
    pub backfill_ring_fullness_percent: u64,
    /// Whether a G4 node is a newest build that carries `serving_authority`.
    pub serving_authority: bool,
    /// `serving_authority.identity.pod_uid`; `None` when the pod is built
    /// means "the simulated pod's own UID". Set it to another UID to
    /// simulate an identity mismatch (a reused pod IP).
    pub pod_uid: Option<String>,
    /// `serving_authority.identity.instance_uid`.
    pub instance_uid: Option<String>,
    /// `serving_authority.identity.incarnation`: +1 on every simulated
    /// process restart.
    pub incarnation: u64,
    /// `serving_authority.identity.host`; `None` when the pod is built means
    /// the pod's name.
    pub host: Option<String>,
}

impl Default for SimNode {
    /// A healthy G4 node of a three-member ring.
    fn default() -> Self {
        SimNode {
            report_generation: ReportGeneration::G4,
            generation: 3,
            ready: true,
            state: NodeState::Serving,
            ring_members: 3,
            ring_fingerprint: "9f2c01ab77e4d310".to_owned(),
            initial_discovery_completed: true,
            writer_lock_owned: true,
            bootstrap_known_peers: 2,
            bootstrap_completed_peers: 2,
            bootstrap_inflight_peers: 0,
            http_inflight_requests: 0,
            grpc_inflight_requests: 0,
            outbox_messages: 0,
            memory_pressure_state: 0,
            fd_timeout_count: 0,
            peer_connection_failure_count: 0,
            backfill_enabled: true,
            backfill_initial_cycle: "complete".to_owned(),
            backfill_backfilling_peers: 0,
            backfill_budget_exhausted_real_peers: 0,
            backfill_budget_exhausted_capability_peers: 0,
            backfill_ring_fullness_percent: 100,
            serving_authority: true,
            pod_uid: None,
            instance_uid: None,
            incarnation: 1,
            host: None,
        }
    }
}

impl SimNode {
    /// The report this node answers, with exactly the keys its generation
    /// carries.
    pub fn report(&self) -> NodeReport {
        let g = self.report_generation;
        let old = g <= ReportGeneration::G2;
        let backfill =
            g >= ReportGeneration::G3 || (g == ReportGeneration::G2 && self.backfill_enabled);
        let new = g >= ReportGeneration::G3;
        let when = |on: bool, v: u64| on.then_some(v);
        NodeReport {
            generation: self.generation,
            ready: self.ready,
            state: self.state,
            ring_members: self.ring_members,
            ring_fingerprint: new.then(|| self.ring_fingerprint.clone()),
            initial_discovery_completed: Some(self.initial_discovery_completed),
            writer_lock_owned: self.writer_lock_owned,
            bootstrap_known_peers: when(old, self.bootstrap_known_peers),
            bootstrap_completed_peers: when(old, self.bootstrap_completed_peers),
            bootstrap_inflight_peers: when(old, self.bootstrap_inflight_peers),
            http_inflight_requests: Some(self.http_inflight_requests),
            grpc_inflight_requests: Some(self.grpc_inflight_requests),
            outbox_messages: when(g <= ReportGeneration::G3, self.outbox_messages),
            memory_pressure_state: self.memory_pressure_state,
            fd_timeout_count: self.fd_timeout_count,
            peer_connection_failure_count: when(new, self.peer_connection_failure_count),
            backfill_initial_cycle: backfill
                .then(|| BackfillCycle::from_wire(&self.backfill_initial_cycle)),
            backfill_backfilling_peers: when(backfill, self.backfill_backfilling_peers),
            backfill_budget_exhausted_real_peers: when(
                backfill,
                self.backfill_budget_exhausted_real_peers,
            ),
            backfill_budget_exhausted_capability_peers: when(
                backfill,
                self.backfill_budget_exhausted_capability_peers,
            ),
            backfill_ring_fullness_percent: when(backfill, self.backfill_ring_fullness_percent),
            serving_authority: (g == ReportGeneration::G4 && self.serving_authority).then(|| {
                ServingAuthority {
                    capability: Some("pull-sync".to_owned()),
                    enabled: Some(true),
                    identity: Some(ServingIdentity {
                        instance_uid: self.instance_uid.clone(),
                        pod_uid: self.pod_uid.clone(),
                        incarnation: Some(format!("sim-{}", self.incarnation)),
                        host: self.host.clone(),
                    }),
                }
            }),
        }
    }

    /// The report's wire form.
    pub fn report_json(&self) -> Vec<u8> {
        // Serializing a struct of plain values to a Vec cannot fail.
        serde_json::to_vec(&self.report()).unwrap_or_default()
    }

    /// A process restart: per-process counters back to 0, generation back to
    /// its first value after discovery (1), a new incarnation. Gauges that a
    /// fresh process starts without (outbox, in-flight requests) go to 0 too.
    pub fn restart(&mut self) {
        self.generation = 1;
        self.fd_timeout_count = 0;
        self.peer_connection_failure_count = 0;
        self.outbox_messages = 0;
        self.http_inflight_requests = 0;
        self.grpc_inflight_requests = 0;
        self.incarnation += 1;
    }

    /// Merge `fields` (wire names, as in a scenario's `set`) into the node.
    /// An unknown field or a value of the wrong type is an error and leaves
    /// the node unchanged.
    pub fn apply_set(&mut self, fields: &Map<String, Value>) -> Result<(), SimError> {
        let mut value = self.to_value()?;
        if let Value::Object(obj) = &mut value {
            for (k, v) in fields {
                obj.insert(k.clone(), v.clone());
            }
        }
        *self = serde_json::from_value(value).map_err(|e| SimError::Scenario(e.to_string()))?;
        Ok(())
    }

    /// Add `delta` (which may be negative; the result saturates at 0) to the
    /// integer field `field` (wire name).
    pub fn apply_add(&mut self, field: &str, delta: i64) -> Result<(), SimError> {
        let mut value = self.to_value()?;
        let slot = value
            .get_mut(field)
            .ok_or_else(|| SimError::Scenario(format!("unknown field `{field}`")))?;
        let current = slot
            .as_u64()
            .ok_or_else(|| SimError::Scenario(format!("field `{field}` is not a counter")))?;
        let next = if delta >= 0 {
            current.saturating_add(delta.unsigned_abs())
        } else {
            current.saturating_sub(delta.unsigned_abs())
        };
        *slot = Value::from(next);
        *self = serde_json::from_value(value).map_err(|e| SimError::Scenario(e.to_string()))?;
        Ok(())
    }

    fn to_value(&self) -> Result<Value, SimError> {
        serde_json::to_value(self).map_err(|e| SimError::Scenario(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::parse_report;

    fn node(g: u8) -> SimNode {
        SimNode {
            report_generation: ReportGeneration::try_from(g).unwrap(),
            pod_uid: Some("uid-1".into()),
            ..SimNode::default()
        }
    }

    #[test]
    fn every_generation_round_trips_through_the_parser_with_its_own_keys() {
        for g in 1..=4u8 {
            let n = node(g);
            let parsed = parse_report(&n.report_json()).unwrap();
            assert_eq!(parsed, n.report(), "generation {g}");
            assert_eq!(parsed.shape_generation(), g, "generation {g}");
        }
        let g2_without_flag = SimNode {
            backfill_enabled: false,
            ..node(2)
        };
        assert_eq!(g2_without_flag.report().backfill_initial_cycle, None);
        assert_eq!(node(4).report().outbox_messages, None);
        assert_eq!(node(4).report().pod_uid(), Some("uid-1"));
        assert_eq!(node(3).report().serving_authority, None);
    }

    #[test]
    fn restart_zeroes_counters_and_changes_incarnation() {
        let mut n = node(4);
        n.fd_timeout_count = 9;
        n.peer_connection_failure_count = 4;
        let before = n.report().incarnation().map(str::to_owned);
        n.restart();
        assert_eq!(
            (n.fd_timeout_count, n.peer_connection_failure_count),
            (0, 0)
        );
        assert_ne!(n.report().incarnation().map(str::to_owned), before);
    }

    #[test]
    fn set_and_add_validate_names_and_types() {
        let mut n = node(4);
        let set: Map<String, Value> =
            serde_json::from_str(r#"{"state":"draining","memory_pressure_state":2}"#).unwrap();
        n.apply_set(&set).unwrap();
        assert_eq!((n.state, n.memory_pressure_state), (NodeState::Draining, 2));
        n.apply_add("fd_timeout_count", 5).unwrap();
        n.apply_add("fd_timeout_count", -9).unwrap();
        assert_eq!(n.fd_timeout_count, 0);
        let bad: Map<String, Value> = serde_json::from_str(r#"{"no_such_key":1}"#).unwrap();
        assert!(n.apply_set(&bad).is_err());
        assert!(n.apply_add("state", 1).is_err());
        assert_eq!(n.state, NodeState::Draining);
    }
}
