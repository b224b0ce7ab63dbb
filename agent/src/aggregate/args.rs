//! The aggregation's flag of `kura-agent run` and its translation into
//! [`AggregateConfig`].

use clap::Args;
use jiff::SignedDuration;

use crate::aggregate::AggregateConfig;
use crate::model::parse::parse_positive_signed;

/// How long a vanished pod's counters are kept.
#[derive(Debug, Clone, Args)]
pub struct AggregateArgs {
    /// How long a vanished pod's counters are kept before they are folded
    /// into `retiredCounters`.
    #[arg(long, env = "KURA_AGENT_RETENTION", default_value = "1h", value_parser = parse_positive_signed)]
    pub retention: SignedDuration,
}

impl AggregateArgs {
    /// The aggregation's settings.
    pub fn config(&self) -> AggregateConfig {
        AggregateConfig {
            retention: self.retention,
            ..AggregateConfig::default()
        }
    }
}
