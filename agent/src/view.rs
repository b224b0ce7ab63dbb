//! [`FleetView`]: the shared, in-memory picture of every instance the agent
//! tracks: the last sample of each pod, the aggregate, the gate verdict,
//! discovery's notes and the last status write with its result. The run
//! loop records sweeps; `kura-agent run` hands it the write driver's
//! results; the presentation (debug server, `/metrics`) only reads it.
//!
//! The view holds the fleet's data only: with sharding, what a replica
//! answers for the instances it does not sweep (their stored statuses and
//! owners) comes from the debug server's own inputs
//! (`crate::debug::DebugState`), not from here.
//!
//! Beside the last sweep, each instance has a bounded history of the last
//! hour ([`history`]: fixed buckets whatever the sweep interval) and since
//! when it stands as it does ([`Standing`], [`Since`]), for the fleet and
//! instance pages.

mod args;
mod history;
mod publication;
mod standing;
mod timeline;

pub use args::ViewArgs;
pub use history::{
    BUCKET_SECONDS, BandChange, BandTops, HISTORY_BUCKETS, HistoryPoint, HistoryView,
    MAX_BAND_MARKS, Since,
};
pub use publication::{
    CONTROLLER_CADENCE, ContestChanges, DISAGREEMENT_GRACE, Disagreement, DisagreementTracker,
    PublicationState, contest_changes,
};
pub use standing::Standing;
pub use timeline::{
    DEFAULT_TIMELINE_BUDGET_BYTES, MAX_TICKS_PER_INSTANCE, TickRecord, TimelineFootprint,
    TimelineQuery, Timelines,
};

use crate::model::{
    GateLimits, InstanceKey, LastWrite, PodIdentity, PodSample, SampleResult, ShadowJudgement,
    WriteRecord,
};
use history::{History, HistoryInput};
use jiff::Timestamp;
use kura_schemas::{
    AgentVerdict, NodeReport, RolloutGate, RolloutHealth, ShadowConfigSource, Signal,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A verdict and its signal, as the verdict gauges count them.
pub type VerdictSignal = (AgentVerdict, Option<Signal>);

/// The last sample of one pod: who was polled, when, whether it failed,
/// and what of its report the aggregate's entry for it
/// (`rolloutHealth.pods`, beside it in [`InstanceView::health`]) does not
/// carry. The report itself is kept only for a pod that has no such entry
/// (past the 32 entries an aggregate publishes): for the others every
/// field the pages show is in the entry, and a second full copy per pod
/// (about 0.6 KiB) was the largest share of the agent's memory at 10,000
/// pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// The pod as discovery saw it when polled (name, UID, restart count,
    /// image, IP; flattened in the JSON), shared with the sample.
    #[serde(flatten)]
    pub pod: Arc<PodIdentity>,
    /// When the sample (or failure) was received.
    pub received_at: Timestamp,
    /// Why the sample failed, if it did.
    pub error: Option<String>,
    /// The pod's `outbox_messages`, shown beside its capacity.
    pub outbox_messages: Option<u64>,
    /// The pod's `outbox_capacity` (some G3 builds): at capacity the node
    /// sheds client writes.
    pub outbox_capacity: Option<u64>,
    /// `backfill_ring_fullness_percent` clamped to 100 (Kura does not clamp
    /// it).
    pub ring_fullness_percent: Option<u64>,
    /// The fence state of a pod that runs fenced serving, so an operator
    /// sees a pod in `Fencing`; never a gate signal.
    pub fence: Option<FenceView>,
    /// The report as received, when the sample was valid and the
    /// aggregate publishes no entry for the pod; `None` otherwise.
    pub report: Option<Box<NodeReport>>,
}

/// `serving_authority` of a pod that runs fenced serving (`enabled` true).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FenceView {
    /// `observed.phase` (`Preparing`, `Serving`, `Quiescing`, `Revoking`,
    /// `Fencing`), when reported.
    pub phase: Option<String>,
    /// `epoch`, when reported.
    pub epoch: Option<u64>,
    /// `valid`, when reported.
    pub valid: Option<bool>,
}

