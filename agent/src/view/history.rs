//! The bounded per-instance history behind the instance page's chart: the
//! last hour in [`HISTORY_BUCKETS`] time buckets of [`BUCKET_SECONDS`]
//! each, whatever the sweep interval. A bucket keeps the maximum of
//! `fdTimeoutCount`, `peerConnectionFailures` and `outboxMessages` over the
//! sweeps that fell into it, and the worst [`Standing`]; a faster cadence
//! only merges more sweeps into the same buckets, it never adds points.
//!
//! Compact integers: each counter series is a base (`u32`) and one `u8`
//! offset per bucket while its values in the window span less than 255 (a
//! counter at rest), one `u16` while they span less than 65,535, else a
//! plain `u32` per bucket, narrowed again once it fits; and nothing at
//! all while the counter is not reported in the window; the standing is
//! one byte per bucket. The band tops the counters were held
//! to are kept as change marks (at most [`MAX_BAND_MARKS`]), not per
//! bucket. A history is smallest for a fleet at rest (counters moving
//! less than 255 within the hour); [`History::heap_bytes`] measures it.

use jiff::Timestamp;

use super::standing::Standing;
use crate::model::GateLimits;

/// Buckets per instance.
pub const HISTORY_BUCKETS: usize = 120;
/// Seconds per bucket: [`HISTORY_BUCKETS`] of them make the last hour.
pub const BUCKET_SECONDS: i64 = 30;
/// Band changes kept per instance (baselines captured, resets lowering
/// the effective baseline); the oldest go first.
pub const MAX_BAND_MARKS: usize = 8;

const N: usize = HISTORY_BUCKETS;
/// "Not reported" in a wide series; a count at or above it is stored as
/// `u32::MAX - 1` (4,294,967,294), far beyond anything a node counts in an
/// hour.
const WIDE_ABSENT: u32 = u32::MAX;

/// A value stored in a series: counts beyond `u32` saturate.
fn compact(value: u64) -> u32 {
    u32::try_from(value)
        .unwrap_or(WIDE_ABSENT - 1)
        .min(WIDE_ABSENT - 1)
}

/// The smallest value reported in `values` ([`WIDE_ABSENT`] for none).
fn lowest(values: &[u32; N]) -> u32 {
    values.iter().copied().min().unwrap_or(WIDE_ABSENT)
}

/// How far apart the values reported in `values` are; `None` when none is.
fn span(values: &[u32; N]) -> Option<u32> {
    let present = values.iter().copied().filter(|&v| v != WIDE_ABSENT);
    let (lo, hi) = present.fold((u32::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));
    (lo <= hi).then(|| hi - lo)
}

/// One counter over the buckets.
#[derive(Debug, Clone)]
enum Series {
    /// Not reported in any bucket of the window: nothing allocated. Each
    /// fleet lacks one counter or more (push-sync nodes have no
    /// replication lag, pull-sync nodes no outbox), so an absent series
    /// costs no more than its tag.
    Absent,
    /// Values spanning less than 255 in the window: about half what a
    /// narrow series takes.
    Tiny(Box<Based<u8>>),
    /// Values spanning less than 65,535 in the window.
    Narrow(Box<Based<u16>>),
    /// The value per bucket; [`WIDE_ABSENT`] where not reported.
    Wide(Box<[u32; N]>),
}

/// The offset type of a [`Based`] series.
trait Offset: Copy + Eq + Into<u32> + TryFrom<u32> {
    /// "Not reported".
    const ABSENT: Self;
    /// The largest offset stored.
    const MAX: Self;
}

impl Offset for u8 {
    const ABSENT: u8 = u8::MAX;
    const MAX: u8 = u8::MAX - 1;
}

impl Offset for u16 {
    const ABSENT: u16 = u16::MAX;
    const MAX: u16 = u16::MAX - 1;
}

/// `base + offset` per bucket; [`Offset::ABSENT`] where not reported.
#[derive(Debug, Clone)]
struct Based<T> {
    base: u32,
    offsets: [T; N],
}

