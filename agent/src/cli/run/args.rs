//! The flags of `kura-agent run` ([`RunArgs`]): each module's own `Args`
//! (its flags and their translation into its settings, beside the module
//! that uses them) flattened in, and the few that are `run`'s own (the
//! identity, the log format). Every flag can also be set by the
//! environment variable named next to it.

use clap::Args;
use kura_gate::GateConfig;

use crate::aggregate::AggregateArgs;
use crate::cli::LogFormat;
use crate::cli::gate_file::{GateArgs, GateFileError};
use crate::cluster::{DiscoveryArgs, PublicationArgs};
use crate::debug::DebugArgs;
use crate::engine::EngineConfig;
use crate::events::EventArgs;
use crate::poll::PollArgs;
use crate::runner::{CadenceArgs, CadenceError, LoopConfig};
use crate::shard::{ShardArgs, ShardError};
use crate::view::ViewArgs;
use crate::write::{ConditionArgs, WriteArgs, WriteQueueConfig};

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

/// Flags of `kura-agent run`: each module's own, flattened in the order of
/// `--help`. Every flag can also be set by the environment variable named
/// next to it.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// What is watched, and which port of a pod is polled (`cluster`).
    #[command(flatten)]
    pub discovery: DiscoveryArgs,

    /// How pods are polled (`poll`).
    #[command(flatten)]
    pub poll: PollArgs,

    /// How often instances are swept (`runner`).
    #[command(flatten)]
    pub cadence: CadenceArgs,

    /// The status writes' heartbeat and rate (`write`).
    #[command(flatten)]
    pub write: WriteArgs,

    /// How long a vanished pod's counters are kept (`aggregate`).
    #[command(flatten)]
    pub aggregate: AggregateArgs,

    /// Where the debug server listens (`debug`).
    #[command(flatten)]
    pub debug: DebugArgs,

    /// Identity written to `status.rolloutHealth.agent` (default: the
    /// `POD_NAME` environment variable, else the hostname).
    #[arg(long, env = "KURA_AGENT_IDENTITY")]
    pub agent_identity: Option<String>,

    /// Log format.
    #[arg(long, env = "KURA_AGENT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Whether and how replicas share the instances (`shard`).
    #[command(flatten)]
    pub shard: ShardArgs,

    /// The gate configuration files (`cli::gate_file`).
    #[command(flatten)]
    pub gate: GateArgs,

    /// What the fleet view may hold (`view`).
    #[command(flatten)]
    pub view: ViewArgs,

    /// Events and their rate bound (`events`).
    #[command(flatten)]
    pub events: EventArgs,

    /// Which conditions are written (`write::conditions`).
    #[command(flatten)]
    pub conditions: ConditionArgs,

    /// Where the agent publishes (`cluster`).
    #[command(flatten)]
    pub publication: PublicationArgs,
}

impl RunArgs {
    /// The write scheduler's settings, with the conditions written.
    pub fn write_queue_config(&self) -> WriteQueueConfig {
        self.write.config(self.conditions.condition_set())
    }

    /// The loop's and every instance engine's settings; `agent` is written
    /// to `rolloutHealth.agent`, `gate` is the cluster's gate configuration
    /// and `shadow` the shadow's ([`GateArgs::load`]). Check them with
    /// [`LoopConfig::validate`].
    pub fn loop_config(
        &self,
        agent: String,
        gate: GateConfig,
        shadow: Option<GateConfig>,
    ) -> LoopConfig {
        LoopConfig {
            cadence: self.cadence.cadence(),
            engine: EngineConfig {
                agent,
                aggregate: self.aggregate.config(),
                gate,
                shadow,
            },
            ..LoopConfig::default()
        }
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
    use crate::cluster::PollPort;
    use crate::events::EventLimitConfig;
    use crate::runner::Cadence;
    use clap::Parser;
    use jiff::SignedDuration;
    use std::net::SocketAddr;
    use std::time::Duration;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: RunArgs,
    }