impl FenceView {
    /// The fence state of `report`, when its node runs fenced serving.
    pub fn of(report: &NodeReport) -> Option<FenceView> {
        report.fence().map(|a| FenceView {
            phase: a.observed.as_ref().map(|o| o.phase.clone()),
            epoch: a.epoch,
            valid: a.valid,
        })
    }
}

impl PodView {
    /// The view of one sample; `keep_report`: keep a valid sample's report
    /// (the pod has no entry in the aggregate).
    pub fn from_sample(sample: &PodSample, keep_report: bool) -> Self {
        let (error, r) = match &sample.result {
            SampleResult::Report(r) => (None, Some(&**r)),
            SampleResult::Error(e) => (Some(e.clone()), None),
        };
        Self {
            pod: Arc::clone(&sample.pod),
            received_at: sample.received_at,
            error,
            outbox_messages: r.and_then(|r| r.outbox_messages),
            outbox_capacity: r.and_then(|r| r.outbox_capacity),
            ring_fullness_percent: r.and_then(NodeReport::ring_fullness_percent),
            fence: r.and_then(FenceView::of),
            report: r.filter(|_| keep_report).map(|r| Box::new(r.clone())),
        }
    }
}

/// Everything known about one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// Namespace (shared with the key).
    pub namespace: Arc<str>,
    /// Name (shared with the key).
    pub name: Arc<str>,
    /// `spec.image`, when known.
    pub spec_image: Option<String>,
    /// When the last sweep of this instance finished.
    pub swept_at: Option<Timestamp>,
    /// The last sample of every pod, by pod name.
    pub pods: Vec<PodView>,
    /// The last aggregate (shared with the engine and the write queue).
    pub health: Option<Arc<RolloutHealth>>,
    /// The last gate verdict (shared with the engine and the write queue).
    pub gate: Option<Arc<RolloutGate>>,
    /// The last status write and its result.
    pub last_write: Option<LastWrite>,
    /// What discovery noted about the instance: status fields it could not
    /// read, pods beyond the per-instance limit.
    pub notes: Vec<String>,
    /// The shadow configuration's verdict on the last sweep (absent
    /// without `--shadow-gate-config`): shown, never published. Boxed, so
    /// that an agent without a shadow pays one pointer per instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Box<ShadowView>>,
}

/// The shadow verdict of one instance as the view keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowView {
    /// The shadow verdict (shared with the engine).
    pub gate: Arc<RolloutGate>,
    /// Which configuration judged.
    pub config_source: ShadowConfigSource,
    /// The limits it compared against.
    #[serde(skip)]
    pub limits: GateLimits,
}

impl From<ShadowJudgement> for ShadowView {
    fn from(j: ShadowJudgement) -> Self {
        ShadowView {
            gate: j.gate,
            config_source: j.source,
            limits: j.limits,
        }
    }
}

impl InstanceView {
    fn empty(key: &InstanceKey) -> Self {
        Self {
            namespace: Arc::clone(&key.namespace),
            name: Arc::clone(&key.name),
            spec_image: None,
            swept_at: None,
            pods: Vec::new(),
            health: None,
            gate: None,
            last_write: None,
            notes: Vec::new(),
            shadow: None,
        }
    }

    /// The verdict and signal, when there is a verdict.
    pub fn verdict(&self) -> Option<(AgentVerdict, Option<Signal>)> {
        self.gate.as_deref().map(|g| (g.verdict, g.signal))
    }

    /// Whether a shadow verdict runs and differs from the live verdict
    /// (its verdict or its signal).
    pub fn shadow_disagrees(&self) -> bool {
        self.shadow.as_ref().is_some_and(|s| {
            self.gate
                .as_deref()
                .is_none_or(|g| g.verdict != s.gate.verdict || g.signal != s.gate.signal)
        })
    }
}

/// One instance in `/debug/instances`: the aggregate and the verdict,
/// without the per-pod samples.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSummary {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.image`.
    pub spec_image: Option<String>,
    /// When the last sweep finished.
    pub swept_at: Option<Timestamp>,
    /// The last aggregate.
    pub health: Option<Arc<RolloutHealth>>,
    /// The last gate verdict.
    pub gate: Option<Arc<RolloutGate>>,
    /// The last write.
    pub last_write: Option<LastWrite>,
}

