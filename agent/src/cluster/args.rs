//! The flags of `kura-agent run` that say what discovery watches and how
//! pods become targets ([`DiscoveryArgs`]), and where the agent publishes
//! ([`PublicationArgs`]), each with its translation into this module's
//! settings.

use clap::Args;

use crate::cluster::{DiscoveryConfig, PodSelection, PollPort, TargetConfig, UnitWatchConfig};
use crate::model::{PublicationTarget, TargetRequest, UnitCount};

/// What is watched, and which port of a pod is polled.
#[derive(Debug, Clone, Args)]
pub struct DiscoveryArgs {
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

    /// With sharding, what each replica watches: `all` (every instance
    /// and pod, keeping its own: no labels needed, each replica then sees
    /// the whole fleet), `instance-label` (only its own watch units: the
    /// instances by their `kura.tuist.dev/shard` label, their pods by the
    /// instance names in `app.kubernetes.io/instance`, which Kura's
    /// controller puts on every pod) or `shard-label` (the pods by their
    /// own `kura.tuist.dev/shard` label too). The unit watches need the
    /// label on the instances: see `--stamp-shard-labels`.
    #[arg(long, env = "KURA_AGENT_SHARD_POD_SELECTION", default_value = "all",
          value_parser = parse_shard_pod_selection)]
    pub shard_pod_selection: ShardPodSelection,

    /// With unit watches: label the instances (and companions) that lack
    /// `kura.tuist.dev/shard` with their bucket (a server-side apply of
    /// that one label, under its own field manager; needs `patch` on
    /// `kurainstances`). Off: an unlabelled instance is in no unit, so
    /// unmonitored, and counted in `kura_agent_unlabelled_objects`.
    #[arg(long, env = "KURA_AGENT_STAMP_SHARD_LABELS", default_value_t = true,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub stamp_shard_labels: bool,
}

/// `--shard-pod-selection`: by unit (and how pods are selected), or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardPodSelection {
    /// Unit watches, pods selected so.
    Units(PodSelection),
    /// Every instance and pod watched, the own kept.
    All,
}

/// `instance-label`, `shard-label` or `all`.
fn parse_shard_pod_selection(s: &str) -> Result<ShardPodSelection, String> {
    match s.trim() {
        "all" => Ok(ShardPodSelection::All),
        other => other.parse().map(ShardPodSelection::Units),
    }
}

impl DiscoveryArgs {
    /// What discovery watches (publishing on the instance until the
    /// publication target is chosen).
    pub fn config(&self) -> DiscoveryConfig {
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
            units: None,
        }
    }

    /// How units are watched when the replicas share the fleet in
    /// `count` units (`None` with `--shard-pod-selection=all`).
    pub fn unit_watches(&self, count: UnitCount) -> Option<UnitWatchConfig> {
        match self.shard_pod_selection {
            ShardPodSelection::All => None,
            ShardPodSelection::Units(pods) => Some(UnitWatchConfig {
                count,
                pods,
                stamp: self.stamp_shard_labels,
            }),
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
}

/// Where the agent publishes.
#[derive(Debug, Clone, Args)]
pub struct PublicationArgs {
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
