//! Command-line flags and `KURA_AGENT_*` environment variables of
//! `kura-agent run`, and every translation of them into the settings of
//! the parts `run` composes (`impl RunArgs`): discovery, targets, poller,
//! loop and engine, write queue, sharding, identity.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use jiff::SignedDuration;
use kura_gate::GateConfig;

use crate::aggregate::AggregateConfig;
use crate::cli::LogFormat;
use crate::cli::gate_file::{self, GateFileError};
use crate::cli::parse::{
    parse_heartbeat_max, parse_positive_duration, parse_positive_signed, parse_rate,
};
use crate::cluster::{DiscoveryConfig, PollPort, TargetConfig};
use crate::engine::EngineConfig;
use crate::events::EventLimitConfig;
use crate::model::{PublicationTarget, TargetRequest};
use crate::poll::PollConfig;
use crate::runner::{Cadence, CadenceError, LoopConfig};
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
    /// The sweep intervals are unusable.
    #[error("sweep cadence: {0}")]
    Cadence(#[from] CadenceError),
    /// The `--gate-config` file is unusable.
    #[error("{0}")]
    GateFile(#[from] GateFileError),
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

    /// Port-forward streams open at once, across all instances: the pods of
    /// node-local instances (`spec.nodeLocalNetwork`) are polled through
    /// the API server's pod port-forward, one stream per poll (needs `get`
    /// and `create` on `pods/portforward`: the agent's websocket upgrade is
    /// a GET, authorized as `get`; `create` is the SPDY form's verb).
    #[arg(long, env = "KURA_AGENT_PORT_FORWARD_STREAMS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub port_forward_streams: u32,

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

    /// How long a vanished pod's counters are kept before they are folded
    /// into `retiredCounters`.
    #[arg(long, env = "KURA_AGENT_RETENTION", default_value = "1h", value_parser = parse_positive_signed)]
    pub retention: SignedDuration,

    /// Listen address of the read-only debug and metrics server. `[::]`
    /// listens on IPv4 and IPv6 (falls back to `0.0.0.0` on a host without
    /// IPv6).
    #[arg(long, env = "KURA_AGENT_DEBUG_LISTEN", default_value = "[::]:8080")]
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

    /// The gate's settings for every instance: a JSON (`.json`) or YAML
    /// file of `GateConfig` keys (camelCase, as in `kura-gate replay`'s
    /// `config`; every key optional, unknown keys refused). Without it the
    /// documented defaults apply. An instance's own
    /// `kura.tuist.dev/gate-config` annotation (a JSON object of the same
    /// keys) is merged over it for that instance only. `soakSeconds` and
    /// `waveDeadlineSeconds` are the orchestrator's: the agent publishes
    /// `healthySince` and never judges a wave.
    #[arg(long, env = "KURA_AGENT_GATE_CONFIG", value_name = "FILE")]
    pub gate_config: Option<PathBuf>,

    /// A candidate gate configuration (the same format as
    /// `--gate-config`, over the defaults) judged beside the live one on
    /// the same samples: every instance gets a second, shadow verdict
    /// (its annotation merged over this file, as the live one is over
    /// `--gate-config`), shown on the pages, in the verdict API under
    /// `shadow` and as `kura_instance_shadow_gate_*` series; it is never
    /// written to the status, a condition or an Event. Restarts start the
    /// shadow from the live verdict's baseline.
    #[arg(long, env = "KURA_AGENT_SHADOW_GATE_CONFIG", value_name = "FILE")]
    pub shadow_gate_config: Option<PathBuf>,
    /// Bytes every instance's timeline (the gate inputs judged since its
    /// baseline, `GET /api/v1/instances/{ns}/{name}/timeline`) may hold
    /// together. Past it the fleet's oldest ticks are dropped first; every
    /// timeline keeps its newest tick. 0 keeps the newest tick only.
    #[arg(long, env = "KURA_AGENT_TIMELINE_BUDGET_BYTES",
          default_value_t = crate::view::DEFAULT_TIMELINE_BUDGET_BYTES)]
    pub timeline_budget_bytes: usize,

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

    /// Where the agent publishes: `instance` (the KuraInstance's own
    /// status: only with this project's CRD and no other writer of
    /// `status.rolloutHealth`), `companion` (a KuraInstanceHealth per
    /// instance, owned by it; the KuraInstance is never written) or `auto`
    /// (chosen once at start: `companion` when the installed KuraInstance
    /// CRD lacks `status.rolloutGate`, cannot be read, or another manager
    /// writes `status.rolloutHealth`; else `instance`).
    #[arg(long, env = "KURA_AGENT_PUBLICATION_TARGET", default_value = "auto",
          value_parser = parse_publication_target)]
    pub publication_target: TargetRequest,
}

