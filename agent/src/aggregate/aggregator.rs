//! [`InstanceAggregator`]: the per-instance fold of one sweep's pod samples
//! into `status.rolloutHealth`, with the counter state carried between sweeps.

use super::AggregateConfig;
use super::backfill::BackfillFold;
use super::fence::FenceFold;
use super::tracked::TrackedPod;
use crate::model::{InstanceInfo, InstanceTraits, PodSample, SampleResult};
use jiff::Timestamp;
use kura_schemas::api_int::{saturating_add, saturating_sum};
use kura_schemas::health::{MAX_POD_ENTRIES, ROLLOUT_HEALTH_SCHEMA_VERSION};
use kura_schemas::{NodeReport, RetiredCounters, RolloutHealth, ServingAuthorityHealth};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// Most pods whose counter state one instance keeps (each pod's state is
/// memory held for as long as the instance is watched).
/// Past it, the pods gone longest (then the first names) are folded into
/// the retired totals; one that comes back is counted afresh. Only
/// [`MAX_POD_ENTRIES`] of them are published in `pods`.
pub const MAX_TRACKED_PODS: usize = 1024;

/// The aggregation state of one instance: per-pod counter state keyed by pod
/// name, retired totals, the reset count and the last `backfillInitialCycle`.
///
/// Up to [`MAX_POD_ENTRIES`] pods, everything it keeps is published in the
/// aggregate it returns, so [`InstanceAggregator::restore`] on that aggregate
/// continues exactly where this one stopped. With more pods, `pods` holds
/// [`MAX_POD_ENTRIES`] of them (failing ones first, then by name) and the
/// rest's counter state lives here only. A restore then carries the
/// unpublished share of the totals (published total minus retired minus the
/// published entries) and each pod seen for the first time after the
/// restore draws its first raw counters from that carry: the totals neither
/// drop nor count those pods twice. The draw is the pod's raw value now, not
/// its share before the restore (which was never published), so growth
/// between the last write and a pod's first answer after the restore is
/// absorbed by what the carry holds beyond the raw values (the offsets of
/// earlier resets). The carry is published inside `retiredCounters`, so
/// every published total is still `retiredCounters` plus the tracked pods'
/// clamped values.
#[derive(Debug, Clone)]
pub struct InstanceAggregator {
    config: AggregateConfig,
    /// Sorted by pod name, at most [`MAX_TRACKED_PODS`] between sweeps.
    pods: Vec<TrackedPod>,
    retired: RetiredCounters,
    /// The unpublished pods' share of the totals at the last restore, not
    /// yet drawn by a pod seen again.
    carried: RetiredCounters,
    counter_resets: u64,
    backfill: String,
}

impl InstanceAggregator {
    /// An aggregator with no history (a new instance, or no status yet).
    pub fn new(config: AggregateConfig) -> Self {
        InstanceAggregator {
            config,
            pods: Vec::new(),
            retired: RetiredCounters::default(),
            carried: RetiredCounters::default(),
            counter_resets: 0,
            backfill: String::new(),
        }
    }

    /// Continue from a published aggregate (after an agent restart). Pod
    /// entries past the bound or with a duplicate name are folded into the
    /// retired totals, so no count is lost; the share of the totals that no
    /// published entry holds (pods past [`MAX_POD_ENTRIES`]) is carried, see
    /// [`InstanceAggregator`].
    pub fn restore(previous: &RolloutHealth, config: AggregateConfig) -> Self {
        let mut agg = InstanceAggregator::new(config);
        agg.retired = previous.retired_counters.clone();
        agg.counter_resets = previous.counter_resets;
        agg.backfill.clone_from(&previous.backfill_initial_cycle);
        let mut restored: Vec<TrackedPod> = previous
            .pods
            .iter()
            .map(|entry| TrackedPod::restore(entry, previous.observed_at))
            .collect();
        // Stable: of entries with one name, the first listed is kept.
        restored.sort_by(|a, b| a.detail.name.cmp(&b.detail.name));
        for pod in restored {
            match agg.pods.last() {
                Some(last) if last.detail.name == pod.detail.name => retire(&mut agg.retired, &pod),
                _ => agg.pods.push(pod),
            }
        }
        agg.enforce_bound();
        let held = agg.totals(&agg.retired);
        agg.carried = RetiredCounters {
            fd_timeout_count: previous
                .fd_timeout_count
                .saturating_sub(held.fd_timeout_count),
            // Null when the restored state holds it all; 0 only when the
            // published total was reported and nothing restored holds it,
            // so "reported once" survives the restore.
            peer_connection_failures: previous.peer_connection_failures.and_then(|p| {
                let held = held.peer_connection_failures;
                let rest = p.saturating_sub(held.unwrap_or(0));
                (rest > 0 || held.is_none()).then_some(rest)
            }),
        };
        agg
    }

