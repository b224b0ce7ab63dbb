//! The real-cluster tier (issue 28): the shipped `kura-agent run`, default
//! settings, against a real kube-apiserver holding N `KuraInstance`s and
//! their realistic Pods, with kura-sim stand-ins answering each Pod's
//! `/status/rollout` on its `podIP`. What `cluster-load` measures:
//!
//! - **start-up**: from the agent's start until every instance has
//!   `status.rolloutHealth` (seconds, CPU share, API requests);
//! - **at rest**: a window after a settle period, nothing changing;
//! - **rollout**: a window from the moment a share of the instances
//!   (5 % by default) get a new `spec.image` and their pods are updated one
//!   at a time, highest ordinal first, as a StatefulSet rolling update does
//!   (new image in the Pod's spec and status, restart count + 1, the
//!   stand-in restarted so its counters start over).
//!
//! For each: CPU share of one core (user + system time over the window),
//! median and largest `VmRSS` sampled each half second, the peak (`VmHWM`),
//! polls, status writes, bytes of status writes
//! (`kura_agent_status_write_bytes_total`: per second, per applied write,
//! and, like the writes, per instance per minute) and Events per second
//! from the agent's own `/metrics`, and (with the API server's audit log,
//! as `scripts/cluster-load.sh` configures it) the API requests the
//! agent's user made per second, by verb and resource.
//!
//! Two publication modes ([`Publication`]): `instance` (this project's
//! `KuraInstance` CRD; statuses on the instances) and `companion` (Tuist's
//! CRD, which does not declare `status.rolloutGate`, plus the
//! `KuraInstanceHealth` CRD; statuses on the companions, which the agent
//! creates). The agent keeps its default `--publication-target auto`; the
//! run checks that it chose the mode's target. A companion run may add a
//! stand-in for Kura's controller ([`controller`]) updating every
//! instance's status every 30 s.
//!
//! With `--replicas N` (N > 1) the harness starts N `kura-agent run`
//! processes sharding the instances (`KURA_AGENT_SHARDING=true`, identity
//! `cluster-load-agent-<i>`, their Leases in the test namespace, granted
//! as the chart's Lease Role grants them, each its own debug port) and
//! measures every phase per replica as well: CPU share, RSS median and
//! max, peak (`VmHWM`), polls, status writes and Events per second, and
//! the instances it owns (its `kura_agent_owned_instances` gauge at the
//! window's end). The report's `replicas` array holds one entry per
//! replica (one entry, equal to the top-level figures, at N = 1). At
//! N > 1 the top-level figures are: CPU share and every rate summed over
//! the replicas, RSS figures and `peak_rss_mib` the largest replica's,
//! `total_peak_rss_mib` the sum of the peaks, API requests those of every
//! replica together (they share one user; [`replicas`] says more).
//! `--max-peak-rss-mib` applies to every replica; the CPU bounds to the
//! summed share.
//!
//! The objects: `testdata/cluster-load/pod.json` and `pod-status.json`,
//! applied server-side by `kube-controller-manager` and `kubelet` as field
//! managers, so each Pod carries realistic managed fields; instances applied
//! by `kura-fleet-controller` with their controller status.

pub mod agents;
pub mod apiserver;
pub mod controller;
pub mod error;
pub mod measure;
pub mod membership;
pub mod objects;
pub mod replicas;
pub mod stand_ins;

use crate::cluster_load::agents::{Agents, Mark};
use crate::cluster_load::controller::{ControllerCounts, ControllerStandIn};
use crate::cluster_load::error::ClusterLoadError;
use crate::cluster_load::measure::{RequestCounts, audit_last_first_status, audit_requests};
use crate::cluster_load::objects::{
    CONTROLLER_MANAGER, FLEET_MANAGER, KUBELET_MANAGER, NEW_IMAGE, OLD_IMAGE, PodName,
    PodTemplates, ROLLED_LABEL, instance, instance_name, instance_status,
};
use crate::cluster_load::replicas::{ReplicaFigures, combine, replica_table};
use crate::cluster_load::stand_ins::StandIns;
use crate::sim_process::Generations;
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the harness lists the instances while it waits for their
/// status.
const LIST_EVERY: Duration = Duration::from_secs(2);
/// How often the start-up wait looks at what its watch has seen.
const WATCH_CHECK_EVERY: Duration = Duration::from_millis(100);

