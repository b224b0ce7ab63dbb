//! The task that publishes Events: transitions in through a bounded queue
//! ([`EventSink`]), through the [`EventLimiter`], out through one
//! [`EventRecorder`], one API call at a time, each bounded by a
//! timeout. Every call is counted in `kura_agent_events_total`.

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use tokio::sync::mpsc;

use super::limiter::{EventLimitConfig, EventLimiter, Publish};
use super::recorder::{Event, EventRecorder, EventType, PublishError, Reporter};
use crate::model::InstanceTransitions;
use crate::telemetry::{self, label};

/// Batches (one instance's transitions of one write) waiting for the
/// publisher; beyond this they are dropped (and counted) rather than
/// holding up a status write. Sized for a start-up: every instance's first
/// write may bring a batch (`BaselineCaptured`, `RolloutHealthy`) while
/// the API server, busy with the first statuses, answers Events slowly,
/// so the queue must hold a batch for most instances a replica holds (a
/// bound of a fraction of that dropped most of a large fleet's first
/// Events). The queue holds what waits, not its capacity.
pub const QUEUE_CAPACITY: usize = 16_384;
/// One Event API call may take this long.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// An Event's note is cut to this many bytes (the API allows 1 kB).
pub const MAX_NOTE: usize = 1000;
/// The publisher wakes at least this often when nothing happens.
const IDLE_WAIT: Duration = Duration::from_secs(5);

/// Where the write path's callback hands transitions. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<InstanceTransitions>,
}

impl EventSink {
    /// Queues one write's transitions; never waits (a full queue drops
    /// them and counts them). What is queued holds no spare room: at
    /// start-up every instance's batch may wait for the status writes.
    pub fn send(&self, mut batch: InstanceTransitions) {
        if batch.transitions.is_empty() {
            return;
        }
        batch.transitions.shrink_to_fit();
        let n = batch.transitions.len() as u64;
        if self.tx.try_send(batch).is_err() {
            metrics::counter!(telemetry::EVENTS_TOTAL, "result" => label::DROPPED).increment(n);
        }
    }
}

/// The publisher for `client`, reporting as `reporter`, bounded by
/// `limit`: the sink to send transitions to and the future to spawn (it
/// ends when every sink is dropped). While `status_backlog` says the
/// status writes are behind, Events wait for them ([`YieldGate`]).
pub fn start_events(
    client: Client,
    reporter: Reporter,
    limit: EventLimitConfig,
    status_backlog: impl Fn() -> bool + Send + 'static,
) -> (EventSink, impl Future<Output = ()> + Send + 'static) {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    let recorder = EventRecorder::new(client, reporter);
    (
        EventSink { tx },
        run(recorder, rx, EventLimiter::new(limit), status_backlog),
    )
}

/// Events yield to status writes for at most this long in a row; a
/// backlog that lasts longer no longer holds them until it has cleared
/// for [`REARM_AFTER`].
pub const MAX_YIELD: Duration = Duration::from_secs(60);
/// A backlog counts as cleared once it has been clear this long: one
/// that clears only for a moment between writes (a large replica's
/// pending writes hover around the threshold) neither starts a new
/// yield nor ends the one under way. Re-armed at every dip, a yield can
/// hold the Events for as long as the writes hover there (3 replicas at
/// 30,000 pods published 3 Events a second at rest in two runs, with
/// their start-up's thousands queued; 43 in a run whose backlog stayed
/// put).
pub const REARM_AFTER: Duration = Duration::from_secs(10);
/// How often a yielding publisher looks at the backlog again.
const YIELD_POLL: Duration = Duration::from_millis(250);

/// Whether the publisher waits for the status writes. Both compete for
/// the same API server; the status is the contract and an Event only
/// tells of it, so while the writes are behind (an agent starting on a
/// large fleet writes every first status and brings an Event batch with
/// most of them) the Events wait, queued, not dropped. Never more than
/// [`MAX_YIELD`] until the backlog has been clear for [`REARM_AFTER`]: a
/// backlog that does not clear, or clears only for moments, does not
/// starve the Events. Pure (time is an argument).
#[derive(Debug, Default)]
pub struct YieldGate {
    /// When the yield under way began.
    since: Option<std::time::Instant>,
    /// The yield under way took its [`MAX_YIELD`].
    spent: bool,
    /// Since when the backlog is clear.
    clear_since: Option<std::time::Instant>,
}

impl YieldGate {
    /// Whether to wait at `now`, the writes being behind (`backlog`) or
    /// not.
    pub fn wait(&mut self, backlog: bool, now: std::time::Instant) -> bool {
        if !backlog {
            let clear = *self.clear_since.get_or_insert(now);
            if now.duration_since(clear) >= REARM_AFTER {
                self.since = None;
                self.spent = false;
            }
            return false;
        }
        self.clear_since = None;
        if self.spent {
            return false;
        }
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) >= MAX_YIELD {
            self.spent = true;
            return false;
        }
        true
    }
}

