//! The debug server's connections: which are served, which wait, and which
//! are shed. Three bounds, and a rule that only idle connections are shed.
//!
//! - Every accepted connection first waits in the *waiting room* until it
//!   has sent a whole request head (read into a small buffer, `head`; at
//!   most the header read timeout). A connection still sending its head
//!   (*silent* here: it has asked for nothing yet) costs a socket, a parked
//!   task and its head so far, no HTTP buffers and no serving slot. At most
//!   `room` connections wait; when the room is full, a newcomer sheds the
//!   longest-waiting silent one (waiting for longer than the grace), and
//!   when none is, the acceptor stops accepting until one leaves (the rest
//!   queue in the kernel's backlog).
//! - A connection that has sent its head asks for one of `capacity`
//!   *serving slots*. A free slot is taken at once; otherwise it may shed a
//!   slot holder that is idle: no request in progress and no byte written
//!   (nor request started or ended) for the grace. A holder with a request
//!   in progress, or that just had one, is never shed: the newcomer queues,
//!   and while any connection queues, every response carries `Connection:
//!   close`, so busy kept-alive clients hand their slots over between
//!   requests without an error.
//!
//! Why: kubelet's probes must be answered within their 1 s timeout however
//! many clients hold connections open without sending anything, or send
//! their heads a byte at a time (they sit in the waiting room and never take
//! a slot; issue 44), and clients whose request is being answered must never
//! be reset (issue 32: shedding the least recently active connection reset
//! a large share of busy clients' requests).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};

/// What a served connection has been doing, shared between its task (its
/// I/O and its requests) and the table (which reads it to find idle ones).
#[derive(Debug)]
pub(crate) struct Activity {
    origin: Instant,
    /// Requests whose response has not been handed over in full.
    in_flight: AtomicU32,
    /// Milliseconds since `origin` of the last byte written, or of the
    /// last request started or response handed over.
    last_ms: AtomicU64,
    /// Milliseconds since `origin` when the requests in flight started
    /// (when `in_flight` last left 0).
    busy_since_ms: AtomicU64,
}

impl Activity {
    /// A connection's activity, timed from `origin` (the table's).
    pub(crate) fn new(origin: Instant) -> Self {
        let activity = Self {
            origin,
            in_flight: AtomicU32::new(0),
            last_ms: AtomicU64::new(0),
            busy_since_ms: AtomicU64::new(0),
        };
        activity.touch();
        activity
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A byte was written (or a request started or ended).
    pub(crate) fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A request started; its response is in flight until the returned
    /// guard drops.
    pub(crate) fn start_request(self: &Arc<Self>) -> InFlight {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.busy_since_ms.store(self.now_ms(), Ordering::Relaxed);
        }
        self.touch();
        InFlight(self.clone())
    }

    /// How long the requests in progress have been, if any is.
    pub(crate) fn busy_for(&self) -> Option<Duration> {
        (self.in_flight.load(Ordering::Acquire) > 0).then(|| {
            let since = self.busy_since_ms.load(Ordering::Relaxed);
            Duration::from_millis(self.now_ms().saturating_sub(since))
        })
    }

    /// No request in progress and nothing written for `grace`, at
    /// `now_ms` (milliseconds since the table's origin).
    fn idle_at(&self, now_ms: u64, grace: Duration) -> Option<u64> {
        let last = self.last_ms.load(Ordering::Relaxed);
        let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        (self.in_flight.load(Ordering::Acquire) == 0 && now_ms.saturating_sub(last) >= grace)
            .then_some(last)
    }
}

/// A request in progress; dropping it (when the response body has been
/// handed over in full, or dropped) ends the request.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A serving slot's holder: its activity, and the sender whose drop closes
/// it.
#[derive(Debug)]
struct Holder {
    activity: Arc<Activity>,
    _shed: oneshot::Sender<()>,
}

#[derive(Debug)]
struct Inner {
    next_id: u64,
    /// Silent connections in the waiting room by id (ids grow with accept
    /// order), with when they were accepted and the sender whose drop closes
    /// them.
    silent: BTreeMap<u64, (Instant, oneshot::Sender<()>)>,
    /// Connections that sent something and wait for a slot.
    queued: usize,
    /// Connections being served.
    holders: HashMap<u64, Holder>,
}

