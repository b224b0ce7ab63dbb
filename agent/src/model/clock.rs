//! The loop's notion of time. In a cluster it is the system clock; the demo
//! compresses time so a rollout's soaks play in about a minute.

use jiff::{SignedDuration, Timestamp};
use std::time::{Duration, Instant};

/// A source of "now" for decisions, and the conversion between real
/// durations (sleeps) and the clock's durations.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// A real (system clock) timestamp, e.g. a poll's receive time, in this
    /// clock's time.
    fn map_real(&self, real: Timestamp) -> Timestamp;
    /// How long to really sleep for `d` of this clock's time.
    fn to_real(&self, d: Duration) -> Duration;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn map_real(&self, real: Timestamp) -> Timestamp {
        real
    }
    fn to_real(&self, d: Duration) -> Duration {
        d
    }
}

/// A clock that runs `scale` times faster than real time from a start
/// point; the scale can change while it runs ([`ScaledClock::set_scale`]:
/// the demo slows to real time once its story is over), time running on
/// without a jump.
#[derive(Debug)]
pub struct ScaledClock {
    anchor: std::sync::RwLock<Anchor>,
}

/// Where the clock's current scale took over: the monotonic instant and
/// the clock's time then.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    mono_start: Instant,
    virtual_start: Timestamp,
    scale: f64,
}

impl Anchor {
    fn scaled(&self, real: SignedDuration) -> Timestamp {
        let nanos = real.as_nanos() as f64 * self.scale;
        let d = SignedDuration::from_nanos(nanos.clamp(i64::MIN as f64, i64::MAX as f64) as i64);
        self.virtual_start
            .checked_add(d)
            .unwrap_or(self.virtual_start)
    }

    fn now(&self) -> Timestamp {
        let elapsed =
            SignedDuration::try_from(self.mono_start.elapsed()).unwrap_or(SignedDuration::MAX);
        self.scaled(elapsed)
    }
}

fn valid_scale(scale: f64) -> f64 {
    if scale.is_finite() && scale >= 1.0 {
        scale
    } else {
        1.0
    }
}

impl ScaledClock {
    /// Starts now at `virtual_start`, running `scale` (≥ 1) times faster.
    pub fn new(virtual_start: Timestamp, scale: f64) -> Self {
        ScaledClock {
            anchor: std::sync::RwLock::new(Anchor {
                mono_start: Instant::now(),
                virtual_start,
                scale: valid_scale(scale),
            }),
        }
    }

    fn anchor(&self) -> Anchor {
        *self
            .anchor
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The speed-up factor.
    pub fn scale(&self) -> f64 {
        self.anchor().scale
    }

    /// From now on, runs `scale` (≥ 1) times faster than real time,
    /// continuing from the current time.
    pub fn set_scale(&self, scale: f64) {
        let mut anchor = self
            .anchor
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = anchor.now();
        *anchor = Anchor {
            mono_start: Instant::now(),
            virtual_start: now,
            scale: valid_scale(scale),
        };
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Timestamp {
        self.anchor().now()
    }
    /// `real` is placed by how long ago it was on the system clock, scaled
    /// back from this clock's now: only a short wall-clock difference is
    /// used, so a system clock slewed or stepped since the start (a VM
    /// resumed, NTP) cannot put mapped times ahead of [`Clock::now`].
    fn map_real(&self, real: Timestamp) -> Timestamp {
        let anchor = self.anchor();
        let ago = Timestamp::now().duration_since(real).as_nanos() as f64 * anchor.scale;
        let ago = SignedDuration::from_nanos(ago.clamp(i64::MIN as f64, i64::MAX as f64) as i64);
        let now = anchor.now();
        now.checked_sub(ago).unwrap_or(now)
    }
    fn to_real(&self, d: Duration) -> Duration {
        d.div_f64(self.anchor().scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_clock_runs_faster_and_maps_real_times() {
        let start: Timestamp = "2026-07-21T10:00:00Z".parse().unwrap();
        let c = ScaledClock::new(start, 60.0);
        assert_eq!(c.to_real(Duration::from_secs(60)), Duration::from_secs(1));
        let minute_ago = c.map_real(Timestamp::now() - SignedDuration::from_secs(1));
        let now = c.now();
        assert!(
            minute_ago <= now - SignedDuration::from_secs(60),
            "{minute_ago} {now}"
        );
        assert!(
            minute_ago > now - SignedDuration::from_secs(70),
            "{minute_ago} {now}"
        );
        assert!(
            c.map_real(Timestamp::now()) <= c.now(),
            "never ahead of now"
        );
        assert!(c.now() >= start);
        assert_eq!(ScaledClock::new(start, f64::NAN).scale(), 1.0);
    }

    #[test]
    fn a_scaled_clock_slows_down_without_a_jump() {
        let start: Timestamp = "2026-07-21T10:00:00Z".parse().unwrap();
        let c = ScaledClock::new(start, 1000.0);
        std::thread::sleep(Duration::from_millis(20));
        let before = c.now();
        assert!(before >= start + SignedDuration::from_secs(20));
        c.set_scale(1.0);
        let after = c.now();
        assert!(after >= before, "time never goes back");
        assert!(
            after < before + SignedDuration::from_secs(1),
            "no jump: {before} -> {after}"
        );
        assert_eq!(c.scale(), 1.0);
        assert_eq!(c.to_real(Duration::from_secs(3)), Duration::from_secs(3));
        let mapped = c.map_real(Timestamp::now() - SignedDuration::from_secs(2));
        let now = c.now();
        assert!(
            mapped <= now - SignedDuration::from_secs(2),
            "{mapped} {now}"
        );
        assert!(
            mapped > now - SignedDuration::from_secs(3),
            "{mapped} {now}"
        );
    }
}