    /// `base` plus every tracked pod's clamped counters.
    fn totals(&self, base: &RetiredCounters) -> RetiredCounters {
        let mut totals = base.clone();
        for pod in &self.pods {
            retire(&mut totals, pod);
        }
        totals
    }

    /// Fold one sweep. `samples` holds one entry per pod discovery lists
    /// now, answered or not (a second entry with the same pod name is
    /// ignored); a tracked pod missing from it is gone: it keeps contributing
    /// its clamped counters until it has been gone longer than the
    /// retention, judged against `now`, and then folds into
    /// `retiredCounters`. `now` becomes `observedAt`; `agent` names the
    /// writer.
    pub fn fold(
        &mut self,
        instance: &InstanceInfo,
        samples: &[PodSample],
        now: Timestamp,
        agent: &str,
    ) -> RolloutHealth {
        self.fold_with(instance, &InstanceTraits::default(), samples, now, agent)
    }

    /// [`InstanceAggregator::fold`] of an instance with its `traits`: a
    /// suspended instance's aggregate is [`InstanceAggregator::suspend`]'s
    /// (its `samples` are not folded); an update pause is copied; fenced
    /// serving configured with no pod reporting it gives the all-zero
    /// `servingAuthority`.
    pub fn fold_with(
        &mut self,
        instance: &InstanceInfo,
        traits: &InstanceTraits,
        samples: &[PodSample],
        now: Timestamp,
        agent: &str,
    ) -> RolloutHealth {
        if traits.suspended {
            return self.suspend(instance, traits, now, agent);
        }
        let mut health = self.fold_sweep(instance, samples, now, agent);
        health.update_paused.clone_from(&traits.update_paused);
        if traits.fence_configured && health.serving_authority.is_none() {
            health.serving_authority = Some(ServingAuthorityHealth::default());
        }
        health
    }

    /// The aggregate of a suspended instance (rollout-health.md): Kura
    /// scaled it to zero pods and wiped its volumes, so every tracked pod
    /// is retired at once (its clamped counters fold into
    /// `retiredCounters`, so the totals never decrease), the backfill
    /// fold starts over, and the aggregate has `suspended: true`,
    /// `expectedPods: 0`, no pod entries and nothing sampled; every
    /// conjunction is false (nothing answered: unavailable is never
    /// healthy). A returning instance's pods are new pods.
    pub fn suspend(
        &mut self,
        instance: &InstanceInfo,
        traits: &InstanceTraits,
        now: Timestamp,
        agent: &str,
    ) -> RolloutHealth {
        let mut retired = combined(&self.retired, &self.carried);
        for pod in self.pods.drain(..) {
            retire(&mut retired, &pod);
        }
        self.retired = retired;
        self.carried = RetiredCounters::default();
        self.backfill.clear();
        let suspended = InstanceInfo {
            expected_pods: 0,
            ..instance.clone()
        };
        let mut health = self.publish(&suspended, &Fold::default(), now, agent);
        health.suspended = true;
        health.update_paused.clone_from(&traits.update_paused);
        health
    }

