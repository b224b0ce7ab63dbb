//! Which member owns which watch unit: rendezvous hashing with bounded
//! loads (consistent hashing with bounded loads, Mirrokni, Thorup and
//! Zadimoghaddam 2018; the shape of Argo CD's `consistent-hashing`
//! sharding).
//!
//! The units are taken in a fixed order, `0..count`; each goes to the
//! member with the highest [`score`]`(member, "unit/<u>")` (ties to the
//! greater id) among those holding fewer than the cap so far. The result
//! is a pure function of the unit count and of the member *set* (sorted
//! and deduplicated first), so every replica computes the same map from
//! the same Leases.
//!
//! The cap ([`Balance`]) is `⌈count / N⌉` (**exact**) when every member of
//! the set publishes exact balance on its Lease, and `⌈count / N · 1.1⌉`
//! (**tenth**, what agents before it assign with) otherwise. Plain
//! rendezvous over 256 units is too uneven (max/mean 1.5 at 15 to 30
//! members, some member with none). The tenth's slack gave the largest of
//! 3 replicas 24 of 64 units (37.5 % of the fleet, 11 % above a third;
//! the replica's memory follows its instances); exact gives it 22
//! (34.4 %). The price of a tighter cap: a departure can move units
//! between two members that stay ("cascades"), more of them with exact
//! balance (a join or leave moves up to about 3.6 × the ideal number of
//! units at 30 members in the measured groups, 4.6 × in the worst group
//! found, 2.6 × with the tenth), which [`super::membership`] guards
//! against. Because the balance is a function of the set (each
//! member's published rule), a group in a rolling upgrade assigns as the
//! older agents do until the last of them is gone, and every replica,
//! older or newer, computes the same map from the same Leases.

use crate::model::units::UnitCount;

use super::rendezvous::{Member, score};

/// The load factor bound of [`Balance::Tenth`]: a member holds at most
/// `⌈count / N · (1 + ε)⌉` units, with ε = [`EPSILON_TENTHS`] / 10.
pub const EPSILON_TENTHS: u32 = 1;

/// How tightly a set of members shares the units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// At most `⌈count / N · 1.1⌉` units each: agents that publish no
    /// balance.
    Tenth,
    /// At most `⌈count / N⌉` units each.
    Exact,
}

impl Balance {
    /// The balance a set of members is assigned with: exact when every
    /// member publishes it (and for no member), the tenth otherwise.
    pub fn of(members: &[Member]) -> Balance {
        if members.iter().all(|m| m.exact) {
            Balance::Exact
        } else {
            Balance::Tenth
        }
    }
}

/// The owner of every unit under one member set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The members, sorted and deduplicated.
    members: Vec<Member>,
    /// Per unit, the index of its owner in `members` (empty without
    /// members).
    owners: Vec<u16>,
}

/// The cap on any member's units under `balance` (`count` when `n` is 0).
pub fn cap_with(count: UnitCount, n: usize, balance: Balance) -> usize {
    let count = usize::from(count.get());
    if n == 0 {
        return count;
    }
    let tenths = match balance {
        Balance::Tenth => 10 + EPSILON_TENTHS as usize,
        Balance::Exact => 10,
    };
    (count * tenths).div_ceil(10 * n)
}

/// The unit key hashed with each member id: `unit/<u>`.
pub fn unit_key(unit: u16) -> String {
    format!("unit/{unit}")
}

/// Assigns every unit of `count` to one of `members` (see the module
/// documentation), with the members' [`Balance::of`]. Independent of the
/// order of `members`; an id given more than once counts once, exact only
/// if every one of its entries is.
pub fn assign(count: UnitCount, members: &[Member]) -> Assignment {
    let mut members = members.to_vec();
    // Sorted by id, then `exact: false` first: the first entry of an id
    // is exact only if all are.
    members.sort();
    members.dedup_by(|later, first| later.id == first.id);
    let n = members.len();
    if n == 0 {
        return Assignment {
            members,
            owners: Vec::new(),
        };
    }
    let cap = cap_with(count, n, Balance::of(&members));
    let mut loads = vec![0usize; n];
    let mut owners = Vec::with_capacity(usize::from(count.get()));
    for unit in 0..count.get() {
        let key = unit_key(unit);
        let mut best: Option<(u64, usize)> = None;
        for (i, m) in members.iter().enumerate() {
            if loads[i] >= cap {
                continue;
            }
            let s = score(&m.id, &key);
            // Members are sorted by id: a later one wins a tie (the greater
            // id), like `rendezvous::owner`.
            if best.is_none_or(|(bs, _)| s >= bs) {
                best = Some((s, i));
            }
        }
        // cap · n ≥ count, so some member always has room.
        let Some((_, i)) = best else { break };
        loads[i] += 1;
        owners.push(u16::try_from(i).unwrap_or(u16::MAX));
    }
    Assignment { members, owners }
}