impl<T: Offset> Based<T> {
    /// Whether values `span` apart fit.
    fn fits(span: u32) -> bool {
        span < T::ABSENT.into()
    }

    /// `values` ([`WIDE_ABSENT`] where not reported) around `base`, their
    /// smallest; they must fit ([`Based::fits`]).
    fn of(values: &[u32; N], base: u32) -> Self {
        let offsets = std::array::from_fn(|i| match values[i] {
            WIDE_ABSENT => T::ABSENT,
            v => T::try_from(v - base).unwrap_or(T::MAX),
        });
        Based { base, offsets }
    }

    fn get(&self, i: usize) -> Option<u32> {
        let o = self.offsets[i];
        (o != T::ABSENT).then(|| self.base + o.into())
    }

    fn clear(&mut self, i: usize) {
        self.offsets[i] = T::ABSENT;
    }

    /// Stores `value` in bucket `i` if it fits around the base.
    fn try_set(&mut self, i: usize, value: u32) -> bool {
        let offset = value
            .checked_sub(self.base)
            .and_then(|d| T::try_from(d).ok())
            .filter(|&d| d != T::ABSENT);
        if let Some(o) = offset {
            self.offsets[i] = o;
        }
        offset.is_some()
    }
}

impl Series {
    fn new() -> Series {
        Series::Absent
    }

    fn get(&self, i: usize) -> Option<u32> {
        match self {
            Series::Absent => None,
            Series::Tiny(t) => t.get(i),
            Series::Narrow(n) => n.get(i),
            Series::Wide(values) => (values[i] != WIDE_ABSENT).then_some(values[i]),
        }
    }

    fn clear(&mut self, i: usize) {
        match self {
            Series::Absent => {}
            Series::Tiny(t) => t.clear(i),
            Series::Narrow(n) => n.clear(i),
            Series::Wide(values) => values[i] = WIDE_ABSENT,
        }
    }

    /// Keeps the larger of the stored value and `value` in bucket `i`.
    fn merge_max(&mut self, i: usize, value: Option<u64>) {
        let Some(value) = value.map(compact) else {
            return;
        };
        let value = self.get(i).map_or(value, |old| old.max(value));
        self.set(i, value);
    }

    fn set(&mut self, i: usize, value: u32) {
        match self {
            Series::Absent => {}
            Series::Tiny(t) => {
                if t.try_set(i, value) {
                    return;
                }
            }
            Series::Narrow(n) => {
                if n.try_set(i, value) {
                    return;
                }
            }
            Series::Wide(values) => {
                values[i] = value;
                return;
            }
        }
        // First value, or out of the narrow range: re-encode around the
        // new value, or widen.
        let mut values = self.values();
        values[i] = value;
        *self = Series::encode(&values);
    }

    fn values(&self) -> [u32; N] {
        std::array::from_fn(|i| self.get(i).unwrap_or(WIDE_ABSENT))
    }

    /// The narrowest encoding of `values` ([`WIDE_ABSENT`] for none).
    fn encode(values: &[u32; N]) -> Series {
        let Some(span) = span(values) else {
            return Series::Absent;
        };
        let lo = lowest(values);
        if Based::<u8>::fits(span) {
            return Series::Tiny(Box::new(Based::of(values, lo)));
        }
        if Based::<u16>::fits(span) {
            return Series::Narrow(Box::new(Based::of(values, lo)));
        }
        Series::Wide(Box::new(*values))
    }

    /// Narrows a series again once its window fits a narrower encoding,
    /// and frees one with nothing left in the window.
    fn shrink(&mut self) {
        if matches!(self, Series::Absent) {
            return;
        }
        let values = self.values();
        let narrower = match (span(&values), &*self) {
            (None, _) => true,
            (Some(d), Series::Narrow(_)) => Based::<u8>::fits(d),
            (Some(d), Series::Wide(_)) => Based::<u16>::fits(d),
            _ => false,
        };
        if narrower {
            *self = Series::encode(&values);
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Series::Absent => 0,
            Series::Tiny(_) => std::mem::size_of::<Based<u8>>(),
            Series::Narrow(_) => std::mem::size_of::<Based<u16>>(),
            Series::Wide(_) => std::mem::size_of::<[u32; N]>(),
        }
    }
}