/// `auto`, `instance` or `companion`.
fn parse_publication_target(s: &str) -> Result<TargetRequest, String> {
    s.parse()
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
            targets: self.target_config(),
            publication: PublicationTarget::Instance,
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
            heartbeat_max: self.heartbeat_max,
            heartbeat_writes_per_second: self.heartbeat_writes_per_second,
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
            port_forward_streams: self.port_forward_streams as usize,
            ..PollConfig::default()
        }
    }

    /// How often instances are swept: `--sweep-interval` for both phases
    /// when set, else `--rollout-interval` and `--steady-interval`.
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

    /// The gate configuration of every instance: `--gate-config`'s file
    /// over the defaults, or the defaults. Reads the file: call at start-up
    /// only.
    pub fn gate_config(&self) -> Result<GateConfig, ConfigError> {
        match &self.gate_config {
            Some(path) => Ok(gate_file::load(path)?.config),
            None => Ok(GateConfig::default()),
        }
    }

    /// The shadow gate configuration: `--shadow-gate-config`'s file over
    /// the defaults, `None` without the flag. Reads the file: call at
    /// start-up only.
    pub fn shadow_gate_config(&self) -> Result<Option<GateConfig>, ConfigError> {
        match &self.shadow_gate_config {
            Some(path) => Ok(Some(gate_file::load(path)?.config)),
            None => Ok(None),
        }
    }

    /// The loop's and every instance engine's settings; `agent` is written
    /// to `rolloutHealth.agent`, `gate` is the cluster's gate configuration
    /// ([`RunArgs::gate_config`]). Check them with [`LoopConfig::validate`].
    pub fn loop_config(&self, agent: String, gate: GateConfig) -> LoopConfig {
        LoopConfig {
            cadence: self.cadence(),
            engine: EngineConfig {
                agent,
                aggregate: AggregateConfig {
                    retention: self.retention,
                    ..AggregateConfig::default()
                },
                gate,
                shadow: None,
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
        assert_eq!(a.sweep_interval, None);
        let c = a.cadence();
        assert_eq!(c.rollout_interval, Duration::from_secs(2));
        assert_eq!(c.steady_interval, Duration::from_secs(30));
        assert_eq!(c.settle, Duration::from_secs(20 * 60));
        assert_eq!(c.jitter, 0.1);
        assert_eq!(
            a.loop_config("me".into(), GateConfig::default()).validate(),
            Ok(())
        );
        assert_eq!(a.heartbeat, Duration::from_secs(30));
        assert_eq!(a.write_rate, 50.0);
        assert_eq!(a.retention, SignedDuration::from_hours(1));
        assert_eq!(
            a.debug_listen,
            "[::]:8080".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(!a.sharding, "one replica, no Leases, unless asked");
        assert_eq!(a.agent_group, "kura-health-agent");
        assert_eq!(a.lease_duration, Duration::from_secs(15));
        assert_eq!(a.shard_config("me"), Ok(None));
        assert_eq!(a.event_limit(), EventLimitConfig::default());
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
        assert_eq!(
            d.args.write_queue_config().heartbeat_max,
            Duration::from_secs(90)
        );
        assert_eq!(
            d.args.write_queue_config().heartbeat_writes_per_second,
            40.0
        );
        let h = Wrapper::try_parse_from([
            "x",
            "--heartbeat-max",
            "45s",
            "--heartbeat-writes-per-second",
            "100",
        ])
        .expect("parse");
        assert_eq!(
            h.args.write_queue_config().heartbeat_max,
            Duration::from_secs(45)
        );
        assert_eq!(
            h.args.write_queue_config().heartbeat_writes_per_second,
            100.0
        );
        let too_long = Wrapper::try_parse_from(["x", "--heartbeat-max", "91s"])
            .err()
            .expect("91s refused")
            .to_string();
        assert!(too_long.contains("at most 90s"), "{too_long}");
        assert!(Wrapper::try_parse_from(["x", "--heartbeat-writes-per-second", "0"]).is_err());
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
        let l = w
            .args
            .loop_config("agent-0".into(), w.args.gate_config().expect("no file"));
        assert_eq!(l.cadence, Cadence::fixed(Duration::from_secs(3)));
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
    fn cadence_flags() {
        let w = Wrapper::try_parse_from([
            "x",
            "--rollout-interval=1s",
            "--steady-interval=1m",
            "--settle=5m",
        ])
        .expect("parse");
        let c = w.args.cadence();
        assert_eq!(c.rollout_interval, Duration::from_secs(1));
        assert_eq!(c.steady_interval, Duration::from_secs(60));
        assert_eq!(c.settle, Duration::from_secs(300));
        // --interval is --sweep-interval: both phases.
        for flag in ["--interval=5s", "--sweep-interval=5s"] {
            let w = Wrapper::try_parse_from(["x", flag]).expect("parse");
            assert_eq!(w.args.cadence().rollout_interval, Duration::from_secs(5));
            assert_eq!(w.args.cadence().steady_interval, Duration::from_secs(5));
        }
        // ... and never together with either of the two.
        for other in ["--rollout-interval=1s", "--steady-interval=1m"] {
            let err = Wrapper::try_parse_from(["x", "--interval=5s", other])
                .err()
                .expect("refused");
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{err}"
            );
        }
        // A steady interval that lets samples go stale at rest is refused
        // at start-up, with the reason.
        let w = Wrapper::try_parse_from(["x", "--steady-interval=3m"]).expect("parse");
        let err = w
            .args
            .loop_config("a".into(), GateConfig::default())
            .validate()
            .map_err(ConfigError::from)
            .expect_err("refused");
        assert!(err.to_string().contains("maximum sample age"), "{err}");
        for bad in [
            "--settle=0s",
            "--rollout-interval=0s",
            "--steady-interval=30",
        ] {
            assert!(Wrapper::try_parse_from(["x", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_gate_config_file_reaches_every_engine() {
        let dir = std::env::temp_dir().join(format!("kura-run-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let good = dir.join("gate.yaml");
        std::fs::write(&good, "fdTimeoutBand: 4\npeerFailureBandMinimum: 7\n").expect("write");
        let w = Wrapper::try_parse_from(["x", &format!("--gate-config={}", good.display())])
            .expect("parse");
        let gate = w.args.gate_config().expect("valid");
        assert_eq!(gate.fd_timeout_band, 4);
        assert_eq!(gate.peer_failure_band_minimum, 7);
        let l = w.args.loop_config("a".into(), gate.clone());
        assert_eq!(l.engine.gate, gate);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"outboxBandPercent": 2000}"#).expect("write");
        let w = Wrapper::try_parse_from(["x", "--gate-config", bad.to_str().expect("utf-8")])
            .expect("parse");
        let message = w.args.gate_config().expect_err("refused").to_string();
        assert!(
            message.starts_with(&format!(
                "gate config {}: key outboxBandPercent: 2000 is above",
                bad.display()
            )),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
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