    fn fold_sweep(
        &mut self,
        instance: &InstanceInfo,
        samples: &[PodSample],
        now: Timestamp,
        agent: &str,
    ) -> RolloutHealth {
        for pod in &mut self.pods {
            pod.listed = false;
        }
        let mut fold = Fold::default();
        // Pods seen for the first time are kept aside and merged in by name
        // once, after the loop: inserting each into the sorted Vec made a
        // sweep of n new pods O(n^2).
        let mut fresh: Vec<TrackedPod> = Vec::new();
        let mut fresh_index: HashMap<&str, usize> = HashMap::new();
        for sample in samples {
            let pod = match self
                .pods
                .binary_search_by(|p| (*p.detail.name).cmp(&*sample.pod.name))
            {
                Ok(i) if self.pods[i].listed => continue,
                Ok(i) => &mut self.pods[i],
                Err(_) => match fresh_index.entry(&*sample.pod.name) {
                    Entry::Occupied(_) => continue,
                    Entry::Vacant(slot) => {
                        slot.insert(fresh.len());
                        fresh.push(TrackedPod::new(&sample.pod, now));
                        let last = fresh.len() - 1;
                        &mut fresh[last]
                    }
                },
            };
            pod.listed = true;
            pod.last_seen = now;
            match &sample.result {
                SampleResult::Report(report) => {
                    let first = (pod.fd.is_none(), pod.peer.is_none());
                    if pod.absorb(
                        &sample.pod,
                        report,
                        sample.replication_lag_entries,
                        sample.received_at,
                    ) {
                        self.counter_resets = saturating_add(self.counter_resets, 1);
                    }
                    draw(&mut self.carried, first, pod);
                    fold.add(report, sample.replication_lag_entries, sample.received_at);
                }
                SampleResult::Error(reason) => {
                    pod.fail(&sample.pod, reason, self.config.max_error_bytes)
                }
            }
        }
        if !fresh.is_empty() {
            fresh.sort_unstable_by(|a, b| a.detail.name.cmp(&b.detail.name));
            self.pods = merge_by_name(std::mem::take(&mut self.pods), fresh);
        }
        self.retire_gone(now);
        self.enforce_bound();
        if fold.sampled > 0 {
            let value = fold.backfill.result();
            if self.backfill != value {
                self.backfill.clear();
                self.backfill.push_str(value);
            }
        }
        self.publish(instance, &fold, now, agent)
    }

    fn retire_gone(&mut self, now: Timestamp) {
        let retention = self.config.retention;
        let retired = &mut self.retired;
        self.pods.retain_mut(|pod| {
            if pod.listed {
                return true;
            }
            if now.duration_since(pod.last_seen) > retention {
                retire(retired, pod);
                return false;
            }
            pod.mark_gone();
            true
        });
    }

