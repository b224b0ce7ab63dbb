//! Discovery: watches of `KuraInstance`s and pods cached in reflector
//! stores, and the pure [`targets`] function that turns the stores'
//! contents into what one sweep polls.
//!
//! # How pods are matched to an instance
//!
//! The pods of a `KuraInstance` are the pods of the StatefulSet of the same
//! name in the same namespace (contract/rollout-health.md). A pod belongs
//! to instance `ns/name` when it is in namespace `ns` and one of its
//! `metadata.ownerReferences` has `kind: StatefulSet` and `name: name`.
//! Addresses are never guessed from names: a pod is polled at its own
//! `status.podIP`. The optional pod label selector (e.g.
//! `app.kubernetes.io/name=kura`) only narrows the watch on the API server;
//! it never adds a pod that the owner rule does not match. Pods in phase
//! `Succeeded` or `Failed` are left out (no process answers there).
//!
//! `KuraInstance`s are watched as dynamic objects and read leniently: the
//! spec must parse (an instance whose spec does not is skipped with a
//! reason), while each of `status.rolloutHealth`, `status.rolloutGate` and
//! the controller's fields is parsed on its own, so one unreadable status
//! field (say, written under an older CRD and partly pruned) neither hides
//! the instance nor breaks the watch for every other instance.

use crate::model::{
    GATE_CONFIG_ANNOTATION, InstanceInfo, InstanceKey, InstanceTarget, NoAddress, PodIdentity,
    PodTarget,
};
use crate::telemetry;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ResourceExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kura_schemas::health::MAX_POD_ENTRIES;
use kura_schemas::{
    KuraInstance, KuraInstanceSpec, KuraInstanceStatus, RolloutGate, RolloutHealth,
};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::watch;

/// Default Kura container name.
pub const DEFAULT_CONTAINER: &str = "kura";
/// Default poll port.
pub const DEFAULT_PORT: u16 = 4000;

/// Which port of a pod to poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollPort {
    /// A fixed port number.
    Number(u16),
    /// A named container port of the Kura container.
    Named(String),
}

/// How [`targets`] reads pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// The Kura container's name; the first container is used when no
    /// container has it.
    pub container_name: String,
    /// The port polled.
    pub port: PollPort,
    /// At most this many pods per instance (the rest are counted in
    /// [`InstanceTarget::pods_dropped`]).
    pub max_pods_per_instance: usize,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            container_name: DEFAULT_CONTAINER.to_owned(),
            port: PollPort::Number(DEFAULT_PORT),
            max_pods_per_instance: MAX_POD_ENTRIES,
        }
    }
}

/// An instance [`targets`] could not use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedInstance {
    /// The instance (name or namespace may be empty when missing).
    pub key: InstanceKey,
    /// Why.
    pub reason: String,
}

/// The result of [`targets`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Targets {
    /// Usable instances, sorted by namespace and name.
    pub instances: Vec<InstanceTarget>,
    /// Instances left out, with reasons.
    pub skipped: Vec<SkippedInstance>,
}

/// The API resource of `KuraInstance` (for dynamic watches and requests).
pub fn kura_instance_resource() -> ApiResource {
    ApiResource::erase::<KuraInstance>(&())
}

/// The name of the StatefulSet that owns `pod`, if any.
pub fn statefulset_owner(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "StatefulSet")
        .map(|o| o.name.as_str())
}

/// The Kura container of a pod: the one named `container_name`, else the
/// first.
fn kura_container<'a>(pod: &'a Pod, container_name: &str) -> Option<&'a Container> {
    let containers = &pod.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == container_name)
        .or_else(|| containers.first())
}

/// The identity of a pod: name, UID, the Kura container's restart count
/// (0 while the container has no status yet: it has not restarted) and
/// image (from the pod spec: what was asked for), and the pod IP. `None`
/// when the pod has no name or UID.
pub fn pod_identity(pod: &Pod, container_name: &str) -> Option<PodIdentity> {
    let name = pod.metadata.name.clone()?;
    let uid = pod.metadata.uid.clone()?;
    let container = kura_container(pod, container_name);
    let restart_count = container
        .and_then(|c| {
            pod.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|s| s.name == c.name)
        })
        .map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0));
    Some(PodIdentity {
        name,
        uid,
        restart_count,
        image: container.and_then(|c| c.image.clone()),
        ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
    })
}