impl From<&InstanceView> for InstanceSummary {
    fn from(v: &InstanceView) -> Self {
        Self {
            namespace: v.namespace.to_string(),
            name: v.name.to_string(),
            spec_image: v.spec_image.clone(),
            swept_at: v.swept_at,
            health: v.health.clone(),
            gate: v.gate.clone(),
            last_write: v.last_write.clone(),
        }
    }
}

/// What one sweep of one instance produced, for [`FleetView::record_sweep`].
#[derive(Debug, Clone)]
pub struct SweepRecord<'a> {
    /// `spec.image`.
    pub spec_image: &'a str,
    /// The names of the instance's current pods.
    pub current_pods: &'a [String],
    /// The sweep's samples.
    pub samples: &'a [PodSample],
    /// The aggregate (the engine's shared value).
    pub health: Option<Arc<RolloutHealth>>,
    /// The verdict (the engine's shared value).
    pub gate: Option<Arc<RolloutGate>>,
    /// What discovery noted about the instance (replaces earlier notes).
    pub notes: Vec<String>,
    /// The limits the verdict compared against (the engine's
    /// `InstanceEngine::limits`), for the pages' bands.
    pub limits: Option<GateLimits>,
    /// When the sweep finished.
    pub at: Timestamp,
}

/// Whether the agent is ready, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// True when there is no reason below.
    pub ready: bool,
    /// Why not ready, one line each.
    pub reasons: Vec<String>,
}

/// What the per-instance histories occupy, from
/// [`FleetView::history_footprint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryFootprint {
    /// Instances with a history.
    pub instances: usize,
    /// Bytes: the histories, their band marks and their keys (map nodes
    /// not counted).
    pub bytes: usize,
}

#[derive(Default)]
struct FleetState {
    instances: BTreeMap<InstanceKey, InstanceView>,
    histories: BTreeMap<InstanceKey, Box<History>>,
    publication: PublicationState,
}

/// The shared fleet view. Cheap to clone; all clones see the same state.
/// Locks are held only to copy in or out, never across an await.
#[derive(Clone, Default)]
pub struct FleetView {
    state: Arc<RwLock<FleetState>>,
    /// Every swept instance's timeline ([`timeline`]), under its own lock:
    /// recording a tick never waits for a page being rendered.
    timelines: Arc<Mutex<Timelines>>,
}

impl std::fmt::Debug for FleetView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetView")
            .field("instances", &self.read().instances.len())
            .finish()
    }
}