    /// Fold the pods past [`MAX_TRACKED_PODS`] into the retired totals: the
    /// ones gone longest first, then by name.
    fn enforce_bound(&mut self) {
        let excess = self.pods.len().saturating_sub(MAX_TRACKED_PODS);
        if excess == 0 {
            return;
        }
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&self.pods[a], &self.pods[b]);
            pa.last_seen
                .cmp(&pb.last_seen)
                .then_with(|| pa.detail.name.cmp(&pb.detail.name))
        });
        let mut drop = vec![false; self.pods.len()];
        for &i in &order[..excess] {
            drop[i] = true;
            retire(&mut self.retired, &self.pods[i]);
        }
        let mut i = 0;
        self.pods.retain(|_| {
            let keep = !drop[i];
            i += 1;
            keep
        });
    }

    /// The `pods` entries: every tracked pod up to [`MAX_POD_ENTRIES`];
    /// past that, the pods whose last sample failed (or that are gone)
    /// first, then by name; in name order either way.
    fn published_pods(&self) -> Vec<Arc<kura_schemas::PodHealth>> {
        if self.pods.len() <= MAX_POD_ENTRIES {
            return self.pods.iter().map(|p| Arc::clone(&p.detail)).collect();
        }
        // Sorted by name already: a stable sort on "has an error" keeps
        // name order within each group.
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.sort_by_key(|&i| self.pods[i].detail.error.is_none());
        order.truncate(MAX_POD_ENTRIES);
        order.sort_unstable();
        order
            .into_iter()
            .map(|i| Arc::clone(&self.pods[i].detail))
            .collect()
    }

    fn publish(
        &self,
        instance: &InstanceInfo,
        fold: &Fold<'_>,
        now: Timestamp,
        agent: &str,
    ) -> RolloutHealth {
        let complete = fold.sampled > 0 && fold.sampled >= instance.expected_pods;
        let retired = combined(&self.retired, &self.carried);
        let totals = self.totals(&retired);
        RolloutHealth {
            schema_version: ROLLOUT_HEALTH_SCHEMA_VERSION,
            observed_at: now,
            sampled_at: fold.oldest,
            observed_generation: instance.generation,
            expected_pods: instance.expected_pods,
            sampled_pods: fold.sampled,
            ready: complete && fold.all_ready,
            serving: complete && fold.all_serving,
            writer_lock_owned: complete && fold.all_writer_lock,
            initial_discovery_completed: complete && fold.all_discovered,
            generation_consistent: complete && fold.same_generation,
            // Kura's controller's rule: one ring size, and one fingerprint
            // among the pods that report one (an older build without it is
            // compared by size only).
            ring_consistent: complete && fold.same_ring_members && fold.same_fingerprint,
            ring_members: fold.min_ring_members.unwrap_or(0),
            bootstrap_inflight_peers: fold.bootstrap_inflight,
            backfill_initial_cycle: self.backfill.clone(),
            backfilling_peers: fold.backfilling,
            backfill_degraded: fold.degraded,
            backfill_budget_exhausted_peers: fold.budget_exhausted,
            outbox_messages: fold.outbox,
            replication_lag_entries: fold.lag,
            serving_authority: fold.fence.result(),
            fd_timeout_count: totals.fd_timeout_count,
            peer_connection_failures: totals.peer_connection_failures,
            memory_pressure_state: fold.max_pressure,
            inflight_requests: fold.inflight,
            counter_resets: self.counter_resets,
            pods: self.published_pods(),
            retired_counters: retired,
            agent: agent.to_owned(),
            suspended: false,
            update_paused: None,
        }
    }
}

/// A pod's first counter values after a restore come out of the carry, as
/// far as it goes: they are (most likely) already in the restored totals.
/// `first` says which of the pod's counters had no value before this
/// sample.
fn draw(carried: &mut RetiredCounters, first: (bool, bool), pod: &TrackedPod) {
    if first.0
        && let Some(c) = pod.fd
    {
        carried.fd_timeout_count = carried.fd_timeout_count.saturating_sub(c.clamped());
    }
    if first.1
        && let (Some(c), Some(left)) = (pod.peer, carried.peer_connection_failures.as_mut())
    {
        *left = left.saturating_sub(c.clamped());
    }
}

/// `a + b`, counter by counter (`peerConnectionFailures` null only when
/// both are).
fn combined(a: &RetiredCounters, b: &RetiredCounters) -> RetiredCounters {
    RetiredCounters {
        fd_timeout_count: saturating_add(a.fd_timeout_count, b.fd_timeout_count),
        peer_connection_failures: match (a.peer_connection_failures, b.peer_connection_failures) {
            (None, None) => None,
            (x, y) => Some(saturating_add(x.unwrap_or(0), y.unwrap_or(0))),
        },
    }
}

/// Add a pod's clamped counters to the retired totals.
fn retire(retired: &mut RetiredCounters, pod: &TrackedPod) {
    if let Some(c) = pod.fd {
        retired.fd_timeout_count = saturating_add(retired.fd_timeout_count, c.clamped());
    }
    if let Some(c) = pod.peer {
        retired.peer_connection_failures = Some(saturating_add(
            retired.peer_connection_failures.unwrap_or(0),
            c.clamped(),
        ));
    }
}