/// Where to poll a pod.
pub fn pod_address(pod: &Pod, config: &TargetConfig) -> Result<SocketAddr, NoAddress> {
    let ip_text = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|s| !s.is_empty())
        .ok_or(NoAddress::NoPodIp)?;
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| NoAddress::InvalidPodIp(ip_text.to_owned()))?;
    let port = match &config.port {
        PollPort::Number(p) => *p,
        PollPort::Named(name) => kura_container(pod, &config.container_name)
            .and_then(|c| c.ports.as_ref())
            .and_then(|ports| {
                ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
            })
            .and_then(|p| u16::try_from(p.container_port).ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| NoAddress::NoNamedPort(name.clone()))?,
    };
    Ok(SocketAddr::new(ip, port))
}

fn pod_is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The parts of a `KuraInstance` the agent reads, parsed leniently from a
/// dynamic object.
struct ObservedInstance {
    info: InstanceInfo,
    spec: KuraInstanceSpec,
    status: Option<KuraInstanceStatus>,
    warnings: Vec<String>,
    gate_config: Option<String>,
}

fn observe_instance(obj: &DynamicObject) -> Result<ObservedInstance, SkippedInstance> {
    let key = InstanceKey::new(
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    );
    let skip = |reason: String| SkippedInstance {
        key: key.clone(),
        reason,
    };
    if key.namespace.is_empty() || key.name.is_empty() {
        return Err(skip(
            "metadata.name or metadata.namespace missing".to_owned(),
        ));
    }
    let generation = obj
        .metadata
        .generation
        .ok_or_else(|| skip("metadata.generation missing".to_owned()))?;
    let spec_value = obj
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| skip("spec missing".to_owned()))?;
    let spec: KuraInstanceSpec =
        serde_json::from_value(spec_value).map_err(|e| skip(format!("spec invalid: {e}")))?;
    let expected_pods = u32::try_from(spec.replicas)
        .ok()
        .filter(|r| *r >= 1)
        .ok_or_else(|| skip(format!("spec.replicas {} is below 1", spec.replicas)))?;
    let (status, warnings) = lenient_status(obj.data.get("status"));
    Ok(ObservedInstance {
        info: InstanceInfo {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            expected_pods,
            generation,
        },
        spec,
        status,
        warnings,
        gate_config: obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(GATE_CONFIG_ANNOTATION))
            .cloned(),
    })
}

/// Parses `status` field group by field group: `rolloutHealth`,
/// `rolloutGate`, and the controller's fields, each on its own.
fn lenient_status(value: Option<&serde_json::Value>) -> (Option<KuraInstanceStatus>, Vec<String>) {
    let mut warnings = Vec::new();
    let Some(serde_json::Value::Object(map)) = value else {
        if let Some(v) = value.filter(|v| !v.is_null()) {
            warnings.push(format!("status is not an object: {v}"));
        }
        return (None, warnings);
    };
    let mut rest = map.clone();
    let health = rest
        .remove("rolloutHealth")
        .filter(|v| !v.is_null())
        .and_then(|v| {
            serde_json::from_value::<RolloutHealth>(v)
                .map_err(|e| warnings.push(format!("status.rolloutHealth unreadable: {e}")))
                .ok()
        });
    let conditions = rest
        .remove("conditions")
        .filter(|v| !v.is_null())
        .map(|v| lenient_conditions(v, &mut warnings))
        .unwrap_or_default();
    let gate = rest
        .remove("rolloutGate")
        .filter(|v| !v.is_null())
        .and_then(|v| {
            serde_json::from_value::<RolloutGate>(v)
                .map_err(|e| warnings.push(format!("status.rolloutGate unreadable: {e}")))
                .ok()
        });
    let mut status = serde_json::from_value::<KuraInstanceStatus>(serde_json::Value::Object(rest))
        .unwrap_or_else(|e| {
            warnings.push(format!("status (controller fields) unreadable: {e}"));
            KuraInstanceStatus::default()
        });
    status.rollout_health = health;
    status.rollout_gate = gate;
    status.conditions = conditions;
    (Some(status), warnings)
}

/// `status.conditions` entry by entry: one that does not read (another
/// writer's odd entry) is left out with a warning, the others are kept.
fn lenient_conditions(value: serde_json::Value, warnings: &mut Vec<String>) -> Vec<Condition> {
    let serde_json::Value::Array(items) = value else {
        warnings.push("status.conditions is not a list".to_owned());
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| {
            serde_json::from_value::<Condition>(item)
                .map_err(|e| warnings.push(format!("status.conditions[{i}] unreadable: {e}")))
                .ok()
        })
        .collect()
}

