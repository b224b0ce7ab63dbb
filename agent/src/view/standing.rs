//! [`Standing`]: the five ways an instance can stand on the fleet page and
//! in its history: healthy, unhealthy, hard stop, no sample to judge, or
//! suspended (no pods, nothing to judge).

use kura_schemas::{AgentVerdict, RolloutGate, Signal};

/// How an instance stands, worst last: the agent's verdict, with an
/// unhealthy verdict that has no sample to judge (no aggregate yet, no pod
/// answered, or the sample too old) set apart as [`Standing::NoSample`].
/// The order is "how bad": sorting by it descending lists hard stops first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Standing {
    /// The instance is suspended (verdict `suspended`): no pods, nothing
    /// to judge; the least worrying standing.
    Suspended,
    /// Every gated signal passes.
    Healthy,
    /// No verdict yet, or the verdict is `sample_missing`/`sample_stale`.
    NoSample,
    /// A gated signal fails.
    Unhealthy,
    /// A hard-stop check fails (memory pressure 2).
    HardStop,
}

impl Standing {
    /// Every standing, worst first.
    pub const WORST_FIRST: [Standing; 5] = [
        Standing::HardStop,
        Standing::Unhealthy,
        Standing::NoSample,
        Standing::Healthy,
        Standing::Suspended,
    ];

    /// How `gate` stands (`None`: the instance has no verdict yet).
    pub fn of(gate: Option<&RolloutGate>) -> Standing {
        match gate {
            None => Standing::NoSample,
            Some(g) => match g.verdict {
                AgentVerdict::Healthy => Standing::Healthy,
                AgentVerdict::HardStop => Standing::HardStop,
                AgentVerdict::Suspended => Standing::Suspended,
                AgentVerdict::Unhealthy => match g.signal {
                    Some(Signal::SampleMissing | Signal::SampleStale) => Standing::NoSample,
                    _ => Standing::Unhealthy,
                },
            },
        }
    }

    /// The word shown for it (never colour alone).
    pub fn word(self) -> &'static str {
        match self {
            Standing::Healthy => "healthy",
            Standing::NoSample => "no sample",
            Standing::Unhealthy => "unhealthy",
            Standing::HardStop => "hard stop",
            Standing::Suspended => "suspended",
        }
    }

    /// A token for URLs, CSS classes and filters.
    pub fn token(self) -> &'static str {
        match self {
            Standing::Healthy => "healthy",
            Standing::NoSample => "no_sample",
            Standing::Unhealthy => "unhealthy",
            Standing::HardStop => "hard_stop",
            Standing::Suspended => "suspended",
        }
    }

    /// The standing of a [`Standing::token`].
    pub fn from_token(token: &str) -> Option<Standing> {
        Standing::WORST_FIRST
            .into_iter()
            .find(|s| s.token() == token)
    }

    /// Its one-byte code (0 is reserved for "nothing recorded").
    pub(crate) fn code(self) -> u8 {
        match self {
            Standing::Healthy => 1,
            Standing::NoSample => 2,
            Standing::Unhealthy => 3,
            Standing::HardStop => 4,
            Standing::Suspended => 5,
        }
    }

    /// The standing of a code, `None` for 0 or an unknown code.
    pub(crate) fn from_code(code: u8) -> Option<Standing> {
        match code {
            1 => Some(Standing::Healthy),
            2 => Some(Standing::NoSample),
            3 => Some(Standing::Unhealthy),
            4 => Some(Standing::HardStop),
            5 => Some(Standing::Suspended),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn gate(verdict: AgentVerdict, signal: Option<Signal>) -> RolloutGate {
        RolloutGate {
            target_image: "img".into(),
            baseline_image: None,
            baseline_captured_at: None,
            baseline: Default::default(),
            effective_baseline: Default::default(),
            soak_eligible: false,
            verdict,
            signal,
            healthy_since: None,
            evaluated_at: Timestamp::UNIX_EPOCH,
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    #[test]
    fn standings_follow_the_verdict_and_set_missing_samples_apart() {
        assert_eq!(Standing::of(None), Standing::NoSample);
        let cases = [
            (AgentVerdict::Healthy, None, Standing::Healthy),
            (
                AgentVerdict::HardStop,
                Some(Signal::MemoryPressureCritical),
                Standing::HardStop,
            ),
            (
                AgentVerdict::Unhealthy,
                Some(Signal::SampleStale),
                Standing::NoSample,
            ),
            (
                AgentVerdict::Unhealthy,
                Some(Signal::SampleMissing),
                Standing::NoSample,
            ),
            (
                AgentVerdict::Unhealthy,
                Some(Signal::FdTimeoutsRegressed),
                Standing::Unhealthy,
            ),
            (
                AgentVerdict::Suspended,
                Some(Signal::InstanceSuspended),
                Standing::Suspended,
            ),
        ];
        for (verdict, signal, want) in cases {
            assert_eq!(Standing::of(Some(&gate(verdict, signal))), want);
        }
    }

    #[test]
    fn codes_and_tokens_round_trip_and_order_is_worst_last() {
        for s in Standing::WORST_FIRST {
            assert_eq!(Standing::from_code(s.code()), Some(s));
            assert_eq!(Standing::from_token(s.token()), Some(s));
        }
        assert_eq!(Standing::from_code(0), None);
        assert!(Standing::HardStop > Standing::Unhealthy);
        assert!(Standing::Unhealthy > Standing::NoSample);
        assert!(Standing::NoSample > Standing::Healthy);
    }
}