/// The objects that carry the agent's status, counted off a watch (names
/// with a non-null `status.rolloutHealth`); the watch stops when this is
/// dropped.
struct StatusWatch {
    with: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusWatch {
    fn start(api: Api<DynamicObject>) -> Self {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let with: Arc<Mutex<HashSet<String>>> = Arc::default();
        let seen = with.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let mut seen = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                        let has = obj.data["status"]
                            .get("rolloutHealth")
                            .is_some_and(|v| !v.is_null());
                        if let Some(name) = obj.metadata.name {
                            if has {
                                seen.insert(name);
                            } else {
                                seen.remove(&name);
                            }
                        }
                    }
                    watcher::Event::Delete(obj) => {
                        if let Some(name) = obj.metadata.name {
                            seen.remove(&name);
                        }
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        });
        StatusWatch { with, task }
    }

    fn count(&self) -> usize {
        self.with
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What to run and for how long.
#[derive(Debug, Clone)]
pub struct ClusterLoadConfig {
    /// `KuraInstance`s to create.
    pub instances: usize,
    /// Pods per instance (StatefulSet replicas).
    pub pods_per_instance: usize,
    /// Agent replicas: 1 = one agent with its default settings (sharding
    /// off); more = that many sharding the instances.
    pub replicas: usize,
    /// With `replicas` > 1: after the rollout, a replica joins and then
    /// one leaves ([`membership`]).
    pub membership_change: bool,
    /// Create the instances with their `kura.tuist.dev/shard` label (as a
    /// provisioner may), not for the agents to stamp.
    pub shard_labelled: bool,
    /// Namespace of the instances and pods (created).
    pub namespace: String,
    /// The admin kubeconfig (the harness's own client; the agent's too
    /// unless `agent_context` is set).
    pub kubeconfig: PathBuf,
    /// A context of the kubeconfig for the agent (its user gets the
    /// chart's cluster-wide permissions, bound to `agent_user`).
    pub agent_context: Option<String>,
    /// The user name the API server knows the agent by (for the RBAC
    /// binding and the audit log).
    pub agent_user: String,
    /// The `kura-agent` binary measured.
    pub agent_bin: PathBuf,
    /// The API server's audit log (`scripts/cluster-load.sh` sets a policy
    /// that logs the agent's user at `Metadata`, nothing else).
    pub audit_log: Option<PathBuf>,
    /// The directory of `pod.json` and `pod-status.json`.
    pub fixtures: PathBuf,
    /// Tuist's `KuraInstance` CRD (companion runs):
    /// `testdata/crds/tuist-kurainstances.yaml`.
    pub tuist_crd: PathBuf,
    /// Work directory: the agent's kubeconfig and log.
    pub work_dir: PathBuf,
    /// This executable (it runs the stand-ins as `serve-pods`).
    pub exe: PathBuf,
    /// The port the stand-ins listen on (the agent's default `--port`).
    pub port: u16,
    /// Second octet of the first stand-in process's addresses.
    pub first_octet: u8,
    /// Report generation(s) of the stand-ins.
    pub generations: Generations,
    /// Requests in flight while the objects are created.
    pub create_concurrency: usize,
    /// At most this long for every instance to get a status.
    pub status_timeout: Duration,
    /// Wait this long after every instance has a status before measuring.
    pub settle: Duration,
    /// The at-rest window.
    pub rest: Duration,
    /// The rollout window.
    pub rollout: Duration,
    /// Share of the instances rolled to a new image.
    pub rollout_fraction: f64,
    /// Time between two pods of one instance in the rolling update.
    pub pod_gap: Duration,
    /// Where the agent publishes, and so which CRDs the cluster gets and
    /// where the harness reads the statuses.
    pub publication: Publication,
    /// With `Some(every)`: a stand-in for Kura's controller rewriting
    /// every instance's status (full update, twelve-field
    /// `rolloutHealth`) every `every`, spread evenly ([`controller`]).
    /// Companion runs only.
    pub controller_stand_in: Option<Duration>,
}

/// Where the agent publishes in a run (rollout-health.md, "Where the agent
/// publishes"). The agent runs with its default `--publication-target
/// auto` either way; the cluster is shaped so that `auto` chooses this
/// target, and the run fails when the agent says it chose the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Publication {
    /// This project's `KuraInstance` CRD (it declares
    /// `status.rolloutGate`): the agent applies `kurainstances/status`;
    /// the harness reads the instances' status.
    #[default]
    Instance,
    /// Tuist's `KuraInstance` CRD (`testdata/crds/tuist-kurainstances.yaml`,
    /// no `rolloutGate`) and the companion CRD: the agent creates one
    /// `KuraInstanceHealth` per instance and applies
    /// `kurainstancehealths/status`; the harness reads the companions.
    Companion,
}

impl Publication {
    /// The target's name, as the agent's flag and gauge spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Publication::Instance => "instance",
            Publication::Companion => "companion",
        }
    }

    /// `instance` or `companion`.
    pub fn parse(s: &str) -> Result<Publication, String> {
        match s {
            "instance" => Ok(Publication::Instance),
            "companion" => Ok(Publication::Companion),
            other => Err(format!("{other:?}: expected instance or companion")),
        }
    }
}

/// The figures of one phase.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PhaseFigures {
    /// Wall time of the window.
    pub seconds: f64,
    /// CPU share of one core over the window, in %.
    pub cpu_percent: f64,
    /// Median `VmRSS` sampled in the window.
    pub rss_median_mib: f64,
    /// Largest `VmRSS` sampled in the window.
    pub rss_max_mib: f64,
    /// `VmHWM` at the end of the window (the peak since the start).
    pub peak_rss_mib: f64,
    /// Polls per second (`kura_agent_polls_total`).
    pub polls_per_s: f64,
    /// Failed polls in the window.
    pub failed_polls: f64,
    /// Status writes applied per second (`kura_agent_status_writes_total{result="applied"}`).
    pub status_writes_per_s: f64,
    /// Bytes of status write bodies sent per second
    /// (`kura_agent_status_write_bytes_total`: every server-side apply's
    /// JSON, a companion's creation included).
    pub status_write_bytes_per_s: f64,
    /// Those bytes per applied write (`None`: no write applied in the
    /// window). Failed writes' bodies and companions' creations count in
    /// the bytes, not in the writes.
    pub status_write_bytes_per_write: Option<f64>,
    /// Status writes applied per instance per minute (the run's figure
    /// over every instance; absent from a replica's own figures).
    pub status_writes_per_instance_per_min: Option<f64>,
    /// Bytes of status write bodies per instance per minute (as
    /// `status_writes_per_instance_per_min`).
    pub status_write_bytes_per_instance_per_min: Option<f64>,
    /// Events published per second (`kura_agent_events_total`).
    pub events_per_s: f64,
    /// Instances owned at the window's end (`kura_agent_owned_instances`;
    /// sharding on only, else absent).
    pub owned_instances: Option<f64>,
    /// API requests per second of the agent's user (audit log).
    pub api_requests_per_s: Option<f64>,
    /// Those requests by `verb resource[/subresource]`, per second.
    pub api_by_kind: BTreeMap<String, f64>,
    /// The API server's own counters per second over the window, every
    /// user's (watch events sent and their bytes, LIST and WATCH requests,
    /// by resource: [`apiserver`]); empty for a replica's own figures or
    /// when the server's metrics could not be read.
    pub apiserver: BTreeMap<String, f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClusterLoadReport {
    /// The binary measured.
    pub agent_bin: String,
    /// The run's publication mode (`instance` or `companion`).
    pub publication: String,
    /// Each replica's publication target as its
    /// `kura_agent_publication_target` gauge said once every instance had
    /// a status (`null`: the agent exports no such gauge).
    pub agent_publication_targets: Vec<Option<String>>,
    /// What the stand-in for Kura's controller did over the run (absent:
    /// none ran).
    pub controller_stand_in: Option<ControllerStandInReport>,
    /// Instances.
    pub instances: usize,
    /// Pods.
    pub pods: usize,
    /// One Pod's JSON as the API server returns it, in bytes.
    pub pod_json_bytes: usize,
    /// Its `metadata.managedFields`, in bytes.
    pub pod_managed_fields_bytes: usize,
    /// Seconds to create every object (not measured on the agent).
    pub create_seconds: f64,
    /// Seconds from the agent's start until the harness's watch had seen
    /// `status.rolloutHealth` on every instance.
    pub status_seconds: f64,
    /// Seconds from the agent's start until the API server completed the
    /// last instance's first status write (audit log; absent without
    /// one), and how many instances that counts.
    pub status_stored_seconds: Option<f64>,
    /// Instances rolled in the rollout phase.
    pub rollout_instances: usize,
    /// Seconds from the rollout's start until every rolled instance was
    /// judged healthy on the new image with `RolloutHealthy` True (`None`:
    /// not within the window).
    pub rollout_healthy_seconds: Option<f64>,
    /// `VmHWM` at the end of the run (with several replicas: the largest
    /// replica's).
    pub peak_rss_mib: f64,
    /// The replicas' `VmHWM` at the end of the run, summed (equal to
    /// `peak_rss_mib` with one replica).
    pub total_peak_rss_mib: f64,
    /// Start-up: from the agent's start until every instance had a status.
    pub startup: PhaseFigures,
    /// At rest.
    pub rest: PhaseFigures,
    /// With `rollout_instances` instances in a rollout.
    pub rollout: PhaseFigures,
    /// Lines of the agents' logs at level WARN.
    pub log_warnings: usize,
    /// Lines of the agents' logs at level ERROR.
    pub log_errors: usize,
    /// Each replica's figures, in replica order (one entry with one
    /// replica).
    pub replicas: Vec<ReplicaFigures>,
    /// The join and the leave (`--membership-change`; absent without).
    pub membership: Option<membership::MembershipReport>,
}