/// The owner of instance `key` once every one of `members` is settled:
/// the owner of its unit under [`assign`].
pub fn instance_owner(
    count: UnitCount,
    key: &crate::model::InstanceKey,
    members: &[Member],
) -> Option<Member> {
    assign(count, members)
        .owner(count.unit_of_key(key))
        .cloned()
}

impl Assignment {
    /// The owner of `unit`, `None` without members or for a unit out of
    /// range.
    pub fn owner(&self, unit: u16) -> Option<&Member> {
        let i = *self.owners.get(usize::from(unit))?;
        self.members.get(usize::from(i))
    }

    /// Whether `unit` belongs to `id`.
    pub fn is_owner(&self, unit: u16, id: &str) -> bool {
        self.owner(unit).is_some_and(|m| m.id == id)
    }

    /// The units of `id`, in order.
    pub fn units_of<'a>(&'a self, id: &'a str) -> impl Iterator<Item = u16> + 'a {
        (0..self.owners.len())
            .filter_map(|u| u16::try_from(u).ok())
            .filter(move |u| self.is_owner(*u, id))
    }

    /// How many units each member holds, by member (sorted by id).
    pub fn loads(&self) -> Vec<(&Member, usize)> {
        let mut loads = vec![0usize; self.members.len()];
        for i in &self.owners {
            if let Some(l) = loads.get_mut(usize::from(*i)) {
                *l += 1;
            }
        }
        self.members.iter().zip(loads).collect()
    }

    /// The members, sorted.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// How many units were assigned (the count, or 0 without members).
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no unit was assigned (no members).
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn count(n: u32) -> UnitCount {
        UnitCount::new(n).expect("count")
    }

    /// The tenth's cap.
    fn cap(count: UnitCount, n: usize) -> usize {
        cap_with(count, n, Balance::Tenth)
    }

    fn members(ids: &[String]) -> Vec<Member> {
        ids.iter().map(Member::new).collect()
    }

    fn exact(ids: &[String]) -> Vec<Member> {
        ids.iter()
            .map(|id| Member::with_balance(id.clone(), true))
            .collect()
    }

