//! The fleet view's flag of `kura-agent run`: the timelines' byte budget.

use clap::Args;

/// What the fleet view may hold.
#[derive(Debug, Clone, Args)]
pub struct ViewArgs {
    /// Bytes every instance's timeline (the gate inputs judged since its
    /// baseline, `GET /api/v1/instances/{ns}/{name}/timeline`) may hold
    /// together. Past it the fleet's oldest ticks are dropped first; every
    /// timeline keeps its newest tick. 0 keeps the newest tick only.
    #[arg(long, env = "KURA_AGENT_TIMELINE_BUDGET_BYTES",
          default_value_t = crate::view::DEFAULT_TIMELINE_BUDGET_BYTES)]
    pub timeline_budget_bytes: usize,
}
