//! Who is in the group, and which instances this replica owns: pure
//! functions of the group's Leases and the time.
//!
//! - A Lease is **current** at `now` when it names a holder, a renew time,
//!   an acquire time and a positive duration, and `renewTime +
//!   leaseDurationSeconds > now`.
//! - The **live members** are the holders of current Leases.
//! - A member is **settled** once its Lease was acquired at least `settle`
//!   ago. Keys move *to* a member only once it is settled, but *away* from
//!   the others as soon as its Lease appears: the old owner stops before the
//!   new one starts, so a join never makes two writers (it makes a short
//!   gap instead). A leave moves keys at once: the member that left is gone
//!   from both sets at the same moment.
//! - This replica **owns** a key when it is the key's rendezvous owner among
//!   all live members *and* among the settled ones, its own Lease is
//!   current by its own knowledge ([`OwnLease::is_current`]), and its view
//!   of the Leases is fresh: the watch shows its own latest renewals (a
//!   replica renews every third of the duration, so a watch that stopped
//!   delivering shows an old own `renewTime`). A stale view could miss a
//!   member that joined; such a replica stops acting instead, within
//!   `staleness`, which must be shorter than the settle time.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::rendezvous::{Member, owner};

/// The parts of a Lease that membership reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The Lease object's name.
    pub name: String,
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `spec.renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
}

fn plus(ts: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| ts.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

impl LeaseRecord {
    /// When the Lease stops being current, if it is well-formed.
    pub fn expires_at(&self) -> Option<Timestamp> {
        let holder = self.holder.as_deref().filter(|h| !h.trim().is_empty());
        let secs = self.duration_seconds.filter(|s| *s > 0)?;
        holder?;
        self.acquire_time?;
        let renew = self.renew_time?;
        Some(plus(renew, Duration::from_secs(u64::try_from(secs).ok()?)))
    }

    /// Whether the Lease is current at `now`.
    pub fn is_current(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|e| e > now)
    }
}

/// The holders of the Leases current at `now`, sorted and deduplicated.
pub fn live_members(leases: &[LeaseRecord], now: Timestamp) -> Vec<Member> {
    leases
        .iter()
        .filter(|l| l.is_current(now))
        .filter_map(|l| l.holder.as_deref().map(|h| h.trim().to_owned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(Member::new)
        .collect()
}

/// The live members whose Lease was acquired at least `settle` before
/// `now` (for a holder with several current Leases, the earliest
/// acquisition counts).
pub fn settled_members(leases: &[LeaseRecord], now: Timestamp, settle: Duration) -> Vec<Member> {
    leases
        .iter()
        .filter(|l| l.is_current(now))
        .filter(|l| l.acquire_time.is_some_and(|a| plus(a, settle) <= now))
        .filter_map(|l| l.holder.as_deref().map(|h| h.trim().to_owned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(Member::new)
        .collect()
}

/// Whether `leases` shows a renewal of `me`'s Lease younger than
/// `staleness` at `now`.
pub fn view_is_fresh(
    leases: &[LeaseRecord],
    me: &str,
    staleness: Duration,
    now: Timestamp,
) -> bool {
    leases
        .iter()
        .filter(|l| l.holder.as_deref().map(str::trim) == Some(me))
        .filter_map(|l| l.renew_time)
        .any(|r| plus(r, staleness) > now)
}

/// The two waits of membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A new Lease gains keys only once it is this old.
    pub settle: Duration,
    /// The own Lease's `renewTime` as the watch shows it may be at most this
    /// old (must be shorter than `settle`).
    pub staleness: Duration,
}

/// What this replica knows of its own Lease: when the last renewal that the
/// API server accepted was sent (by this replica's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnLease {
    /// Send time of the last accepted renewal (`renewTime` it wrote).
    pub last_renewed: Option<Timestamp>,
    /// The Lease's duration.
    pub duration: Duration,
    /// Safety margin: this replica stops writing this long before the
    /// others may consider its Lease expired (covers clock skew and a write
    /// already on the wire).
    pub margin: Duration,
}

impl OwnLease {
    /// Until when this replica may write: `last_renewed + duration -
    /// margin`.
    pub fn valid_until(&self) -> Option<Timestamp> {
        let last = self.last_renewed?;
        let usable = self.duration.saturating_sub(self.margin);
        Some(plus(last, usable))
    }

    /// Whether this replica's own Lease is current by its own knowledge.
    pub fn is_current(&self, now: Timestamp) -> bool {
        self.valid_until().is_some_and(|v| v > now)
    }
}