    /// Replica-like names: `kura-health-agent-<hash>-<suffix>`.
    fn names(seed: u64, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let h = crate::model::units::fmix64(seed.wrapping_mul(1_000_003) + i as u64);
                format!("kura-health-agent-{:x}-{:05x}", h >> 40, h & 0xfffff)
            })
            .collect()
    }

    fn max_over_mean(a: &Assignment) -> f64 {
        let max = a.loads().iter().map(|(_, l)| *l).max().unwrap_or(0);
        max as f64 / (a.len() as f64 / a.members().len() as f64)
    }

    fn moved(a: &Assignment, b: &Assignment) -> usize {
        (0..a.len())
            .filter_map(|u| u16::try_from(u).ok())
            .filter(|u| a.owner(*u) != b.owner(*u))
            .count()
    }

    /// Each unit's owner's id, in unit order.
    fn owner_ids(a: &Assignment) -> Vec<Option<String>> {
        (0..a.len())
            .filter_map(|u| u16::try_from(u).ok())
            .map(|u| a.owner(u).map(|m| m.id.clone()))
            .collect()
    }

    /// Each unit's owner's first letter, in unit order.
    fn owners_of(a: &Assignment) -> String {
        (0..a.len())
            .filter_map(|u| u16::try_from(u).ok())
            .map(|u| {
                a.owner(u)
                    .map_or('-', |m| m.id.chars().next().unwrap_or('?'))
            })
            .collect()
    }

    #[test]
    fn the_assignment_is_pinned() {
        // A change here changes ownership across a rolling upgrade with
        // mixed versions (the count annotation does not catch it).
        let m = members(&["a".into(), "b".into(), "c".into()]);
        assert_eq!(owners_of(&assign(count(16), &m)), PINNED_16_ABC);
        assert_eq!(cap(count(16), 3), 6);
        assert_eq!(cap(count(256), 17), 17);
        assert_eq!(cap(count(64), 3), 24);
        assert_eq!(cap(count(4), 0), 4);
    }

    /// The owners of units 0..16 among `a`, `b`, `c`.
    const PINNED_16_ABC: &str = "bbcbacbbabcccaaa";

    #[test]
    fn the_exact_assignment_is_pinned() {
        let m = exact(&["a".into(), "b".into(), "c".into()]);
        assert_eq!(owners_of(&assign(count(16), &m)), PINNED_16_ABC_EXACT);
        assert_eq!(owners_of(&assign(count(64), &m)), PINNED_64_ABC_EXACT);
        assert_eq!(cap_with(count(16), 3, Balance::Exact), 6);
        assert_eq!(cap_with(count(64), 3, Balance::Exact), 22);
        assert_eq!(cap_with(count(256), 17, Balance::Exact), 16);
        assert_eq!(cap_with(count(4), 0, Balance::Exact), 4);
        let loads: Vec<usize> = assign(count(64), &m)
            .loads()
            .iter()
            .map(|(_, l)| *l)
            .collect();
        assert_eq!(loads.iter().sum::<usize>(), 64);
        assert!(loads.iter().all(|l| *l <= 22), "{loads:?}");
    }

    /// The owners of units 0..16 among `a`, `b`, `c`, all exact (the same
    /// as the tenth's: both caps are 6).
    const PINNED_16_ABC_EXACT: &str = "bbcbacbbabcccaaa";
    /// The owners of units 0..64 among `a`, `b`, `c`, all exact (caps 22
    /// and, with the tenth, 24).
    const PINNED_64_ABC_EXACT: &str =
        "bbcbacbbabbcbbbbbccabaccabaabcaccaacaacbbbcbcabcababcaccccaaccaa";

    #[test]
    fn an_id_given_twice_counts_once_and_exact_only_if_both_are() {
        let ids = names(11, 3);
        let mut twice = exact(&ids);
        twice.push(Member::with_balance(ids[0].clone(), false));
        let a = assign(count(64), &twice);
        assert_eq!(a.members().len(), 3);
        // The tenth's map (one member not exact), by owner id.
        assert_eq!(owner_ids(&a), owner_ids(&assign(count(64), &members(&ids))));
        assert_ne!(owner_ids(&a), owner_ids(&assign(count(64), &exact(&ids))));
        let mut same = exact(&ids);
        same.push(Member::with_balance(ids[0].clone(), true));
        assert_eq!(assign(count(64), &same), assign(count(64), &exact(&ids)));
    }

    #[test]
    fn one_member_without_exact_balance_makes_the_whole_set_tenth() {
        let ids: Vec<String> = names(7, 3);
        let mut mixed = exact(&ids);
        mixed[1].exact = false;
        assert_eq!(Balance::of(&exact(&ids)), Balance::Exact);
        assert_eq!(Balance::of(&mixed), Balance::Tenth);
        assert_eq!(Balance::of(&members(&ids)), Balance::Tenth);
        // The mixed set assigns exactly as agents before exact balance do
        // (they see the same ids).
        assert_eq!(
            owner_ids(&assign(count(64), &mixed)),
            owner_ids(&assign(count(64), &members(&ids)))
        );
    }

    /// Exact balance at 3 members, 64 units (the chart's 3 replicas):
    /// never more than 22 units (a third of 64, rounded up), where the
    /// tenth reaches 24; a join or leave moves at most twice the ideal
    /// (64 / 4 units for a join, 64 / 3 for a leave).
    #[test]
    fn exact_balance_at_three_members_over_many_groups() {
        let c = count(64);
        let (mut tenth_max, mut exact_max) = (0usize, 0usize);
        for seed in 0..200u64 {
            let ids = names(seed, 4);
            let t = assign(c, &members(&ids[..3]));
            let e = assign(c, &exact(&ids[..3]));
            tenth_max = tenth_max.max(t.loads().iter().map(|(_, l)| *l).max().unwrap_or(0));
            exact_max = exact_max.max(e.loads().iter().map(|(_, l)| *l).max().unwrap_or(0));
            let joined = assign(c, &exact(&ids));
            assert!(
                moved(&e, &joined) <= 2 * 16,
                "seed {seed}: a join moved {}",
                moved(&e, &joined)
            );
            let left = assign(c, &exact(&ids[1..3]));
            assert!(
                moved(&e, &left) <= 2 * 64 / 3,
                "seed {seed}: a leave moved {}",
                moved(&e, &left)
            );
        }
        assert_eq!(exact_max, 22);
        assert!(tenth_max > 22, "the tenth reaches {tenth_max}");
    }

    #[test]
    fn no_members_no_owners() {
        let a = assign(count(64), &[]);
        assert!(a.is_empty());
        assert_eq!(a.owner(0), None);
    }

    #[test]
    fn one_member_owns_everything() {
        let a = assign(count(64), &[Member::new("solo")]);
        assert_eq!(a.units_of("solo").count(), 64);
    }

    /// The balance and movement figures of docs/sharding.md: run with
    /// `--nocapture` to print them. Asserts the bounds measured.
    #[test]
    fn balance_and_movement_figures() {
        let mut out = String::new();
        for (balance, group) in [
            (Balance::Tenth, members as fn(&[String]) -> Vec<Member>),
            (Balance::Exact, exact),
        ] {
            out.push_str(&format!("{balance:?}:\n"));
            for units in [64u32, 256] {
                let c = count(units);
                for n in [2usize, 3, 5, 10, 15, 17, 20, 30] {
                    let (mut worst, mut sum) = (0f64, 0f64);
                    let (mut join_worst, mut join_sum) = (0f64, 0f64);
                    let (mut leave_worst, mut leave_sum) = (0f64, 0f64);
                    let samples = 40u64;
                    for seed in 0..samples {
                        let ids = names(seed * 97 + n as u64, n + 1);
                        let m = group(&ids[..n]);
                        let a = assign(c, &m);
                        let r = max_over_mean(&a);
                        worst = worst.max(r);
                        sum += r;
                        // A join: the (n+1)-th name.
                        let joined = assign(c, &group(&ids));
                        let ideal_join = f64::from(units) / (n as f64 + 1.0);
                        let j = moved(&a, &joined) as f64 / ideal_join;
                        join_worst = join_worst.max(j);
                        join_sum += j;
                        // A leave: the first member goes.
                        let left = assign(c, &group(&ids[1..n]));
                        let ideal_leave = f64::from(units) / n as f64;
                        let l = moved(&a, &left) as f64 / ideal_leave;
                        leave_worst = leave_worst.max(l);
                        leave_sum += l;
                    }
                    let s = samples as f64;
                    out.push_str(&format!(
                    "units {units:3} N {n:2}: max/mean {:.2} (mean {:.2}); join moves {:.2}x ideal (mean {:.2}x); leave moves {:.2}x ideal (mean {:.2}x)\n",
                    worst,
                    sum / s,
                    join_worst,
                    join_sum / s,
                    leave_worst,
                    leave_sum / s
                ));
                    // The cap is the bound: ⌈(1 + ε) · units / N⌉ / (units / N).
                    let bound = cap_with(c, n, balance) as f64 * n as f64 / f64::from(units);
                    assert!(worst <= bound + 1e-9, "max/mean {worst} at N {n}");
                    out.push_str(&format!("    (cap bound {bound:.3})\n"));
                }
            }
        }
        eprintln!("{out}");
    }

    proptest! {
        #[test]
        fn deterministic_and_independent_of_order(
            ids in prop::collection::btree_set("[a-z0-9-]{1,12}", 1..12),
            rotate in 0usize..12,
            units in prop::sample::select(vec![1u32, 4, 16, 64, 256]),
        ) {
            let mut m: Vec<Member> = ids.iter().map(Member::new).collect();
            let first = assign(count(units), &m);
            prop_assert_eq!(&assign(count(units), &m), &first);
            let len = m.len();
            m.rotate_left(rotate % len);
            m.reverse();
            m.push(m[0].clone());
            prop_assert_eq!(&assign(count(units), &m), &first);
        }

        #[test]
        fn every_unit_has_exactly_one_owner_within_the_cap(
            ids in prop::collection::btree_set("[a-z0-9-]{1,12}", 1..31),
            units in prop::sample::select(vec![1u32, 4, 16, 64, 256]),
        ) {
            let m: Vec<Member> = ids.iter().map(Member::new).collect();
            let a = assign(count(units), &m);
            prop_assert_eq!(a.len(), units as usize);
            let total: usize = a.loads().iter().map(|(_, l)| l).sum();
            prop_assert_eq!(total, units as usize);
            for u in 0..units {
                let u = u16::try_from(u).expect("unit");
                let owners = m.iter().filter(|x| a.is_owner(u, &x.id)).count();
                prop_assert_eq!(owners, 1);
            }
            let cap = cap(count(units), m.len());
            prop_assert!(a.loads().iter().all(|(_, l)| *l <= cap));
            let e: Vec<Member> = ids.iter().map(|id| Member::with_balance(id.clone(), true)).collect();
            let a = assign(count(units), &e);
            let total: usize = a.loads().iter().map(|(_, l)| l).sum();
            prop_assert_eq!(total, units as usize);
            let cap = cap_with(count(units), e.len(), Balance::Exact);
            prop_assert!(a.loads().iter().all(|(_, l)| *l <= cap));
        }

        /// Measured worst over 40 groups per N (docs/sharding.md): 2.4×
        /// the ideal on a join and 2.6× on a leave at N = 30, 256 units;
        /// asserted with some room.
        #[test]
        fn a_join_or_leave_moves_a_bounded_number_of_units(
            seed in any::<u64>(),
            n in 2usize..=30,
        ) {
            let c = count(256);
            let ids = names(seed, n + 1);
            let before = assign(c, &members(&ids[..n]));
            let joined = assign(c, &members(&ids));
            let ideal_join = 256.0 / (n as f64 + 1.0);
            let j = moved(&before, &joined) as f64 / ideal_join;
            prop_assert!(j <= 3.5, "a join at N {} moved {:.2}x the ideal", n, j);
            let left = assign(c, &members(&ids[1..n]));
            let l = moved(&before, &left) as f64 / (256.0 / n as f64);
            prop_assert!(l <= 3.5, "a leave at N {} moved {:.2}x the ideal", n, l);
            // The newcomer gets its share, no more than the cap.
            let got = joined.units_of(&ids[n]).count();
            prop_assert!(got <= cap(c, n + 1));
            // Exact balance: more cascades, still bounded (worst 3.6 × in
            // the figures' 40 groups at N = 30; 4.6 × found by this test
            // at N = 28, seed 10251220157640508813).
            let before = assign(c, &exact(&ids[..n]));
            let joined = assign(c, &exact(&ids));
            let j = moved(&before, &joined) as f64 / ideal_join;
            prop_assert!(j <= 6.0, "an exact join at N {} moved {:.2}x the ideal", n, j);
            let left = assign(c, &exact(&ids[1..n]));
            let l = moved(&before, &left) as f64 / (256.0 / n as f64);
            prop_assert!(l <= 6.0, "an exact leave at N {} moved {:.2}x the ideal", n, l);
            prop_assert!(joined.units_of(&ids[n]).count() <= cap_with(c, n + 1, Balance::Exact));
        }

        #[test]
        fn balanced_at_256_units_up_to_30_members(
            seed in any::<u64>(),
            n in 1usize..=30,
        ) {
            let a = assign(count(256), &members(&names(seed, n)));
            let bound = cap(count(256), n) as f64 * n as f64 / 256.0;
            prop_assert!(max_over_mean(&a) <= bound + 1e-9, "{}", max_over_mean(&a));
            // Never more than 1.2 × the mean at 256 units up to 30
            // members (the cap's rounding is worst at N = 28: 11 / 9.14).
            prop_assert!(max_over_mean(&a) <= 1.21, "{}", max_over_mean(&a));
        }
    }
}