impl FleetView {
    /// An empty view, ready as long as no write was pruned and no status
    /// is contested.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, FleetState> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, FleetState> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn timelines(&self) -> MutexGuard<'_, Timelines> {
        self.timelines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds every timeline together to `bytes` (default
    /// [`DEFAULT_TIMELINE_BUDGET_BYTES`]).
    pub fn set_timeline_budget(&self, bytes: usize) {
        self.timelines().set_budget(bytes);
    }

    /// Adds one judged sweep to `key`'s timeline.
    pub fn record_tick(&self, key: &InstanceKey, tick: &TickRecord<'_>) {
        self.timelines().record(key, tick);
    }

    /// `key`'s timeline (the ticks `query` chooses) as the document of
    /// `GET /api/v1/instances/{ns}/{name}/timeline`; `None` when this
    /// replica does not sweep the instance (or has not swept it yet).
    pub fn timeline(
        &self,
        key: &InstanceKey,
        query: &TimelineQuery,
        now: Timestamp,
    ) -> Option<kura_schemas::InstanceTimeline> {
        self.timelines().document(key, query, now)
    }

    /// What the timelines hold (the load harness reports it).
    pub fn timeline_footprint(&self) -> TimelineFootprint {
        self.timelines().footprint()
    }

    /// Records the publication target chosen at start.
    pub fn set_publication_choice(&self, choice: crate::model::TargetChoice) {
        self.write().publication.choice = Some(choice);
    }

    /// Records the instances another manager contests (instance mode).
    pub fn set_contested(&self, contested: BTreeMap<InstanceKey, Box<str>>) {
        self.write().publication.contested = contested;
    }

    /// Records the lasting disagreements with Kura's controller
    /// (companion mode).
    pub fn set_disagreements(&self, found: BTreeMap<InstanceKey, Disagreement>) {
        self.write().publication.disagreements = found;
    }

    /// Where the agent publishes, what is contested and where Kura's
    /// controller disagrees.
    pub fn publication(&self) -> PublicationState {
        self.read().publication.clone()
    }

    /// What the instance page says about `key`'s publication: contested
    /// (by whom), or a lasting disagreement with Kura's controller.
    pub fn publication_notes(&self, key: &InstanceKey, now: Timestamp) -> Vec<String> {
        let state = self.read();
        let p = &state.publication;
        let mut out = Vec::new();
        if let Some(manager) = p.contested.get(key) {
            out.push(format!(
                "StatusContested: {manager:?} also writes status.rolloutHealth; the agent stopped writing this instance (run with --publication-target companion)"
            ));
        }
        if let Some(d) = p.disagreements.get(key) {
            out.push(d.describe(now));
        }
        out
    }

    /// The agent's `ready` and `serving` of `key`'s latest aggregate.
    pub fn ready_serving(&self, key: &InstanceKey) -> Option<(bool, bool)> {
        let state = self.read();
        let h = state.instances.get(key)?.health.as_ref()?;
        Some((h.ready, h.serving))
    }

    /// Records one sweep of one instance: the samples (merged by pod name
    /// into the last sample per pod; pods not in `current_pods` are
    /// dropped), the aggregate and the verdict. Without a shadow verdict:
    /// [`FleetView::record_sweep_with_shadow`] records one with it.
    pub fn record_sweep(&self, key: &InstanceKey, sweep: SweepRecord<'_>) {
        self.record_sweep_with_shadow(key, sweep, None);
    }

    /// [`FleetView::record_sweep`] with the sweep's shadow verdict (`None`
    /// when no shadow configuration runs), recorded under the same lock so
    /// a reader never sees a live verdict beside another sweep's shadow.
    pub fn record_sweep_with_shadow(
        &self,
        key: &InstanceKey,
        sweep: SweepRecord<'_>,
        shadow: Option<ShadowJudgement>,
    ) {
        let point = HistoryInput {
            at: sweep.at,
            standing: Standing::of(sweep.gate.as_deref()),
            fd_timeouts: sweep.health.as_deref().map(|h| h.fd_timeout_count),
            peer_failures: sweep
                .health
                .as_ref()
                .and_then(|h| h.peer_connection_failures),
            outbox: sweep.health.as_deref().and_then(|h| h.outbox_messages),
            replication_lag: sweep
                .health
                .as_deref()
                .and_then(|h| h.replication_lag_entries),
            limits: sweep.limits,
        };
        let mut state = self.write();
        match state.histories.get_mut(key) {
            Some(history) => history.record(&point),
            None => {
                state
                    .histories
                    .insert(key.clone(), Box::new(History::new(&point)));
            }
        }
        let view = state
            .instances
            .entry(key.clone())
            .or_insert_with(|| InstanceView::empty(key));
        view.spec_image = Some(sweep.spec_image.to_owned());
        view.swept_at = Some(sweep.at);
        let published = sweep.health.as_deref().map_or(&[][..], |h| &h.pods[..]);
        for sample in sweep.samples {
            let keep_report = !published.iter().any(|p| *p.name == *sample.pod.name);
            let pod = PodView::from_sample(sample, keep_report);
            match view.pods.iter_mut().find(|p| p.pod.name == pod.pod.name) {
                Some(slot) => *slot = pod,
                None => view.pods.push(pod),
            }
        }
        view.pods
            .retain(|p| sweep.current_pods.iter().any(|n| **n == *p.pod.name));
        view.pods.sort_by(|a, b| a.pod.name.cmp(&b.pod.name));
        // Pushing grows the list by doubling (three pods get room for
        // four); a few hundred bytes per slot, kept for the instance's life.
        view.pods.shrink_to_fit();
        view.health = sweep.health;
        view.gate = sweep.gate;
        view.notes = sweep.notes;
        view.shadow = shadow.map(|s| Box::new(ShadowView::from(s)));
    }

    /// Records the result of a status write (creating the instance's entry
    /// if needed: a pruned write must never go unreported).
    pub fn record_write(&self, key: &InstanceKey, write: LastWrite) {
        let mut state = self.write();
        state
            .instances
            .entry(key.clone())
            .or_insert_with(|| InstanceView::empty(key))
            .last_write = Some(write);
    }

    /// Keeps only the instances for which `keep` is true.
    pub fn retain(&self, keep: impl Fn(&InstanceKey) -> bool) {
        let mut state = self.write();
        state.instances.retain(|k, _| keep(k));
        state.histories.retain(|k, _| keep(k));
        drop(state);
        self.timelines().retain(keep);
    }

    /// The last hour of `key` up to `now`, once it has been swept.
    pub fn history(&self, key: &InstanceKey, now: Timestamp) -> Option<HistoryView> {
        self.read().histories.get(key).map(|h| h.view(now))
    }

    /// Since when every swept instance stands as it does.
    pub fn since_all(&self) -> BTreeMap<InstanceKey, Since> {
        self.read()
            .histories
            .iter()
            .map(|(k, h)| (k.clone(), h.since()))
            .collect()
    }

    /// Since when each of `keys` stands as it does (`None`: not swept),
    /// in the order given: what a page showing a few instances needs,
    /// without copying every key as [`FleetView::since_all`] does.
    pub fn since_of<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k InstanceKey>,
    ) -> Vec<Option<Since>> {
        let state = self.read();
        keys.into_iter()
            .map(|k| state.histories.get(k).map(|h| h.since()))
            .collect()
    }

