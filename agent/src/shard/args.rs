//! The sharding flags of `kura-agent run` and their translation into
//! [`ShardConfig`].

use std::time::Duration;

use clap::Args;

use crate::model::parse::parse_positive_duration;
use crate::model::units::UnitCount;
use crate::shard::{ShardConfig, ShardError};

/// Whether and how replicas share the instances.
#[derive(Debug, Clone, Args)]
pub struct ShardArgs {
    /// Share the instances among every replica of the same group: each
    /// replica holds a Lease in `--lease-namespace` and polls and writes
    /// only the instances of the watch units it owns (`--shard-units`,
    /// bounded-load rendezvous hashing over the live members). Off: this replica writes every instance, so run exactly
    /// one (no Lease permissions needed).
    #[arg(long, env = "KURA_AGENT_SHARDING", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub sharding: bool,

    /// Namespace of the replicas' Leases (default: the `POD_NAMESPACE`
    /// environment variable).
    #[arg(long, env = "KURA_AGENT_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// The replica group: the `kura.tuist.dev/agent-group` label of the
    /// Leases and their name prefix. Replicas of one deployment share it.
    #[arg(long, env = "KURA_AGENT_GROUP", default_value = "kura-health-agent")]
    pub agent_group: String,

    /// Lease duration, whole seconds (3 s to 1 h). Renewed every third of
    /// it; a replica stops writing a fifth of it before its Lease could
    /// expire; a departed replica's instances move after at most this long.
    #[arg(long, env = "KURA_AGENT_LEASE_DURATION", default_value = "15s", value_parser = parse_positive_duration)]
    pub lease_duration: Duration,

    /// How many watch units the 256 shard buckets are grouped into (a
    /// power of two from 1 to 256): replicas own units, assigned with
    /// bounded load, and an instance belongs to its unit's owner. Every
    /// replica of a group must use the same count (each publishes it on
    /// its Lease; while any member's differs, none owns anything).
    #[arg(long, env = "KURA_AGENT_SHARD_UNITS", default_value = "64")]
    pub shard_units: UnitCount,
}

impl ShardArgs {
    /// The sharding settings for `identity`, `None` when sharding is off.
    /// Reads `POD_NAMESPACE` when `--lease-namespace` is not set: call at
    /// start-up only.
    pub fn config(&self, identity: &str) -> Result<Option<ShardConfig>, ShardError> {
        if !self.sharding {
            return Ok(None);
        }
        let namespace = self
            .lease_namespace
            .clone()
            .filter(|n| !n.trim().is_empty())
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .ok_or(ShardError::NoNamespace)?;
        Ok(Some(
            ShardConfig::new(
                namespace,
                self.agent_group.clone(),
                identity,
                self.lease_duration,
            )?
            .with_units(self.shard_units),
        ))
    }
}