/// Builds the sweep targets from the contents of the instance and pod
/// stores. Pure: same objects in, same targets out (sorted by namespace and
/// name; pods by name).
pub fn targets<'a, 'b>(
    instances: impl IntoIterator<Item = &'a DynamicObject>,
    pods: impl IntoIterator<Item = &'b Pod>,
    config: &TargetConfig,
) -> Targets {
    let mut by_owner: HashMap<(&str, &str), Vec<&Pod>> = HashMap::new();
    for pod in pods {
        if pod_is_finished(pod) {
            continue;
        }
        let (Some(ns), Some(owner)) = (pod.metadata.namespace.as_deref(), statefulset_owner(pod))
        else {
            continue;
        };
        by_owner.entry((ns, owner)).or_default().push(pod);
    }
    let mut out = Targets::default();
    for obj in instances {
        let observed = match observe_instance(obj) {
            Ok(o) => o,
            Err(skipped) => {
                out.skipped.push(skipped);
                continue;
            }
        };
        let mut pod_targets: Vec<PodTarget> = by_owner
            .get(&(
                observed.info.namespace.as_str(),
                observed.info.name.as_str(),
            ))
            .into_iter()
            .flatten()
            .filter_map(|pod| {
                Some(PodTarget {
                    identity: pod_identity(pod, &config.container_name)?,
                    addr: pod_address(pod, config),
                })
            })
            .collect();
        pod_targets.sort_by(|a, b| a.identity.name.cmp(&b.identity.name));
        let pods_dropped = pod_targets
            .len()
            .saturating_sub(config.max_pods_per_instance);
        pod_targets.truncate(config.max_pods_per_instance);
        out.instances.push(InstanceTarget {
            info: observed.info,
            spec_image: observed.spec.image,
            pods: pod_targets,
            pods_dropped,
            previous_status: observed.status,
            status_warnings: observed.warnings,
            gate_config: observed.gate_config,
        });
    }
    out.instances
        .sort_by(|a, b| (&a.info.namespace, &a.info.name).cmp(&(&b.info.namespace, &b.info.name)));
    out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// What to watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// Namespaces to watch; empty: all namespaces.
    pub namespaces: Vec<String>,
    /// Label selector for `KuraInstance`s.
    pub instance_selector: Option<String>,
    /// Label selector for pods.
    pub pod_selector: Option<String>,
}

/// The running watches' caches. Cheap to clone.
#[derive(Clone)]
pub struct Discovery {
    instances: Vec<Store<DynamicObject>>,
    pods: Vec<Store<Pod>>,
    /// Every watch's readiness, in start order.
    watches: Vec<Arc<WatchState>>,
    /// Bumped whenever an instance watch shows a `spec.image` change.
    image_changes: Arc<watch::Sender<u64>>,
    /// Bumped by every event any watch applied to its store.
    revision: Arc<AtomicU64>,
}

/// The `spec.image` of every instance one instance watch has shown, to
/// tell an upgrade apart from any other change of the object (status
/// writes, labels). Holds one entry per instance of its scope: a deleted
/// instance is dropped, and so is one a re-list no longer shows.
#[derive(Debug, Default)]
struct SpecImages {
    seen: HashMap<InstanceKey, String>,
    /// The instances shown since a re-list began.
    relist: Option<HashSet<InstanceKey>>,
}

impl SpecImages {
    /// Records one event of the instance watch; true when it shows an
    /// instance whose `spec.image` differs from the one shown before (an
    /// instance seen for the first time is no change).
    fn observe(&mut self, event: &watcher::Event<DynamicObject>) -> bool {
        match event {
            watcher::Event::Init => {
                self.relist = Some(HashSet::new());
                false
            }
            watcher::Event::InitApply(obj) => {
                if let (Some(relist), Some(key)) = (self.relist.as_mut(), key_of(obj)) {
                    relist.insert(key);
                }
                self.record(obj)
            }
            watcher::Event::Apply(obj) => self.record(obj),
            watcher::Event::Delete(obj) => {
                if let Some(key) = key_of(obj) {
                    self.seen.remove(&key);
                }
                false
            }
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.seen.retain(|k, _| relist.contains(k));
                }
                false
            }
        }
    }

    fn record(&mut self, obj: &DynamicObject) -> bool {
        let (Some(key), Some(image)) = (key_of(obj), spec_image_of(obj)) else {
            return false;
        };
        match self.seen.get_mut(&key) {
            Some(old) if old == image => false,
            Some(old) => {
                image.clone_into(old);
                true
            }
            None => {
                self.seen.insert(key, image.to_owned());
                false
            }
        }
    }
}

