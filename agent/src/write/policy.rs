//! "When to write" (contract/rollout-health.md): which desired statuses are
//! worth a status write before the heartbeat, and which go first under the
//! shared rate limit. Pure comparisons; the heartbeat and the rate limit
//! belong to the [queue](super::queue).
//!
//! Material means [`material_status_change`]: [`material_change`] of the aggregate (anything but `observedAt`,
//! `sampledAt` and the per-pod `sampledAt`) or any change of the verdict
//! but `evaluatedAt`; priority means [`priority_status_change`]:
//! [`is_priority_change`] (`ready`,
//! `serving` or `ringConsistent` flipped, `memoryPressureState` rose, no
//! valid writer left or the grant moved to `Fencing`), a
//! new gate verdict, a new `RolloutHealthy` status or a new generation.

use kura_schemas::{PodHealth, RolloutHealth};

use crate::model::DesiredStatus;
use crate::model::conditions::rollout_healthy_status;

/// Whether `desired` is worth a write before the heartbeat, against the
/// status last `written`: [`material_change`] of the aggregate, or any
/// change of the verdict but `evaluatedAt` (times that move every sweep
/// are not a change).
pub fn material_status_change(written: &DesiredStatus, desired: &DesiredStatus) -> bool {
    if material_change(&written.health, &desired.health) {
        return true;
    }
    if written.gate.evaluated_at == desired.gate.evaluated_at {
        return written.gate != desired.gate;
    }
    let mut gate = (*written.gate).clone();
    gate.evaluated_at = desired.gate.evaluated_at;
    gate != *desired.gate
}

/// Whether a material change should be written before others:
/// [`is_priority_change`] of the aggregate, a new verdict, a new
/// `RolloutHealthy` status, or a new generation judged (`kubectl wait`
/// waits for the conditions' `observedGeneration` to reach it).
pub fn priority_status_change(written: &DesiredStatus, desired: &DesiredStatus) -> bool {
    is_priority_change(Some(&written.health), &desired.health)
        || written.gate.verdict != desired.gate.verdict
        || written.health.observed_generation != desired.health.observed_generation
        || rollout_healthy_status(Some(&written.health), Some(&written.gate))
            != rollout_healthy_status(Some(&desired.health), Some(&desired.gate))
}

/// Whether `next` differs from `prev` in any field other than `observedAt`,
/// `sampledAt` and the per-pod `sampledAt`: such a change is written at once,
/// anything else waits for the heartbeat.
pub fn material_change(prev: &RolloutHealth, next: &RolloutHealth) -> bool {
    // Destructured so that a field added to the contract cannot be forgotten.
    let RolloutHealth {
        schema_version,
        observed_at: _,
        sampled_at: _,
        observed_generation,
        expected_pods,
        sampled_pods,
        ready,
        serving,
        writer_lock_owned,
        initial_discovery_completed,
        generation_consistent,
        ring_consistent,
        ring_members,
        bootstrap_inflight_peers,
        backfill_initial_cycle,
        backfilling_peers,
        backfill_degraded,
        backfill_budget_exhausted_peers,
        outbox_messages,
        replication_lag_entries,
        serving_authority,
        fd_timeout_count,
        peer_connection_failures,
        memory_pressure_state,
        inflight_requests,
        counter_resets,
        pods,
        retired_counters,
        suspended,
        update_paused,
        agent,
    } = next;
    *schema_version != prev.schema_version
        || *observed_generation != prev.observed_generation
        || *expected_pods != prev.expected_pods
        || *sampled_pods != prev.sampled_pods
        || *ready != prev.ready
        || *serving != prev.serving
        || *writer_lock_owned != prev.writer_lock_owned
        || *initial_discovery_completed != prev.initial_discovery_completed
        || *generation_consistent != prev.generation_consistent
        || *ring_consistent != prev.ring_consistent
        || *ring_members != prev.ring_members
        || *bootstrap_inflight_peers != prev.bootstrap_inflight_peers
        || *backfill_initial_cycle != prev.backfill_initial_cycle
        || *backfilling_peers != prev.backfilling_peers
        || *backfill_degraded != prev.backfill_degraded
        || *backfill_budget_exhausted_peers != prev.backfill_budget_exhausted_peers
        || *outbox_messages != prev.outbox_messages
        || *replication_lag_entries != prev.replication_lag_entries
        || *serving_authority != prev.serving_authority
        || *fd_timeout_count != prev.fd_timeout_count
        || *peer_connection_failures != prev.peer_connection_failures
        || *memory_pressure_state != prev.memory_pressure_state
        || *inflight_requests != prev.inflight_requests
        || *counter_resets != prev.counter_resets
        || *retired_counters != prev.retired_counters
        || *suspended != prev.suspended
        || *update_paused != prev.update_paused
        || *agent != prev.agent
        || pods.len() != prev.pods.len()
        || pods
            .iter()
            .zip(&prev.pods)
            .any(|(n, p)| pod_material_change(p, n))
}

