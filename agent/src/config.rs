//! Command-line flags and `KURA_AGENT_*` environment variables of
//! `kura-agent run`, and the small parsers they need (durations like `2s`,
//! `10s`, `1h`).

use clap::{Args, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;

/// Errors of the configuration parsers.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration that is not written like `2s`, `500ms`, `10m`, `1h30m`.
    #[error("invalid duration {input:?}: {reason}")]
    InvalidDuration {
        /// What was given.
        input: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A write rate that is not a positive finite number.
    #[error("invalid rate {0:?}: expected a positive number of writes per second")]
    InvalidRate(String),
    /// The agent identity could not be found anywhere.
    #[error("no agent identity: set --agent-identity, POD_NAME or a hostname")]
    NoIdentity,
    /// The sharding settings are unusable.
    #[error("sharding: {0}")]
    Shard(#[from] crate::shard::ShardError),
}

/// Parses a non-negative duration written like `2s`, `500ms`, `10m`, `1h`,
/// `1h 30m` (jiff's friendly format) or ISO 8601 (`PT2S`). A bare number is
/// rejected: the unit is never guessed.
pub fn parse_duration(input: &str) -> Result<Duration, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty".to_owned()));
    }
    let signed: jiff::SignedDuration = trimmed
        .parse()
        .map_err(|e: jiff::Error| invalid(e.to_string()))?;
    if signed.is_negative() {
        return Err(invalid("negative".to_owned()));
    }
    Duration::try_from(signed).map_err(|e| invalid(e.to_string()))
}

/// Parses a positive duration (`0s` rejected).
pub fn parse_positive_duration(input: &str) -> Result<Duration, ConfigError> {
    let d = parse_duration(input)?;
    if d.is_zero() {
        return Err(ConfigError::InvalidDuration {
            input: input.to_owned(),
            reason: "must be greater than zero".to_owned(),
        });
    }
    Ok(d)
}

/// Parses a positive, finite rate (writes per second).
pub fn parse_rate(input: &str) -> Result<f64, ConfigError> {
    match input.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ConfigError::InvalidRate(input.to_owned())),
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// Human-readable text.
    Text,
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
    #[arg(long, env = "KURA_AGENT_RETENTION", default_value = "1h", value_parser = parse_positive_duration)]
    pub retention: Duration,

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
}

impl RunArgs {
    /// What discovery watches.
    pub fn discovery_config(&self) -> crate::cluster::DiscoveryConfig {
        crate::cluster::DiscoveryConfig {
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
    pub fn target_config(&self) -> crate::cluster::TargetConfig {
        use crate::cluster::{PollPort, TargetConfig};
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
    pub fn write_queue_config(&self) -> crate::write::WriteQueueConfig {
        crate::write::WriteQueueConfig {
            heartbeat: self.heartbeat,
            rate_per_second: self.write_rate,
            burst: self.write_burst,
            ..Default::default()
        }
    }

    /// The sharding settings for `identity`, `None` when sharding is off.
    /// Reads `POD_NAMESPACE` when `--lease-namespace` is not set: call at
    /// start-up only.
    pub fn shard_config(
        &self,
        identity: &str,
    ) -> Result<Option<crate::shard::ShardConfig>, ConfigError> {
        if !self.sharding {
            return Ok(None);
        }
        let namespace = self
            .lease_namespace
            .clone()
            .filter(|n| !n.trim().is_empty())
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .ok_or(crate::shard::ShardError::NoNamespace)?;
        Ok(Some(crate::shard::ShardConfig::new(
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
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn durations_without_unit_or_negative_are_rejected() {
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-2s").is_err());
        assert!(parse_duration("two seconds").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn rates_must_be_positive_and_finite() {
        assert_eq!(parse_rate("20"), Ok(20.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-1").is_err());
        assert!(parse_rate("inf").is_err());
        assert!(parse_rate("NaN").is_err());
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
        assert_eq!(a.retention, Duration::from_secs(3600));
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
        use crate::cluster::PollPort;
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