/// The key of a watched instance, when it has a name and a namespace.
fn key_of(obj: &DynamicObject) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        obj.metadata.namespace.clone()?,
        obj.metadata.name.clone()?,
    ))
}

/// `spec.image` of a watched instance, when it is a string.
fn spec_image_of(obj: &DynamicObject) -> Option<&str> {
    obj.data.get("spec")?.get("image")?.as_str()
}

/// One watch's readiness, shared between its driver and [`Discovery`]:
/// whether its initial list is in, and its last error.
struct WatchState {
    /// `kurainstances` or `pods` (also the `resource` label of
    /// `kura_agent_watch_errors_total`).
    resource: &'static str,
    /// Which namespace scope, in configuration order (`#0` for all
    /// namespaces).
    scope: usize,
    synced: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl WatchState {
    fn new(resource: &'static str, scope: usize) -> Self {
        WatchState {
            resource,
            scope,
            synced: AtomicBool::new(false),
            last_error: Mutex::new(None),
        }
    }

    fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Records one event of the watch: `result` is the event or its error,
    /// `init_done` whether the event completes the initial list.
    fn observe(&self, result: Result<(), String>, init_done: bool) {
        match result {
            Ok(()) if init_done => {
                if !self.synced.swap(true, Ordering::AcqRel) {
                    tracing::info!(resource = self.resource, "initial list received");
                }
            }
            Ok(()) => {}
            Err(error) => {
                metrics::counter!(telemetry::WATCH_ERRORS_TOTAL, "resource" => self.resource)
                    .increment(1);
                tracing::warn!(resource = self.resource, %error, "watch error; retrying with backoff");
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
            }
        }
    }

    /// `kurainstances#0`, with the last error if there is one.
    fn describe(&self) -> String {
        let error = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match error {
            Some(e) => format!("{}#{} (last error: {e})", self.resource, self.scope),
            None => format!("{}#{}", self.resource, self.scope),
        }
    }
}

/// The `resource` of the instance watches.
pub(crate) const INSTANCES: &str = "kurainstances";
/// The `resource` of the pod watches.
pub(crate) const PODS: &str = "pods";

/// The future that drives every watch of a [`Discovery`]; it runs until
/// dropped (watch errors are retried with kube's default backoff).
pub type DiscoveryDriver = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The future that runs one watch's stream, recording each event's
/// outcome in its [`WatchState`].
fn driven<K: Send + 'static>(
    stream: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    state: Arc<WatchState>,
) -> DiscoveryDriver {
    Box::pin(stream.for_each(move |ev| {
        state.observe(
            ev.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            matches!(ev, Ok(watcher::Event::InitDone)),
        );
        std::future::ready(())
    }))
}