    /// Reads every instance in place, by namespace and name, under the
    /// read lock: for a reader that needs a few fields of every instance
    /// (counts, sort keys) and copies out only the few it shows, where
    /// [`FleetView::snapshot`] would copy all of them. `read` runs with
    /// the lock held (sweeps wait to be recorded): it must be quick and
    /// must not block.
    pub fn read_instances<R>(
        &self,
        read: impl FnOnce(std::collections::btree_map::Values<'_, InstanceKey, InstanceView>) -> R,
    ) -> R {
        read(self.read().instances.values())
    }

    /// Reads the instances after `after` (all of them for `None`), in
    /// order, under the read lock: for a reader that walks the fleet a
    /// chunk at a time (a streamed scrape) without copying it. The same
    /// rules as [`FleetView::read_instances`]: quick, never blocking.
    pub fn read_instances_after<R>(
        &self,
        after: Option<&InstanceKey>,
        read: impl FnOnce(&mut dyn Iterator<Item = &InstanceView>) -> R,
    ) -> R {
        use std::ops::Bound;
        let state = self.read();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut rest = state
            .instances
            .range::<InstanceKey, _>((lower, Bound::Unbounded))
            .map(|(_, v)| v);
        read(&mut rest)
    }

    /// What the histories occupy (the load harness reports it).
    pub fn history_footprint(&self) -> HistoryFootprint {
        let state = self.read();
        let bytes = state
            .histories
            .iter()
            .map(|(k, h)| {
                std::mem::size_of::<InstanceKey>()
                    + k.namespace.len()
                    + k.name.len()
                    + std::mem::size_of::<Box<History>>()
                    + h.heap_bytes()
            })
            .sum();
        HistoryFootprint {
            instances: state.histories.len(),
            bytes,
        }
    }

    /// Every instance, by namespace and name.
    pub fn snapshot(&self) -> Vec<InstanceView> {
        self.read().instances.values().cloned().collect()
    }

    /// Every instance's verdict and signal (`None`: not judged yet) and
    /// how many verdicts carry a `configError`, read in place: what the
    /// run loop's gauges need each reconcile, without copying the view.
    pub fn verdicts(&self) -> (Vec<Option<VerdictSignal>>, usize) {
        let state = self.read();
        let refused = state
            .instances
            .values()
            .filter(|v| v.gate.as_ref().is_some_and(|g| g.config_error.is_some()))
            .count();
        (
            state
                .instances
                .values()
                .map(InstanceView::verdict)
                .collect(),
            refused,
        )
    }

    /// One instance.
    pub fn instance(&self, key: &InstanceKey) -> Option<InstanceView> {
        self.read().instances.get(key).cloned()
    }

    /// The fleet's own reasons not to be ready: the last write of an
    /// instance was pruned, or another manager contests its status (the
    /// debug server adds the pending initial lists,
    /// `crate::debug::DebugState::readiness`).
    pub fn readiness(&self) -> Readiness {
        let state = self.read();
        let pruned = state.instances.iter().filter_map(|(k, v)| {
            match v.last_write.as_ref().map(|w| &w.result) {
                Some(WriteRecord::Pruned { missing }) => Some(format!(
                    "status write for {k} was pruned (CRD too old): missing {}",
                    missing.join(", ")
                )),
                _ => None,
            }
        });
        let contested = state.publication.contested.iter().map(|(k, m)| {
            format!(
                "status.rolloutHealth of {k} is also written by {m:?}: not written (StatusContested; use --publication-target companion)"
            )
        });
        let reasons: Vec<String> = pruned.chain(contested).collect();
        Readiness {
            ready: reasons.is_empty(),
            reasons,
        }
    }

    /// Every instance, by key (a copy).
    pub fn instances(&self) -> BTreeMap<InstanceKey, InstanceView> {
        self.read().instances.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodIdentity;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + s).expect("ts")
    }