/// The band tops of the four charted counters, when compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BandTops {
    /// `fdTimeoutCount`'s band top.
    pub fd_timeouts: Option<u64>,
    /// `peerConnectionFailures`' band top.
    pub peer_failures: Option<u64>,
    /// `outboxMessages`' band top.
    pub outbox: Option<u64>,
    /// `replicationLagEntries`' band top.
    pub replication_lag: Option<u64>,
}

impl BandTops {
    /// The bands `limits` held the counters to (none when the counter
    /// checks did not run).
    fn of(limits: Option<&GateLimits>) -> BandTops {
        match limits.filter(|l| l.counters_compared) {
            Some(l) => BandTops {
                fd_timeouts: l.fd_timeout_band_top,
                peer_failures: l.peer_failure_band_top,
                outbox: l.outbox_band_top,
                replication_lag: l.replication_lag_band_top,
            },
            None => BandTops::default(),
        }
    }
}

/// A change of the band tops, from the bucket `slot` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BandMark {
    slot: i64,
    tops: [u32; 4],
}

fn pack(tops: BandTops) -> [u32; 4] {
    let one = |v: Option<u64>| v.map_or(WIDE_ABSENT, compact);
    [
        one(tops.fd_timeouts),
        one(tops.peer_failures),
        one(tops.outbox),
        one(tops.replication_lag),
    ]
}

fn unpack(tops: [u32; 4]) -> BandTops {
    let one = |v: u32| (v != WIDE_ABSENT).then_some(u64::from(v));
    BandTops {
        fd_timeouts: one(tops[0]),
        peer_failures: one(tops[1]),
        outbox: one(tops[2]),
        replication_lag: one(tops[3]),
    }
}

/// What one sweep contributes to the history.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HistoryInput {
    pub at: Timestamp,
    pub standing: Standing,
    pub fd_timeouts: Option<u64>,
    pub peer_failures: Option<u64>,
    pub outbox: Option<u64>,
    pub replication_lag: Option<u64>,
    pub limits: Option<GateLimits>,
}

/// One instance's bounded history, plus since when it stands as it does.
#[derive(Debug, Clone)]
pub(crate) struct History {
    /// The newest bucket written (seconds since the epoch / [`BUCKET_SECONDS`]).
    newest: i64,
    /// [`Standing::code`] per bucket, 0 where no sweep fell.
    standing: [u8; N],
    fd_timeouts: Series,
    peer_failures: Series,
    outbox: Series,
    replication_lag: Series,
    bands: Vec<BandMark>,
    current: Standing,
    since: Timestamp,
    since_first_sweep: bool,
    limits: Option<GateLimits>,
}

fn slot_of(at: Timestamp) -> i64 {
    at.as_second().div_euclid(BUCKET_SECONDS)
}

fn index_of(slot: i64) -> usize {
    // rem_euclid of a positive modulus is in 0..N.
    usize::try_from(slot.rem_euclid(N as i64)).unwrap_or(0)
}

