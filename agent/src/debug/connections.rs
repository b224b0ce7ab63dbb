//! The debug server's connection slots: at most a fixed number of
//! connections are open at once, and a newly accepted connection always gets
//! a slot. When every slot is taken, the connection that has gone longest
//! without starting a request is shed (closed) to make room.
//!
//! Why: kubelet's probes must be answered within their 1 s timeout however
//! many clients hold connections open without sending anything. A bound
//! taken *before* `accept` let 64 idle connections queue every probe behind
//! the header timeout; accept-then-shed keeps the bound on open sockets and
//! serves the newest connection (the probe) at once. A client that is being
//! answered has just started a request, so it is the last to go.

use std::collections::HashMap;

/// One connection's place in the table.
#[derive(Debug)]
struct Slot<H> {
    /// When the connection last started a request (or was accepted), on the
    /// table's own sequence: larger is more recent.
    last_active: u64,
    /// Dropped (or handed back) to shed the connection.
    handle: H,
}

/// The open connections, at most `capacity`. `H` is what closes a
/// connection when the table drops or returns it (the server uses a
/// one-shot sender its connection task waits on).
#[derive(Debug)]
pub(crate) struct ConnectionSlots<H> {
    capacity: usize,
    next_id: u64,
    next_seq: u64,
    open: HashMap<u64, Slot<H>>,
}

impl<H> ConnectionSlots<H> {
    /// A table of `capacity` slots (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            next_id: 0,
            next_seq: 0,
            open: HashMap::with_capacity(capacity.max(1)),
        }
    }

    fn tick(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Gives a newly accepted connection a slot. Returns its id and, when
    /// the table was full, the handle of the connection shed for it (the
    /// least recently active one).
    pub(crate) fn admit(&mut self, handle: H) -> (u64, Option<H>) {
        let shed = if self.open.len() >= self.capacity {
            self.open
                .iter()
                .min_by_key(|(_, slot)| slot.last_active)
                .map(|(id, _)| *id)
                .and_then(|id| self.open.remove(&id))
                .map(|slot| slot.handle)
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        let last_active = self.tick();
        self.open.insert(
            id,
            Slot {
                last_active,
                handle,
            },
        );
        (id, shed)
    }

    /// Connection `id` started a request: it becomes the most recently
    /// active. Nothing when it was shed already.
    pub(crate) fn touch(&mut self, id: u64) {
        let seq = self.tick();
        if let Some(slot) = self.open.get_mut(&id) {
            slot.last_active = seq;
        }
    }

    /// Connection `id` ended: its slot is free. Nothing when it was shed.
    pub(crate) fn release(&mut self, id: u64) {
        self.open.remove(&id);
    }

    /// How many connections hold a slot.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_capacity_nothing_is_shed() {
        let mut slots = ConnectionSlots::new(3);
        for n in 0..3 {
            let (_, shed) = slots.admit(n);
            assert_eq!(shed, None);
        }
        assert_eq!(slots.len(), 3);
    }

    #[test]
    fn a_full_table_sheds_the_least_recently_active() {
        let mut slots = ConnectionSlots::new(3);
        let (a, _) = slots.admit("a");
        let (_b, _) = slots.admit("b");
        let (_c, _) = slots.admit("c");
        // `a` starts a request: `b` is now the longest idle.
        slots.touch(a);
        let (_d, shed) = slots.admit("d");
        assert_eq!(shed, Some("b"));
        let (_e, shed) = slots.admit("e");
        assert_eq!(shed, Some("c"));
        let (_f, shed) = slots.admit("f");
        assert_eq!(shed, Some("a"));
        assert_eq!(slots.len(), 3);
    }

    #[test]
    fn the_newest_connection_always_gets_a_slot() {
        // Idle connections arriving forever never push out the one that
        // came after them until `capacity` more have arrived.
        let mut slots = ConnectionSlots::new(4);
        let mut shed_ids = Vec::new();
        for n in 0..20u32 {
            let (_, shed) = slots.admit(n);
            shed_ids.extend(shed);
        }
        assert_eq!(shed_ids, (0..16).collect::<Vec<u32>>());
        assert_eq!(slots.len(), 4);
    }

    #[test]
    fn released_and_shed_ids_are_forgotten() {
        let mut slots = ConnectionSlots::new(2);
        let (a, _) = slots.admit('a');
        let (b, _) = slots.admit('b');
        slots.release(a);
        assert_eq!(slots.len(), 1);
        let (_c, shed) = slots.admit('c');
        assert_eq!(shed, None, "a released slot is reused");
        let (_d, shed) = slots.admit('d');
        assert_eq!(shed, Some('b'));
        // `b` ends after being shed: nothing else is freed.
        slots.release(b);
        slots.touch(b);
        assert_eq!(slots.len(), 2);
    }

    #[test]
    fn a_capacity_of_zero_still_serves_one() {
        let mut slots = ConnectionSlots::new(0);
        assert_eq!(slots.admit(1).1, None);
        assert_eq!(slots.admit(2).1, Some(1));
    }
}