/// The per-sweep fold of the valid reports (no allocation).
#[derive(Debug)]
struct Fold<'a> {
    sampled: u32,
    oldest: Option<Timestamp>,
    all_ready: bool,
    all_serving: bool,
    all_writer_lock: bool,
    all_discovered: bool,
    first_generation: Option<u64>,
    same_generation: bool,
    first_fingerprint: Option<&'a str>,
    same_fingerprint: bool,
    first_ring_members: Option<u64>,
    same_ring_members: bool,
    min_ring_members: Option<u64>,
    bootstrap_inflight: Option<u64>,
    backfill: BackfillFold<'a>,
    backfilling: Option<u64>,
    degraded: bool,
    budget_exhausted: Option<u64>,
    outbox: Option<u64>,
    lag: Option<u64>,
    fence: FenceFold<'a>,
    max_pressure: u8,
    inflight: u64,
}

impl Default for Fold<'_> {
    fn default() -> Self {
        Fold {
            sampled: 0,
            oldest: None,
            all_ready: true,
            all_serving: true,
            all_writer_lock: true,
            all_discovered: true,
            first_generation: None,
            same_generation: true,
            first_fingerprint: None,
            same_fingerprint: true,
            first_ring_members: None,
            same_ring_members: true,
            min_ring_members: None,
            bootstrap_inflight: None,
            backfill: BackfillFold::default(),
            backfilling: None,
            degraded: false,
            budget_exhausted: None,
            outbox: None,
            lag: None,
            fence: FenceFold::default(),
            max_pressure: 0,
            inflight: 0,
        }
    }
}

impl<'a> Fold<'a> {
    fn add(&mut self, r: &'a NodeReport, lag: Option<u64>, at: Timestamp) {
        self.sampled = self.sampled.saturating_add(1);
        self.oldest = Some(self.oldest.map_or(at, |o| o.min(at)));
        self.all_ready &= r.ready;
        self.all_serving &= r.state == kura_schemas::NodeState::Serving;
        self.all_writer_lock &= r.writer_lock_owned;
        self.all_discovered &= r.initial_discovery_completed == Some(true);
        self.same_generation &= *self.first_generation.get_or_insert(r.generation) == r.generation;
        if let Some(f) = r.ring_fingerprint.as_deref() {
            self.same_fingerprint &= *self.first_fingerprint.get_or_insert(f) == f;
        }
        self.same_ring_members &=
            *self.first_ring_members.get_or_insert(r.ring_members) == r.ring_members;
        self.min_ring_members = Some(
            self.min_ring_members
                .map_or(r.ring_members, |m| m.min(r.ring_members)),
        );
        sum(&mut self.bootstrap_inflight, r.bootstrap_inflight_peers);
        self.backfill.add(r.backfill_initial_cycle.as_ref());
        sum(&mut self.backfilling, r.backfill_backfilling_peers);
        self.degraded |= matches!(
            r.backfill_initial_cycle,
            Some(kura_schemas::report::BackfillCycle::Degraded)
        );
        sum(
            &mut self.budget_exhausted,
            r.backfill_budget_exhausted_real_peers,
        );
        sum(&mut self.outbox, r.outbox_messages);
        sum(&mut self.lag, lag);
        self.fence.add(r.serving_authority.as_ref());
        self.max_pressure = self.max_pressure.max(r.memory_pressure_state);
        self.inflight = saturating_sum([
            self.inflight,
            r.http_inflight_requests.unwrap_or(0),
            r.grpc_inflight_requests.unwrap_or(0),
        ]);
    }
}

/// Sum of the values present; `None` while none was.
fn sum(acc: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *acc = Some(saturating_add(acc.unwrap_or(0), v));
    }
}

/// Two lists sorted by pod name with no name in both, merged in order.
fn merge_by_name(a: Vec<TrackedPod>, b: Vec<TrackedPod>) -> Vec<TrackedPod> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.detail.name <= y.detail.name,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return merged,
        };
        merged.extend(if take_a { a.next() } else { b.next() });
    }
}