fn pod_material_change(prev: &PodHealth, next: &PodHealth) -> bool {
    let PodHealth {
        name,
        uid,
        restart_count,
        image,
        ip,
        incarnation,
        sampled_at: _,
        error,
        ready,
        state,
        generation,
        ring_members,
        ring_fingerprint,
        memory_pressure_state,
        outbox_messages,
        replication_lag_entries,
        fence,
        fd_timeout_count,
        fd_timeout_count_raw,
        peer_connection_failures,
        peer_connection_failures_raw,
    } = next;
    *name != prev.name
        || *uid != prev.uid
        || *restart_count != prev.restart_count
        || *image != prev.image
        || *ip != prev.ip
        || *incarnation != prev.incarnation
        || *error != prev.error
        || *ready != prev.ready
        || *state != prev.state
        || *generation != prev.generation
        || *ring_members != prev.ring_members
        || *ring_fingerprint != prev.ring_fingerprint
        || *memory_pressure_state != prev.memory_pressure_state
        || *outbox_messages != prev.outbox_messages
        || *replication_lag_entries != prev.replication_lag_entries
        || *fence != prev.fence
        || *fd_timeout_count != prev.fd_timeout_count
        || *fd_timeout_count_raw != prev.fd_timeout_count_raw
        || *peer_connection_failures != prev.peer_connection_failures
        || *peer_connection_failures_raw != prev.peer_connection_failures_raw
}

/// Whether writing `next` should go ahead of other writes: it flips `ready`,
/// `serving` or `ringConsistent`, raises `memoryPressureState`, drops
/// `servingAuthority.validWriters` to 0 or moves `servingAuthority.phase`
/// to `Fencing`, marks the instance suspended or brings an `updatePaused`,
/// compared with the last aggregate written (`prev`). With nothing written yet
/// (`None`) the first aggregate is a priority: consumers have no status at all.
pub fn is_priority_change(prev: Option<&RolloutHealth>, next: &RolloutHealth) -> bool {
    match prev {
        None => true,
        Some(p) => {
            p.ready != next.ready
                || p.serving != next.serving
                || p.ring_consistent != next.ring_consistent
                || next.memory_pressure_state > p.memory_pressure_state
                || fence_worsened(p, next)
                || (next.suspended && !p.suspended)
                || (next.update_paused.is_some() && p.update_paused.is_none())
        }
    }
}

