//! [`DebugState`]: every input of the debug server, handed in once by
//! whoever starts it (`kura-agent run`, the demo, the tests): the fleet
//! view, the metrics recorder, the clock, and the lookups the view itself
//! does not hold (the watches' readiness, the sharding members, the
//! statuses stored in the cluster, this replica's identity). The routes
//! read them through the answers below; the view stays the fleet's data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::model::{Clock, InstanceKey, MembersSource, StoredInstance, StoredStatusSource};
use crate::view::{FleetView, InstanceView, Readiness};

/// Lists the watches (and the shard) still waiting for their initial
/// list, one line each.
pub type SyncProbe = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// What the debug server reads. Cheap to clone; every clone reads the same
/// view and sources.
#[derive(Clone)]
pub struct DebugState {
    /// The fleet view.
    pub view: FleetView,
    /// The Prometheus recorder's handle.
    pub metrics: PrometheusHandle,
    /// The clock the fleet view's times are in (sample ages are computed
    /// against it; the demo's clock runs faster than real time).
    pub clock: Arc<dyn Clock>,
    /// Gates readiness on the initial lists (`None`: none to wait for).
    pub sync_probe: Option<SyncProbe>,
    /// The sharding members (`None`: sharding is off).
    pub members: Option<Arc<dyn MembersSource>>,
    /// The statuses stored in the cluster, for the instances this replica
    /// does not sweep (`None`: no cluster is watched).
    pub stored: Option<Arc<dyn StoredStatusSource>>,
    /// This replica's identity (who writes what it sweeps, without
    /// sharding).
    pub identity: Option<String>,
}

/// What one replica knows of one instance: its own last sweep (`live`,
/// when it sweeps the instance), the status stored in the cluster
/// (`stored`, when it watches the cluster) and who writes the status.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceAnswer {
    /// Namespace and name.
    pub key: InstanceKey,
    /// This replica's own view, when it sweeps the instance.
    pub live: Option<InstanceView>,
    /// The instance as the watch last saw it.
    pub stored: Option<StoredInstance>,
    /// The replica that writes its status.
    pub owned_by: Option<String>,
}

impl DebugState {
    /// The state of a server reading `view`, `metrics` on `clock`, with no
    /// readiness probe, no sharding, no stored statuses and no identity.
    pub fn new(view: FleetView, metrics: PrometheusHandle, clock: Arc<dyn Clock>) -> Self {
        Self {
            view,
            metrics,
            clock,
            sync_probe: None,
            members: None,
            stored: None,
            identity: None,
        }
    }

    /// Readiness also waits for `probe` to return no pending list.
    #[must_use]
    pub fn with_sync_probe(self, probe: SyncProbe) -> Self {
        Self {
            sync_probe: Some(probe),
            ..self
        }
    }

    /// The sharding section and the owners from `source`.
    #[must_use]
    pub fn with_members(self, source: Arc<dyn MembersSource>) -> Self {
        Self {
            members: Some(source),
            ..self
        }
    }

    /// Answers for the instances this replica does not sweep from `source`.
    #[must_use]
    pub fn with_stored(self, source: Arc<dyn StoredStatusSource>) -> Self {
        Self {
            stored: Some(source),
            ..self
        }
    }

    /// This replica's identity.
    #[must_use]
    pub fn with_identity(self, identity: impl Into<String>) -> Self {
        Self {
            identity: Some(identity.into()),
            ..self
        }
    }