/// The controller stand-in's part of the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ControllerStandInReport {
    /// Each instance's status updated once per this many seconds.
    pub every_seconds: f64,
    /// Its counters at the end of the run.
    #[serde(flatten)]
    pub counts: ControllerCounts,
    /// Successful updates per second over the start-up, rest and rollout
    /// windows together.
    pub updates_per_s: f64,
}

/// Limits a run is checked against (each only when set).
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    /// Peak RSS over the run, MiB, of every replica.
    pub max_peak_rss_mib: Option<f64>,
    /// CPU share at rest, %.
    pub max_rest_cpu_percent: Option<f64>,
    /// CPU share in the rollout phase, %.
    pub max_rollout_cpu_percent: Option<f64>,
    /// Seconds until every instance has a status.
    pub max_status_seconds: Option<f64>,
}

impl Bounds {
    /// The bounds `report` misses, as sentences.
    pub fn missed(&self, report: &ClusterLoadReport) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |what: &str, value: f64, bound: Option<f64>, unit: &str| {
            if let Some(b) = bound
                && value > b
            {
                out.push(format!(
                    "{what} {value:.1}{unit} is above the bound {b}{unit}"
                ));
            }
        };
        if report.replicas.len() > 1 {
            for r in &report.replicas {
                check(
                    &format!("peak RSS of {}", r.name()),
                    r.peak_rss_mib,
                    self.max_peak_rss_mib,
                    " MiB",
                );
            }
        } else {
            check(
                "peak RSS",
                report.peak_rss_mib,
                self.max_peak_rss_mib,
                " MiB",
            );
        }
        check(
            "CPU at rest",
            report.rest.cpu_percent,
            self.max_rest_cpu_percent,
            " %",
        );
        check(
            "CPU in the rollout",
            report.rollout.cpu_percent,
            self.max_rollout_cpu_percent,
            " %",
        );
        check(
            "time until every instance has a status",
            report.status_seconds,
            self.max_status_seconds,
            " s",
        );
        out
    }
}

/// The `KuraInstance` resource.
fn instances_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kura.tuist.dev", "v1alpha1", "KuraInstance"),
        "kurainstances",
    )
}

/// The companion resource, `KuraInstanceHealth`.
fn companions_resource() -> ApiResource {
    ApiResource::erase::<kura_schemas::KuraInstanceHealth>(&())
}

/// A client for `context` of the kubeconfig at `path` (current context when
/// `None`).
async fn client(path: &Path, context: Option<&str>) -> Result<Client, ClusterLoadError> {
    let err = |source| ClusterLoadError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(err)?;
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(err)?;
    config.read_timeout = Some(Duration::from_secs(120));
    Client::try_from(config).map_err(ClusterLoadError::Client)
}