fn slot_start(slot: i64) -> Timestamp {
    Timestamp::from_second(slot.saturating_mul(BUCKET_SECONDS)).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl History {
    /// A history whose first sweep is `input`.
    pub(crate) fn new(input: &HistoryInput) -> History {
        let mut h = History {
            newest: slot_of(input.at),
            standing: [0; N],
            fd_timeouts: Series::new(),
            peer_failures: Series::new(),
            outbox: Series::new(),
            replication_lag: Series::new(),
            bands: Vec::new(),
            current: input.standing,
            since: input.at,
            since_first_sweep: true,
            limits: None,
        };
        h.record(input);
        h
    }

    /// Merges one sweep into its bucket. A sweep older than the window is
    /// ignored; a sweep in a newer bucket first clears the buckets it
    /// skips over.
    pub(crate) fn record(&mut self, input: &HistoryInput) {
        let slot = slot_of(input.at);
        if slot <= self.newest - N as i64 {
            return;
        }
        if slot > self.newest {
            let skipped = (slot - self.newest).min(N as i64);
            for k in 1..=skipped {
                let i = index_of(self.newest + k);
                self.standing[i] = 0;
                self.fd_timeouts.clear(i);
                self.peer_failures.clear(i);
                self.outbox.clear(i);
                self.replication_lag.clear(i);
            }
            self.newest = slot;
            self.fd_timeouts.shrink();
            self.peer_failures.shrink();
            self.outbox.shrink();
            self.replication_lag.shrink();
            self.current_changes(input);
        } else if slot == self.newest {
            self.current_changes(input);
        }
        let i = index_of(slot);
        self.standing[i] = self.standing[i].max(input.standing.code());
        self.fd_timeouts.merge_max(i, input.fd_timeouts);
        self.peer_failures.merge_max(i, input.peer_failures);
        self.outbox.merge_max(i, input.outbox);
        self.replication_lag.merge_max(i, input.replication_lag);
    }

    /// The newest sweep's standing, limits and band.
    fn current_changes(&mut self, input: &HistoryInput) {
        if input.standing != self.current {
            self.current = input.standing;
            self.since = input.at;
            self.since_first_sweep = false;
        }
        self.limits = input.limits;
        let tops = pack(BandTops::of(input.limits.as_ref()));
        let slot = slot_of(input.at);
        if self.bands.last().map(|m| m.tops) != Some(tops) {
            self.bands.push(BandMark { slot, tops });
        }
        // Keep one mark at or before the window's start, and at most
        // MAX_BAND_MARKS in all.
        let window_start = self.newest - N as i64 + 1;
        while self.bands.len() > 1 && self.bands[1].slot <= window_start {
            self.bands.remove(0);
        }
        while self.bands.len() > MAX_BAND_MARKS {
            self.bands.remove(0);
        }
    }

    /// Since when the instance stands as it does now.
    pub(crate) fn since(&self) -> Since {
        Since {
            standing: self.current,
            at: self.since,
            first_sweep: self.since_first_sweep,
        }
    }

    /// The last hour up to `now`'s bucket (or the newest bucket written,
    /// if that is later), oldest bucket first.
    pub(crate) fn view(&self, now: Timestamp) -> HistoryView {
        let end = slot_of(now).max(self.newest);
        let first = end - N as i64 + 1;
        let points = (first..=end)
            .map(|slot| {
                let recorded = slot <= self.newest && slot > self.newest - N as i64;
                let i = index_of(slot);
                let read = |s: &Series| {
                    if recorded {
                        s.get(i).map(u64::from)
                    } else {
                        None
                    }
                };
                HistoryPoint {
                    start: slot_start(slot),
                    standing: if recorded {
                        Standing::from_code(self.standing[i])
                    } else {
                        None
                    },
                    fd_timeouts: read(&self.fd_timeouts),
                    peer_failures: read(&self.peer_failures),
                    outbox: read(&self.outbox),
                    replication_lag: read(&self.replication_lag),
                }
            })
            .collect();
        HistoryView {
            bucket_seconds: BUCKET_SECONDS,
            start: slot_start(first),
            end: slot_start(end + 1),
            points,
            bands: self
                .bands
                .iter()
                .map(|m| BandChange {
                    from: slot_start(m.slot),
                    tops: unpack(m.tops),
                })
                .collect(),
            since: self.since(),
            limits: self.limits,
        }
    }

    /// What this history occupies on the heap (it is boxed): the struct,
    /// the band marks' buffer and any widened series.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<History>()
            + self.bands.capacity() * std::mem::size_of::<BandMark>()
            + self.fd_timeouts.heap_bytes()
            + self.peer_failures.heap_bytes()
            + self.outbox.heap_bytes()
            + self.replication_lag.heap_bytes()
    }
}

/// Since when an instance stands as it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since {
    /// How it stands.
    pub standing: Standing,
    /// Since when (the first sweep that found it so).
    pub at: Timestamp,
    /// True when that was the first sweep this agent made of it (it may
    /// have stood so for longer, e.g. before an agent restart).
    pub first_sweep: bool,
}

