//! The generation-neutral state of one simulated Kura node, and how it is
//! rendered as a [`NodeReport`] of a chosen report generation.

use crate::SimError;
use kura_schemas::NodeReport;
use kura_schemas::report::{
    BackfillCycle, NodeState, ObservedGrant, ServingAuthority, ServingIdentity,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `serving_authority.capability` of the newest builds.
const FENCE_CAPABILITY: &str = "positive-fence-v1";

/// The `frontier` of a link whose peer reported its feed position.
const REPORTED: &str = "reported";

/// `frontier_ms` of a `reported` replica link (a fixed time: 2026-12-03).
const REPORTED_FRONTIER_MS: u64 = 1_796_287_650_000;

/// `lag_entries` of a gateway's `region` link: large, so that summing it by
/// mistake shows.
pub const REGION_LINK_LAG: u64 = 1000;

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
    /// `outbox_capacity` (some G3 builds): `None` leaves the key out.
    pub outbox_capacity: Option<u64>,
    /// Whether a G4 node is a newest build that carries `serving_authority`.
    pub serving_authority: bool,
    /// Whether the node runs fenced serving (`serving_authority.enabled`).
    /// Without it, a newest build writes empty `instance_uid`, `pod_uid` and
    /// `host`, exactly as Kura does (contract/node-report.md).
    pub fenced_serving: bool,
    /// `serving_authority.observed.phase` while fenced serving is on
    /// (`Preparing`, `Serving`, `Quiescing`, `Revoking`, `Fencing`).
    pub fence_phase: String,
    /// `serving_authority.epoch` while fenced serving is on and the node
    /// holds a valid grant (0 otherwise, as Kura reports it).
    pub fence_epoch: u64,
    /// Whether a fenced node holds a valid grant (`serving_authority.valid`):
    /// true on the primary, false on a standby and on every pod once the
    /// grant is in `Fencing`.
    pub fence_valid: bool,
    /// The replication lag a pull-sync node (G4) reports on
    /// `GET /status/cluster` (`lag_entries` of its one `replica` link).
    /// `None`: a build without the route (HTTP 404).
    pub replication_lag_entries: Option<u64>,
    /// The HTTP status `GET /status/cluster` answers with (200: the body).
    pub cluster_status: u16,
    /// The `frontier` of the `replica` link on `GET /status/cluster`, and
    /// with it the link's state as Kura's `sync/coordinator.rs` writes it:
    /// `reported` (forward, settled, `frontier_ms` a time), `pending` (still
    /// bootstrapping: not settled, `frontier_ms` null) or `abandoned` (gave
    /// up after its retries: settled, `frontier_ms` null). Any other value is
    /// served verbatim with `frontier_ms` null.
    pub replica_frontier: String,
    /// Whether the node is its region's gateway in a multi-region mesh:
    /// `"gateway": true`, and a `region` link to another region's gateway
    /// beside the `replica` link, with `"frontier": "pending"` and
    /// `"frontier_ms": null` for its whole life (`sync/region.rs`) and a lag
    /// of [`REGION_LINK_LAG`] entries that must not be summed.
    pub gateway: bool,
    /// `serving_authority.identity.pod_uid` of a fenced node; `None` when
    /// the pod is built means "the simulated pod's own UID". Set it to
    /// another UID to simulate an identity mismatch (a reused pod IP).
    pub pod_uid: Option<String>,
    /// `serving_authority.identity.instance_uid`.
    pub instance_uid: Option<String>,
    /// Process start counter behind `serving_authority.identity.incarnation`
    /// (rendered as a UUIDv7-shaped string): +1 on every simulated process
    /// restart.
    pub incarnation: u64,
    /// `serving_authority.identity.host`; `None` when the pod is built means
    /// the pod's name.
    pub host: Option<String>,
}

