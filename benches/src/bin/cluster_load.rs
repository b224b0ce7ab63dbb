//! `cluster-load`: the real-cluster tier of the benchmarks (issue 28). The
//! shipped `kura-agent run`, default settings, against a real kube-apiserver
//! holding N `KuraInstance`s with realistic Pods, at rest and with a share
//! of the instances in a rolling update; prints a table and one JSON line
//! (`kura_benches::cluster_load` says what is measured).
//!
//! Run it through `scripts/cluster-load.sh`, which starts the API server
//! (with the audit log the API-request figures come from) and builds the
//! binaries:
//!
//! `scripts/cluster-load.sh --instances 3334 --max-peak-rss-mib 64`
//!
//! `--publication companion` measures the agent beside Tuist's KuraInstance
//! CRD (no `status.rolloutGate`): its default `auto` chooses the companion
//! target, and the statuses are read on the `KuraInstanceHealth` objects
//! (`--controller-stand-in` adds Kura's controller's status updates);
//! `--publication instance`, the default, is the run as before.
//!
//! `--replicas 3` runs three sharding replicas instead of one agent and
//! measures each (`kura_benches::cluster_load::replicas` says how the
//! top-level figures are made of theirs).
//!
//! Exit status: 0, 1 when the run could not be completed (every instance
//! without a status in time included), 2 when a bound given by a `--max-*`
//! flag is missed.

use clap::{Parser, Subcommand};
use kura_benches::cluster_load::stand_ins::serve_pods;
use kura_benches::cluster_load::{Bounds, ClusterLoadConfig, Publication, json_line, run, table};
use kura_benches::sim_process::Generations;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "cluster-load",
    about = "The shipped agent against a real API server with N realistic instances"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Mode>,
    #[command(flatten)]
    args: Args,
}

#[derive(Debug, clap::Args)]
struct Args {
    /// KuraInstances to create.
    #[arg(long, default_value_t = 100)]
    instances: usize,
    /// Pods per instance.
    #[arg(long, default_value_t = 3)]
    pods_per_instance: usize,
    /// Agent replicas (1–16). 1: one `kura-agent run` with its default
    /// settings. N > 1: N of them sharding the instances
    /// (KURA_AGENT_SHARDING=true, identities cluster-load-agent-0..N-1,
    /// Leases in --namespace), each measured on its own (a per-replica
    /// table, the JSON's `replicas` array); the top-level figures then sum
    /// CPU and rates over the replicas and take the largest replica's RSS;
    /// --max-peak-rss-mib applies to every replica, the CPU bounds to the
    /// sum.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    replicas: u8,
    /// With --replicas N > 1: after the rollout, replica N joins, then
    /// replica 0 leaves; each change's LIST requests by replica (audit
    /// log) and the API server's LIST bytes are reported, and the run
    /// fails when a change lists pods or instances without a selector
    /// (beyond a one-page probe) or makes two status writers alternate.
    #[arg(long)]
    membership_change: bool,
    /// Create the instances with their `kura.tuist.dev/shard` label (the
    /// Tuist provisioner may apply it); without it, sharding replicas
    /// with unit watches stamp it, as on a first install.
    #[arg(long)]
    shard_labelled: bool,
    /// Namespace of the instances and pods.
    #[arg(long, default_value = "kura-load")]
    namespace: String,
    /// The admin kubeconfig (scripts/k8s-up.sh writes one).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// A context of the kubeconfig for the agent (default: the current
    /// one); its user gets the chart's cluster-wide permissions.
    #[arg(long)]
    agent_context: Option<String>,
    /// The user name the API server knows the agent by (RBAC binding,
    /// audit log).
    #[arg(long, default_value = "kura-test-user")]
    agent_user: String,
    /// The kura-agent binary to measure (default: `kura-agent` next to this
    /// executable).
    #[arg(long)]
    agent_bin: Option<PathBuf>,
    /// The API server's audit log (for the API-request figures).
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// The directory of pod.json and pod-status.json.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/cluster-load"))]
    fixtures: PathBuf,
    /// Work directory (agent kubeconfig and log).
    #[arg(long, default_value = "/tmp/cluster-load")]
    work_dir: PathBuf,
    /// Port the stand-ins listen on (the agent's default --port).
    #[arg(long, default_value_t = 4000)]
    port: u16,
    /// Second octet of the stand-ins' first addresses (127.N.0.1).
    #[arg(long, default_value_t = 150)]
    first_octet: u8,
    /// Report generation of the stand-ins: `mixed` or 1–4.
    #[arg(long, default_value = "4", value_parser = Generations::parse)]
    generation: Generations,
    /// Requests in flight while creating the objects.
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// At most this long for every instance to get a status.
    #[arg(long, default_value = "600s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    status_timeout: Duration,
    /// Wait after every instance has a status, before the rest window.
    #[arg(long, default_value = "30s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    settle: Duration,
    /// The at-rest window.
    #[arg(long, default_value = "60s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    rest: Duration,
    /// The rollout window.
    #[arg(long, default_value = "60s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    rollout: Duration,
    /// Share of the instances rolled to a new image.
    #[arg(long, default_value_t = 0.05)]
    rollout_fraction: f64,
    /// Time between two pods of an instance in the rolling update.
    #[arg(long, default_value = "5s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    pod_gap: Duration,
    /// Where the agent publishes. `instance`: this project's KuraInstance
    /// CRD; the agent applies kurainstances/status and the harness reads
    /// the instances. `companion`: Tuist's KuraInstance CRD (--tuist-crd,
    /// no status.rolloutGate) plus the KuraInstanceHealth CRD; the agent
    /// creates a companion per instance and applies
    /// kurainstancehealths/status, and the harness reads the companions.
    /// Either way the agent runs with its default
    /// --publication-target auto, and the run fails if it chose the other.
    #[arg(long, default_value = "instance", value_parser = Publication::parse)]
    publication: Publication,
    /// Companion runs: a stand-in for Kura's controller rewrites every
    /// instance's status as it does (a full status update, PUT
    /// .../status, with its twelve-field rolloutHealth), once per
    /// --controller-every per instance, spread evenly, from before the
    /// agent starts to the end of the run (its requests are not the
    /// agent's: not in the API figures).
    #[arg(long, alias = "controller-standin")]
    controller_stand_in: bool,
    /// The controller stand-in's period per instance.
    #[arg(long, default_value = "30s", value_parser = kura_agent::model::parse::parse_positive_duration)]
    controller_every: Duration,
    /// Tuist's KuraInstance CRD (companion runs).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/crds/tuist-kurainstances.yaml"))]
    tuist_crd: PathBuf,
    /// Bound: peak RSS of the agent (of each replica) over the run, MiB.
    #[arg(long)]
    max_peak_rss_mib: Option<f64>,
    /// Bound: CPU share at rest, % of one core (summed over the replicas).
    #[arg(long)]
    max_rest_cpu_percent: Option<f64>,
    /// Bound: CPU share with the instances in a rollout, % of one core
    /// (summed over the replicas).
    #[arg(long)]
    max_rollout_cpu_percent: Option<f64>,
    /// Bound: seconds until every instance has a status.
    #[arg(long)]
    max_status_seconds: Option<f64>,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Serve stand-in pods for a parent `cluster-load` (internal).
    #[command(hide = true)]
    ServePods {
        #[arg(long)]
        first_ip: Ipv4Addr,
        #[arg(long)]
        port: u16,
        #[arg(long, default_value = "4", value_parser = Generations::parse)]
        generation: Generations,
    },
}