    #[test]
    fn defaults_match_the_design() {
        let w = Wrapper::try_parse_from(["x"]).expect("defaults parse");
        let a = w.args;
        assert!(a.discovery.namespaces.is_empty());
        assert_eq!(a.discovery.container_name, "kura");
        assert_eq!(a.discovery.port, 4000);
        assert_eq!(a.discovery.port_name, None);
        assert_eq!(a.poll.poll_concurrency, 64);
        assert_eq!(a.poll.poll_timeout, Duration::from_secs(2));
        assert_eq!(a.poll.body_limit, 65536);
        assert_eq!(a.cadence.sweep_interval, None);
        let c = a.cadence.cadence();
        assert_eq!(c.rollout_interval, Duration::from_secs(2));
        assert_eq!(c.steady_interval, Duration::from_secs(30));
        assert_eq!(c.settle, Duration::from_secs(20 * 60));
        assert_eq!(c.jitter, 0.1);
        assert_eq!(
            a.loop_config("me".into(), GateConfig::default(), None)
                .validate(),
            Ok(())
        );
        assert_eq!(a.write.heartbeat, Duration::from_secs(30));
        assert_eq!(a.write.write_rate, 50.0);
        assert_eq!(a.aggregate.retention, SignedDuration::from_hours(1));
        assert_eq!(
            a.debug.debug_listen,
            "[::]:8080".parse::<SocketAddr>().expect("addr")
        );
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(!a.shard.sharding, "one replica, no Leases, unless asked");
        assert_eq!(a.shard.agent_group, "kura-health-agent");
        assert_eq!(a.shard.lease_duration, Duration::from_secs(15));
        assert_eq!(a.shard.config("me"), Ok(None));
        assert_eq!(a.events.limit(), EventLimitConfig::default());
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
        let c = w.args.shard.config("agent-0").expect("ok").expect("on");
        assert_eq!(c.namespace, "kura-system");
        assert_eq!(c.identity, "agent-0");
        assert_eq!(c.renew_every, Duration::from_secs(3));
        assert_eq!(c.units.get(), 64, "--shard-units defaults to 64");
        let w = Wrapper::try_parse_from([
            "x",
            "--sharding",
            "--lease-namespace=ns",
            "--shard-units=256",
        ])
        .expect("parse");
        let c = w.args.shard.config("a").expect("ok").expect("on");
        assert_eq!(c.units.get(), 256);
        for bad in ["--shard-units=100", "--shard-units=0", "--shard-units=512"] {
            assert!(
                Wrapper::try_parse_from(["x", "--sharding", bad]).is_err(),
                "{bad}"
            );
        }
        let off = Wrapper::try_parse_from(["x", "--sharding=false"]).expect("parse");
        assert!(!off.args.shard.sharding);
        let bad = Wrapper::try_parse_from([
            "x",
            "--sharding=true",
            "--lease-namespace=ns",
            "--lease-duration=1s",
        ])
        .expect("parse");
        assert!(bad.args.shard.config("a").is_err());
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
        assert_eq!(w.args.discovery.namespaces, ["a", "b", "c"]);
        assert_eq!(w.args.poll.poll_timeout, Duration::from_millis(500));
        assert_eq!(w.args.discovery.port_name.as_deref(), Some("http"));
        assert_eq!(w.args.log_format, LogFormat::Text);
        assert_eq!(w.args.write.write_rate, 5.0);
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
        assert_eq!(
            w.args.discovery.target_config().port,
            PollPort::Named("http".into())
        );
        assert_eq!(
            w.args.discovery.config().pod_selector.as_deref(),
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
        assert_eq!(
            d.args.discovery.target_config().port,
            PollPort::Number(4000)
        );
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
        let poll = w.args.poll.config();
        assert_eq!(poll.timeout, Duration::from_millis(500));
        assert_eq!(poll.concurrency, 8);
        assert!(!poll.keep_alive);
        assert_eq!(poll.body_limit, 64 * 1024);
        let gates = w.args.gate.load().expect("no file");
        let l = w
            .args
            .loop_config("agent-0".into(), gates.live, gates.shadow);
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
        let c = w.args.cadence.cadence();
        assert_eq!(c.rollout_interval, Duration::from_secs(1));
        assert_eq!(c.steady_interval, Duration::from_secs(60));
        assert_eq!(c.settle, Duration::from_secs(300));
        // --interval is --sweep-interval: both phases.
        for flag in ["--interval=5s", "--sweep-interval=5s"] {
            let w = Wrapper::try_parse_from(["x", flag]).expect("parse");
            assert_eq!(
                w.args.cadence.cadence().rollout_interval,
                Duration::from_secs(5)
            );
            assert_eq!(
                w.args.cadence.cadence().steady_interval,
                Duration::from_secs(5)
            );
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
            .loop_config("a".into(), GateConfig::default(), None)
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
        let gate = w.args.gate.load().expect("valid").live;
        assert_eq!(gate.fd_timeout_band, 4);
        assert_eq!(gate.peer_failure_band_minimum, 7);
        let l = w.args.loop_config("a".into(), gate.clone(), None);
        assert_eq!(l.engine.gate, gate);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"outboxBandPercent": 2000}"#).expect("write");
        let w = Wrapper::try_parse_from(["x", "--gate-config", bad.to_str().expect("utf-8")])
            .expect("parse");
        let message = w.args.gate.load().expect_err("refused").to_string();
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
