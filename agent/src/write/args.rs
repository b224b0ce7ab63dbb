//! The write path's flags of `kura-agent run` and their translation:
//! the write scheduler ([`WriteArgs`] into [`WriteQueueConfig`]) and which
//! conditions are written ([`ConditionArgs`] into [`ConditionSet`]).

use std::time::Duration;

use clap::Args;

use crate::model::parse::{ParseError, parse_positive_duration, parse_rate};
use crate::write::HEARTBEAT_CEILING;
use crate::write::WriteQueueConfig;
use crate::write::conditions::ConditionSet;

/// The status writes' heartbeat and rate.
#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
    /// The shortest heartbeat: an unchanged status is rewritten at least
    /// this often while the fleet is small. It grows with the fleet's
    /// instances (every replica's) so that heartbeats cost about
    /// `--heartbeat-writes-per-second`, up to `--heartbeat-max`; material
    /// changes are written at once whatever it is.
    #[arg(long, env = "KURA_AGENT_HEARTBEAT", default_value = "30s", value_parser = parse_positive_duration)]
    pub heartbeat: Duration,

    /// The longest heartbeat the fleet's size may raise it to: at most 90s
    /// (two writes in the 180 s after which consumers call a status
    /// stale). Set it to `--heartbeat` (or below) for a fixed heartbeat.
    #[arg(long, env = "KURA_AGENT_HEARTBEAT_MAX", default_value = "90s", value_parser = parse_heartbeat_max)]
    pub heartbeat_max: Duration,

    /// The heartbeat writes per second the whole replica set aims for at
    /// rest: the heartbeat is the fleet's instances over this, between
    /// `--heartbeat` and `--heartbeat-max` (40: 30 s up to 1,200
    /// instances, 83 s at 3,334, 90 s from 3,600 on).
    #[arg(long, env = "KURA_AGENT_HEARTBEAT_WRITES_PER_SECOND", default_value = "40", value_parser = parse_rate)]
    pub heartbeat_writes_per_second: f64,

    /// Status writes per second, shared by all instances: the floor. The
    /// agent raises it to what the heartbeat needs for the instances it
    /// writes (2 writes per instance per `--heartbeat`: each status
    /// rewritten every heartbeat, with as much again for changes and for
    /// first statuses at start-up), so the heartbeat holds at any size.
    #[arg(long, env = "KURA_AGENT_WRITE_RATE", default_value = "50", value_parser = parse_rate)]
    pub write_rate: f64,

    /// Writes allowed in a burst above the rate.
    #[arg(long, env = "KURA_AGENT_WRITE_BURST", default_value_t = 40,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub write_burst: u32,
}

impl WriteArgs {
    /// The write scheduler's settings, writing the conditions of
    /// `conditions`.
    pub fn config(&self, conditions: ConditionSet) -> WriteQueueConfig {
        WriteQueueConfig {
            heartbeat: self.heartbeat,
            heartbeat_max: self.heartbeat_max,
            heartbeat_writes_per_second: self.heartbeat_writes_per_second,
            rate_per_second: self.write_rate,
            burst: self.write_burst,
            conditions,
            ..WriteQueueConfig::default()
        }
    }
}

/// Which conditions the agent writes.
#[derive(Debug, Clone, Args)]
pub struct ConditionArgs {
    /// Also write kstatus' `Reconciling` (True until the verdict on the
    /// current image is healthy) and `Stalled` (True on a hard stop)
    /// conditions, so Flux, `helm --wait` and kpt read an instance's
    /// rollout as in progress, failed or current. The top-level
    /// `status.observedGeneration` of a KuraInstance is never written
    /// (Kura's controller's); a companion carries its own. Off by
    /// default: these conventionally belong to the resource's own
    /// controller; turn it on only when the fleet controller writes none
    /// of them (or in companion mode, where the companion is the agent's).
    #[arg(long, env = "KURA_AGENT_KSTATUS_CONDITIONS", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub kstatus_conditions: bool,
}

impl ConditionArgs {
    /// Which conditions the agent writes.
    pub fn condition_set(&self) -> ConditionSet {
        ConditionSet {
            kstatus: self.kstatus_conditions,
        }
    }
}

/// Parses the longest status heartbeat: positive and at most
/// [`HEARTBEAT_CEILING`] (90 s), so a live agent's status is rewritten
/// at least twice in the 180 s after which consumers call it stale.
pub fn parse_heartbeat_max(input: &str) -> Result<Duration, ParseError> {
    let d = parse_positive_duration(input)?;
    if d > HEARTBEAT_CEILING {
        return Err(ParseError::InvalidDuration {
            input: input.to_owned(),
            reason: "at most 90s: consumers call a status older than 180s stale, and a longer heartbeat leaves fewer than two writes in that window".to_owned(),
        });
    }
    Ok(d)
}