impl Discovery {
    /// Sets up one instance watch and one pod watch per namespace (one of
    /// each for all namespaces when none is configured), each feeding its
    /// own reflector store. Returns the caches and the future to spawn.
    pub fn start(client: Client, config: &DiscoveryConfig) -> (Discovery, DiscoveryDriver) {
        let resource = kura_instance_resource();
        let scopes: Vec<Option<&str>> = if config.namespaces.is_empty() {
            vec![None]
        } else {
            config.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        let mut watches = Vec::new();
        let image_changes = Arc::new(watch::Sender::new(0u64));
        let revision = Arc::new(AtomicU64::new(0));
        let mut drivers: Vec<DiscoveryDriver> = Vec::new();
        let mut instance_stores = Vec::new();
        let mut pod_stores = Vec::new();
        for (i, scope) in scopes.into_iter().enumerate() {
            let instance_api: Api<DynamicObject> = match scope {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let pod_api: Api<Pod> = match scope {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            };
            let mut instance_cfg = watcher::Config::default();
            if let Some(sel) = &config.instance_selector {
                instance_cfg = instance_cfg.labels(sel);
            }
            let mut pod_cfg = watcher::Config::default();
            if let Some(sel) = &config.pod_selector {
                pod_cfg = pod_cfg.labels(sel);
            }

            let writer = reflector::store::Writer::new(resource.clone());
            instance_stores.push(writer.as_reader());
            let state = Arc::new(WatchState::new(INSTANCES, i));
            watches.push(Arc::clone(&state));
            // The reflector has applied an event to the store before the
            // stream yields it, so whoever hears of the change reads the
            // new object.
            let mut images = SpecImages::default();
            let signal = Arc::clone(&image_changes);
            let applied = Arc::clone(&revision);
            let stream = reflector::reflector(
                writer,
                watcher::watcher(instance_api, instance_cfg)
                    .modify(|o| {
                        o.managed_fields_mut().clear();
                        // The one annotation read; others (e.g. a
                        // last-applied configuration) are not kept.
                        o.annotations_mut()
                            .retain(|k, _| k == GATE_CONFIG_ANNOTATION);
                    })
                    .default_backoff(),
            )
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    // The revision first: the loop woken by the image
                    // signal must not find the targets unchanged.
                    applied.fetch_add(1, Ordering::AcqRel);
                    if images.observe(ev) {
                        signal.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
            });
            drivers.push(driven(stream, state));

            let (reader, writer) = reflector::store::<Pod>();
            pod_stores.push(reader);
            let state = Arc::new(WatchState::new(PODS, i));
            watches.push(Arc::clone(&state));
            let stream = reflector::reflector(
                writer,
                watcher::watcher(pod_api, pod_cfg)
                    .modify(|p| {
                        p.managed_fields_mut().clear();
                        p.annotations_mut().clear();
                    })
                    .default_backoff(),
            )
            .inspect({
                let applied = Arc::clone(&revision);
                move |ev| {
                    if ev.is_ok() {
                        applied.fetch_add(1, Ordering::AcqRel);
                    }
                }
            });
            drivers.push(driven(stream, state));
        }
        let driver: DiscoveryDriver = Box::pin(async move {
            futures::future::join_all(drivers).await;
        });
        (
            Discovery {
                instances: instance_stores,
                pods: pod_stores,
                watches,
                image_changes,
                revision,
            },
            driver,
        )
    }

    /// True once every watch has delivered its initial list (and stays true
    /// through later re-lists, which the stores absorb atomically).
    pub fn is_ready(&self) -> bool {
        self.watches.iter().all(|w| w.is_synced())
    }

    /// The watches that have not delivered their initial list yet, e.g.
    /// `kurainstances#0`, with their last error if any, for the readiness
    /// detail.
    pub fn pending_lists(&self) -> Vec<String> {
        self.watches
            .iter()
            .filter(|w| !w.is_synced())
            .map(|w| w.describe())
            .collect()
    }

    /// A signal that changes whenever a watch shows an instance whose
    /// `spec.image` changed.
    pub fn image_changes(&self) -> watch::Receiver<u64> {
        self.image_changes.subscribe()
    }

    /// A count of the events the watches applied to their stores: while it
    /// stays the same, [`Discovery::targets`] answers the same.
    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    /// Every watched instance with its stored status, without pods (what
    /// a replica answers from for the instances it does not sweep).
    pub fn stored_instances(&self) -> Vec<InstanceTarget> {
        let instances: Vec<Arc<DynamicObject>> =
            self.instances.iter().flat_map(Store::state).collect();
        targets(
            instances.iter().map(|o| o.as_ref()),
            std::iter::empty(),
            &TargetConfig::default(),
        )
        .instances
    }

    /// One watched instance with its stored status, without pods.
    pub fn stored_instance(&self, key: &InstanceKey) -> Option<InstanceTarget> {
        let found = self.instances.iter().find_map(|store| {
            store.find(|o| {
                o.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                    && o.metadata.name.as_deref() == Some(key.name.as_str())
            })
        })?;
        targets(
            [found.as_ref()],
            std::iter::empty(),
            &TargetConfig::default(),
        )
        .instances
        .pop()
    }

    /// The current targets, from the stores' contents.
    pub fn targets(&self, config: &TargetConfig) -> Targets {
        let instances: Vec<Arc<DynamicObject>> =
            self.instances.iter().flat_map(Store::state).collect();
        let pods: Vec<Arc<Pod>> = self.pods.iter().flat_map(Store::state).collect();
        targets(
            instances.iter().map(|o| o.as_ref()),
            pods.iter().map(|p| p.as_ref()),
            config,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SampleResult;
    use jiff::Timestamp;
    use serde_json::json;

    fn instance(ns: &str, name: &str, replicas: i64, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1",
            "kind": "KuraInstance",
            "metadata": {"name": name, "namespace": ns, "generation": 3, "uid": format!("iu-{name}")},
            "spec": {"image": "ghcr.io/tuist/kura:0.6.0", "replicas": replicas, "region": "eu"},
            "status": status
        }))
        .expect("instance")
    }

