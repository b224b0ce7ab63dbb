//! Command-line flags and `KURA_AGENT_*` environment variables of
//! `kura-agent run`, and every translation of them into the settings of
//! the parts `run` composes (`impl RunArgs`): discovery, targets, poller,
//! loop and engine, write queue, sharding, identity.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use jiff::SignedDuration;
use kura_gate::GateConfig;

use crate::aggregate::AggregateConfig;
use crate::cli::LogFormat;
use crate::cli::parse::{parse_positive_duration, parse_positive_signed, parse_rate};
use crate::cluster::{DiscoveryConfig, PollPort, TargetConfig};
use crate::engine::EngineConfig;
use crate::events::EventLimitConfig;
use crate::poll::PollConfig;
use crate::runner::LoopConfig;
use crate::shard::{ShardConfig, ShardError};
use crate::write::WriteQueueConfig;
use crate::write::conditions::ConditionSet;

/// Settings `run` cannot start with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The agent identity could not be found anywhere.
    #[error("no agent identity: set --agent-identity, POD_NAME or a hostname")]
    NoIdentity,
    /// The sharding settings are unusable.
    #[error("sharding: {0}")]
    Shard(#[from] ShardError),
}

/// Flags of `kura-agent run`. Every flag can also be set by the environment
/// variable named next to it.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Namespaces to watch (repeat, or comma-separated); empty: all namespaces.
    #[arg(
        long = "namespace",
        env = "KURA_AGENT_NAMESPACES",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,

    /// Label selector for `KuraInstance`s (e.g. `tier=managed`).
    #[arg(long, env = "KURA_AGENT_INSTANCE_SELECTOR")]
    pub instance_selector: Option<String>,

    /// Label selector for pods, narrowing the pod watch (e.g.
    /// `app.kubernetes.io/name=kura`). Pods are always matched to instances
    /// by their StatefulSet owner reference as well.
    #[arg(long, env = "KURA_AGENT_POD_SELECTOR")]
    pub pod_selector: Option<String>,

    /// Name of the Kura container in the pod (falls back to the first
    /// container when no container has this name).
    #[arg(long, env = "KURA_AGENT_CONTAINER", default_value = "kura")]
    pub container_name: String,

    /// Port polled on each pod IP for `GET /status/rollout`.
    #[arg(long, env = "KURA_AGENT_PORT", default_value_t = 4000)]
    pub port: u16,

    /// Named container port to poll instead of `--port` (looked up on the
    /// Kura container).
    #[arg(long, env = "KURA_AGENT_PORT_NAME")]
    pub port_name: Option<String>,

    /// Polls in flight at once, across all instances.
    #[arg(long, env = "KURA_AGENT_POLL_CONCURRENCY", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub poll_concurrency: u32,

    /// Per-request poll timeout.
    #[arg(long, env = "KURA_AGENT_POLL_TIMEOUT", default_value = "2s", value_parser = parse_positive_duration)]
    pub poll_timeout: Duration,

    /// Keep one idle connection per pod between sweeps (`false`: a new
    /// connection per poll). An idle kept connection costs its socket only
    /// (a few hundred bytes of agent memory, plus the kernel's buffers).
    #[arg(long, env = "KURA_AGENT_POLL_KEEP_ALIVE", default_value_t = true, action = clap::ArgAction::Set)]
    pub poll_keep_alive: bool,

    /// Largest report body accepted, in bytes.
    #[arg(long, env = "KURA_AGENT_BODY_LIMIT", default_value_t = 64 * 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub body_limit: u32,

    /// Time between sweeps (each sleep is jittered by ±10 %).
    #[arg(long, env = "KURA_AGENT_SWEEP_INTERVAL", default_value = "10s", value_parser = parse_positive_duration)]
    pub sweep_interval: Duration,

    /// Rewrite an unchanged status at least this often.
    #[arg(long, env = "KURA_AGENT_HEARTBEAT", default_value = "30s", value_parser = parse_positive_duration)]
    pub heartbeat: Duration,

    /// Status writes per second, shared by all instances.
    #[arg(long, env = "KURA_AGENT_WRITE_RATE", default_value = "50", value_parser = parse_rate)]
    pub write_rate: f64,

    /// Writes allowed in a burst above the rate.
    #[arg(long, env = "KURA_AGENT_WRITE_BURST", default_value_t = 40,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub write_burst: u32,

    /// How long a vanished pod's counters are kept before they are folded
    /// into `retiredCounters`.
    #[arg(long, env = "KURA_AGENT_RETENTION", default_value = "1h", value_parser = parse_positive_signed)]
    pub retention: SignedDuration,

    /// Listen address of the read-only debug and metrics server.
    #[arg(long, env = "KURA_AGENT_DEBUG_LISTEN", default_value = "0.0.0.0:8080")]
    pub debug_listen: SocketAddr,

    /// Identity written to `status.rolloutHealth.agent` (default: the
    /// `POD_NAME` environment variable, else the hostname).
    #[arg(long, env = "KURA_AGENT_IDENTITY")]
    pub agent_identity: Option<String>,

    /// Log format.
    #[arg(long, env = "KURA_AGENT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Share the instances among every replica of the same group: each
    /// replica holds a Lease in `--lease-namespace` and polls and writes
    /// only the instances it owns (rendezvous hashing over the live
    /// members). Off: this replica writes every instance, so run exactly
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

    /// Publish Kubernetes Events (events.k8s.io) on the instances'
    /// transitions: baseline captured, healthy, unhealthy, hard stop,
    /// status pruned. Needs create and patch on events.k8s.io events.
    #[arg(long, env = "KURA_AGENT_EVENTS", default_value_t = true,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub events: bool,

    /// Events one instance may get at once (its rate bound's burst).
    #[arg(long, env = "KURA_AGENT_EVENT_BURST", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub event_burst: u32,

    /// One more Event per instance per this long; transitions beyond the
    /// bound are coalesced into the next Event.
    #[arg(long, env = "KURA_AGENT_EVENT_INTERVAL", default_value = "60s", value_parser = parse_positive_duration)]
    pub event_interval: Duration,

    /// Also write kstatus' `Reconciling` (True until the verdict on the
    /// current image is healthy) and `Stalled` (True on a hard stop)
    /// conditions and the top-level `status.observedGeneration` (the
    /// generation judged), so Flux, `helm --wait` and kpt read an
    /// instance's rollout as in progress, failed or current. Off by
    /// default: these conventionally belong to the resource's own
    /// controller; turn it on only when the fleet controller writes none
    /// of them.
    #[arg(long, env = "KURA_AGENT_KSTATUS_CONDITIONS", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub kstatus_conditions: bool,
}