/// Run the whole measurement.
pub async fn run(config: &ClusterLoadConfig) -> Result<ClusterLoadReport, ClusterLoadError> {
    let admin = client(&config.kubeconfig, None).await?;
    let templates = PodTemplates::load(&config.fixtures)?;
    std::fs::create_dir_all(&config.work_dir).map_err(|source| ClusterLoadError::WorkDir {
        path: config.work_dir.clone(),
        source,
    })?;
    let n = config.instances;
    let ppi = config.pods_per_instance.max(1);
    if config.controller_stand_in.is_some() && config.publication != Publication::Companion {
        return Err(ClusterLoadError::Protocol(
            "the controller stand-in writes status.rolloutHealth: with it the agent's auto \
             choice is companion, so it runs with --publication companion only"
                .to_owned(),
        ));
    }
    let mut report = ClusterLoadReport {
        agent_bin: config.agent_bin.display().to_string(),
        publication: config.publication.as_str().to_owned(),
        instances: n,
        pods: n * ppi,
        ..ClusterLoadReport::default()
    };

    // ---- the cluster's objects ----------------------------------------
    let created = Instant::now();
    match config.publication {
        Publication::Instance => {
            let crd = serde_json::to_value(kura_schemas::KuraInstance::crd())
                .map_err(ClusterLoadError::Crd)?;
            apply_crd(&admin, &crd).await?;
        }
        Publication::Companion => {
            apply_crd(&admin, &tuist_crd(&config.tuist_crd)?).await?;
            let crd = serde_json::to_value(kura_schemas::KuraInstanceHealth::crd())
                .map_err(ClusterLoadError::Crd)?;
            apply_crd(&admin, &crd).await?;
        }
    }
    let ns_api: Api<Namespace> = Api::all(admin.clone());
    ns_api
        .patch(
            &config.namespace,
            &PatchParams::apply(FLEET_MANAGER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": config.namespace}})),
        )
        .await
        .map_err(ClusterLoadError::api("create the namespace"))?;
    if config.agent_context.is_some() {
        grant_agent(&admin, &config.agent_user).await?;
        if config.replicas > 1 {
            grant_leases(&admin, &config.agent_user, &config.namespace).await?;
        }
    }
    eprintln!("cluster-load: creating {n} instances and {} pods", n * ppi);
    let instances: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), &config.namespace, &instances_resource());
    let ns = config.namespace.as_str();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = instances.clone();
            async move {
                let name = instance_name(i);
                let pp = PatchParams::apply(FLEET_MANAGER).force();
                api.patch(
                    &name,
                    &pp,
                    &Patch::Apply(instance(
                        ns,
                        i,
                        ppi,
                        OLD_IMAGE,
                        false,
                        config.shard_labelled,
                    )),
                )
                .await
                .map_err(ClusterLoadError::api(format!("apply instance {name}")))?;
                api.patch_status(
                    &name,
                    &pp,
                    &Patch::Apply(instance_status(ns, i, ppi, OLD_IMAGE)),
                )
                .await
                .map_err(ClusterLoadError::api(format!(
                    "apply instance status {name}"
                )))?;
                Ok::<_, ClusterLoadError>(())
            }
        })
        .buffer_unordered(config.create_concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    // Where the agent's statuses are read: the instances, or their
    // companions (same namespace and name).
    let statuses: Api<DynamicObject> = match config.publication {
        Publication::Instance => instances.clone(),
        Publication::Companion => {
            Api::namespaced_with(admin.clone(), &config.namespace, &companions_resource())
        }
    };
    let where_ = match config.publication {
        Publication::Instance => "instances",
        Publication::Companion => "companions (KuraInstanceHealth)",
    };
    let (already, _) = count_with_status(&statuses, &Which::All).await?;
    if already > 0 {
        return Err(ClusterLoadError::Protocol(format!(
            "{already} {where_} in namespace {ns} already have a status (an earlier run's): use a fresh namespace or API server"
        )));
    }
    let pods: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &ApiResource::erase::<Pod>(&()));
    let names: Vec<PodName> = (0..n)
        .flat_map(|i| (0..ppi).map(move |o| PodName::new(ns, i, o)))
        .collect();
    let uids: Vec<(String, String)> = futures::stream::iter(names.iter())
        .map(|p| {
            let api = pods.clone();
            let templates = &templates;
            async move {
                let body = templates.pod(p, OLD_IMAGE)?;
                let obj = api
                    .patch(
                        &p.pod,
                        &PatchParams::apply(CONTROLLER_MANAGER).force(),
                        &Patch::Apply(body),
                    )
                    .await
                    .map_err(ClusterLoadError::api(format!("apply pod {}", p.pod)))?;
                Ok::<_, ClusterLoadError>((p.pod.clone(), obj.metadata.uid.unwrap_or_default()))
            }
        })
        .buffered(config.create_concurrency.max(1))
        .try_collect()
        .await?;
    let stand_ins = StandIns::spawn(
        &config.exe,
        &uids,
        config.first_octet,
        config.port,
        config.generations,
    )?;
    let started = Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(1))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    futures::stream::iter(names.iter())
        .map(|p| {
            let api = pods.clone();
            let templates = &templates;
            let ip = stand_ins.addr(&p.pod).map(|a| a.ip());
            async move {
                let Some(std::net::IpAddr::V4(ip)) = ip else {
                    return Err(ClusterLoadError::Protocol(format!(
                        "no IPv4 stand-in for {}",
                        p.pod
                    )));
                };
                let body = templates.status(p, OLD_IMAGE, ip, 0, started)?;
                api.patch_status(
                    &p.pod,
                    &PatchParams::apply(KUBELET_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map_err(ClusterLoadError::api(format!("apply pod status {}", p.pod)))?;
                Ok(())
            }
        })
        .buffer_unordered(config.create_concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    if let Some(first) = names.first() {
        let pod = pods
            .get(&first.pod)
            .await
            .map_err(ClusterLoadError::api("get a pod"))?;
        report.pod_json_bytes = serde_json::to_vec(&pod).map(|v| v.len()).unwrap_or(0);
        report.pod_managed_fields_bytes = serde_json::to_vec(&pod.metadata.managed_fields)
            .map(|v| v.len())
            .unwrap_or(0);
    }
    report.create_seconds = created.elapsed().as_secs_f64();
    eprintln!(
        "cluster-load: created in {:.1} s; a Pod is {:.1} KB of JSON, {:.1} KB of it managed fields",
        report.create_seconds,
        report.pod_json_bytes as f64 / 1000.0,
        report.pod_managed_fields_bytes as f64 / 1000.0
    );

    // ---- Kura's controller (stand-in) ------------------------------------
    // Running before the agent starts, as Kura's controller would be.
    let controller = match config.controller_stand_in {
        Some(every) => {
            eprintln!(
                "cluster-load: controller stand-in: a full status update of every instance every {every:?}"
            );
            Some((
                ControllerStandIn::start(instances.clone(), n, ppi, every).await?,
                every,
            ))
        }
        None => None,
    };

    // ---- the agent ------------------------------------------------------
    // The start-up window opens before the agent starts: its first lists
    // and watches count.
    let start_mark = Mark::before_start(config.replicas.max(1));
    let server_start = apiserver::read(&admin).await;
    let mut agents = Agents::start(config)?;
    for p in agents.processes() {
        eprintln!(
            "cluster-load: agent {}{} started (pid {}, debug {}, log {})",
            config.agent_bin.display(),
            p.identity
                .as_deref()
                .map_or_else(String::new, |id| format!(" as {id}")),
            p.pid,
            p.debug,
            p.log.display()
        );
    }
    eprintln!("cluster-load: waiting for every instance's status on its {where_}");
    let deadline = start_mark.at + config.status_timeout;
    // Watched, not listed: a full list of every status every 2 s was
    // about 12 MB of JSON the API server encoded while the agent wrote,
    // on the same cores, and it saw the last status up to a list late.
    let seen = StatusWatch::start(statuses.clone());
    loop {
        agents.alive()?;
        let with = seen.count();
        if with >= n {
            break;
        }
        if Instant::now() > deadline {
            let chosen = agents.mark().map(|m| targets_of(&m)).unwrap_or_default();
            return Err(ClusterLoadError::Timeout(format!(
                "{with} of {n} {where_} had status.rolloutHealth after {:?} (the agent's publication target: {chosen:?}, the run's: {})",
                config.status_timeout,
                config.publication.as_str()
            )));
        }
        tokio::time::sleep(WATCH_CHECK_EVERY).await;
    }
    drop(seen);
    let status_mark = agents.mark()?;
    let server_status = apiserver::read(&admin).await;
    report.agent_publication_targets = targets_of(&status_mark);
    if let Some(other) = report
        .agent_publication_targets
        .iter()
        .flatten()
        .find(|t| *t != config.publication.as_str())
    {
        return Err(ClusterLoadError::Protocol(format!(
            "the agent chose publication target {other}, the run is for {}",
            config.publication.as_str()
        )));
    }
    report.status_seconds = status_mark.at.duration_since(start_mark.at).as_secs_f64();
    let startup = agents.figures(&start_mark, &status_mark);
    eprintln!(
        "cluster-load: every instance has a status after {:.1} s; settling {:?}",
        report.status_seconds, config.settle
    );

    // ---- at rest --------------------------------------------------------
    tokio::time::sleep(config.settle).await;
    let rest_from = agents.mark()?;
    let server_rest_from = apiserver::read(&admin).await;
    eprintln!("cluster-load: at rest for {:?}", config.rest);
    tokio::time::sleep(config.rest).await;
    let rest_to = agents.mark()?;
    let server_rest_to = apiserver::read(&admin).await;
    let rest = agents.figures(&rest_from, &rest_to);

    // ---- rollout --------------------------------------------------------
    let k = if config.rollout_fraction > 0.0 {
        ((n as f64 * config.rollout_fraction).round() as usize).clamp(1, n.max(1))
    } else {
        0
    };
    report.rollout_instances = k;
    let rolled: Vec<usize> = (0..k).map(|j| j * n / k.max(1)).collect();
    let rolled_names: HashSet<String> = rolled.iter().map(|&i| instance_name(i)).collect();
    let rolled_statuses = match config.publication {
        // The rolled instances carry a label; their companions do not.
        Publication::Instance => Which::Label(ROLLED_LABEL),
        Publication::Companion => Which::Names(&rolled_names),
    };
    eprintln!(
        "cluster-load: rolling {k} instances to {NEW_IMAGE} (one pod every {:?}), window {:?}",
        config.pod_gap, config.rollout
    );
    let stand_ins = Arc::new(Mutex::new(stand_ins));
    let roll_from = agents.mark()?;
    let server_roll_from = apiserver::read(&admin).await;
    let roll = tokio::spawn(
        Roll {
            instances: instances.clone(),
            pods: pods.clone(),
            templates: Arc::new(templates.clone()),
            stand_ins: Arc::clone(&stand_ins),
            namespace: ns.to_owned(),
            pods_per_instance: ppi,
            shard_labelled: config.shard_labelled,
            gap: config.pod_gap,
        }
        .run(rolled),
    );
    let window_end = roll_from.at + config.rollout;
    let mut roll_result = None;
    let mut roll = Some(roll);
    while Instant::now() < window_end {
        agents.alive()?;
        if let Some(handle) = roll.take_if(|h| h.is_finished()) {
            roll_result = Some(handle.await);
        }
        if report.rollout_healthy_seconds.is_none() && roll.is_none() && k > 0 {
            let (_, healthy) = count_with_status(&statuses, &rolled_statuses).await?;
            if healthy >= k {
                report.rollout_healthy_seconds = Some(roll_from.at.elapsed().as_secs_f64());
            }
        }
        let left = window_end.saturating_duration_since(Instant::now());
        tokio::time::sleep(LIST_EVERY.min(left)).await;
    }
    let roll_to = agents.mark()?;
    let server_roll_to = apiserver::read(&admin).await;
    let rollout = agents.figures(&roll_from, &roll_to);
    match roll_result {
        Some(Ok(r)) => r?,
        Some(Err(e)) => return Err(ClusterLoadError::Protocol(format!("rollout task: {e}"))),
        None => {
            if let Some(handle) = roll.take() {
                eprintln!("cluster-load: the rolling update outlasted the window; waiting for it");
                handle
                    .await
                    .map_err(|e| ClusterLoadError::Protocol(format!("rollout task: {e}")))??;
            }
        }
    }
    let peaks = agents.peaks_mib();
    if config.membership_change && config.replicas > 1 {
        let m = membership::run(config, &mut agents, &admin).await?;
        eprint!("{}", membership::table(&m));
        let wrong = membership::violations(&m);
        report.membership = Some(m);
        if !wrong.is_empty() {
            agents.stop();
            return Err(ClusterLoadError::Protocol(format!(
                "membership change: {}",
                wrong.join("; ")
            )));
        }
    }
    agents.stop();
    if let Some((c, every)) = &controller {
        c.stop();
        let counts = c.counts();
        let secs = roll_to.at.duration_since(start_mark.at).as_secs_f64();
        report.controller_stand_in = Some(ControllerStandInReport {
            every_seconds: every.as_secs_f64(),
            counts,
            updates_per_s: counts.updates as f64 / secs.max(1e-9),
        });
    }
    report.startup = combine(&startup);
    report.rest = combine(&rest);
    report.rollout = combine(&rollout);
    for phase in [&mut report.startup, &mut report.rest, &mut report.rollout] {
        per_instance(phase, n);
    }
    for (phase, from, to) in [
        (&mut report.startup, &server_start, &server_status),
        (&mut report.rest, &server_rest_from, &server_rest_to),
        (&mut report.rollout, &server_roll_from, &server_roll_to),
    ] {
        if let (Some(from), Some(to)) = (from, to) {
            phase.apiserver = apiserver::rates(from, to, phase.seconds);
        }
    }
    report.peak_rss_mib = peaks.iter().copied().fold(0.0, f64::max);
    report.total_peak_rss_mib = peaks.iter().sum();
    report.replicas = agents.replica_reports(startup, rest, rollout, &peaks);
    report.log_warnings = report.replicas.iter().map(|r| r.log_warnings).sum();
    report.log_errors = report.replicas.iter().map(|r| r.log_errors).sum();

    // ---- API requests ---------------------------------------------------
    if let Some(log) = &config.audit_log {
        let windows = [
            (start_mark.ts, status_mark.ts),
            (rest_from.ts, rest_to.ts),
            (roll_from.ts, roll_to.ts),
        ];
        let counts = audit_requests(log, &config.agent_user, &windows)?;
        let resource = match config.publication {
            Publication::Instance => "kurainstances",
            Publication::Companion => "kurainstancehealths",
        };
        if let Some((last, count)) =
            audit_last_first_status(log, &config.agent_user, resource, start_mark.ts)?
            && count >= n
        {
            report.status_stored_seconds = Some(last.duration_since(start_mark.ts).as_secs_f64());
        }
        for (phase, c) in [&mut report.startup, &mut report.rest, &mut report.rollout]
            .into_iter()
            .zip(counts)
        {
            apply_counts(phase, &c);
        }
    }
    Ok(report)
}

/// The run's writes and bytes per instance per minute, from its rates.
fn per_instance(phase: &mut PhaseFigures, instances: usize) {
    if instances == 0 {
        return;
    }
    let per = 60.0 / instances as f64;
    phase.status_writes_per_instance_per_min = Some(phase.status_writes_per_s * per);
    phase.status_write_bytes_per_instance_per_min = Some(phase.status_write_bytes_per_s * per);
}

/// Each replica's publication target at `mark`, as strings.
fn targets_of(mark: &Mark) -> Vec<Option<String>> {
    Agents::publication_targets(mark)
        .into_iter()
        .map(|t| t.map(str::to_owned))
        .collect()
}

fn apply_counts(phase: &mut PhaseFigures, c: &RequestCounts) {
    let secs = phase.seconds.max(1e-9);
    phase.api_requests_per_s = Some(c.total as f64 / secs);
    phase.api_by_kind = c
        .by_kind
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64 / secs))
        .collect();
}

