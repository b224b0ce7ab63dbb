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
/// point.
#[derive(Debug, Clone)]
pub struct ScaledClock {
    real_start: Timestamp,
    mono_start: Instant,
    virtual_start: Timestamp,
    scale: f64,
}

impl ScaledClock {
    /// Starts now at `virtual_start`, running `scale` (≥ 1) times faster.
    pub fn new(virtual_start: Timestamp, scale: f64) -> Self {
        ScaledClock {
            real_start: Timestamp::now(),
            mono_start: Instant::now(),
            virtual_start,
            scale: if scale.is_finite() && scale >= 1.0 {
                scale
            } else {
                1.0
            },
        }
    }

    /// The speed-up factor.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    fn scaled(&self, real: SignedDuration) -> Timestamp {
        let nanos = real.as_nanos() as f64 * self.scale;
        let d = SignedDuration::from_nanos(nanos.clamp(i64::MIN as f64, i64::MAX as f64) as i64);
        self.virtual_start
            .checked_add(d)
            .unwrap_or(self.virtual_start)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Timestamp {
        let elapsed =
            SignedDuration::try_from(self.mono_start.elapsed()).unwrap_or(SignedDuration::MAX);
        self.scaled(elapsed)
    }
    fn map_real(&self, real: Timestamp) -> Timestamp {
        self.scaled(real.duration_since(self.real_start))
    }
    fn to_real(&self, d: Duration) -> Duration {
        d.div_f64(self.scale)
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
        let later = c.real_start + SignedDuration::from_secs(2);
        assert_eq!(c.map_real(later), start + SignedDuration::from_secs(120));
        assert!(c.now() >= start);
        assert_eq!(ScaledClock::new(start, f64::NAN).scale(), 1.0);
    }
}