    fn pod(ns: &str, name: &str, owner: &str, ip: Option<&str>, extra: serde_json::Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner,
                                              "uid": "sts", "controller": true}]},
            "spec": {"containers": [
                {"name": "sidecar", "image": "envoy:1"},
                {"name": "kura", "image": "ghcr.io/tuist/kura:0.6.0",
                 "ports": [{"name": "http", "containerPort": 4100}]}
            ]},
            "status": {"phase": "Running",
                       "containerStatuses": [
                           {"name": "sidecar", "restartCount": 9, "ready": true, "image": "envoy:1", "imageID": ""},
                           {"name": "kura", "restartCount": 2, "ready": true, "image": "x", "imageID": ""}]}
        });
        if let Some(ip) = ip {
            v["status"]["podIP"] = json!(ip);
        }
        merge(&mut v, extra);
        serde_json::from_value(v).expect("pod")
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn pods_are_matched_by_statefulset_owner_and_namespace() {
        let instances = [
            instance("kura", "acme", 2, json!(null)),
            instance("kura", "beta", 1, json!(null)),
        ];
        let pods = [
            pod("kura", "acme-1", "acme", Some("10.0.0.2"), json!({})),
            pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({})),
            pod("other", "acme-0", "acme", Some("10.9.0.1"), json!({})),
            pod("kura", "acme-x", "acme-other", Some("10.0.0.9"), json!({})),
            pod(
                "kura",
                "done-0",
                "acme",
                Some("10.0.0.3"),
                json!({"status": {"phase": "Succeeded"}}),
            ),
        ];
        let t = targets(&instances, &pods, &TargetConfig::default());
        assert!(t.skipped.is_empty());
        assert_eq!(t.instances.len(), 2);
        let acme = &t.instances[0];
        assert_eq!(
            acme.info,
            InstanceInfo {
                namespace: "kura".into(),
                name: "acme".into(),
                expected_pods: 2,
                generation: 3
            }
        );
        assert_eq!(acme.spec_image, "ghcr.io/tuist/kura:0.6.0");
        let names: Vec<_> = acme.pods.iter().map(|p| p.identity.name.as_str()).collect();
        assert_eq!(names, ["acme-0", "acme-1"]);
        assert_eq!(
            acme.pods[0].addr,
            Ok("10.0.0.1:4000".parse().expect("addr"))
        );
        assert_eq!(
            acme.pods[0].identity,
            PodIdentity {
                name: "acme-0".into(),
                uid: "u-acme-0".into(),
                restart_count: 2,
                image: Some("ghcr.io/tuist/kura:0.6.0".into()),
                ip: Some("10.0.0.1".into()),
            }
        );
        assert!(t.instances[1].pods.is_empty(), "beta has no pods");
    }

    #[test]
    fn container_falls_back_to_the_first_and_named_ports_resolve() {
        let p = pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}));
        let id = pod_identity(&p, "not-there").expect("identity");
        assert_eq!(id.restart_count, 9);
        assert_eq!(id.image.as_deref(), Some("envoy:1"));
        let named = TargetConfig {
            port: PollPort::Named("http".into()),
            ..TargetConfig::default()
        };
        assert_eq!(
            pod_address(&p, &named),
            Ok("10.0.0.1:4100".parse().expect("addr"))
        );
        let missing = TargetConfig {
            port: PollPort::Named("grpc".into()),
            ..TargetConfig::default()
        };
        assert_eq!(
            pod_address(&p, &missing),
            Err(NoAddress::NoNamedPort("grpc".into()))
        );
    }

    #[test]
    fn pods_without_address_become_failed_samples_not_silence() {
        let instances = [instance("kura", "acme", 2, json!(null))];
        let pods = [
            pod("kura", "acme-0", "acme", None, json!({})),
            pod("kura", "acme-1", "acme", Some("fe80::1"), json!({})),
            pod("kura", "acme-2", "acme", Some("not-an-ip"), json!({})),
        ];
        let t = targets(&instances, &pods, &TargetConfig::default());
        let acme = &t.instances[0];
        assert_eq!(acme.pods[0].addr, Err(NoAddress::NoPodIp));
        assert_eq!(
            acme.pods[1].addr,
            Ok("[fe80::1]:4000".parse().expect("addr"))
        );
        assert_eq!(
            acme.pods[2].addr,
            Err(NoAddress::InvalidPodIp("not-an-ip".into()))
        );
        assert_eq!(acme.pollable().len(), 1);
        let now: Timestamp = "2026-07-21T10:00:00Z".parse().expect("ts");
        let failed = acme.unreachable_samples(now);
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0].result, SampleResult::Error("no pod IP".into()));
        assert_eq!(failed[0].received_at, now);
    }

    #[test]
    fn the_gate_config_annotation_reaches_its_instance_only_as_written() {
        let mut tuned = instance("kura", "tuned", 1, json!(null));
        let text = r#"{"fdTimeoutBand": 3}"#;
        tuned.metadata.annotations = Some(
            [
                (GATE_CONFIG_ANNOTATION.to_owned(), text.to_owned()),
                ("other".to_owned(), "x".to_owned()),
            ]
            .into(),
        );
        let mut broken = instance("kura", "broken", 1, json!(null));
        broken.metadata.annotations =
            Some([(GATE_CONFIG_ANNOTATION.to_owned(), "{not json".to_owned())].into());
        let plain = instance("kura", "plain", 1, json!(null));
        let t = targets(&[tuned, broken, plain], &[], &TargetConfig::default());
        let by_name = |n: &str| {
            t.instances
                .iter()
                .find(|i| i.info.name == n)
                .and_then(|i| i.gate_config.clone())
        };
        assert_eq!(by_name("tuned").as_deref(), Some(text));
        // Discovery never judges the text: an invalid one is the engine's
        // to report, never a reason to skip the instance.
        assert_eq!(by_name("broken").as_deref(), Some("{not json"));
        assert_eq!(by_name("plain"), None);
        assert!(t.skipped.is_empty());
    }

    #[test]
    fn invalid_instances_are_skipped_with_a_reason() {
        let mut no_gen = instance("kura", "nogen", 1, json!(null));
        no_gen.metadata.generation = None;
        let mut bad_spec = instance("kura", "badspec", 1, json!(null));
        bad_spec.data["spec"] = json!({"replicas": 1});
        let instances = [instance("kura", "zero", 0, json!(null)), no_gen, bad_spec];
        let t = targets(&instances, &[], &TargetConfig::default());
        assert!(t.instances.is_empty());
        let reasons: Vec<_> = t
            .skipped
            .iter()
            .map(|s| (s.key.name.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(reasons[0].0, "badspec");
        assert!(reasons[0].1.starts_with("spec invalid"), "{reasons:?}");
        assert_eq!(reasons[1], ("nogen", "metadata.generation missing"));
        assert_eq!(reasons[2], ("zero", "spec.replicas 0 is below 1"));
    }

    #[test]
    fn previous_status_is_read_field_group_by_field_group() {
        let gate = json!({"targetImage": "img:2", "verdict": "healthy", "evaluatedAt": "2026-07-21T10:00:00Z"});
        // rolloutHealth lost its required fields (an older CRD pruned them):
        // the gate and the controller's fields must survive.
        let inst = instance(
            "kura",
            "acme",
            1,
            json!({"phase": "Running", "rolloutHealth": {"ready": true}, "rolloutGate": gate}),
        );
        let t = targets(&[inst], &[], &TargetConfig::default());
        let target = &t.instances[0];
        let status = target.previous_status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.rollout_health, None);
        assert_eq!(
            status
                .rollout_gate
                .as_ref()
                .map(|g| g.target_image.as_str()),
            Some("img:2")
        );
        assert_eq!(target.status_warnings.len(), 1);
        assert!(target.status_warnings[0].starts_with("status.rolloutHealth unreadable"));
    }

    async fn until(what: &str, cond: impl Fn() -> bool) {
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while !cond() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "timed out waiting for {what}");
    }

    fn list_response(body: serde_json::Value) -> http::Response<kube::client::Body> {
        http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(
                serde_json::to_vec(&body).expect("encode"),
            ))
            .expect("response")
    }

    #[tokio::test]
    async fn ready_only_once_both_initial_lists_are_in() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let config = DiscoveryConfig {
            namespaces: vec![],
            instance_selector: None,
            pod_selector: Some("app.kubernetes.io/name=kura".into()),
        };
        let (discovery, driver) = Discovery::start(client, &config);
        let driver = tokio::spawn(driver);
        assert!(!discovery.is_ready());

        // The two initial lists, in whatever order the watchers send them.
        let mut lists = Vec::new();
        for _ in 0..2 {
            lists.push(handle.next_request().await.expect("list request"));
        }
        lists.sort_by_key(|(r, _)| r.uri().path().to_owned());
        let (pod_req, pod_send) = lists.remove(0);
        let (inst_req, inst_send) = lists.remove(0);
        assert_eq!(pod_req.uri().path(), "/api/v1/pods");
        assert!(
            pod_req
                .uri()
                .query()
                .unwrap_or_default()
                .contains("labelSelector=app.kubernetes.io%2Fname%3Dkura"),
            "{:?}",
            pod_req.uri()
        );
        assert_eq!(
            inst_req.uri().path(),
            "/apis/kura.tuist.dev/v1alpha1/kurainstances"
        );

        let instance_obj =
            serde_json::to_value(instance("kura", "acme", 1, json!(null))).expect("encode");
        inst_send.send_response(list_response(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstanceList",
            "metadata": {"resourceVersion": "10"}, "items": [instance_obj]
        })));
        until("the instance list to land", || {
            discovery.targets(&TargetConfig::default()).instances.len() == 1
        })
        .await;
        assert!(!discovery.is_ready(), "the pod list is not in yet");
        assert_eq!(discovery.pending_lists(), ["pods#0"]);

        // RBAC refuses the pod list first: not ready, and the detail says why.
        pod_send.send_response(
            http::Response::builder()
                .status(403)
                .header("content-type", "application/json")
                .body(Body::from(
                    serde_json::to_vec(
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "pods is forbidden", "reason": "Forbidden", "code": 403}),
                    )
                    .expect("encode"),
                ))
                .expect("response"),
        );
        until("the list error to show", || {
            discovery
                .pending_lists()
                .first()
                .is_some_and(|p| p.contains("pods is forbidden"))
        })
        .await;
        assert!(!discovery.is_ready());
        // The watcher retries after kube's backoff; set aside the instance
        // watch request, answer the pod list again.
        let mut held = Vec::new();
        let pod_send = loop {
            let (req, send) = handle.next_request().await.expect("request");
            if req.uri().path() == "/api/v1/pods" {
                break send;
            }
            held.push(send);
        };
        let pod_obj =
            serde_json::to_value(pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({})))
                .expect("encode");
        pod_send.send_response(list_response(json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "11"}, "items": [pod_obj]
        })));
        until("both lists", || discovery.is_ready()).await;
        let t = discovery.targets(&TargetConfig::default());
        assert_eq!(t.instances[0].pods.len(), 1);
        assert_eq!(
            t.instances[0].pollable()[0].1,
            "10.0.0.1:4000".parse().expect("addr")
        );
        driver.abort();
    }

    #[test]
    fn spec_image_changes_are_told_apart_from_other_changes() {
        let with_image = |name: &str, image: &str| {
            let mut o = instance("kura", name, 1, json!(null));
            o.data["spec"]["image"] = json!(image);
            o
        };
        let mut images = SpecImages::default();
        use watcher::Event;
        // First sight (initial list or a new instance): no change.
        assert!(!images.observe(&Event::Init));
        assert!(!images.observe(&Event::InitApply(with_image("a", "v1"))));
        assert!(!images.observe(&Event::InitDone));
        assert!(!images.observe(&Event::Apply(with_image("b", "v1"))));
        // A status write or a label: the same image, no change.
        let mut relabelled = with_image("a", "v1");
        relabelled.data["status"] = json!({"phase": "Running"});
        assert!(!images.observe(&Event::Apply(relabelled)));
        // An upgrade, then the same object again.
        assert!(images.observe(&Event::Apply(with_image("a", "v2"))));
        assert!(!images.observe(&Event::Apply(with_image("a", "v2"))));
        // A re-list shows a change made while the watch was away, and
        // forgets an instance deleted meanwhile.
        assert!(!images.observe(&Event::Init));
        assert!(images.observe(&Event::InitApply(with_image("a", "v3"))));
        assert!(!images.observe(&Event::InitDone));
        assert_eq!(images.seen.len(), 1, "b is gone: {:?}", images.seen);
        assert!(
            !images.observe(&Event::Apply(with_image("b", "v9"))),
            "b is new again"
        );
        assert!(!images.observe(&Event::Delete(with_image("b", "v9"))));
        assert!(!images.observe(&Event::Apply(with_image("b", "v1"))));
        // No image (an invalid spec): neither recorded nor a change.
        let mut broken = with_image("c", "v1");
        broken.data["spec"] = json!({"replicas": 1});
        assert!(!images.observe(&Event::Apply(broken)));
    }

    #[test]
    fn pods_beyond_the_cap_are_counted_not_kept() {
        let instances = [instance("kura", "acme", 3, json!(null))];
        let pods: Vec<Pod> = (0..5)
            .map(|i| {
                pod(
                    "kura",
                    &format!("acme-{i}"),
                    "acme",
                    Some("10.0.0.1"),
                    json!({}),
                )
            })
            .collect();
        let cfg = TargetConfig {
            max_pods_per_instance: 3,
            ..TargetConfig::default()
        };
        let t = targets(&instances, &pods, &cfg);
        assert_eq!(t.instances[0].pods.len(), 3);
        assert_eq!(t.instances[0].pods_dropped, 2);
    }
}