/// Tuist's `KuraInstance` CRD from its YAML.
fn tuist_crd(path: &Path) -> Result<serde_json::Value, ClusterLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClusterLoadError::Fixture {
        path: path.to_path_buf(),
        source,
    })?;
    serde_yaml::from_str(&text)
        .map_err(|e| ClusterLoadError::Protocol(format!("{}: not a CRD: {e}", path.display())))
}

/// Apply a CRD and wait until it is established.
async fn apply_crd(client: &Client, crd: &serde_json::Value) -> Result<(), ClusterLoadError> {
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("cluster-load").force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(ClusterLoadError::api(format!("apply the CRD {name}")))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = api
            .get(&name)
            .await
            .map_err(ClusterLoadError::api("get the CRD"))?;
        let established = got
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            // The resource is served a moment after it is established.
            tokio::time::sleep(Duration::from_secs(1)).await;
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ClusterLoadError::Timeout(
                "the CRD to be established".to_owned(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The chart's cluster-wide permissions (`kha.watchRules`), plus what the
/// publication choice and companion mode need, bound to `user`.
async fn grant_agent(client: &Client, user: &str) -> Result<(), ClusterLoadError> {
    let name = "kura-load-agent";
    let pp = PatchParams::apply("cluster-load").force();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            name,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                    // `patch`: sharding replicas stamp the shard label on
                    // the instances (as the chart grants with sharding).
                    {"apiGroups": ["kura.tuist.dev"], "resources": ["kurainstances"], "verbs": ["get", "list", "watch", "patch"]},
                    {"apiGroups": ["kura.tuist.dev"], "resources": ["kurainstances/status"], "verbs": ["patch"]},
                    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
                    // `auto` reads the KuraInstance CRD; without it the
                    // agent cannot rule a second writer out and chooses
                    // companion.
                    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                     "resourceNames": ["kurainstances.kura.tuist.dev"], "verbs": ["get"]},
                    // Companion mode: watch the companions, create them
                    // (server-side apply), apply their status.
                    {"apiGroups": ["health.kura.tuist.dev"], "resources": ["kurainstancehealths"],
                     "verbs": ["get", "list", "watch", "create", "patch"]},
                    {"apiGroups": ["health.kura.tuist.dev"], "resources": ["kurainstancehealths/status"], "verbs": ["patch"]}
                ]
            })),
        )
        .await
        .map_err(ClusterLoadError::api("apply the agent's ClusterRole"))?;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch(
            name,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
            })),
        )
        .await
        .map_err(ClusterLoadError::api("bind the agent's ClusterRole"))?;
    Ok(())
}