/// The table of connections (see the module documentation).
#[derive(Debug)]
pub(crate) struct Connections {
    capacity: usize,
    room: usize,
    grace: Duration,
    origin: Instant,
    inner: Mutex<Inner>,
    /// Woken when a slot or a place in the waiting room frees.
    freed: Notify,
}

/// A connection's ticket: its id in the table; the receiver completes (with
/// an error) when the table sheds it.
pub(crate) struct Ticket {
    /// The connection's id.
    pub(crate) id: u64,
    /// Completes when the connection is shed.
    pub(crate) shed: oneshot::Receiver<()>,
}

impl Connections {
    /// A table of `capacity` serving slots and a waiting room of `room`
    /// (each at least one); connections idle for `grace` may be shed.
    pub(crate) fn new(capacity: usize, room: usize, grace: Duration) -> Self {
        Self {
            capacity: capacity.max(1),
            room: room.max(1),
            grace,
            origin: Instant::now(),
            inner: Mutex::new(Inner {
                next_id: 0,
                silent: BTreeMap::new(),
                queued: 0,
                holders: HashMap::new(),
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change is a few map operations: a panic elsewhere while the
        // lock was held leaves the table usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the waiting room has a place for one more connection:
    /// free, or made by shedding a connection silent for the grace. Call
    /// before `accept`.
    pub(crate) async fn room_for_one(&self) {
        loop {
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            let wait = {
                let mut inner = self.lock();
                if inner.silent.len() + inner.queued < self.room {
                    return;
                }
                match inner.silent.first_key_value() {
                    Some((_, (since, _))) if since.elapsed() >= self.grace => {
                        // Dropping the sender closes it.
                        inner.silent.pop_first();
                        tracing::debug!(
                            "debug server: waiting room full, a silent connection closed"
                        );
                        return;
                    }
                    Some((_, (since, _))) => self.grace.saturating_sub(since.elapsed()),
                    None => self.grace,
                }
            };
            let _ = tokio::time::timeout(wait, freed).await;
        }
    }

    /// Enters a newly accepted connection into the waiting room (after
    /// [`Self::room_for_one`]).
    pub(crate) fn arrive(&self) -> Ticket {
        let (tx, shed) = oneshot::channel();
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.silent.insert(id, (Instant::now(), tx));
        Ticket { id, shed }
    }

    /// Connection `id` sent its request head: it leaves the waiting room
    /// and queues for a slot. `false` when it was shed already.
    pub(crate) fn spoke(&self, id: u64) -> bool {
        let mut inner = self.lock();
        if inner.silent.remove(&id).is_some() {
            inner.queued += 1;
            true
        } else {
            false
        }
    }

    /// Connection `id` left the waiting room without a whole request head
    /// (it timed out, closed, or was shed).
    pub(crate) fn leave_silent(&self, id: u64) {
        if self.lock().silent.remove(&id).is_some() {
            self.freed.notify_waiters();
        }
    }

    /// Gives queued connection `id` (see [`Self::spoke`]) a serving slot:
    /// waits for a free one or an idle holder to shed, at most `limit`.
    /// Returns its activity and the receiver that completes when it is shed,
    /// or `None` when no slot came within `limit` (it leaves the queue).
    pub(crate) async fn serve(
        &self,
        id: u64,
        limit: Duration,
    ) -> Option<(Arc<Activity>, oneshot::Receiver<()>)> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.try_take(id) {
                return Some(slot);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                self.leave_queue();
                return None;
            }
            // A holder may turn idle without anything waking us: look again
            // after a fraction of the grace.
            let step = (self.grace / 4).max(Duration::from_millis(5));
            let _ = tokio::time::timeout(step.min(deadline - now), freed).await;
        }
    }

    /// Gives queued connection `id` a slot now, a free one or an idle
    /// holder's, without waiting. `None` when there is none: it stays
    /// queued until [`Self::leave_queue`].
    pub(crate) fn serve_now(&self, id: u64) -> Option<(Arc<Activity>, oneshot::Receiver<()>)> {
        self.try_take(id)
    }

    /// A queued connection leaves the queue without a slot (it waited too
    /// long, or was answered outside the slots).
    pub(crate) fn leave_queue(&self) {
        let mut inner = self.lock();
        inner.queued = inner.queued.saturating_sub(1);
        drop(inner);
        self.freed.notify_waiters();
    }

    fn try_take(&self, id: u64) -> Option<(Arc<Activity>, oneshot::Receiver<()>)> {
        let mut inner = self.lock();
        if inner.holders.len() >= self.capacity {
            let now_ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
            let victim = inner
                .holders
                .iter()
                .filter_map(|(id, h)| h.activity.idle_at(now_ms, self.grace).map(|at| (at, *id)))
                .min()
                .map(|(_, id)| id)?;
            // Dropping its sender closes it.
            inner.holders.remove(&victim);
            tracing::debug!("debug server: all slots taken, an idle connection closed");
        }
        let (tx, shed) = oneshot::channel();
        let activity = Arc::new(Activity::new(self.origin));
        inner.holders.insert(
            id,
            Holder {
                activity: activity.clone(),
                _shed: tx,
            },
        );
        inner.queued = inner.queued.saturating_sub(1);
        drop(inner);
        // A place in the waiting room freed.
        self.freed.notify_waiters();
        Some((activity, shed))
    }

    /// Whether connections wait for a slot (responses then close their
    /// connection, handing the slot over).
    pub(crate) fn queue_waits(&self) -> bool {
        self.lock().queued > 0
    }

    /// Served connection `id` ended: its slot is free. Nothing when it was
    /// shed.
    pub(crate) fn release(&self, id: u64) {
        self.lock().holders.remove(&id);
        self.freed.notify_waiters();
    }

    /// (silent, queued, served) connections.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        (inner.silent.len(), inner.queued, inner.holders.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_millis(40);

    fn table(capacity: usize, room: usize) -> Arc<Connections> {
        Arc::new(Connections::new(capacity, room, GRACE))
    }

    #[tokio::test]
    async fn a_connection_that_spoke_gets_a_free_slot_at_once() {
        let t = table(2, 4);
        let a = t.arrive();
        assert_eq!(t.counts(), (1, 0, 0));
        assert!(t.spoke(a.id));
        let served = t.serve(a.id, Duration::ZERO).await;
        assert!(served.is_some());
        assert_eq!(t.counts(), (0, 0, 1));
        t.release(a.id);
        assert_eq!(t.counts(), (0, 0, 0));
    }

    #[tokio::test]
    async fn a_holder_with_a_request_in_progress_is_never_shed() {
        let t = table(1, 4);
        let a = t.arrive();
        t.spoke(a.id);
        let (activity, mut a_shed) = t.serve(a.id, Duration::ZERO).await.expect("slot");
        let request = activity.start_request();
        tokio::time::sleep(GRACE * 2).await;
        let b = t.arrive();
        t.spoke(b.id);
        assert!(t.queue_waits());
        assert!(
            t.serve(b.id, GRACE * 2).await.is_none(),
            "b waited: a is busy"
        );
        assert!(
            a_shed
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        // The request ended, but only just: a is not idle yet.
        drop(request);
        let c = t.arrive();
        t.spoke(c.id);
        assert!(t.try_take(c.id).is_none());
        // Once quiet for the grace, a is shed for c.
        assert!(t.serve(c.id, GRACE * 3).await.is_some());
        assert!(
            a_shed
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
    }

    #[tokio::test]
    async fn a_queued_connection_takes_a_released_slot() {
        let t = table(1, 4);
        let a = t.arrive();
        t.spoke(a.id);
        let (activity, _a_shed) = t.serve(a.id, Duration::ZERO).await.expect("slot");
        let _request = activity.start_request();
        let b = t.arrive();
        t.spoke(b.id);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.serve(b.id, Duration::from_secs(5)).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        t.release(a.id);
        assert!(waiter.await.expect("join"));
        assert_eq!(t.counts(), (0, 0, 1));
    }

    #[tokio::test]
    async fn a_full_waiting_room_sheds_the_longest_silent_after_the_grace() {
        let t = table(1, 2);
        t.room_for_one().await;
        let mut a = t.arrive();
        t.room_for_one().await;
        let b = t.arrive();
        // Full, and nobody silent for the grace yet: the acceptor waits.
        let started = Instant::now();
        t.room_for_one().await;
        assert!(started.elapsed() >= GRACE / 2, "{:?}", started.elapsed());
        assert!(
            a.shed
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(t.counts(), (1, 0, 0));
        // A connection that spoke is not silent: it is never shed from the room.
        t.spoke(b.id);
        assert!(!t.spoke(a.id), "a was shed");
        assert_eq!(t.counts(), (0, 1, 0));
    }
}