impl RunArgs {
    /// What discovery watches.
    pub fn discovery_config(&self) -> DiscoveryConfig {
        DiscoveryConfig {
            namespaces: self
                .namespaces
                .iter()
                .filter(|n| !n.trim().is_empty())
                .cloned()
                .collect(),
            instance_selector: self
                .instance_selector
                .clone()
                .filter(|s| !s.trim().is_empty()),
            pod_selector: self.pod_selector.clone().filter(|s| !s.trim().is_empty()),
        }
    }

    /// How pods become targets.
    pub fn target_config(&self) -> TargetConfig {
        TargetConfig {
            container_name: self.container_name.clone(),
            port: match &self.port_name {
                Some(name) if !name.trim().is_empty() => PollPort::Named(name.clone()),
                _ => PollPort::Number(self.port),
            },
            ..TargetConfig::default()
        }
    }

    /// The write scheduler's settings.
    pub fn write_queue_config(&self) -> WriteQueueConfig {
        WriteQueueConfig {
            heartbeat: self.heartbeat,
            rate_per_second: self.write_rate,
            burst: self.write_burst,
            conditions: self.condition_set(),
            ..WriteQueueConfig::default()
        }
    }

    /// The poller's settings (which port is polled is the targets'
    /// business: [`RunArgs::target_config`]).
    pub fn poll_config(&self) -> PollConfig {
        PollConfig {
            concurrency: self.poll_concurrency as usize,
            timeout: self.poll_timeout,
            body_limit: self.body_limit as usize,
            keep_alive: self.poll_keep_alive,
            ..PollConfig::default()
        }
    }