/// The chart's Lease Role for sharding (`sharding.enabled`), in the
/// namespace of the Leases, bound to `user`: only Leases, only there.
async fn grant_leases(
    client: &Client,
    user: &str,
    namespace: &str,
) -> Result<(), ClusterLoadError> {
    let name = "kura-load-agent-leases";
    let pp = PatchParams::apply("cluster-load").force();
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    roles
        .patch(
            name,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}
                ]
            })),
        )
        .await
        .map_err(ClusterLoadError::api("apply the agents' Lease Role"))?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    bindings
        .patch(
            name,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
            })),
        )
        .await
        .map_err(ClusterLoadError::api("bind the agents' Lease Role"))?;
    Ok(())
}

/// The objects [`count_with_status`] counts.
enum Which<'a> {
    /// Every one.
    All,
    /// Those carrying this label.
    Label(&'a str),
    /// Those of these names.
    Names(&'a HashSet<String>),
}

/// (objects with `status.rolloutHealth`, objects judged healthy on
/// [`NEW_IMAGE`] with `RolloutHealthy` True) among `which` of `api`: the
/// instances, or their companions (whose status has the same fields).
async fn count_with_status(
    api: &Api<DynamicObject>,
    which: &Which<'_>,
) -> Result<(usize, usize), ClusterLoadError> {
    let mut lp = ListParams::default().match_any();
    if let Which::Label(l) = which {
        lp = lp.labels(l);
    }
    let list = api
        .list(&lp)
        .await
        .map_err(ClusterLoadError::api("list the statuses"))?;
    let mut with = 0;
    let mut healthy_new = 0;
    for obj in &list.items {
        if let Which::Names(names) = which
            && !obj
                .metadata
                .name
                .as_ref()
                .is_some_and(|n| names.contains(n))
        {
            continue;
        }
        let status = &obj.data["status"];
        if status.get("rolloutHealth").is_some_and(|v| !v.is_null()) {
            with += 1;
        }
        let gate = &status["rolloutGate"];
        let condition_true = status["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "RolloutHealthy" && c["status"] == "True")
        });
        if gate["targetImage"] == NEW_IMAGE && gate["verdict"] == "healthy" && condition_true {
            healthy_new += 1;
        }
    }
    Ok((with, healthy_new))
}

