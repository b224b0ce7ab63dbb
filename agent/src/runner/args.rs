//! The sweep cadence's flags of `kura-agent run` and their translation
//! into [`Cadence`].

use std::time::Duration;

use clap::Args;

use crate::model::parse::parse_positive_duration;
use crate::runner::Cadence;

/// How often instances are swept.
#[derive(Debug, Clone, Args)]
pub struct CadenceArgs {
    /// Time between two sweeps of an instance in a rollout: from the moment
    /// its `spec.image` differs from its baseline's image or its pods run
    /// more than one image, until its verdict has been healthy for
    /// `--settle`; and while its verdict is unhealthy or a hard stop (or it
    /// has none yet). Jittered by ±10 %.
    #[arg(long, env = "KURA_AGENT_ROLLOUT_INTERVAL", default_value = "2s",
          value_parser = parse_positive_duration, conflicts_with = "sweep_interval")]
    pub rollout_interval: Duration,

    /// Time between two sweeps of an instance at rest (not in a rollout).
    /// Jittered by ±10 %; must stay below the maximum sample age (180 s)
    /// with its jitter, so at most 163 s.
    #[arg(long, env = "KURA_AGENT_STEADY_INTERVAL", default_value = "30s",
          value_parser = parse_positive_duration, conflicts_with = "sweep_interval")]
    pub steady_interval: Duration,

    /// How long an upgraded instance's verdict must have been healthy
    /// before it is swept at the steady interval again.
    #[arg(long, env = "KURA_AGENT_SETTLE", default_value = "20m", value_parser = parse_positive_duration)]
    pub settle: Duration,

    /// One interval for every instance, in a rollout or not: sets both
    /// `--rollout-interval` and `--steady-interval` (and cannot be combined
    /// with either). `--interval` is the same flag.
    #[arg(long, alias = "interval", env = "KURA_AGENT_SWEEP_INTERVAL",
          value_parser = parse_positive_duration)]
    pub sweep_interval: Option<Duration>,
}

impl CadenceArgs {
    /// How often instances are swept: `--sweep-interval` for both phases
    /// when set, else `--rollout-interval` and `--steady-interval`. Check
    /// it with `LoopConfig::validate`.
    pub fn cadence(&self) -> Cadence {
        let (rollout_interval, steady_interval) = match self.sweep_interval {
            Some(both) => (both, both),
            None => (self.rollout_interval, self.steady_interval),
        };
        Cadence {
            rollout_interval,
            steady_interval,
            settle: self.settle,
            ..Cadence::default()
        }
    }
}