async fn run(
    mut recorder: EventRecorder,
    mut rx: mpsc::Receiver<InstanceTransitions>,
    mut limiter: EventLimiter,
    status_backlog: impl Fn() -> bool + Send + 'static,
) {
    let mut gate = YieldGate::default();
    loop {
        while gate.wait(status_backlog(), std::time::Instant::now()) {
            tokio::time::sleep(YIELD_POLL).await;
        }
        let now = Timestamp::now();
        let wait = limiter
            .next_due(now)
            .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
            .unwrap_or(IDLE_WAIT)
            .min(IDLE_WAIT);
        tokio::select! {
            batch = rx.recv() => {
                let Some(batch) = batch else { return };
                let (now_out, suppressed) = limiter.offer(batch, Timestamp::now());
                if suppressed > 0 {
                    metrics::counter!(telemetry::EVENTS_TOTAL, "result" => label::SUPPRESSED)
                        .increment(u64::from(suppressed));
                }
                for p in now_out {
                    publish(&mut recorder, p).await;
                }
            }
            () = tokio::time::sleep(wait) => {
                for p in limiter.due(Timestamp::now()) {
                    publish(&mut recorder, p).await;
                }
            }
        }
    }
}

/// The Event for `p`.
pub fn event_of(p: &Publish) -> Event {
    let mut note = p.transition.note.clone();
    if p.coalesced > 0 {
        note.push_str(&format!(
            " ({} earlier transition(s) of this instance folded into this Event by the rate bound)",
            p.coalesced
        ));
    }
    let cut = kura_schemas::text::cut_at_char_boundary(&note, MAX_NOTE).len();
    note.truncate(cut);
    Event {
        type_: if p.transition.kind.is_warning() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: p.transition.kind.reason().to_owned(),
        note: Some(note),
        action: p.transition.action.clone().into_owned(),
        image: p.transition.image.as_deref().map(str::to_owned),
    }
}

/// What the Event is about: the `KuraInstance`.
pub fn reference_of(p: &Publish) -> ObjectReference {
    ObjectReference {
        api_version: Some("kura.tuist.dev/v1alpha1".to_owned()),
        kind: Some("KuraInstance".to_owned()),
        namespace: Some(p.key.namespace.to_string()),
        name: Some(p.key.name.to_string()),
        uid: p.uid.clone(),
        ..ObjectReference::default()
    }
}

async fn publish(recorder: &mut EventRecorder, p: Publish) {
    let event = event_of(&p);
    let reference = reference_of(&p);
    match recorder.publish(&event, &reference, CALL_TIMEOUT).await {
        Ok(()) => {
            metrics::counter!(telemetry::EVENTS_TOTAL, "result" => label::PUBLISHED).increment(1);
            tracing::debug!(instance = %p.key, reason = %event.reason, "event published");
        }
        Err(PublishError::Api(error)) => {
            metrics::counter!(telemetry::EVENTS_TOTAL, "result" => label::FAILED).increment(1);
            tracing::warn!(instance = %p.key, reason = %event.reason, %error,
                "event not published (the agent needs create and patch on events.k8s.io events)");
        }
        Err(PublishError::TimedOut(_)) => {
            metrics::counter!(telemetry::EVENTS_TOTAL, "result" => label::FAILED).increment(1);
            tracing::warn!(instance = %p.key, reason = %event.reason, "event not published: timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Events wait while the writes are behind, never more than
    /// `MAX_YIELD` in a row, and wait again once a backlog has cleared
    /// for `REARM_AFTER`.
    #[test]
    fn events_yield_to_a_status_backlog_for_a_bounded_time() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut gate = YieldGate::default();
        assert!(!gate.wait(false, at(0)), "no backlog: publish");
        assert!(gate.wait(true, at(1)));
        assert!(gate.wait(true, at(30)));
        assert!(
            !gate.wait(true, at(61)),
            "a minute of backlog: publish anyway"
        );
        assert!(
            !gate.wait(true, at(200)),
            "and keep publishing while it lasts"
        );
        assert!(!gate.wait(false, at(201)));
        assert!(!gate.wait(false, at(211)), "clear for REARM_AFTER");
        assert!(gate.wait(true, at(212)), "a new backlog: wait again");
    }

    /// A backlog that clears only for moments neither starts the yield
    /// again once it was spent nor lengthens the one under way: the
    /// Events wait `MAX_YIELD` in all, then go.
    #[test]
    fn a_flickering_backlog_holds_events_no_longer_than_max_yield() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut gate = YieldGate::default();
        let mut waited_until = None;
        // Behind for 4 s, clear for 1 s, for 10 minutes.
        for step in 0..600_u64 {
            let now = at(step * 1000);
            let backlog = step % 5 != 4;
            if gate.wait(backlog, now) {
                waited_until = Some(step);
            }
        }
        assert_eq!(
            waited_until,
            Some(58),
            "the yield ends MAX_YIELD after the first backlog, dips or not"
        );
    }
}