/// The rolling update of the rollout phase.
#[derive(Clone)]
struct Roll {
    instances: Api<DynamicObject>,
    pods: Api<DynamicObject>,
    templates: Arc<PodTemplates>,
    stand_ins: Arc<Mutex<StandIns>>,
    namespace: String,
    pods_per_instance: usize,
    shard_labelled: bool,
    gap: Duration,
}

impl Roll {
    /// Each rolled instance gets [`NEW_IMAGE`], then its pods, highest
    /// ordinal first, one every `gap`: the Pod's spec and status on the new
    /// image, restart count 1, its stand-in restarted. Instances roll side
    /// by side.
    async fn run(self, rolled: Vec<usize>) -> Result<(), ClusterLoadError> {
        let tasks: Vec<_> = rolled
            .into_iter()
            .map(|i| tokio::spawn(self.clone().one(i)))
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| ClusterLoadError::Protocol(format!("rollout task: {e}")))??;
        }
        Ok(())
    }

    async fn one(self, i: usize) -> Result<(), ClusterLoadError> {
        let ns = self.namespace.as_str();
        let ppi = self.pods_per_instance;
        self.instances
            .patch(
                &instance_name(i),
                &PatchParams::apply(FLEET_MANAGER).force(),
                &Patch::Apply(instance(ns, i, ppi, NEW_IMAGE, true, self.shard_labelled)),
            )
            .await
            .map_err(ClusterLoadError::api("set a new spec.image"))?;
        for ordinal in (0..ppi).rev() {
            let p = PodName::new(ns, i, ordinal);
            let body = self.templates.pod(&p, NEW_IMAGE)?;
            self.pods
                .patch(
                    &p.pod,
                    &PatchParams::apply(CONTROLLER_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map_err(ClusterLoadError::api(format!("roll pod {}", p.pod)))?;
            let ip = {
                let mut s = self.stand_ins.lock().map_err(|_| {
                    ClusterLoadError::Protocol("stand-ins lock poisoned".to_owned())
                })?;
                s.restart(&p.pod)?;
                s.addr(&p.pod).map(|a| a.ip())
            };
            let Some(std::net::IpAddr::V4(ip)) = ip else {
                return Err(ClusterLoadError::Protocol(format!(
                    "no stand-in for {}",
                    p.pod
                )));
            };
            let body = self
                .templates
                .status(&p, NEW_IMAGE, ip, 1, Timestamp::now())?;
            self.pods
                .patch_status(
                    &p.pod,
                    &PatchParams::apply(KUBELET_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map_err(ClusterLoadError::api(format!("roll pod status {}", p.pod)))?;
            if ordinal > 0 {
                tokio::time::sleep(self.gap).await;
            }
        }
        Ok(())
    }
}

/// The report as a table, for people.
pub fn table(r: &ClusterLoadReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "cluster-load: {} instances, {} pods (a Pod: {:.1} KB of JSON, {:.1} KB managed fields), agent {}{}\n",
        r.instances,
        r.pods,
        r.pod_json_bytes as f64 / 1000.0,
        r.pod_managed_fields_bytes as f64 / 1000.0,
        r.agent_bin,
        if r.replicas.len() > 1 {
            format!(
                ", {} replicas sharding (CPU and rates summed, RSS the largest replica's)",
                r.replicas.len()
            )
        } else {
            String::new()
        }
    ));
    out.push_str(&format!(
        "publication: {} (the agent's choice: {}){}\n",
        r.publication,
        if r.agent_publication_targets.is_empty() {
            "n/a".to_owned()
        } else {
            r.agent_publication_targets
                .iter()
                .map(|t| t.as_deref().unwrap_or("n/a"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        match &r.controller_stand_in {
            Some(c) => format!(
                "; controller stand-in: every instance's status every {:.0} s, {} updates ({:.2}/s), {} conflicts, {} errors",
                c.every_seconds, c.counts.updates, c.updates_per_s, c.counts.conflicts, c.counts.errors
            ),
            None => String::new(),
        }
    ));
    out.push_str(&format!(
        "every instance had a status after {:.1} s{}; {} instances rolled{}\n",
        r.status_seconds,
        match r.status_stored_seconds {
            Some(s) => format!(" (the API server had stored the last first status at {s:.1} s)"),
            None => String::new(),
        },
        r.rollout_instances,
        match r.rollout_healthy_seconds {
            Some(s) => format!(", all judged healthy on the new image after {s:.1} s"),
            None => ", not all judged healthy on the new image within the window".to_owned(),
        }
    ));
    out.push_str(&format!(
        "{:<22} {:>6} {:>6} {:>10} {:>9} {:>9} {:>8} {:>7} {:>9} {:>10} {:>8} {:>9} {:>10}\n",
        "phase",
        "secs",
        "CPU %",
        "RSS median",
        "RSS max",
        "peak RSS",
        "polls/s",
        "failed",
        "writes/s",
        "bytes/s",
        "B/write",
        "events/s",
        "API req/s"
    ));
    for (name, p) in [
        ("start-up (to status)", &r.startup),
        ("at rest", &r.rest),
        ("rollout", &r.rollout),
    ] {
        out.push_str(&format!(
            "{:<22} {:>6.1} {:>6.1} {:>6.1} MiB {:>5.1} MiB {:>5.1} MiB {:>8.1} {:>7} {:>9.2} {:>10.0} {:>8} {:>9.2} {:>10}\n",
            name,
            p.seconds,
            p.cpu_percent,
            p.rss_median_mib,
            p.rss_max_mib,
            p.peak_rss_mib,
            p.polls_per_s,
            p.failed_polls,
            p.status_writes_per_s,
            p.status_write_bytes_per_s,
            p.status_write_bytes_per_write
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}")),
            p.events_per_s,
            p.api_requests_per_s
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}")),
        ));
    }
    for (name, p) in [
        ("start-up", &r.startup),
        ("at rest", &r.rest),
        ("rollout", &r.rollout),
    ] {
        if let (Some(w), Some(b)) = (
            p.status_writes_per_instance_per_min,
            p.status_write_bytes_per_instance_per_min,
        ) {
            out.push_str(&format!(
                "per instance {name}: {w:.2} status writes/min, {b:.0} bytes/min ({:.1} KB/h)\n",
                b * 60.0 / 1000.0
            ));
        }
    }
    // The agent's own requests (audit log), then every user's as the API
    // server counts them, each phase on one line.
    for (what, whose, of) in [
        (
            "API requests/s",
            "",
            (|p| &p.api_by_kind) as fn(&PhaseFigures) -> &BTreeMap<String, f64>,
        ),
        ("API server/s", " (every user)", |p| &p.apiserver),
    ] {
        for (name, p) in [
            ("start-up", &r.startup),
            ("at rest", &r.rest),
            ("rollout", &r.rollout),
        ] {
            // The server's counters of the resources the agent reads or
            // writes (the JSON keeps every resource's).
            let items: Vec<String> = of(p)
                .iter()
                .filter(|(k, _)| {
                    whose.is_empty()
                        || k.rsplit_once(' ')
                            .is_some_and(|(_, r)| AGENT_RESOURCES.contains(&r))
                })
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect();
            if items.is_empty() {
                continue;
            }
            out.push_str(&format!("{what} {name}{whose}: {}\n", items.join(", ")));
        }
    }
    if r.replicas.len() > 1 {
        out.push_str(&format!(
            "peak RSS over the run: {:.1} MiB the largest replica, {:.1} MiB the {} together; agent logs: {} warnings, {} errors\n",
            r.peak_rss_mib,
            r.total_peak_rss_mib,
            r.replicas.len(),
            r.log_warnings,
            r.log_errors
        ));
        out.push_str(&replica_table(&r.replicas));
    } else {
        out.push_str(&format!(
            "peak RSS over the run: {:.1} MiB; agent log: {} warnings, {} errors\n",
            r.peak_rss_mib, r.log_warnings, r.log_errors
        ));
    }
    if let Some(m) = &r.membership {
        out.push_str(&membership::table(m));
    }
    out
}

/// The resources whose API-server counters the table prints.
const AGENT_RESOURCES: [&str; 5] = [
    "pods",
    "kurainstances",
    "kurainstancehealths",
    "leases",
    "events",
];

/// The report as one JSON line, for machines.
pub fn json_line(r: &ClusterLoadReport) -> String {
    json!({"cluster_load": r}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, peak: f64) -> ReplicaFigures {
        ReplicaFigures {
            identity: Some(name.to_owned()),
            peak_rss_mib: peak,
            ..ReplicaFigures::default()
        }
    }

    #[test]
    fn the_peak_rss_bound_applies_to_every_replica() {
        let bounds = Bounds {
            max_peak_rss_mib: Some(50.0),
            ..Bounds::default()
        };
        // The largest replica is within the bound only if every one is;
        // the message names the replica that missed it.
        let report = ClusterLoadReport {
            peak_rss_mib: 61.0,
            total_peak_rss_mib: 150.0,
            replicas: vec![
                replica("cluster-load-agent-0", 45.0),
                replica("cluster-load-agent-1", 61.0),
                replica("cluster-load-agent-2", 44.0),
            ],
            ..ClusterLoadReport::default()
        };
        let missed = bounds.missed(&report);
        assert_eq!(missed.len(), 1, "{missed:?}");
        assert!(missed[0].contains("cluster-load-agent-1"), "{missed:?}");
        // The sum of the peaks (150 MiB) is no replica's and bounds nothing.
        let within = ClusterLoadReport {
            replicas: vec![
                replica("cluster-load-agent-0", 45.0),
                replica("cluster-load-agent-1", 49.0),
            ],
            peak_rss_mib: 49.0,
            total_peak_rss_mib: 94.0,
            ..ClusterLoadReport::default()
        };
        assert!(bounds.missed(&within).is_empty());
    }

    #[test]
    fn one_replica_keeps_the_top_level_peak_bound() {
        let bounds = Bounds {
            max_peak_rss_mib: Some(50.0),
            ..Bounds::default()
        };
        let report = ClusterLoadReport {
            peak_rss_mib: 70.0,
            total_peak_rss_mib: 70.0,
            replicas: vec![ReplicaFigures {
                peak_rss_mib: 70.0,
                ..ReplicaFigures::default()
            }],
            ..ClusterLoadReport::default()
        };
        assert_eq!(
            bounds.missed(&report),
            vec!["peak RSS 70.0 MiB is above the bound 50 MiB".to_owned()]
        );
    }

    #[test]
    fn the_table_has_a_row_per_replica_and_phase_only_with_several() {
        let one = ClusterLoadReport {
            replicas: vec![ReplicaFigures::default()],
            ..ClusterLoadReport::default()
        };
        assert!(!table(&one).contains("per replica"));
        let mut three = ClusterLoadReport {
            replicas: (0..3)
                .map(|i| replica(&agents::replica_identity(i), 40.0))
                .collect(),
            ..ClusterLoadReport::default()
        };
        three.replicas[1].rest.owned_instances = Some(34.0);
        let t = table(&three);
        assert!(t.contains("3 replicas sharding"), "{t}");
        assert_eq!(t.matches("cluster-load-agent-1").count(), 4, "{t}");
        let rest_row = t
            .lines()
            .find(|l| l.starts_with("at rest") && l.contains("cluster-load-agent-1"))
            .expect("row");
        assert!(rest_row.contains(" 34 "), "{rest_row}");
        let absent = t
            .lines()
            .find(|l| l.starts_with("at rest") && l.contains("cluster-load-agent-0"))
            .expect("row");
        assert!(absent.contains("n/a"), "absent is not zero: {absent}");
    }
}