    /// The loop's and every instance engine's settings; `agent` is written
    /// to `rolloutHealth.agent`.
    pub fn loop_config(&self, agent: String) -> LoopConfig {
        LoopConfig {
            sweep_interval: self.sweep_interval,
            engine: EngineConfig {
                agent,
                aggregate: AggregateConfig {
                    retention: self.retention,
                    ..AggregateConfig::default()
                },
                gate: GateConfig::default(),
            },
            ..LoopConfig::default()
        }
    }

    /// Which conditions the agent writes.
    pub fn condition_set(&self) -> ConditionSet {
        ConditionSet {
            kstatus: self.kstatus_conditions,
        }
    }

    /// The per-instance rate bound of Events.
    pub fn event_limit(&self) -> EventLimitConfig {
        EventLimitConfig {
            burst: self.event_burst,
            refill: self.event_interval,
        }
    }

    /// The sharding settings for `identity`, `None` when sharding is off.
    /// Reads `POD_NAMESPACE` when `--lease-namespace` is not set: call at
    /// start-up only.
    pub fn shard_config(&self, identity: &str) -> Result<Option<ShardConfig>, ConfigError> {
        if !self.sharding {
            return Ok(None);
        }
        let namespace = self
            .lease_namespace
            .clone()
            .filter(|n| !n.trim().is_empty())
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .ok_or(ShardError::NoNamespace)?;
        Ok(Some(ShardConfig::new(
            namespace,
            self.agent_group.clone(),
            identity,
            self.lease_duration,
        )?))
    }

    /// The agent identity: `--agent-identity`, else `POD_NAME`, else the
    /// hostname. Reads the environment: call at start-up only.
    pub fn resolve_identity(&self) -> Result<String, ConfigError> {
        let from_env = std::env::var("POD_NAME").ok();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok());
        pick_identity(
            self.agent_identity.as_deref(),
            from_env.as_deref(),
            hostname.as_deref(),
        )
    }
}