impl Default for SimNode {
    /// A healthy node of the newest builds (G4 with `serving_authority`,
    /// fenced serving off, so its identity strings are empty) in a
    /// three-member ring.
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
            outbox_capacity: None,
            serving_authority: true,
            fenced_serving: false,
            fence_phase: "Serving".to_owned(),
            fence_epoch: 1,
            fence_valid: true,
            replication_lag_entries: Some(0),
            cluster_status: 200,
            replica_frontier: REPORTED.to_owned(),
            gateway: false,
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
            serving_authority: self.authority_on().then(|| self.authority()),
            outbox_capacity: self.outbox_capacity.filter(|_| g == ReportGeneration::G3),
        }
    }

    fn authority_on(&self) -> bool {
        self.report_generation == ReportGeneration::G4 && self.serving_authority
    }

    /// What the parser reads from [`Self::authority_json`].
    fn authority(&self) -> ServingAuthority {
        let fenced = self.fenced_serving;
        let named = |v: &Option<String>| v.clone().filter(|s| fenced && !s.is_empty());
        ServingAuthority {
            capability: Some(FENCE_CAPABILITY.to_owned()),
            enabled: Some(fenced),
            identity: Some(ServingIdentity {
                instance_uid: named(&self.instance_uid),
                pod_uid: named(&self.pod_uid),
                incarnation: Some(self.incarnation_text()),
                host: named(&self.host),
            }),
            epoch: Some(self.reported_epoch()),
            valid: Some(self.holds_grant()),
            observed: fenced.then(|| ObservedGrant {
                phase: self.fence_phase.clone(),
            }),
        }
    }

    /// `serving_authority` as Kura's `serving_authority.rs` writes it, every
    /// key included (contract/node-report.md): empty identity strings and a
    /// null `observed` when fenced serving is off.
    fn authority_json(&self) -> Value {
        let fenced = self.fenced_serving;
        let text = |v: &Option<String>| {
            if fenced {
                v.clone().unwrap_or_default()
            } else {
                String::new()
            }
        };
        serde_json::json!({
            "automatic_partition_promotion": false,
            "barrier": null,
            "capability": FENCE_CAPABILITY,
            "enabled": fenced,
            "epoch": self.reported_epoch(),
            "identity": {
                "host": text(&self.host),
                "incarnation": self.incarnation_text(),
                "instance_uid": text(&self.instance_uid),
                "pod_uid": text(&self.pod_uid),
            },
            "mutations": 0,
            "observed": if fenced {
                serde_json::json!({"epoch": self.fence_epoch, "phase": self.fence_phase})
            } else {
                Value::Null
            },
            "remaining_ms": if self.holds_grant() { 5_000 } else { 0 },
            "revoked_epoch": 0,
            "valid": self.holds_grant(),
        })
    }

    /// Whether the node holds a valid grant: fenced serving on, the node the
    /// holder, and the grant not in `Fencing` or `Preparing` (Kura's
    /// `install()` clears the active grant then).
    fn holds_grant(&self) -> bool {
        self.fenced_serving
            && self.fence_valid
            && !matches!(self.fence_phase.as_str(), "Fencing" | "Preparing")
    }

    /// `serving_authority.epoch`: the grant's epoch while it is held, else 0.
    fn reported_epoch(&self) -> u64 {
        if self.holds_grant() {
            self.fence_epoch
        } else {
            0
        }
    }

    /// Whether the node replicates by pull (G4: no `outbox_messages`), so
    /// the agent reads its lag from `GET /status/cluster`.
    pub fn pulls(&self) -> bool {
        self.report_generation == ReportGeneration::G4
    }

    /// The `GET /status/cluster` body of a pull-sync node, as Kura's
    /// `cluster_status` (http.rs) writes it (contract/node-report.md,
    /// contract/examples/cluster-status-*.json): one `replica` link with
    /// [`Self::replication_lag_entries`] in the state
    /// [`Self::replica_frontier`] names, and on a [`Self::gateway`] a
    /// `region` link too, whose lag is not the instance's; the
    /// informational keys of the newest builds (`frontier`, `frontier_ms`,
    /// `unsupported`, `tenant_id`, `node`, `node_url`, `members`, `nodes`,
    /// `connected_nodes`, `regions`, `gateway`, `feed`), keys in
    /// alphabetical order. `None` when the route is absent.
    pub fn cluster_json(&self) -> Option<Vec<u8>> {
        let lag = self.replication_lag_entries?;
        let me = "http://kura-0.kura-headless.kura.svc:7443";
        let sibling = "http://kura-1.kura-headless.kura.svc:7443";
        let elsewhere = "https://kura.elsewhere.example:7443";
        let (phase, settled, frontier_ms) = match self.replica_frontier.as_str() {
            REPORTED => ("forward", true, Value::from(REPORTED_FRONTIER_MS)),
            "pending" => ("bootstrapping", false, Value::Null),
            "abandoned" => ("retrying", true, Value::Null),
            _ => ("forward", true, Value::Null),
        };
        let mut links = vec![serde_json::json!({
            "frontier": self.replica_frontier, "frontier_ms": frontier_ms, "kind": "replica",
            "lag_entries": lag, "peer": sibling, "phase": phase, "region": "sim",
            "settled": settled, "unsupported": false
        })];
        let mut connected = vec![sibling];
        let mut members = vec![me, sibling];
        let mut regions = vec!["sim"];
        if self.gateway {
            links.push(serde_json::json!({
                "frontier": "pending", "frontier_ms": null, "kind": "region",
                "lag_entries": REGION_LINK_LAG, "peer": elsewhere, "phase": "forward",
                "region": "elsewhere", "settled": true, "unsupported": false
            }));
            connected.push(elsewhere);
            members.push(elsewhere);
            regions.push("elsewhere");
        }
        let head = lag.saturating_add(40_000);
        let body = serde_json::json!({
            "connected_nodes": connected,
            "feed": {"consumers": [{"cursor": head, "peer": sibling, "pinned": false}],
                     "enabled": true, "floor": 40_000, "head": head},
            "gateway": self.gateway,
            "generation": self.generation,
            "members": members,
            "node": "sim",
            "node_url": me,
            "nodes": members,
            "regions": regions,
            "ring_members": self.ring_members,
            "status": "ok",
            "sync_links": links,
            "tenant_id": "sim"
        });
        serde_json::to_vec(&body).ok()
    }

    /// A UUIDv7-shaped incarnation, distinct per simulated process start.
    fn incarnation_text(&self) -> String {
        let n = self.incarnation;
        format!(
            "019add3e-{:04x}-7{:03x}-9d2b-{:012x}",
            (n >> 48) & 0xffff,
            (n >> 36) & 0xfff,
            n & 0xffff_ffff_ffff
        )
    }

    /// The report's wire form: compact JSON, keys in alphabetical order, and
    /// `serving_authority` with every key a real node writes.
    pub fn report_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.wire_value()).unwrap_or_default()
    }

    /// The report's wire form as a JSON value.
    pub fn wire_value(&self) -> Value {
        let mut report = self.report();
        report.serving_authority = None;
        // Serializing a struct of plain values cannot fail.
        let mut value = serde_json::to_value(&report).unwrap_or_default();
        if self.authority_on()
            && let Value::Object(obj) = &mut value
        {
            obj.insert("serving_authority".to_owned(), self.authority_json());
        }
        value
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
            host: Some("pod-1".into()),
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
        assert_eq!(node(3).report().serving_authority, None);
        let g3_capacity = SimNode {
            outbox_capacity: Some(10_000),
            ..node(3)
        };
        let parsed = parse_report(&g3_capacity.report_json()).unwrap();
        assert_eq!(parsed.outbox_capacity, Some(10_000));
        assert_eq!(parsed, g3_capacity.report());
    }

    #[test]
    fn newest_builds_without_fenced_serving_write_empty_identity_like_kura() {
        let n = node(4);
        let wire: Value = serde_json::from_slice(&n.report_json()).unwrap();
        let authority = &wire["serving_authority"];
        assert_eq!(authority["enabled"], false);
        assert_eq!(authority["capability"], "positive-fence-v1");
        assert_eq!(authority["observed"], Value::Null);
        for key in ["instance_uid", "pod_uid", "host"] {
            assert_eq!(authority["identity"][key], "", "{key}");
        }
        let incarnation = authority["identity"]["incarnation"].as_str().unwrap();
        assert_eq!(incarnation.len(), 36, "{incarnation}");
        let parsed = parse_report(&n.report_json()).unwrap();
        assert_eq!(parsed.pod_uid(), None, "an empty pod_uid names nothing");
        assert_eq!(parsed.fence(), None);
        assert_eq!(parsed, n.report());
    }

    #[test]
    fn fenced_nodes_name_their_pod_and_phase() {
        let n = SimNode {
            fenced_serving: true,
            fence_phase: "Fencing".into(),
            ..node(4)
        };
        let parsed = parse_report(&n.report_json()).unwrap();
        assert_eq!(parsed, n.report());
        assert_eq!(parsed.pod_uid(), Some("uid-1"));
        let fence = parsed.fence().unwrap();
        assert_eq!(fence.observed.as_ref().unwrap().phase, "Fencing");
        // In Fencing no pod holds the grant (Kura's install() clears it).
        assert_eq!((fence.valid, fence.epoch), (Some(false), Some(0)));
        let primary = SimNode {
            fence_phase: "Serving".into(),
            fence_epoch: 3,
            ..n.clone()
        };
        let standby = SimNode {
            fence_valid: false,
            ..primary.clone()
        };
        let fence = |n: &SimNode| {
            let a = parse_report(&n.report_json())
                .unwrap()
                .serving_authority
                .unwrap();
            (a.valid, a.epoch)
        };
        assert_eq!(fence(&primary), (Some(true), Some(3)));
        assert_eq!(fence(&standby), (Some(false), Some(0)));
    }

    #[test]
    fn only_pull_sync_nodes_describe_their_links() {
        let body = node(4).cluster_json().unwrap();
        let status = kura_schemas::parse_cluster_status(&body).unwrap();
        assert_eq!(status.replication_lag_entries(), Some(0));
        let lagging = SimNode {
            replication_lag_entries: Some(77),
            gateway: true,
            ..node(4)
        };
        let status = kura_schemas::parse_cluster_status(&lagging.cluster_json().unwrap()).unwrap();
        assert_eq!(
            status.replication_lag_entries(),
            Some(77),
            "the region link is not summed"
        );
        assert!(node(4).pulls() && !node(3).pulls());
        let without = SimNode {
            replication_lag_entries: None,
            ..node(4)
        };
        assert_eq!(without.cluster_json(), None);
    }

    /// Each replica link state and the gateway's region link, as Kura
    /// writes them: `frontier_ms` a time only when `reported`, null
    /// otherwise (the region link's for its whole life); every body parses,
    /// its lag the replica link's alone.
    #[test]
    fn cluster_bodies_carry_kuras_frontier_keys() {
        use kura_schemas::cluster::{LinkKind, parse_cluster_status};
        for (frontier, gateway, phase, settled, frontier_ms) in [
            (
                "reported",
                false,
                "forward",
                true,
                Value::from(REPORTED_FRONTIER_MS),
            ),
            ("pending", false, "bootstrapping", false, Value::Null),
            ("abandoned", true, "retrying", true, Value::Null),
            (
                "reported",
                true,
                "forward",
                true,
                Value::from(REPORTED_FRONTIER_MS),
            ),
        ] {
            let n = SimNode {
                replication_lag_entries: Some(12),
                replica_frontier: frontier.into(),
                gateway,
                ..node(4)
            };
            let body = n.cluster_json().unwrap();
            let wire: Value = serde_json::from_slice(&body).unwrap();
            let links = wire["sync_links"].as_array().unwrap();
            let replica = &links[0];
            assert_eq!(
                (
                    &replica["kind"],
                    &replica["frontier"],
                    &replica["frontier_ms"],
                    &replica["phase"],
                    &replica["settled"]
                ),
                (
                    &Value::from("replica"),
                    &Value::from(frontier),
                    &frontier_ms,
                    &Value::from(phase),
                    &Value::from(settled)
                ),
                "{frontier}"
            );
            assert_eq!(wire["gateway"], gateway);
            assert_eq!(links.len(), if gateway { 2 } else { 1 });
            if gateway {
                let region = &links[1];
                assert_eq!(region["kind"], "region");
                assert_eq!(region["frontier"], "pending");
                assert_eq!(region["frontier_ms"], Value::Null);
                assert!(wire["regions"].as_array().unwrap().len() == 2);
            }
            assert_eq!(wire.get("pulling"), None, "gone from the newest builds");
            let status = parse_cluster_status(&body).unwrap();
            assert_eq!(status.replication_lag_entries(), Some(12), "{frontier}");
            let kinds: Vec<&LinkKind> = status
                .sync_links
                .iter()
                .flatten()
                .map(|l| &l.kind)
                .collect();
            let expected = [LinkKind::Replica, LinkKind::Region];
            assert_eq!(kinds, expected.iter().take(links.len()).collect::<Vec<_>>());
            assert_eq!(
                status.sync_links.unwrap()[0].frontier_ms,
                frontier_ms.as_u64(),
                "a null frontier_ms is dropped, not an error"
            );
            assert_eq!(status.gateway, Some(gateway));
        }
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