    /// Not ready while an initial list is pending (the probe's lines
    /// first), or for the view's own reasons (a pruned write, a contested
    /// status).
    pub fn readiness(&self) -> Readiness {
        let mut reasons: Vec<String> = self
            .sync_probe
            .as_ref()
            .map(|p| p())
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("initial list pending: {l}"))
            .collect();
        reasons.extend(self.view.readiness().reasons);
        Readiness {
            ready: reasons.is_empty(),
            reasons,
        }
    }

    /// Who writes `key`'s status: with sharding the owner among the live
    /// members; else this replica (its identity, or the agent named in
    /// `live`'s aggregate).
    fn owner(
        &self,
        key: &InstanceKey,
        live: Option<&InstanceView>,
        now: Timestamp,
    ) -> Option<String> {
        match &self.members {
            Some(m) => m.owner_of(key, now),
            None => self.identity.clone().or_else(|| {
                live.and_then(|v| v.health.as_ref())
                    .map(|h| h.agent.clone())
            }),
        }
    }

    /// What this replica knows of `key` at `now`; `None` when it neither
    /// sweeps nor watches an instance of that name.
    pub fn answer(&self, key: &InstanceKey, now: Timestamp) -> Option<InstanceAnswer> {
        let live = self.view.instance(key);
        let stored = self.stored.as_ref().and_then(|s| s.stored_instance(key));
        if live.is_none() && stored.is_none() {
            return None;
        }
        let owned_by = self.owner(key, live.as_ref(), now);
        Some(InstanceAnswer {
            key: key.clone(),
            live,
            stored,
            owned_by,
        })
    }

    /// What this replica knows of every instance it sweeps or watches, by
    /// namespace and name.
    pub fn answers(&self, now: Timestamp) -> Vec<InstanceAnswer> {
        let mut live = self.view.instances();
        let mut stored: BTreeMap<InstanceKey, StoredInstance> = self
            .stored
            .as_ref()
            .map(|s| s.stored_instances())
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.key.clone(), s))
            .collect();
        let keys: BTreeSet<InstanceKey> = live.keys().chain(stored.keys()).cloned().collect();
        keys.into_iter()
            .map(|key| {
                let live = live.remove(&key);
                let owned_by = self.owner(&key, live.as_ref(), now);
                InstanceAnswer {
                    stored: stored.remove(&key),
                    live,
                    owned_by,
                    key,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LastWrite, SystemClock, WriteRecord};
    use crate::view::SweepRecord;

    fn state(view: FleetView) -> DebugState {
        let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        DebugState::new(view, metrics, Arc::new(SystemClock))
    }

    #[test]
    fn readiness_waits_for_pending_lists_then_the_views_reasons() {
        let view = FleetView::new();
        let pending = Arc::new(std::sync::Mutex::new(vec!["pods#0".to_owned()]));
        let p = pending.clone();
        let s = state(view.clone()).with_sync_probe(Arc::new(move || {
            p.lock().map(|g| g.clone()).unwrap_or_default()
        }));
        let r = s.readiness();
        assert!(!r.ready);
        assert_eq!(r.reasons, ["initial list pending: pods#0"]);
        pending.lock().expect("lock").clear();
        assert!(s.readiness().ready);

        let k = InstanceKey::new("ns", "a");
        let at = Timestamp::from_second(1_780_000_000).expect("ts");
        view.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &[],
                samples: &[],
                health: None,
                gate: None,
                notes: Vec::new(),
                limits: None,
                at,
            },
        );
        view.record_write(
            &k,
            LastWrite {
                at,
                attempt: 0,
                priority: false,
                result: WriteRecord::Pruned {
                    missing: vec!["status.rolloutGate".into()],
                },
            },
        );
        pending.lock().expect("lock").push("pods#1".to_owned());
        let r = s.readiness();
        assert_eq!(r.reasons.len(), 2, "{r:?}");
        assert_eq!(r.reasons[0], "initial list pending: pods#1");
        assert!(r.reasons[1].contains("ns/a"), "{r:?}");
    }

    #[test]
    fn a_replica_answers_from_its_identity_without_sharding() {
        let view = FleetView::new();
        let k = InstanceKey::new("ns", "a");
        let at = Timestamp::from_second(1_780_000_000).expect("ts");
        assert!(state(view.clone()).answer(&k, at).is_none());
        view.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &[],
                samples: &[],
                health: None,
                gate: None,
                notes: Vec::new(),
                limits: None,
                at,
            },
        );
        let s = state(view).with_identity("replica-a");
        let answer = s.answer(&k, at).expect("swept");
        assert_eq!(answer.owned_by.as_deref(), Some("replica-a"));
        assert!(answer.live.is_some() && answer.stored.is_none());
        assert_eq!(s.answers(at), vec![answer]);
    }
}