// The agent's allocator, as in fleet-load.
#[global_allocator]
static ALLOCATOR: kura_agent::cli::allocator::Allocator = kura_agent::cli::allocator::Allocator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Mode::ServePods {
            first_ip,
            port,
            generation,
        }) => serve_pods(first_ip, port, generation).map(|()| ExitCode::SUCCESS),
        None => measure(cli.args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("cluster-load: {e}");
        ExitCode::FAILURE
    })
}

fn measure(a: Args) -> Result<ExitCode, kura_benches::cluster_load::error::ClusterLoadError> {
    use kura_benches::cluster_load::error::ClusterLoadError;
    let exe = std::env::current_exe().map_err(ClusterLoadError::Child)?;
    let agent_bin = match a.agent_bin {
        Some(p) => p,
        None => exe
            .parent()
            .map(|d| d.join("kura-agent"))
            .unwrap_or_else(|| PathBuf::from("kura-agent")),
    };
    let config = ClusterLoadConfig {
        instances: a.instances,
        pods_per_instance: a.pods_per_instance,
        replicas: usize::from(a.replicas),
        membership_change: a.membership_change,
        shard_labelled: a.shard_labelled,
        namespace: a.namespace,
        kubeconfig: a.kubeconfig,
        agent_context: a.agent_context,
        agent_user: a.agent_user,
        agent_bin,
        audit_log: a.audit_log,
        fixtures: a.fixtures,
        tuist_crd: a.tuist_crd,
        work_dir: a.work_dir,
        exe,
        port: a.port,
        first_octet: a.first_octet,
        generations: a.generation,
        create_concurrency: a.create_concurrency,
        status_timeout: a.status_timeout,
        settle: a.settle,
        rest: a.rest,
        rollout: a.rollout,
        rollout_fraction: a.rollout_fraction.clamp(0.0, 1.0),
        pod_gap: a.pod_gap,
        publication: a.publication,
        controller_stand_in: a.controller_stand_in.then_some(a.controller_every),
    };
    let bounds = Bounds {
        max_peak_rss_mib: a.max_peak_rss_mib,
        max_rest_cpu_percent: a.max_rest_cpu_percent,
        max_rollout_cpu_percent: a.max_rollout_cpu_percent,
        max_status_seconds: a.max_status_seconds,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(ClusterLoadError::Runtime)?;
    let report = runtime.block_on(run(&config))?;
    print!("{}", table(&report));
    println!("{}", json_line(&report));
    let missed = bounds.missed(&report);
    for m in &missed {
        println!("BOUND MISSED: {m}");
    }
    Ok(if missed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
