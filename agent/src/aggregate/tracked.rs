//! The state the aggregator keeps per tracked pod: its published entry
//! (identity of the last valid sample, last sample detail, error) and its
//! counters.

use super::counters::{self, Counter};
use jiff::Timestamp;
use kura_schemas::{NodeReport, PodHealth};

use crate::model::PodIdentity;

/// The `error` a tracked pod shows once discovery no longer lists it. A
/// restored entry carrying it was already gone at the last sweep.
pub const GONE_ERROR: &str = kura_schemas::health::GONE_POD_ERROR;

/// One tracked pod.
#[derive(Debug, Clone)]
pub(crate) struct TrackedPod {
    /// Exactly what is published in `pods`.
    pub(crate) detail: PodHealth,
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
            detail: PodHealth {
                name: pod.name.clone(),
                ..PodHealth::default()
            },
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
    pub(crate) fn restore(detail: &PodHealth, observed_at: Timestamp) -> Self {
        let last_seen = if detail.error.as_deref() == Some(GONE_ERROR) {
            detail
                .sampled_at
                .map_or(observed_at, |s| s.min(observed_at))
        } else {
            observed_at
        };
        TrackedPod {
            detail: detail.clone(),
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
        let d = &mut self.detail;
        let identity_changed = self.fd.is_some()
            && (d.uid != pod.uid
                || pod.restart_count > d.restart_count
                || matches!((d.incarnation.as_deref(), report.incarnation()),
                            (Some(a), Some(b)) if a != b));
        let mut reset = counters::observe(&mut self.fd, report.fd_timeout_count, identity_changed);
        match report.peer_connection_failure_count {
            Some(raw) => reset |= counters::observe(&mut self.peer, raw, identity_changed),
            None => counters::close_on_identity_change(&mut self.peer, identity_changed),
        }
        set_str(&mut d.uid, &pod.uid);
        d.restart_count = pod.restart_count;
        set_opt(&mut d.image, pod.image.as_deref());
        set_opt(&mut d.ip, pod.ip.as_deref());
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
        self.publish_counters();
        reset || identity_changed
    }

    /// Record a failed sample. The entry keeps describing the last valid
    /// sample (its `sampledAt` says when); a pod that never answered shows
    /// what discovery knows of it.
    pub(crate) fn fail(&mut self, pod: &PodIdentity, reason: &str, max_len: usize) {
        if self.fd.is_none() {
            let d = &mut self.detail;
            set_str(&mut d.uid, &pod.uid);
            d.restart_count = pod.restart_count;
            set_opt(&mut d.image, pod.image.as_deref());
            set_opt(&mut d.ip, pod.ip.as_deref());
        }
        set_opt(&mut self.detail.error, Some(truncate(reason, max_len)));
    }

    /// Mark the pod as no longer listed by discovery.
    pub(crate) fn mark_gone(&mut self) {
        set_opt(&mut self.detail.error, Some(GONE_ERROR));
    }

    fn publish_counters(&mut self) {
        let d = &mut self.detail;
        d.fd_timeout_count = self.fd.map(Counter::clamped);
        d.fd_timeout_count_raw = self.fd.map(|c| c.last_raw);
        d.peer_connection_failures = self.peer.map(Counter::clamped);
        d.peer_connection_failures_raw = self.peer.map(|c| c.last_raw);
    }
}

/// Longest prefix of `s` within `max` bytes, cut at a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Overwrite without allocating when the value did not change.
fn set_str(dst: &mut String, src: &str) {
    if dst != src {
        dst.clear();
        dst.push_str(src);
    }
}

fn set_opt(dst: &mut Option<String>, src: Option<&str>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => set_str(d, s),
        (None, Some(s)) => *dst = Some(s.to_owned()),
        (_, None) => *dst = None,
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_cuts_at_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("abcdef", 3), "abc");
        assert_eq!(truncate("aé", 2), "a");
    }
}