    fn failed(name: &str, at: i64, why: &str) -> PodSample {
        PodSample {
            replication_lag_entries: None,
            pod: std::sync::Arc::new(PodIdentity {
                name: name.into(),
                uid: format!("u-{name}").into(),
                ..Default::default()
            }),
            received_at: ts(at),
            result: SampleResult::Error(why.into()),
        }
    }

    #[test]
    fn sweeps_keep_the_last_sample_per_current_pod() {
        let v = FleetView::new();
        let k = InstanceKey::new("ns", "a");
        let pods = ["a-0".to_owned(), "a-1".to_owned()];
        let first = [failed("a-0", 0, "timeout"), failed("a-1", 0, "refused")];
        v.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &pods,
                samples: &first,
                health: None,
                gate: None,
                notes: vec!["status.rolloutGate unreadable: x".into()],
                limits: None,
                at: ts(0),
            },
        );
        assert_eq!(
            v.instance(&k).expect("instance").notes,
            ["status.rolloutGate unreadable: x"]
        );
        let second = [failed("a-0", 10, "HTTP 500")];
        v.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &pods[..1],
                samples: &second,
                health: None,
                gate: None,
                notes: Vec::new(),
                limits: None,
                at: ts(10),
            },
        );
        let view = v.instance(&k).expect("instance");
        assert!(view.notes.is_empty(), "each sweep replaces the notes");
        assert_eq!(view.pods.len(), 1);
        assert_eq!(view.pods[0].error.as_deref(), Some("HTTP 500"));
        assert_eq!(view.swept_at, Some(ts(10)));
    }

    fn valid(name: &str, at: i64) -> PodSample {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/reports/g1-bootstrap.json"
        );
        let report =
            kura_schemas::parse_report(&std::fs::read(path).expect("fixture")).expect("report");
        PodSample {
            replication_lag_entries: None,
            pod: std::sync::Arc::new(PodIdentity {
                name: name.into(),
                uid: format!("u-{name}").into(),
                ..Default::default()
            }),
            received_at: ts(at),
            result: SampleResult::Report(Box::new(report)),
        }
    }

    /// A pod with an entry in the published aggregate is shown from that
    /// entry; only a pod without one (past the 32 published) keeps its
    /// report in the view, and no failed sample keeps one.
    #[test]
    fn the_view_keeps_a_report_only_for_pods_without_a_published_entry() {
        let v = FleetView::new();
        let k = InstanceKey::new("ns", "a");
        let pods = ["a-0".to_owned(), "a-1".to_owned(), "a-2".to_owned()];
        let samples = [
            valid("a-0", 0),
            valid("a-1", 0),
            failed("a-2", 0, "timeout"),
        ];
        let mut health = crate::model::fixtures::health(ts(0));
        health.pods = vec![std::sync::Arc::new(kura_schemas::PodHealth {
            name: "a-0".into(),
            ..Default::default()
        })];
        v.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &pods,
                samples: &samples,
                health: Some(Arc::new(health)),
                gate: None,
                notes: Vec::new(),
                limits: None,
                at: ts(0),
            },
        );
        let view = v.instance(&k).expect("instance");
        let kept: Vec<(&str, bool)> = view
            .pods
            .iter()
            .map(|p| (&*p.pod.name, p.report.is_some()))
            .collect();
        assert_eq!(kept, [("a-0", false), ("a-1", true), ("a-2", false)]);
        let SampleResult::Report(sent) = &samples[1].result else {
            panic!("a valid sample")
        };
        assert_eq!(view.pods[1].report.as_deref(), Some(&**sent));
    }

    #[test]
    fn instances_are_read_in_place_and_since_is_looked_up_for_the_keys_given() {
        let v = FleetView::new();
        let (a, b) = (InstanceKey::new("ns", "a"), InstanceKey::new("ns", "b"));
        for (k, at) in [(&b, 0), (&a, 5)] {
            v.record_sweep(
                k,
                SweepRecord {
                    spec_image: "img",
                    current_pods: &[],
                    samples: &[],
                    health: None,
                    gate: None,
                    notes: Vec::new(),
                    limits: None,
                    at: ts(at),
                },
            );
        }
        v.record_write(
            &InstanceKey::new("ns", "c"),
            LastWrite {
                at: ts(9),
                attempt: 0,
                priority: false,
                result: WriteRecord::Applied,
            },
        );
        let names = v.read_instances(|all| all.map(|i| i.name.to_string()).collect::<Vec<_>>());
        assert_eq!(names, ["a", "b", "c"], "by namespace and name");
        let missing = InstanceKey::new("ns", "c");
        let since = v.since_of([&b, &missing, &a]);
        assert_eq!(
            since.iter().map(|s| s.map(|s| s.at)).collect::<Vec<_>>(),
            [Some(ts(0)), None, Some(ts(5))],
            "in the order given; no history for an instance never swept"
        );
    }

    #[test]
    fn sweeps_feed_a_bounded_history_that_leaves_with_the_instance() {
        let v = FleetView::new();
        let k = InstanceKey::new("ns", "a");
        assert!(v.history(&k, ts(0)).is_none());
        for s in 0..400 {
            v.record_sweep(
                &k,
                SweepRecord {
                    spec_image: "img",
                    current_pods: &[],
                    samples: &[],
                    health: None,
                    gate: None,
                    notes: Vec::new(),
                    limits: None,
                    at: ts(s * 5),
                },
            );
        }
        let h = v.history(&k, ts(2000)).expect("history");
        assert_eq!(h.points.len(), HISTORY_BUCKETS);
        assert!(
            h.points
                .iter()
                .any(|p| p.standing == Some(Standing::NoSample))
        );
        assert_eq!(v.since_all()[&k].standing, Standing::NoSample);
        let footprint = v.history_footprint();
        assert_eq!(footprint.instances, 1);
        // Only the standing was recorded (every sample failed): no
        // counter series is held.
        assert!(
            footprint.bytes > 300 && footprint.bytes < 600,
            "{footprint:?}"
        );
        v.retain(|_| false);
        assert!(v.history(&k, ts(2000)).is_none());
        assert_eq!(v.history_footprint().instances, 0);
    }

    #[test]
    fn readiness_fails_on_pruned_writes() {
        let v = FleetView::new();
        assert!(v.readiness().ready);

        let k = InstanceKey::new("ns", "a");
        v.record_sweep(
            &k,
            SweepRecord {
                spec_image: "img",
                current_pods: &[],
                samples: &[],
                health: None,
                gate: None,
                notes: Vec::new(),
                limits: None,
                at: ts(0),
            },
        );
        let pruned = LastWrite {
            at: ts(1),
            attempt: 0,
            priority: false,
            result: WriteRecord::Pruned {
                missing: vec!["status.rolloutGate".into()],
            },
        };
        v.record_write(&k, pruned.clone());
        let r = v.readiness();
        assert!(!r.ready);
        assert!(
            r.reasons[0].contains("ns/a") && r.reasons[0].contains("status.rolloutGate"),
            "{r:?}"
        );
        v.record_write(
            &k,
            LastWrite {
                result: WriteRecord::Applied,
                ..pruned
            },
        );
        assert!(v.readiness().ready, "a later full write clears it");
    }
}
