//! The stored-status lifecycle of every watched instance, in one place
//! and pure (docs/architecture.md, "Stored statuses"). The fact store
//! ([`super::store::FactStore`]) asks it whether to read an instance's
//! status from a watch event, whether a target may be handed out, and
//! whether the answer of a GET is still wanted; discovery makes the GETs.
//!
//! ```text
//!             release                keep (instance present)
//!   Held ───────────────► Released ───────────────────────► Rereading{ticket}
//!    ▲                        │ keep (instance gone)              │
//!    │◄───────────────────────┘                                  │
//!    │◄── the object read whole (a watch event after keep, a ────┘
//!    │    re-list entry read after keep) or the GET with this ticket answered
//!    └── delete: the instance is gone (no state kept: Absent)
//! ```
//!
//! - **Held** (the default, no entry kept): the store reads the status from
//!   every event; a task starts from it.
//! - **Released**: a task of this replica sweeps the instance and its
//!   engine holds the status; the store reads none (the watch brings the
//!   task's own writes).
//! - **Rereading**: the task stopped; the status is read again (one GET,
//!   bounded by discovery) and no target is handed out for the instance
//!   until it is in, so no task starts without its history. The first whole
//!   read of the object ends it: a watch event, or the GET's answer while
//!   its ticket is current (a later delete, release or read makes a late
//!   answer stale, and it is dropped). Meanwhile the view answers from the
//!   last verdict this replica published, marked as being read again.

use std::collections::HashMap;

use kura_schemas::KuraInstanceStatus;

use crate::model::InstanceKey;

/// Where an instance's stored status stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Kept and read from every event (the default).
    Held,
    /// Let go: a task of this replica holds it.
    Released,
    /// Being read again: no task may start until it is in.
    Rereading,
}

/// The state of an instance that is not [`Stage::Held`].
#[derive(Debug)]
enum State {
    Released,
    Rereading {
        ticket: u64,
        /// What this replica last published, for the view's answers only
        /// (never a task's start: the new owner may have written since).
        last: Option<Box<KuraInstanceStatus>>,
    },
}

/// One re-read to make: a GET of `key`, whose answer counts while its
/// ticket is current ([`Lifecycle::wanted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reread {
    /// The instance.
    pub key: InstanceKey,
    /// Which re-read of it this is.
    pub ticket: u64,
}

/// Every instance's [`Stage`]. See the module documentation.
#[derive(Debug, Default)]
pub struct Lifecycle {
    states: HashMap<InstanceKey, State>,
    tickets: u64,
}

impl Lifecycle {
    /// Where `key`'s status stands.
    pub fn stage(&self, key: &InstanceKey) -> Stage {
        match self.states.get(key) {
            None => Stage::Held,
            Some(State::Released) => Stage::Released,
            Some(State::Rereading { .. }) => Stage::Rereading,
        }
    }

    /// Whether the status of `key` is let go (not read from events).
    pub fn released(&self, key: &InstanceKey) -> bool {
        self.stage(key) == Stage::Released
    }

    /// A task holds `key`'s status: Released (from any stage; a re-read
    /// under way becomes stale).
    pub fn release(&mut self, key: &InstanceKey) {
        self.states.insert(key.clone(), State::Released);
    }

    /// `key`'s task stopped: a Released status is read again when the
    /// instance is `present` (returned: the GET to make), else Held (there
    /// is nothing to read). `last` is what the task last published (for
    /// the answers meanwhile). Held and Rereading stay as they are.
    pub fn keep(
        &mut self,
        key: &InstanceKey,
        present: bool,
        last: Option<KuraInstanceStatus>,
    ) -> Option<Reread> {
        if !self.released(key) {
            return None;
        }
        if !present {
            self.states.remove(key);
            return None;
        }
        self.tickets += 1;
        self.states.insert(
            key.clone(),
            State::Rereading {
                ticket: self.tickets,
                last: last.map(Box::new),
            },
        );
        Some(Reread {
            key: key.clone(),
            ticket: self.tickets,
        })
    }

    /// Whether `reread`'s answer is still wanted.
    pub fn wanted(&self, reread: &Reread) -> bool {
        matches!(self.states.get(&reread.key),
            Some(State::Rereading { ticket, .. }) if *ticket == reread.ticket)
    }

    /// `reread` answered: Held when still wanted (returned), else the
    /// answer is stale and nothing changes.
    pub fn answered(&mut self, reread: &Reread) -> bool {
        let wanted = self.wanted(reread);
        if wanted {
            self.states.remove(&reread.key);
        }
        wanted
    }

    /// The object of `key` was read whole with its status (a watch event
    /// or a re-list entry read while not released): a re-read under way
    /// ends (returned), Held.
    pub fn read_whole(&mut self, key: &InstanceKey) -> bool {
        let rereading = self.stage(key) == Stage::Rereading;
        if rereading {
            self.states.remove(key);
        }
        rereading
    }

    /// The instance is gone: nothing is kept of it.
    pub fn gone(&mut self, key: &InstanceKey) {
        self.states.remove(key);
    }

    /// What this replica last published of `key`, while its status is
    /// being read again.
    pub fn last(&self, key: &InstanceKey) -> Option<&KuraInstanceStatus> {
        match self.states.get(key) {
            Some(State::Rereading { last, .. }) => last.as_deref(),
            _ => None,
        }
    }
}

/// The note on an answer given while the status is being read again.
pub const REREADING_NOTE: &str = "status being read again after this replica stopped sweeping the instance: shown is the last verdict it published";

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> InstanceKey {
        InstanceKey::new("kura", "acme")
    }

    #[test]
    fn the_stages_and_their_transitions() {
        let mut l = Lifecycle::default();
        assert_eq!(l.stage(&key()), Stage::Held);
        assert_eq!(l.keep(&key(), true, None), None, "Held stays Held");
        l.release(&key());
        assert!(l.released(&key()));
        let first = l.keep(&key(), true, None).expect("a GET");
        assert_eq!(l.stage(&key()), Stage::Rereading);
        assert_eq!(l.keep(&key(), true, None), None, "one re-read at a time");
        // Released again (a task started from a whole read): the answer
        // is stale.
        l.release(&key());
        assert!(!l.answered(&first));
        let second = l
            .keep(
                &key(),
                true,
                Some(KuraInstanceStatus {
                    phase: Some("Running".into()),
                    ..KuraInstanceStatus::default()
                }),
            )
            .expect("a GET");
        assert_ne!(first.ticket, second.ticket);
        assert!(l.last(&key()).is_some());
        assert!(!l.answered(&first), "an older ticket's answer");
        assert!(l.answered(&second));
        assert_eq!(l.stage(&key()), Stage::Held);
        assert!(l.last(&key()).is_none());
        // A whole read ends a re-read; a delete forgets all.
        l.release(&key());
        let third = l.keep(&key(), true, None).expect("a GET");
        assert!(l.read_whole(&key()));
        assert!(!l.read_whole(&key()));
        assert!(!l.answered(&third));
        l.release(&key());
        l.gone(&key());
        assert_eq!(l.stage(&key()), Stage::Held);
        // Released, then gone from the watch: nothing to read.
        l.release(&key());
        assert_eq!(l.keep(&key(), false, None), None);
        assert_eq!(l.stage(&key()), Stage::Held);
    }
}