/// The group as seen at one moment: who is live, who is settled, and
/// whether this replica may act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// This replica's identity.
    pub me: String,
    /// Holders of current Leases.
    pub live: Vec<Member>,
    /// Live members past the settle time.
    pub settled: Vec<Member>,
    /// Whether this replica's own Lease is current by its own knowledge.
    pub own_current: bool,
}

impl Membership {
    /// The membership at `now`, as `me` sees it from `leases` and what it
    /// knows of its own Lease.
    pub fn at(
        me: &str,
        leases: &[LeaseRecord],
        own: &OwnLease,
        timing: Timing,
        now: Timestamp,
    ) -> Self {
        Membership {
            me: me.to_owned(),
            live: live_members(leases, now),
            settled: settled_members(leases, now, timing.settle),
            own_current: own.is_current(now) && view_is_fresh(leases, me, timing.staleness, now),
        }
    }

    /// Whether this replica owns `key` (see the module documentation).
    pub fn owns(&self, key: &str) -> bool {
        self.own_current
            && owner(key, &self.live).is_some_and(|m| m.id == self.me)
            && owner(key, &self.settled).is_some_and(|m| m.id == self.me)
    }

    /// The member `key` goes to once every live member is settled.
    pub fn owner_of(&self, key: &str) -> Option<&Member> {
        owner(key, &self.live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("ts")
    }

    fn lease(holder: &str, acquired: i64, renewed: i64, secs: i32) -> LeaseRecord {
        LeaseRecord {
            name: format!("kura-health-agent-{holder}"),
            holder: Some(holder.to_owned()),
            acquire_time: Some(t(acquired)),
            renew_time: Some(t(renewed)),
            duration_seconds: Some(secs),
        }
    }

    #[test]
    fn a_lease_is_current_until_renew_plus_duration() {
        let l = lease("a", 0, 10, 15);
        assert!(l.is_current(t(24)));
        assert!(
            !l.is_current(t(25)),
            "renewTime + duration is already expired"
        );
        assert!(!l.is_current(t(40)));
    }

    #[test]
    fn malformed_leases_are_never_current() {
        let mut no_holder = lease("a", 0, 10, 15);
        no_holder.holder = Some(" ".into());
        let mut no_renew = lease("b", 0, 10, 15);
        no_renew.renew_time = None;
        let zero = lease("c", 0, 10, 0);
        let mut no_acquire = lease("d", 0, 10, 15);
        no_acquire.acquire_time = None;
        for l in [no_holder, no_renew, zero, no_acquire] {
            assert!(!l.is_current(t(11)), "{l:?}");
        }
    }

    #[test]
    fn live_members_are_the_current_holders_deduplicated() {
        let leases = [
            lease("b", 0, 10, 15),
            lease("a", 0, 10, 15),
            lease("a", 0, 12, 15),
            lease("gone", 0, 0, 5),
        ];
        let live = live_members(&leases, t(11));
        assert_eq!(live, vec![Member::new("a"), Member::new("b")]);
    }

    #[test]
    fn own_lease_stops_a_margin_before_expiry() {
        let own = OwnLease {
            last_renewed: Some(t(10)),
            duration: Duration::from_secs(15),
            margin: Duration::from_secs(3),
        };
        assert!(own.is_current(t(21)));
        assert!(!own.is_current(t(22)));
        let never = OwnLease {
            last_renewed: None,
            ..own
        };
        assert!(!never.is_current(t(0)));
    }

    fn timing(settle: Duration) -> Timing {
        Timing {
            settle,
            staleness: Duration::from_secs(8),
        }
    }

    fn own(renewed: i64) -> OwnLease {
        OwnLease {
            last_renewed: Some(t(renewed)),
            duration: Duration::from_secs(15),
            margin: Duration::from_secs(3),
        }
    }

    fn keys() -> Vec<String> {
        (0..60).map(|i| format!("ns/i-{i}")).collect()
    }

    #[test]
    fn at_every_moment_of_a_join_no_key_has_two_owners() {
        let settle = Duration::from_secs(5);
        // a and b settled long ago; c joins at 100.
        let before = [lease("a", 0, 99, 15), lease("b", 0, 99, 15)];
        let after = [
            lease("a", 0, 99, 15),
            lease("b", 0, 99, 15),
            lease("c", 100, 100, 15),
        ];
        let view = |me: &str, leases: &[LeaseRecord], now| {
            Membership::at(me, leases, &own(99), timing(settle), t(now))
        };
        let mut moved_to_c = 0;
        for k in keys() {
            let owners_before: Vec<_> = ["a", "b"]
                .iter()
                .filter(|m| view(m, &before, 100).owns(&k))
                .collect();
            assert_eq!(owners_before.len(), 1, "{k}");
            // Seen by a and b, c's Lease is not settled yet: c's future keys
            // have no owner (a gap, never two).
            for now in [100, 101, 104] {
                let n = ["a", "b", "c"]
                    .iter()
                    .filter(|m| view(m, &after, now).owns(&k))
                    .count();
                assert!(n <= 1, "{k} at {now}");
            }
            // Once c is settled, every key has exactly one owner again.
            let owners: Vec<_> = ["a", "b", "c"]
                .iter()
                .filter(|m| view(m, &after, 105).owns(&k))
                .collect();
            assert_eq!(owners.len(), 1, "{k}");
            if *owners[0] == "c" {
                moved_to_c += 1;
                assert!(!view("c", &after, 104).owns(&k));
            } else {
                assert_eq!(owners, owners_before, "only c's keys move");
            }
        }
        assert!(moved_to_c > 0);
    }

    #[test]
    fn a_leave_moves_keys_when_the_lease_expires() {
        let settle = Duration::from_secs(5);
        // "dead" stopped renewing at 90: its Lease is current until 105.
        let leases = [
            lease("a", 0, 100, 15),
            lease("b", 0, 100, 15),
            lease("dead", 0, 90, 15),
        ];
        let all = [Member::new("a"), Member::new("b"), Member::new("dead")];
        let mut moved = 0;
        for k in keys() {
            let at = |now| {
                ["a", "b"]
                    .iter()
                    .filter(|m| {
                        Membership::at(m, &leases, &own(100), timing(settle), t(now)).owns(&k)
                    })
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
            };
            let dead_key = owner(&k, &all).is_some_and(|m| m.id == "dead");
            let before = at(104);
            let after = at(105);
            assert_eq!(after.len(), 1, "{k}: one owner once the Lease expired");
            if dead_key {
                assert!(before.is_empty(), "{k}: nobody takes it before expiry");
                moved += 1;
            } else {
                assert_eq!(before, after, "{k}: only the dead member's keys move");
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn a_replica_whose_own_lease_lapsed_owns_nothing() {
        let leases = [lease("a", 0, 100, 15)];
        let m = Membership::at("a", &leases, &own(100), timing(Duration::ZERO), t(105));
        assert!(m.owns("ns/x"));
        let m = Membership::at("a", &leases, &own(80), timing(Duration::ZERO), t(105));
        assert!(!m.owns("ns/x"), "own renewal too old: fenced");
    }

    #[test]
    fn a_stale_lease_view_fences_even_while_renewals_succeed() {
        // Renewals succeed (own(112)), but the watch stopped at 100: the
        // view may be missing a member that joined since.
        let leases = [lease("a", 0, 100, 15)];
        let m = Membership::at("a", &leases, &own(112), timing(Duration::ZERO), t(107));
        assert!(m.owns("ns/x"), "within the staleness bound");
        let m = Membership::at("a", &leases, &own(112), timing(Duration::ZERO), t(108));
        assert!(
            !m.owns("ns/x"),
            "own renewTime in the view is 8 s old: stale"
        );
        assert!(!view_is_fresh(&[], "a", Duration::from_secs(8), t(0)));
    }
}