/// One bucket of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPoint {
    /// When the bucket starts.
    pub start: Timestamp,
    /// The worst standing of its sweeps; `None` when no sweep fell in it.
    pub standing: Option<Standing>,
    /// The largest `fdTimeoutCount` of its sweeps.
    pub fd_timeouts: Option<u64>,
    /// The largest `peerConnectionFailures`.
    pub peer_failures: Option<u64>,
    /// The largest `outboxMessages`.
    pub outbox: Option<u64>,
    /// The largest `replicationLagEntries`.
    pub replication_lag: Option<u64>,
}

/// Band tops in force from a point in time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BandChange {
    /// From this bucket's start on (may lie before the window).
    pub from: Timestamp,
    /// The tops (none when the counters were not compared).
    pub tops: BandTops,
}

/// An instance's history as the instance page draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryView {
    /// Seconds per bucket.
    pub bucket_seconds: i64,
    /// Start of the oldest bucket.
    pub start: Timestamp,
    /// End of the newest bucket.
    pub end: Timestamp,
    /// Every bucket of the window, oldest first ([`HISTORY_BUCKETS`]).
    pub points: Vec<HistoryPoint>,
    /// Band changes, oldest first; the first may start before the window.
    pub bands: Vec<BandChange>,
    /// Since when the instance stands as it does.
    pub since: Since,
    /// The limits of the newest sweep's verdict.
    pub limits: Option<GateLimits>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        // A bucket boundary, so tests can count buckets.
        Timestamp::from_second(1_780_000_020 + s).expect("ts")
    }

    fn input(s: i64, standing: Standing, fd: u64) -> HistoryInput {
        HistoryInput {
            replication_lag: None,
            at: at(s),
            standing,
            fd_timeouts: Some(fd),
            peer_failures: None,
            outbox: Some(10),
            limits: None,
        }
    }

    fn limits(fd_top: u64, compared: bool) -> GateLimits {
        GateLimits {
            max_sample_age_seconds: 180,
            future_skew_seconds: 60,
            outbox_band_top: Some(60),
            replication_lag_band_top: None,
            fd_timeout_band_top: Some(fd_top),
            peer_failure_band_top: None,
            counters_compared: compared,
        }
    }

    #[test]
    fn a_bucket_keeps_the_maximum_and_the_worst_standing() {
        assert_eq!(at(0).as_second() % BUCKET_SECONDS, 0);
        let mut h = History::new(&input(0, Standing::Healthy, 5));
        h.record(&input(10, Standing::HardStop, 9));
        h.record(&input(20, Standing::Unhealthy, 7));
        let v = h.view(at(20));
        assert_eq!(v.points.len(), HISTORY_BUCKETS);
        let last = v.points.last().expect("point");
        assert_eq!(last.start, at(0));
        assert_eq!(last.standing, Some(Standing::HardStop));
        assert_eq!(last.fd_timeouts, Some(9));
        assert_eq!(last.peer_failures, None, "absent is never 0");
        assert_eq!(last.outbox, Some(10));
        assert!(
            v.points[..HISTORY_BUCKETS - 1]
                .iter()
                .all(|p| p.standing.is_none())
        );
        assert_eq!(v.since.standing, Standing::Unhealthy);
        assert_eq!(v.since.at, at(20));
        assert!(!v.since.first_sweep);
    }

    #[test]
    fn any_cadence_gives_the_same_number_of_points_and_the_same_size() {
        let mut slow = History::new(&input(0, Standing::Healthy, 0));
        let mut fast = History::new(&input(0, Standing::Healthy, 0));
        for s in (0..7200).step_by(10) {
            slow.record(&input(s, Standing::Healthy, u64::try_from(s).unwrap_or(0)));
        }
        for s in 0..7200 {
            fast.record(&input(s, Standing::Healthy, u64::try_from(s).unwrap_or(0)));
        }
        let (vs, vf) = (slow.view(at(7199)), fast.view(at(7199)));
        assert_eq!(vs.points.len(), HISTORY_BUCKETS);
        assert_eq!(vf.points.len(), HISTORY_BUCKETS);
        assert_eq!(slow.heap_bytes(), fast.heap_bytes());
        // Four narrow series (fd, peers, outbox, replication lag) of 120
        // buckets, the standing codes and the band marks.
        assert!(slow.heap_bytes() < 1500, "{} bytes", slow.heap_bytes());
        // The bucket maximum is the bucket's last second (fast) or its last
        // 10 s sweep (slow).
        let last = vf.points.last().expect("point");
        assert_eq!(last.fd_timeouts, Some(7199));
        assert_eq!(vs.points.last().expect("point").fd_timeouts, Some(7190));
        assert_eq!(vf.points[0].start, at(7200 - 3600));
    }

    #[test]
    fn skipped_buckets_are_empty_and_old_sweeps_are_ignored() {
        let mut h = History::new(&input(0, Standing::Healthy, 1));
        h.record(&input(95, Standing::Unhealthy, 2));
        let v = h.view(at(95));
        let n = HISTORY_BUCKETS;
        assert_eq!(v.points[n - 4].fd_timeouts, Some(1));
        assert_eq!(v.points[n - 3].standing, None);
        assert_eq!(v.points[n - 2].standing, None);
        assert_eq!(v.points[n - 1].fd_timeouts, Some(2));
        // A sweep from two hours ago changes nothing.
        let before = h.view(at(95));
        h.record(&input(-7200, Standing::HardStop, 99));
        assert_eq!(h.view(at(95)), before);
        // A late sweep inside the window merges into its bucket.
        h.record(&input(40, Standing::HardStop, 3));
        assert_eq!(
            h.view(at(95)).points[n - 3].standing,
            Some(Standing::HardStop)
        );
        assert_eq!(
            h.view(at(95)).since.standing,
            Standing::Unhealthy,
            "a late sweep does not move the current standing"
        );
        // Nothing swept for more than an hour: every bucket is empty.
        let v = h.view(at(95 + 3700));
        assert!(v.points.iter().all(|p| p.standing.is_none()));
        // A sweep after a long gap clears what wrapped around.
        h.record(&input(95 + 3600 * 3, Standing::Healthy, 4));
        let v = h.view(at(95 + 3600 * 3));
        assert_eq!(v.points.iter().filter(|p| p.standing.is_some()).count(), 1);
    }

    #[test]
    fn series_widen_for_a_large_span_and_narrow_again() {
        let mut h = History::new(&input(0, Standing::Healthy, 10));
        h.record(&input(30, Standing::Healthy, 10_000_000));
        assert!(matches!(h.fd_timeouts, Series::Wide(_)));
        let v = h.view(at(30));
        let n = HISTORY_BUCKETS;
        assert_eq!(v.points[n - 2].fd_timeouts, Some(10));
        assert_eq!(v.points[n - 1].fd_timeouts, Some(10_000_000));
        // Below the base also re-encodes.
        h.record(&input(60, Standing::Healthy, 3));
        assert_eq!(h.view(at(60)).points[n - 1].fd_timeouts, Some(3));
        // Once the large value leaves the window, the series is narrow again
        // (tiny: what is left spans less than 255).
        h.record(&input(60 + 3600, Standing::Healthy, 5));
        assert!(matches!(h.fd_timeouts, Series::Tiny(_)));
        assert_eq!(
            h.view(at(3660)).points[n - 1].fd_timeouts,
            Some(5),
            "{:?}",
            h.fd_timeouts
        );
        // Saturation instead of wrapping.
        h.record(&input(3690, Standing::Healthy, u64::MAX));
        assert_eq!(
            h.view(at(3690)).points[n - 1].fd_timeouts,
            Some(u64::from(u32::MAX - 1))
        );
    }

    #[test]
    fn a_series_takes_u8_u16_or_u32_per_bucket_by_its_span_in_the_window() {
        let mut h = History::new(&input(0, Standing::Healthy, 1_000));
        assert!(matches!(h.fd_timeouts, Series::Tiny(_)), "at rest");
        h.record(&input(30, Standing::Healthy, 1_254));
        assert!(matches!(h.fd_timeouts, Series::Tiny(_)), "a span of 254");
        h.record(&input(60, Standing::Healthy, 1_255));
        assert!(matches!(h.fd_timeouts, Series::Narrow(_)), "a span of 255");
        h.record(&input(90, Standing::Healthy, 999));
        assert!(matches!(h.fd_timeouts, Series::Narrow(_)), "below the base");
        let n = HISTORY_BUCKETS;
        let points = h.view(at(90)).points;
        let last: Vec<_> = points[n - 4..].iter().map(|p| p.fd_timeouts).collect();
        assert_eq!(last, [Some(1_000), Some(1_254), Some(1_255), Some(999)]);
        // The wide values leave the window: tiny again at the next bucket.
        h.record(&input(90 + 3600, Standing::Healthy, 1_001));
        assert!(matches!(h.fd_timeouts, Series::Tiny(_)));
        assert_eq!(h.view(at(3690)).points[n - 1].fd_timeouts, Some(1_001));
        assert!(std::mem::size_of::<Based<u8>>() <= 128);
    }

    #[test]
    fn a_counter_never_reported_costs_nothing_and_one_gone_for_an_hour_is_freed() {
        // input() reports fdTimeoutCount and outboxMessages only.
        let mut h = History::new(&input(0, Standing::Healthy, 1));
        assert!(matches!(h.peer_failures, Series::Absent));
        assert!(matches!(h.replication_lag, Series::Absent));
        let two = h.heap_bytes();
        assert_eq!(
            two,
            std::mem::size_of::<History>()
                + 2 * std::mem::size_of::<Based<u8>>()
                + h.bands.capacity() * std::mem::size_of::<BandMark>()
        );
        let mut i = input(30, Standing::Healthy, 1);
        i.replication_lag = Some(7);
        h.record(&i);
        assert!(matches!(h.replication_lag, Series::Tiny(_)));
        assert_eq!(h.heap_bytes(), two + std::mem::size_of::<Based<u8>>());
        assert_eq!(
            h.view(at(30)).points[HISTORY_BUCKETS - 1].replication_lag,
            Some(7)
        );
        // An hour without it: the window has no value left, nothing is held.
        h.record(&input(30 + 3600, Standing::Healthy, 1));
        assert!(matches!(h.replication_lag, Series::Absent));
        assert!(
            h.view(at(3630))
                .points
                .iter()
                .all(|p| p.replication_lag.is_none())
        );
    }

    #[test]
    fn band_marks_follow_changes_and_stay_bounded() {
        let mut h = History::new(&input(0, Standing::Healthy, 1));
        assert_eq!(h.view(at(0)).bands.len(), 1);
        assert_eq!(h.view(at(0)).bands[0].tops, BandTops::default());
        let mut i = input(30, Standing::Healthy, 1);
        i.limits = Some(limits(8, false));
        h.record(&i);
        assert_eq!(h.view(at(30)).bands.len(), 1, "not compared: no band");
        i.limits = Some(limits(8, true));
        i.at = at(60);
        h.record(&i);
        let v = h.view(at(60));
        assert_eq!(v.bands.len(), 2);
        assert_eq!(v.bands[1].from, at(60));
        assert_eq!(v.bands[1].tops.fd_timeouts, Some(8));
        assert_eq!(v.bands[1].tops.outbox, Some(60));
        assert_eq!(v.limits, Some(limits(8, true)));
        for k in 0..20 {
            i.at = at(90 + 30 * k);
            i.limits = Some(limits(20 - u64::try_from(k).unwrap_or(0), true));
            h.record(&i);
        }
        assert_eq!(h.bands.len(), MAX_BAND_MARKS);
        // An hour later only the band in force at the window's start is kept.
        i.at = at(90 + 30 * 19 + 7200);
        h.record(&i);
        assert_eq!(h.bands.len(), 1);
    }
}
