//! The Events' flags of `kura-agent run` and their translation into
//! [`EventLimitConfig`].

use std::time::Duration;

use clap::Args;

use crate::events::EventLimitConfig;
use crate::model::parse::parse_positive_duration;

/// Whether Events are published, and their per-instance rate bound.
#[derive(Debug, Clone, Args)]
pub struct EventArgs {
    /// Publish Kubernetes Events (events.k8s.io) on the instances'
    /// transitions: baseline captured, healthy, unhealthy, hard stop,
    /// status pruned. Needs create and patch on events.k8s.io events.
    #[arg(long, env = "KURA_AGENT_EVENTS", default_value_t = true,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub events: bool,

    /// Events one instance may get at once (its rate bound's burst). A
    /// Normal Event never takes the last token (kept for a Warning), so a
    /// rollout's Normal Events and the Warnings after them go out at once
    /// while they fit the burst.
    #[arg(long, env = "KURA_AGENT_EVENT_BURST",
          default_value_t = crate::events::limiter::DEFAULT_BURST,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub event_burst: u32,

    /// One more Event per instance per this long; transitions beyond the
    /// bound are coalesced into the next Event.
    #[arg(long, env = "KURA_AGENT_EVENT_INTERVAL", default_value = "60s", value_parser = parse_positive_duration)]
    pub event_interval: Duration,
}

impl EventArgs {
    /// The per-instance rate bound of Events.
    pub fn limit(&self) -> EventLimitConfig {
        EventLimitConfig {
            burst: self.event_burst,
            refill: self.event_interval,
        }
    }
}