/// The first non-blank candidate, trimmed, in the order: flag, `POD_NAME`,
/// hostname.
pub fn pick_identity(
    flag: Option<&str>,
    pod_name: Option<&str>,
    hostname: Option<&str>,
) -> Result<String, ConfigError> {
    [flag, pod_name, hostname]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or(ConfigError::NoIdentity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: RunArgs,
    }

    #[test]
    fn defaults_match_the_design() {
        let w = Wrapper::try_parse_from(["x"]).expect("defaults parse");
        let a = w.args;
        assert!(a.namespaces.is_empty());
        assert_eq!(a.container_name, "kura");
        assert_eq!(a.port, 4000);
        assert_eq!(a.port_name, None);
        assert_eq!(a.poll_concurrency, 64);
        assert_eq!(a.poll_timeout, Duration::from_secs(2));
        assert_eq!(a.body_limit, 65536);
        assert_eq!(a.sweep_interval, Duration::from_secs(10));
        assert_eq!(a.heartbeat, Duration::from_secs(30));
        assert_eq!(a.write_rate, 50.0);
        assert_eq!(a.retention, SignedDuration::from_hours(1));
        assert_eq!(
            a.debug_listen,
            "0.0.0.0:8080".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(!a.sharding, "one replica, no Leases, unless asked");
        assert_eq!(a.agent_group, "kura-health-agent");
        assert_eq!(a.lease_duration, Duration::from_secs(15));
        assert_eq!(a.shard_config("me"), Ok(None));
    }

    #[test]
    fn sharding_flags_build_the_shard_config() {
        let w = Wrapper::try_parse_from([
            "x",
            "--sharding",
            "--lease-namespace",
            "kura-system",
            "--lease-duration",
            "9s",
        ])
        .expect("parse");
        let c = w.args.shard_config("agent-0").expect("ok").expect("on");
        assert_eq!(c.namespace, "kura-system");
        assert_eq!(c.identity, "agent-0");
        assert_eq!(c.renew_every, Duration::from_secs(3));
        let off = Wrapper::try_parse_from(["x", "--sharding=false"]).expect("parse");
        assert!(!off.args.sharding);
        let bad = Wrapper::try_parse_from([
            "x",
            "--sharding=true",
            "--lease-namespace=ns",
            "--lease-duration=1s",
        ])
        .expect("parse");
        assert!(matches!(
            bad.args.shard_config("a"),
            Err(ConfigError::Shard(_))
        ));
    }

    #[test]
    fn flags_override_defaults() {
        let w = Wrapper::try_parse_from([
            "x",
            "--namespace",
            "a,b",
            "--namespace",
            "c",
            "--poll-timeout",
            "500ms",
            "--port-name",
            "http",
            "--log-format",
            "text",
            "--write-rate",
            "5",
        ])
        .expect("parse");
        assert_eq!(w.args.namespaces, ["a", "b", "c"]);
        assert_eq!(w.args.poll_timeout, Duration::from_millis(500));
        assert_eq!(w.args.port_name.as_deref(), Some("http"));
        assert_eq!(w.args.log_format, LogFormat::Text);
        assert_eq!(w.args.write_rate, 5.0);
        assert!(Wrapper::try_parse_from(["x", "--poll-timeout", "2"]).is_err());
        assert!(Wrapper::try_parse_from(["x", "--poll-concurrency", "0"]).is_err());
    }

    #[test]
    fn args_convert_to_module_configs() {
        let w = Wrapper::try_parse_from([
            "x",
            "--port-name",
            "http",
            "--pod-selector",
            "app.kubernetes.io/name=kura",
            "--heartbeat",
            "1m",
        ])
        .expect("parse");
        assert_eq!(w.args.target_config().port, PollPort::Named("http".into()));
        assert_eq!(
            w.args.discovery_config().pod_selector.as_deref(),
            Some("app.kubernetes.io/name=kura")
        );
        assert_eq!(
            w.args.write_queue_config().heartbeat,
            Duration::from_secs(60)
        );
        let d = Wrapper::try_parse_from(["x"]).expect("parse");
        assert_eq!(d.args.target_config().port, PollPort::Number(4000));
        assert_eq!(d.args.write_queue_config().rate_per_second, 50.0);
    }

    #[test]
    fn poller_loop_and_engine_settings_come_from_the_flags() {
        let w = Wrapper::try_parse_from([
            "x",
            "--retention=90m",
            "--poll-timeout=500ms",
            "--poll-concurrency=8",
            "--poll-keep-alive=false",
            "--sweep-interval=3s",
        ])
        .expect("parse");
        let poll = w.args.poll_config();
        assert_eq!(poll.timeout, Duration::from_millis(500));
        assert_eq!(poll.concurrency, 8);
        assert!(!poll.keep_alive);
        assert_eq!(poll.body_limit, 64 * 1024);
        let l = w.args.loop_config("agent-0".into());
        assert_eq!(l.sweep_interval, Duration::from_secs(3));
        assert_eq!(l.engine.agent, "agent-0");
        assert_eq!(l.engine.aggregate.retention, SignedDuration::from_mins(90));
        assert_eq!(l.engine.gate, GateConfig::default());
        // A retention that is no positive duration is refused at start,
        // never replaced by a default.
        for bad in ["--retention=0s", "--retention=-1h", "--retention=60"] {
            assert!(Wrapper::try_parse_from(["x", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn identity_prefers_flag_then_pod_name_then_hostname() {
        assert_eq!(
            pick_identity(Some("f"), Some("p"), Some("h")),
            Ok("f".into())
        );
        assert_eq!(pick_identity(None, Some("p"), Some("h")), Ok("p".into()));
        assert_eq!(pick_identity(Some(" "), None, Some("h\n")), Ok("h".into()));
        assert_eq!(
            pick_identity(None, None, None),
            Err(ConfigError::NoIdentity)
        );
    }
}
