//! The state the aggregator keeps per tracked pod: its published entry
//! (identity of the last valid sample, last sample detail, error) and its
//! counters.

use super::counters::{self, Counter};
use jiff::Timestamp;
use kura_schemas::{NodeReport, PodHealth};
use std::sync::Arc;

use crate::model::PodIdentity;

/// The `error` a tracked pod shows once discovery no longer lists it. A
/// restored entry carrying it was already gone at the last sweep.
pub const GONE_ERROR: &str = kura_schemas::health::GONE_POD_ERROR;

/// One tracked pod.
#[derive(Debug, Clone)]
pub(crate) struct TrackedPod {
    /// Exactly what is published in `pods`, and the same allocation: a
    /// sweep that changes it copies it only while an earlier aggregate
    /// (the view's, the write queue's) still holds it, so between sweeps
    /// each pod's entry exists once.
    pub(crate) detail: Arc<PodHealth>,
    /// `fd_timeout_count` state; `Some` once the pod had a valid sample.
    pub(crate) fd: Option<Counter>,
    /// `peer_connection_failure_count` state; `None` while never reported.
    pub(crate) peer: Option<Counter>,
    /// The last sweep time discovery listed this pod.
    pub(crate) last_seen: Timestamp,
    /// Whether the current sweep listed this pod.
    pub(crate) listed: bool,
}

impl TrackedPod {
    /// A pod seen for the first time.
    pub(crate) fn new(pod: &PodIdentity, now: Timestamp) -> Self {
        TrackedPod {
            detail: Arc::new(PodHealth {
                name: Arc::clone(&pod.name),
                ..PodHealth::default()
            }),
            fd: None,
            peer: None,
            last_seen: now,
            listed: false,
        }
    }

    /// Rebuild a tracked pod from its published entry. `observed_at` is the
    /// time of the aggregate it comes from: a pod listed then was last seen
    /// then; a pod already gone was last seen no later than its last valid
    /// sample, which is used (retiring it earlier never loses a count).
    pub(crate) fn restore(detail: &Arc<PodHealth>, observed_at: Timestamp) -> Self {
        let last_seen = if detail.error.as_deref() == Some(GONE_ERROR) {
            detail
                .sampled_at
                .map_or(observed_at, |s| s.min(observed_at))
        } else {
            observed_at
        };
        TrackedPod {
            detail: Arc::clone(detail),
            fd: Counter::restore(detail.fd_timeout_count, detail.fd_timeout_count_raw),
            peer: Counter::restore(
                detail.peer_connection_failures,
                detail.peer_connection_failures_raw,
            ),
            last_seen,
            listed: false,
        }
    }

    /// Fold a valid report. Returns whether a counter reset was absorbed
    /// (at most one per sample, however many counters it touched).
    pub(crate) fn absorb(
        &mut self,
        pod: &PodIdentity,
        report: &NodeReport,
        replication_lag_entries: Option<u64>,
        at: Timestamp,
    ) -> bool {
        let prev = &*self.detail;
        let identity_changed = self.fd.is_some()
            && (*prev.uid != *pod.uid
                || pod.restart_count > prev.restart_count
                || matches!((prev.incarnation.as_deref(), report.incarnation()),
                            (Some(a), Some(b)) if a != b));
        let mut reset = counters::observe(&mut self.fd, report.fd_timeout_count, identity_changed);
        match report.peer_connection_failure_count {
            Some(raw) => reset |= counters::observe(&mut self.peer, raw, identity_changed),
            None => counters::close_on_identity_change(&mut self.peer, identity_changed),
        }
        // A valid sample always moves `sampledAt`: the entry changes.
        let d = Arc::make_mut(&mut self.detail);
        share(&mut d.uid, &pod.uid);
        d.restart_count = pod.restart_count;
        share_opt(&mut d.image, pod.image.as_ref());
        share_opt(&mut d.ip, pod.ip.as_ref());
        set_opt(&mut d.incarnation, report.incarnation());
        d.sampled_at = Some(at);
        d.error = None;
        d.ready = Some(report.ready);
        set_opt(&mut d.state, Some(report.state.as_str()));
        d.generation = Some(report.generation);
        d.ring_members = Some(report.ring_members);
        set_opt(&mut d.ring_fingerprint, report.ring_fingerprint.as_deref());
        d.memory_pressure_state = Some(report.memory_pressure_state);
        d.outbox_messages = report.outbox_messages;
        d.replication_lag_entries = replication_lag_entries;
        let fence = report
            .serving_authority
            .as_ref()
            .map(kura_schemas::PodFence::from);
        // Kept when unchanged: no new allocation per sweep.
        if d.fence.as_deref() != fence.as_ref() {
            d.fence = fence.map(Box::new);
        }
        publish_counters(d, self.fd, self.peer);
        reset || identity_changed
    }

    /// Record a failed sample. The entry keeps describing the last valid
    /// sample (its `sampledAt` says when); a pod that never answered shows
    /// what discovery knows of it.
    pub(crate) fn fail(&mut self, pod: &PodIdentity, reason: &str, max_len: usize) {
        let reason = kura_schemas::text::cut_at_char_boundary(reason, max_len);
        let d = &*self.detail;
        // A pod that never answered shows what discovery knows of it.
        let identity_moved = self.fd.is_none()
            && (*d.uid != *pod.uid
                || d.restart_count != pod.restart_count
                || d.image.as_deref() != pod.image.as_deref()
                || d.ip.as_deref() != pod.ip.as_deref());
        if !identity_moved && d.error.as_deref() == Some(reason) {
            return;
        }
        let d = Arc::make_mut(&mut self.detail);
        if identity_moved {
            share(&mut d.uid, &pod.uid);
            d.restart_count = pod.restart_count;
            share_opt(&mut d.image, pod.image.as_ref());
            share_opt(&mut d.ip, pod.ip.as_ref());
        }
        set_opt(&mut d.error, Some(reason));
    }

    /// Mark the pod as no longer listed by discovery.
    pub(crate) fn mark_gone(&mut self) {
        if !self.detail.is_gone() {
            set_opt(&mut Arc::make_mut(&mut self.detail).error, Some(GONE_ERROR));
        }
    }
}

/// The entry's counter fields from the pod's counter state.
fn publish_counters(d: &mut PodHealth, fd: Option<Counter>, peer: Option<Counter>) {
    d.fd_timeout_count = fd.map(Counter::clamped);
    d.fd_timeout_count_raw = fd.map(|c| c.last_raw);
    d.peer_connection_failures = peer.map(Counter::clamped);
    d.peer_connection_failures_raw = peer.map(|c| c.last_raw);
}

/// Replace the shared text only when the value changed: an unchanged one
/// stays shared with every copy of the entry.
fn set_str(dst: &mut Arc<str>, src: &str) {
    if **dst != *src {
        *dst = Arc::from(src);
    }
}

/// Hold discovery's text itself (the entry then shares the pod identity's
/// allocation instead of holding a copy, also after discovery made the
/// identity anew with the same values, as a re-list does).
fn share(dst: &mut Arc<str>, src: &Arc<str>) {
    if !Arc::ptr_eq(dst, src) {
        *dst = Arc::clone(src);
    }
}

fn share_opt(dst: &mut Option<Arc<str>>, src: Option<&Arc<str>>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => share(d, s),
        (None, Some(s)) => *dst = Some(Arc::clone(s)),
        (_, None) => *dst = None,
    }
}

fn set_opt(dst: &mut Option<Arc<str>>, src: Option<&str>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => set_str(d, s),
        (None, Some(s)) => *dst = Some(Arc::from(s)),
        (_, None) => *dst = None,
    }
}