/// `servingAuthority.validWriters` dropped to 0, or its phase moved to
/// `Fencing` (from anything else, or from no fenced serving at all).
fn fence_worsened(prev: &RolloutHealth, next: &RolloutHealth) -> bool {
    let Some(n) = next.serving_authority.as_ref() else {
        return false;
    };
    let p = prev.serving_authority.as_ref();
    (n.valid_writers == 0 && p.is_none_or(|p| p.valid_writers > 0))
        || (n.is_fencing() && !p.is_some_and(|p| p.is_fencing()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn base() -> RolloutHealth {
        RolloutHealth {
            sampled_at: Some(ts("2026-07-21T09:59:59Z")),
            observed_generation: 4,
            ring_members: 3,
            backfill_initial_cycle: "complete".into(),
            backfilling_peers: Some(0),
            backfill_budget_exhausted_peers: Some(0),
            fd_timeout_count: 2,
            peer_connection_failures: Some(1),
            memory_pressure_state: 1,
            inflight_requests: 3,
            pods: vec![std::sync::Arc::new(PodHealth {
                name: "p-0".into(),
                uid: "u".into(),
                sampled_at: Some(ts("2026-07-21T09:59:59Z")),
                fd_timeout_count: Some(2),
                fd_timeout_count_raw: Some(2),
                ..PodHealth::default()
            })],
            agent: "agent-0".into(),
            ..crate::model::fixtures::health(ts("2026-07-21T10:00:00Z"))
        }
    }

    #[test]
    fn only_times_changed_is_not_material() {
        let prev = base();
        let mut next = base();
        next.observed_at = ts("2026-07-21T10:00:10Z");
        next.sampled_at = Some(ts("2026-07-21T10:00:09Z"));
        std::sync::Arc::make_mut(&mut next.pods[0]).sampled_at = Some(ts("2026-07-21T10:00:09Z"));
        assert!(!material_change(&prev, &next));
        assert!(!is_priority_change(Some(&prev), &next));
    }

    #[test]
    fn sampled_at_disappearing_is_not_material_but_sampled_pods_is() {
        let prev = base();
        let mut next = base();
        next.sampled_at = None;
        assert!(!material_change(&prev, &next));
        next.sampled_pods = 0;
        assert!(material_change(&prev, &next));
    }

    #[test]
    fn any_other_field_is_material() {
        let prev = base();
        let mut a = base();
        a.fd_timeout_count = 3;
        assert!(material_change(&prev, &a));
        let mut b = base();
        std::sync::Arc::make_mut(&mut b.pods[0]).fd_timeout_count_raw = Some(0);
        assert!(material_change(&prev, &b));
        let mut c = base();
        std::sync::Arc::make_mut(&mut c.pods[0]).error = Some("timeout".into());
        assert!(material_change(&prev, &c));
        let mut d = base();
        d.pods.clear();
        assert!(material_change(&prev, &d));
        let mut e = base();
        e.outbox_messages = Some(0);
        assert!(material_change(&prev, &e));
        assert!(!material_change(&prev, &base()));
    }

    #[test]
    fn priority_flips_and_pressure_rises() {
        let prev = base();
        let mut a = base();
        a.ready = false;
        assert!(is_priority_change(Some(&prev), &a));
        let mut b = base();
        b.serving = false;
        assert!(is_priority_change(Some(&prev), &b));
        let mut c = base();
        c.ring_consistent = false;
        assert!(is_priority_change(Some(&prev), &c));
        let mut d = base();
        d.memory_pressure_state = 2;
        assert!(is_priority_change(Some(&prev), &d));
        let mut e = base();
        e.memory_pressure_state = 0;
        assert!(
            !is_priority_change(Some(&prev), &e),
            "pressure falling is not urgent"
        );
        let mut f = base();
        f.fd_timeout_count = 40;
        assert!(!is_priority_change(Some(&prev), &f));
        assert!(is_priority_change(None, &f));
    }

    #[test]
    fn suspension_and_an_update_pause_go_first_and_their_end_does_not() {
        let prev = base();
        let mut suspended = base();
        suspended.suspended = true;
        assert!(is_priority_change(Some(&prev), &suspended));
        assert!(material_change(&prev, &suspended));
        assert!(!is_priority_change(Some(&suspended), &prev));
        let mut paused = base();
        paused.update_paused = Some(Box::new(kura_schemas::UpdatePaused {
            strategy: "OnDelete".into(),
            ..Default::default()
        }));
        assert!(is_priority_change(Some(&prev), &paused));
        assert!(material_change(&prev, &paused));
        assert!(!is_priority_change(Some(&paused), &prev));
    }

    #[test]
    fn losing_the_writer_or_fencing_goes_first_and_new_fields_are_material() {
        use kura_schemas::ServingAuthorityHealth;
        let fence = |writers: u32, phase: &str| {
            Some(ServingAuthorityHealth {
                enabled_pods: 2,
                valid_writers: writers,
                phase: phase.into(),
                epoch: u64::from(writers),
            })
        };
        let with = |a: Option<ServingAuthorityHealth>| RolloutHealth {
            serving_authority: a,
            ..base()
        };
        let serving = with(fence(1, "Serving"));
        assert!(is_priority_change(
            Some(&serving),
            &with(fence(0, "Revoking"))
        ));
        assert!(is_priority_change(
            Some(&base()),
            &with(fence(0, "Preparing"))
        ));
        assert!(is_priority_change(
            Some(&with(fence(0, "Revoking"))),
            &with(fence(0, "Fencing"))
        ));
        // Already without a writer, or already fenced: not urgent again.
        assert!(!is_priority_change(
            Some(&with(fence(0, "Revoking"))),
            &with(fence(0, "Quiescing"))
        ));
        assert!(!is_priority_change(
            Some(&with(fence(0, "Fencing"))),
            &with(fence(0, "Fencing"))
        ));
        // A writer coming back is not urgent, but it is material.
        assert!(!is_priority_change(
            Some(&with(fence(0, "Revoking"))),
            &serving
        ));
        assert!(material_change(&with(fence(0, "Revoking")), &serving));
        let lag = RolloutHealth {
            replication_lag_entries: Some(5),
            ..base()
        };
        assert!(material_change(&base(), &lag));
        let mut pods = base();
        std::sync::Arc::make_mut(&mut pods.pods[0]).fence =
            Some(Box::new(kura_schemas::PodFence {
                enabled: Some(true),
                ..Default::default()
            }));
        assert!(material_change(&base(), &pods));
    }
}
