//! Discovery: the watches of `KuraInstance`s and pods, each event turned
//! into what the agent keeps ([`FactStore`]) as it arrives, and the
//! targets read from there.
//!
//! Objects are read as typed partial objects ([`super::wire`]): a Pod's
//! volumes, env, probes, managed fields and conditions are skipped by the
//! parser and never stored. What is kept per pod is its
//! [`PodFacts`](super::pods::PodFacts)
//! (identity and address), per instance its shape and its status as last
//! seen, parsed ([`super::instances`]). The optional pod label selector
//! (e.g. `app.kubernetes.io/name=kura`) only narrows the watch on the API
//! server; it never adds a pod the owner rule ([`super::pods`]) does not
//! match.

use crate::model::{
    Contest, ControllerHealth, DesiredStatus, InstanceKey, InstanceTarget, PodScope,
    PublicationTarget, StatusLifecycle, StoredInstance, StoredStatusSource,
};
use crate::telemetry::{self, label};
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::runtime::{WatchStreamExt, watcher};
use kura_schemas::{KuraInstance, KuraInstanceStatus};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{Semaphore, watch};

use super::pods::TargetConfig;
use super::stamp::{Kind, Stamper};
use super::store::{FactStore, ScopeMap, Targets};
use super::stored::Reread;
use super::units::{UnitWatchConfig, UnitWatches};
use super::wire::{CompanionObject, InstanceObject, PodObject};

/// The API resource of `KuraInstance` (for dynamic watches and requests).
pub fn kura_instance_resource() -> ApiResource {
    ApiResource::erase::<KuraInstance>(&())
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
    /// How pods are read into targets.
    pub targets: TargetConfig,
    /// Where the agent publishes: in `companion` mode the agent's statuses
    /// are read from a watch of the companions (`KuraInstanceHealth`), and
    /// an instance's `status.rolloutHealth` is Kura's controller's.
    pub publication: PublicationTarget,
    /// With a pod scope that keeps units (sharding by unit): watch only
    /// the kept units, each selected on the API server
    /// ([`super::units`]). `None`: every instance and pod is watched, the
    /// pods filtered here by the scope.
    pub units: Option<UnitWatchConfig>,
}

/// An API handle in `namespace` (all namespaces for `None`).
pub(super) fn api_in<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// `a,b` of the selectors given (an empty one left out).
pub(super) fn join_selectors(a: Option<&str>, b: Option<&str>) -> String {
    [a, b]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// The fleet's instances from `held` instances in `watched` of `count`
/// units, rounded.
fn fleet_estimate(held: usize, watched: usize, count: usize) -> usize {
    (held * count + watched / 2) / watched.max(1)
}

/// The running watches' caches. Cheap to clone.
#[derive(Clone)]
pub struct Discovery {
    store: Arc<Mutex<FactStore>>,
    /// Every watch's readiness, in start order.
    watches: Vec<Arc<WatchState>>,
    /// Bumped whenever an instance watch shows a `spec.image` change.
    image_changes: Arc<watch::Sender<u64>>,
    /// Which instances' pods are kept (all without one).
    pod_scope: Option<Arc<dyn PodScope>>,
    /// Per pod watch, the value of the scope's signal its last complete
    /// list was made under ([`NOT_LISTED`] before the first).
    pod_lists: Vec<Arc<AtomicU64>>,
    /// For reading one instance again ([`Discovery::keep_status`]).
    client: Client,
    /// Which store scope holds an instance.
    map: ScopeMap,
    /// The unit watches, when watching by unit.
    units: Option<Arc<UnitWatches>>,
    /// Where the agent publishes (where a status is read again from).
    publication: PublicationTarget,
    /// The GETs of statuses read again in flight at once: after a Lease
    /// lapse every instance of the replica is read again.
    rereads: Arc<Semaphore>,
    /// Instances not watched, read by one GET for the debug server
    /// ([`StoredStatusSource::fetch`]).
    fetched: Arc<Mutex<Fetched>>,
}

/// The stored views of instances this replica does not watch (sharding by
/// unit), read by one GET each and kept [`FETCHED_FOR`]; at most
/// [`FETCHED_KEPT`] (the oldest go first).
#[derive(Default)]
struct Fetched {
    by_key: std::collections::HashMap<InstanceKey, (std::time::Instant, Option<StoredInstance>)>,
}

/// How long an instance read by one GET is answered from.
pub const FETCHED_FOR: std::time::Duration = std::time::Duration::from_secs(5);
/// At most this many instances read by one GET are kept.
pub const FETCHED_KEPT: usize = 256;
/// The longest a GET of an instance not watched may take.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Fetched {
    /// `key`'s view if read less than [`FETCHED_FOR`] ago (`Some(None)`:
    /// read, and not found or not usable).
    fn fresh(&self, key: &InstanceKey) -> Option<Option<StoredInstance>> {
        let (at, view) = self.by_key.get(key)?;
        (at.elapsed() < FETCHED_FOR).then(|| view.clone())
    }

    fn keep(&mut self, key: InstanceKey, view: Option<StoredInstance>) {
        self.by_key.retain(|_, (at, _)| at.elapsed() < FETCHED_FOR);
        if self.by_key.len() >= FETCHED_KEPT
            && let Some(oldest) = self
                .by_key
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            self.by_key.remove(&oldest);
        }
        self.by_key.insert(key, (std::time::Instant::now(), view));
    }
}

/// At most this many statuses are read again (GET) at once.
pub const REREAD_CONCURRENCY: usize = 16;

/// No pod list complete yet.
const NOT_LISTED: u64 = u64::MAX;

/// Objects per page of a list (kube's default is 500). A page's body is
/// held whole while it is parsed, and copied once on the way: kube's
/// default pages of realistic Pods made the agent's peak at start-up and
/// at each re-list. Smaller pages cost more list requests, still few.
pub(super) const LIST_PAGE_SIZE: u32 = 100;

/// The future that runs one pod watch: each event applied to the store
/// with the scope's filter; when the scope changes, the watch starts
/// again (a new list, swapped in whole when complete), and `listed` says
/// under which value of the scope's signal the last list completed.
fn pod_watch(
    api: Api<PodObject>,
    config: watcher::Config,
    state: Arc<WatchState>,
    store: Arc<Mutex<FactStore>>,
    scope_index: usize,
    pod_scope: Option<Arc<dyn PodScope>>,
    listed: Arc<AtomicU64>,
) -> DiscoveryDriver {
    Box::pin(async move {
        let mut changes = pod_scope.as_ref().map(|s| s.changes());
        loop {
            let epoch = changes.as_mut().map_or(0, |c| *c.borrow_and_update());
            let scope = pod_scope.clone();
            let facts = Arc::clone(&store);
            let done = Arc::clone(&listed);
            let run = driven(
                watcher::watcher(api.clone(), config.clone()).default_backoff(),
                Arc::clone(&state),
                move |ev| {
                    let keeps = |key: &InstanceKey| scope.as_ref().is_none_or(|s| s.keeps(key));
                    locked(&facts).apply_pod(scope_index, ev, &keeps);
                    if matches!(ev, watcher::Event::InitDone) {
                        done.store(epoch, Ordering::Release);
                    }
                },
            );
            match changes.as_mut() {
                None => return run.await,
                Some(c) => {
                    tokio::select! {
                        () = run => return,
                        changed = c.changed() => {
                            if changed.is_err() {
                                // The scope is gone: keep watching as is.
                                changes = None;
                            }
                            tracing::info!(resource = PODS, scope = scope_index,
                                "the pods this replica keeps changed: listing them again");
                        }
                    }
                }
            }
        }
    })
}

/// What [`namespace_watches`] started besides its drivers.
struct NamespaceWatches {
    watches: Vec<Arc<WatchState>>,
    listed: Arc<AtomicU64>,
}

/// One namespace scope's watches without units: every instance (and
/// companion) of the scope, and its pods, kept by `pod_scope`.
fn namespace_watches(
    client: &Client,
    config: &DiscoveryConfig,
    scope: Option<&str>,
    i: usize,
    store: &Arc<Mutex<FactStore>>,
    image_changes: &Arc<watch::Sender<u64>>,
    pod_scope: Option<Arc<dyn PodScope>>,
) -> (Vec<DiscoveryDriver>, NamespaceWatches) {
    let mut drivers: Vec<DiscoveryDriver> = Vec::new();
    let mut watches = Vec::new();
    let instance_api: Api<InstanceObject> = api_in(client, scope);
    let pod_api: Api<PodObject> = api_in(client, scope);
    let mut instance_cfg = watcher::Config::default().page_size(LIST_PAGE_SIZE);
    if let Some(sel) = &config.instance_selector {
        instance_cfg = instance_cfg.labels(sel);
    }
    let mut pod_cfg = watcher::Config::default().page_size(LIST_PAGE_SIZE);
    if let Some(sel) = &config.pod_selector {
        pod_cfg = pod_cfg.labels(sel);
    }

    let state = Arc::new(WatchState::new(INSTANCES, i));
    watches.push(Arc::clone(&state));
    let signal = Arc::clone(image_changes);
    let facts = Arc::clone(store);
    drivers.push(driven(
        watcher::watcher(instance_api, instance_cfg).default_backoff(),
        state,
        move |ev| {
            // Applied (and the revision moved) before the signal: the
            // loop woken by it must not find the targets unchanged.
            let applied = locked(&facts).apply_instance(i, ev);
            if applied.image_changed {
                signal.send_modify(|n| *n = n.wrapping_add(1));
            }
        },
    ));

    if config.publication == PublicationTarget::Companion {
        let companion_api: Api<CompanionObject> = api_in(client, scope);
        let state = Arc::new(WatchState::new(COMPANIONS, i));
        watches.push(Arc::clone(&state));
        let facts = Arc::clone(store);
        drivers.push(driven(
            watcher::watcher(
                companion_api,
                watcher::Config::default().page_size(LIST_PAGE_SIZE),
            )
            .default_backoff(),
            state,
            move |ev| locked(&facts).apply_companion(i, ev),
        ));
    }

    let state = Arc::new(WatchState::new(PODS, i));
    watches.push(Arc::clone(&state));
    let listed = Arc::new(AtomicU64::new(NOT_LISTED));
    drivers.push(pod_watch(
        pod_api,
        pod_cfg,
        state,
        Arc::clone(store),
        i,
        pod_scope,
        Arc::clone(&listed),
    ));
    (drivers, NamespaceWatches { watches, listed })
}

/// One watch's readiness, shared between its driver and [`Discovery`]:
/// whether its initial list is in, and its last error.
pub(super) struct WatchState {
    /// `kurainstances` or `pods` (also the `resource` label of
    /// `kura_agent_watch_errors_total`).
    resource: &'static str,
    /// Which namespace scope, in configuration order (`#0` for all
    /// namespaces).
    scope: usize,
    /// The watch unit, for a unit's watch.
    unit: Option<u16>,
    synced: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl WatchState {
    pub(super) fn new(resource: &'static str, scope: usize) -> Self {
        WatchState {
            resource,
            scope,
            synced: AtomicBool::new(false),
            last_error: Mutex::new(None),
            unit: None,
        }
    }

    /// The state of one of `unit`'s watches.
    pub(super) fn for_unit(resource: &'static str, scope: usize, unit: u16) -> Self {
        WatchState {
            unit: Some(unit),
            ..WatchState::new(resource, scope)
        }
    }

    pub(super) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Whether the watch's last event was an error (it is retrying).
    pub(super) fn failing(&self) -> bool {
        self.last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }

    /// Records one event of the watch: `result` is the event or its error,
    /// `init_done` whether the event completes the initial list.
    pub(super) fn observe(&self, result: Result<(), String>, init_done: bool) {
        match result {
            Ok(()) if init_done => {
                if !self.synced.swap(true, Ordering::AcqRel) {
                    match self.unit {
                        None => tracing::info!(resource = self.resource, "initial list received"),
                        Some(unit) => {
                            tracing::debug!(
                                resource = self.resource,
                                unit,
                                "initial list received"
                            );
                        }
                    }
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
    pub(super) fn describe(&self) -> String {
        let error = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let unit = self.unit.map(|u| format!(" unit {u}")).unwrap_or_default();
        match error {
            Some(e) => format!("{}#{}{unit} (last error: {e})", self.resource, self.scope),
            None => format!("{}#{}{unit}", self.resource, self.scope),
        }
    }
}

/// The `resource` of the instance watches.
pub(super) const INSTANCES: &str = label::KURAINSTANCES;
/// The `resource` of the pod watches.
pub(super) const PODS: &str = label::PODS;
/// The `resource` of the companion watches (companion mode).
pub(super) const COMPANIONS: &str = label::KURAINSTANCEHEALTHS;

/// The future that drives every watch of a [`Discovery`]; it runs until
/// dropped (watch errors are retried with kube's default backoff).
pub type DiscoveryDriver = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The future that runs one watch's stream: each event is applied with
/// `apply` (under the store's lock, before anyone hears of it), and its
/// outcome recorded in the watch's [`WatchState`].
pub(super) fn driven<K: Send + 'static>(
    stream: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    state: Arc<WatchState>,
    mut apply: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> DiscoveryDriver {
    Box::pin(stream.for_each(move |ev| {
        if let Ok(ev) = &ev {
            apply(ev);
        }
        state.observe(
            ev.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            matches!(ev, Ok(watcher::Event::InitDone)),
        );
        std::future::ready(())
    }))
}

/// The store, even if a panicking holder poisoned it (every update is
/// whole before the lock is released).
pub(super) fn locked(store: &Mutex<FactStore>) -> MutexGuard<'_, FactStore> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Discovery {
    /// Sets up one instance watch and one pod watch per namespace (one of
    /// each for all namespaces when none is configured), each feeding its
    /// scope of the store. Returns the caches and the future to spawn.
    ///
    /// With a `pod_scope` (sharding), only the pods of the instances it
    /// keeps are kept; when it changes, the pods are listed again
    /// ([`Discovery::pods_current`] is false until that list is in).
    pub fn start(
        client: Client,
        config: &DiscoveryConfig,
        pod_scope: Option<Arc<dyn PodScope>>,
    ) -> (Discovery, DiscoveryDriver) {
        let scopes: Vec<Option<&str>> = if config.namespaces.is_empty() {
            vec![None]
        } else {
            config.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        // Unit watches need a scope that keeps units.
        let units = config.units.filter(|_| pod_scope.is_some());
        let map = ScopeMap {
            namespaces: config.namespaces.clone(),
            units: units.map(|u| u.count),
        };
        let store = Arc::new(Mutex::new(
            FactStore::with_scopes(map.clone(), config.targets.clone())
                .with_target(config.publication),
        ));
        let mut watches = Vec::new();
        let image_changes = Arc::new(watch::Sender::new(0u64));
        let mut drivers: Vec<DiscoveryDriver> = Vec::new();
        let mut pod_lists = Vec::new();
        let mut unit_watches = None;
        if let (Some(unit_config), Some(scope)) = (units, pod_scope.as_ref()) {
            let (stamper, stamping) = Stamper::start(
                client.clone(),
                Arc::clone(scope),
                unit_config.count,
                unit_config.stamp,
            );
            drivers.push(stamping);
            for (i, namespace) in scopes.iter().enumerate() {
                let mut kinds = vec![(Kind::Instance, INSTANCES)];
                if config.publication == PublicationTarget::Companion {
                    kinds.push((Kind::Companion, COMPANIONS));
                }
                for (kind, resource) in kinds {
                    let state = Arc::new(WatchState::new(resource, i));
                    watches.push(Arc::clone(&state));
                    let selector = match kind {
                        Kind::Instance => config.instance_selector.as_deref(),
                        Kind::Companion => None,
                    };
                    drivers.push(stamper.watch(kind, *namespace, selector, state));
                }
            }
            let manager = Arc::new(UnitWatches::new(
                client.clone(),
                unit_config,
                map.clone(),
                config.instance_selector.clone(),
                config.pod_selector.clone(),
                config.publication,
                Arc::clone(&store),
                Arc::clone(&image_changes),
                Some(Arc::clone(&stamper)),
            ));
            drivers.push(Box::pin(Arc::clone(&manager).follow(Arc::clone(scope))));
            unit_watches = Some(manager);
        } else {
            for (i, scope) in scopes.into_iter().enumerate() {
                let (instance_watch, more) = namespace_watches(
                    &client,
                    config,
                    scope,
                    i,
                    &store,
                    &image_changes,
                    pod_scope.clone(),
                );
                watches.extend(more.watches);
                pod_lists.push(more.listed);
                drivers.extend(instance_watch);
            }
        }
        let driver: DiscoveryDriver = Box::pin(async move {
            futures::future::join_all(drivers).await;
        });
        (
            Discovery {
                store,
                watches,
                image_changes,
                pod_scope,
                pod_lists,
                client,
                map,
                units: unit_watches,
                publication: config.publication,
                rereads: Arc::new(Semaphore::new(REREAD_CONCURRENCY)),
                fetched: Arc::default(),
            },
            driver,
        )
    }

    /// A discovery over `store` without watches, reading statuses again
    /// through `client` (tests drive the store's events by hand).
    #[cfg(test)]
    pub(crate) fn over(store: FactStore, client: Client, publication: PublicationTarget) -> Self {
        Discovery {
            store: Arc::new(Mutex::new(store)),
            watches: Vec::new(),
            image_changes: Arc::new(watch::Sender::new(0)),
            pod_scope: None,
            pod_lists: Vec::new(),
            client,
            map: ScopeMap::default(),
            units: None,
            publication,
            rereads: Arc::new(Semaphore::new(REREAD_CONCURRENCY)),
            fetched: Arc::default(),
        }
    }

    /// Whether `key`'s stored status is held (`None`: not watched).
    #[cfg(test)]
    pub(crate) fn stored_one_status(&self, key: &InstanceKey) -> Option<bool> {
        locked(&self.store)
            .stored_one(key)
            .map(|t| t.previous_status.is_some())
    }

    /// Runs `f` on the store under its lock (tests: a watch event by hand).
    #[cfg(test)]
    pub(crate) fn with_store<R>(&self, f: impl FnOnce(&mut FactStore) -> R) -> R {
        f(&mut locked(&self.store))
    }

    /// True once every watch has delivered its initial list (and stays true
    /// through later re-lists, which the store swaps in whole).
    pub fn is_ready(&self) -> bool {
        self.watches.iter().all(|w| w.is_synced())
            && self.units.as_ref().is_none_or(|u| u.started())
    }

    /// The watches that have not delivered their initial list yet, e.g.
    /// `kurainstances#0`, with their last error if any, for the readiness
    /// detail.
    pub fn pending_lists(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .watches
            .iter()
            .filter(|w| !w.is_synced())
            .map(|w| w.describe())
            .collect();
        if let Some(units) = &self.units {
            out.extend(units.pending());
        }
        out
    }

    /// The watch units this replica watches now (`None`: not by unit).
    #[cfg(test)]
    pub fn watched_units(&self) -> Option<Vec<u16>> {
        self.units.as_ref().map(|u| u.watched())
    }

    /// Whether every pod watch's last complete list was made under the
    /// pod scope as it stands (always, without a scope, once listed): the
    /// targets then hold the pods of every instance the scope keeps.
    pub fn pods_current(&self) -> bool {
        let now = self.pod_scope.as_ref().map_or(0, |s| *s.changes().borrow());
        if let Some(units) = &self.units {
            return units.current(now);
        }
        self.pod_lists
            .iter()
            .all(|l| l.load(Ordering::Acquire) == now)
    }

    /// A signal that changes whenever a watch shows an instance whose
    /// `spec.image` changed.
    pub fn image_changes(&self) -> watch::Receiver<u64> {
        self.image_changes.subscribe()
    }

    /// A number that moves exactly when some instance's target changed
    /// (see [`FactStore`]): while it stays the same, [`Discovery::targets`]
    /// answers the same, but for the status each target was found with.
    pub fn revision(&self) -> u64 {
        locked(&self.store).revision()
    }

    /// The instances whose targets changed after `revision`, or `None`
    /// when that is too far back to tell.
    pub fn changed_since(&self, revision: u64) -> Option<Vec<InstanceKey>> {
        locked(&self.store).changed_since(revision)
    }

    /// The instances the watches hold (usable or not).
    pub fn instance_count(&self) -> usize {
        locked(&self.store).instance_count()
    }

    /// The instances of the whole fleet: every instance watched, whoever
    /// owns it; with unit watches, estimated from the units watched (the
    /// bucket hash spreads instances evenly over the units: the instances
    /// held times all units over the units watched), `None` while no unit
    /// is watched.
    pub fn fleet_instances(&self) -> Option<usize> {
        let held = self.instance_count();
        let Some(units) = &self.units else {
            return Some(held);
        };
        let (watched, count) = units.share();
        if watched == 0 {
            return None;
        }
        Some(fleet_estimate(held, watched, count))
    }

    /// The current targets.
    pub fn targets(&self) -> Targets {
        locked(&self.store).targets()
    }

    /// The current targets of `keys` (those that exist and are usable).
    pub fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        locked(&self.store).targets_of(keys)
    }

    /// `key`'s task has its state: its status is no longer kept
    /// ([`FactStore::release_status`]).
    pub fn release_status(&self, key: &InstanceKey) {
        locked(&self.store).release_status(key);
    }

    /// `key`'s task stopped or ended: its status is kept again, and read
    /// again when it was released (one GET of the instance, at most
    /// [`REREAD_CONCURRENCY`] at once, retried with back-off until it
    /// answers or is no longer wanted), so the fleet view answers from it
    /// and a task started for the instance again continues from it.
    /// `last` is what the task last published: the view's answer
    /// meanwhile. Returns whether the status is being read again. Must be
    /// called within the tokio runtime.
    pub fn keep_status(&self, key: &InstanceKey, last: Option<&DesiredStatus>) -> bool {
        let last = last.map(|d| KuraInstanceStatus {
            rollout_health: Some((*d.health).clone()),
            rollout_gate: Some((*d.gate).clone()),
            ..KuraInstanceStatus::default()
        });
        let Some(request) = locked(&self.store).keep_status(key, last) else {
            return false;
        };
        let Some(scope) = self.map.scope_of(key) else {
            locked(&self.store).abandon_reread(key);
            return false;
        };
        let store = Arc::clone(&self.store);
        let permits = Arc::clone(&self.rereads);
        match self.publication {
            PublicationTarget::Instance => {
                let api: Api<InstanceObject> = Api::namespaced(self.client.clone(), &key.namespace);
                tokio::spawn(reread(
                    api,
                    store,
                    permits,
                    request,
                    move |store, r, obj| {
                        store.reread_instance(scope, r, obj.as_ref());
                    },
                ));
            }
            PublicationTarget::Companion => {
                let api: Api<CompanionObject> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                tokio::spawn(reread(
                    api,
                    store,
                    permits,
                    request,
                    move |store, r, obj| {
                        store.reread_companion(scope, r, obj.as_ref());
                    },
                ));
            }
        }
        true
    }

    /// The instances another manager contests (instance mode), with that
    /// manager and the instance's UID.
    pub fn contested(&self) -> Vec<Contest> {
        locked(&self.store).contested()
    }

    /// Kura's controller's own numbers of every instance that has them
    /// (companion mode).
    pub fn controller_healths(&self) -> Vec<(InstanceKey, ControllerHealth)> {
        locked(&self.store).controller_healths()
    }

    /// Whether `key`'s status is being read again (its target is
    /// withheld meanwhile).
    #[cfg(test)]
    pub(crate) fn status_pending(&self, key: &InstanceKey) -> bool {
        locked(&self.store).status_pending(key)
    }
}

/// Reads a status again (the instance's, or its companion's, through
/// `api`) with one of `permits`, retried with back-off until it answers;
/// stops as soon as the answer is no longer wanted (a watch event read the
/// object whole, it was deleted or released again). The answer is applied
/// with `apply`, which applies it only while still wanted.
async fn reread<K>(
    api: Api<K>,
    store: Arc<Mutex<FactStore>>,
    permits: Arc<Semaphore>,
    reread: Reread,
    apply: impl Fn(&mut FactStore, &Reread, Option<K>),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let key = &reread.key;
    let mut wait = REREAD_FIRST_WAIT;
    loop {
        if !locked(&store).reread_wanted(&reread) {
            return;
        }
        let answer = {
            let Ok(_permit) = permits.acquire().await else {
                return;
            };
            // Waiting for a permit, the watch may have brought it.
            if !locked(&store).reread_wanted(&reread) {
                return;
            }
            api.get_opt(&key.name).await
        };
        match answer {
            Ok(obj) => {
                apply(&mut locked(&store), &reread, obj);
                return;
            }
            Err(e) => {
                tracing::warn!(namespace = %key.namespace, instance = %key.name,
                    error = %e, "reading the instance's status again failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(REREAD_MAX_WAIT);
            }
        }
    }
}

/// The stored-status lifecycle's port: the run loop lets a status go
/// after its task's first sweep and has it read again when the task stops.
impl StatusLifecycle for Discovery {
    fn release_status(&self, key: &InstanceKey) {
        Discovery::release_status(self, key);
    }
    fn keep_status(&self, key: &InstanceKey, last: Option<&DesiredStatus>) -> bool {
        Discovery::keep_status(self, key, last)
    }
}

/// The instance watch's view of who else writes `status.rolloutHealth`.
impl crate::model::ContestSource for Discovery {
    fn contested_by(&self, key: &InstanceKey) -> Option<Box<str>> {
        locked(&self.store).contested_by(key)
    }
}

/// The instance watch's UIDs (companion mode).
impl crate::model::InstanceUids for Discovery {
    fn uid_of(&self, key: &InstanceKey) -> Option<Box<str>> {
        locked(&self.store).instance_uid(key)
    }
    fn companion_absent(&self, key: &InstanceKey) -> bool {
        locked(&self.store).companion_absent(key)
    }
}

/// First wait before a failed read of an instance's status is retried.
const REREAD_FIRST_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
/// Longest wait between retries of that read.
const REREAD_MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The status stored in the cluster, from the instance watch: what the
/// fleet view answers from for the instances this replica does not sweep.
impl StoredStatusSource for Discovery {
    fn stored_instances(&self) -> Vec<StoredInstance> {
        locked(&self.store)
            .stored()
            .iter()
            .map(StoredInstance::of)
            .collect()
    }

    fn stored_instance(&self, key: &InstanceKey) -> Option<StoredInstance> {
        if let Some(t) = locked(&self.store).stored_one(key) {
            return Some(StoredInstance::of(&t));
        }
        self.fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fresh(key)
            .flatten()
    }

    /// With unit watches, an instance of a unit this replica does not
    /// watch is read by one GET (and its companion's in companion mode),
    /// at most [`REREAD_CONCURRENCY`] at once with the re-reads, within
    /// [`FETCH_TIMEOUT`]; its view is kept [`FETCHED_FOR`].
    fn fetch<'a>(&'a self, key: &'a InstanceKey) -> crate::model::BoxFuture<'a> {
        Box::pin(async move {
            if self.units.is_none() || locked(&self.store).stored_one(key).is_some() {
                return;
            }
            let fresh = |f: &Arc<Mutex<Fetched>>| {
                f.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .fresh(key)
                    .is_some()
            };
            if fresh(&self.fetched) {
                return;
            }
            let Ok(_permit) = self.rereads.acquire().await else {
                return;
            };
            if fresh(&self.fetched) {
                return;
            }
            let read = async {
                let instance: Api<InstanceObject> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                let Some(obj) = instance.get_opt(&key.name).await? else {
                    return Ok::<_, kube::Error>(None);
                };
                let companion = match self.publication {
                    PublicationTarget::Instance => None,
                    PublicationTarget::Companion => {
                        Api::<CompanionObject>::namespaced(self.client.clone(), &key.namespace)
                            .get_opt(&key.name)
                            .await?
                    }
                };
                Ok(
                    super::store::stored_of(&obj, companion.as_ref(), self.publication)
                        .as_ref()
                        .map(StoredInstance::of),
                )
            };
            match tokio::time::timeout(FETCH_TIMEOUT, read).await {
                Ok(Ok(view)) => self
                    .fetched
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .keep(key.clone(), view),
                Ok(Err(e)) => tracing::debug!(instance = %key, error = %e,
                    "reading an instance this replica does not watch failed"),
                Err(_) => tracing::debug!(instance = %key,
                    "reading an instance this replica does not watch timed out"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::instances::tests::instance;
    use crate::cluster::pods::tests::pod;
    use serde_json::json;

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

    /// A pod scope keeping the units it is told.
    struct Units {
        count: crate::model::UnitCount,
        kept: Mutex<std::collections::BTreeSet<u16>>,
        changes: watch::Sender<u64>,
    }

    impl PodScope for Units {
        fn keeps(&self, key: &InstanceKey) -> bool {
            self.kept
                .lock()
                .expect("kept")
                .contains(&self.count.unit_of_key(key))
        }
        fn changes(&self) -> watch::Receiver<u64> {
            self.changes.subscribe()
        }
        fn kept_units(&self) -> Option<crate::model::KeptUnits> {
            Some(crate::model::KeptUnits {
                count: self.count,
                units: self.kept.lock().expect("kept").clone(),
            })
        }
    }

    fn selector_of(req: &http::Request<kube::client::Body>) -> String {
        let query = req.uri().query().unwrap_or_default().to_owned();
        url_decoded(&query, "labelSelector")
    }

    fn url_decoded(query: &str, param: &str) -> String {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{param}=")))
            .map(|v| {
                let v = v.replace('+', " ");
                let mut out = Vec::new();
                let b = v.as_bytes();
                let mut i = 0;
                while i < b.len() {
                    if b[i] == b'%' && i + 2 < b.len() {
                        let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("hex");
                        out.push(u8::from_str_radix(hex, 16).expect("hex"));
                        i += 3;
                    } else {
                        out.push(b[i]);
                        i += 1;
                    }
                }
                String::from_utf8(out).expect("utf8")
            })
            .unwrap_or_default()
    }

    fn is_watch(req: &http::Request<kube::client::Body>) -> bool {
        req.uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .any(|p| p == "watch=true")
    }

    #[tokio::test]
    async fn a_replica_lists_only_its_units_and_drops_a_lost_one_whole() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let count = crate::model::UnitCount::new(4).expect("count");
        let scope = Arc::new(Units {
            count,
            kept: Mutex::new([1u16, 3].into_iter().collect()),
            changes: watch::Sender::new(0),
        });
        let config = DiscoveryConfig {
            publication: PublicationTarget::Instance,
            namespaces: vec![],
            instance_selector: Some("tier=managed".into()),
            pod_selector: Some("app.kubernetes.io/name=kura".into()),
            targets: TargetConfig::default(),
            units: Some(UnitWatchConfig {
                count,
                pods: super::super::units::PodSelection::InstanceLabel,
                stamp: false,
            }),
        };
        let (discovery, driver) =
            Discovery::start(client, &config, Some(scope.clone() as Arc<dyn PodScope>));
        let driver = tokio::spawn(driver);
        let mut held = Vec::new();
        let mut lists = std::collections::BTreeMap::new();
        while lists.len() < 3 {
            let (req, send) = handle.next_request().await.expect("request");
            assert!(!is_watch(&req), "a list comes first: {:?}", req.uri());
            assert_eq!(
                req.uri().path(),
                "/apis/kura.tuist.dev/v1alpha1/kurainstances"
            );
            lists.insert(selector_of(&req), send);
        }
        let unit1 = "kura.tuist.dev/shard in (40,41,42,43,44,45,46,47,48,49,4a,4b,4c,4d,4e,4f,50,51,52,53,54,55,56,57,58,59,5a,5b,5c,5d,5e,5f,60,61,62,63,64,65,66,67,68,69,6a,6b,6c,6d,6e,6f,70,71,72,73,74,75,76,77,78,79,7a,7b,7c,7d,7e,7f),tier=managed";
        let unit3 = format!("{},tier=managed", count.selector(3));
        let mut keys: Vec<&String> = lists.keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            vec![
                &"!kura.tuist.dev/shard,tier=managed".to_owned(),
                &unit1.to_owned(),
                &unit3
            ]
        );
        let empty = |kind: &str| {
            list_response(json!({
                "apiVersion": "kura.tuist.dev/v1alpha1", "kind": kind,
                "metadata": {"resourceVersion": "10"}, "items": []
            }))
        };
        // kura/acme hashes to bucket 111: unit 1 of 4.
        let acme = serde_json::to_value(instance("kura", "acme", 1, json!(null))).expect("encode");
        lists
            .remove(unit1)
            .expect("unit 1")
            .send_response(list_response(json!({
                "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstanceList",
                "metadata": {"resourceVersion": "10"}, "items": [acme]
            })));
        lists
            .remove(&unit3)
            .expect("unit 3")
            .send_response(empty("KuraInstanceList"));
        lists
            .remove("!kura.tuist.dev/shard,tier=managed")
            .expect("unlabelled")
            .send_response(empty("PartialObjectMetadataList"));

        // Unit 1's pods, by its instances' names; unit 3 has none to list.
        let pod_send = loop {
            let (req, send) = handle.next_request().await.expect("request");
            if is_watch(&req) {
                held.push(send);
                continue;
            }
            assert_eq!(req.uri().path(), "/api/v1/pods");
            assert_eq!(
                selector_of(&req),
                "app.kubernetes.io/instance in (acme),app.kubernetes.io/name=kura"
            );
            break send;
        };
        assert!(!discovery.pods_current(), "unit 1's pods are not in");
        let acme0 =
            serde_json::to_value(pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({})))
                .expect("encode");
        pod_send.send_response(list_response(json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "11"}, "items": [acme0]
        })));
        until("every kept unit listed", || {
            discovery.is_ready() && discovery.pods_current()
        })
        .await;
        assert_eq!(discovery.targets().instances[0].pods.len(), 1);
        assert_eq!(discovery.watched_units(), Some(vec![1, 3]));

        // Unit 1 is lost: its instance and pods go at once, nothing is
        // listed again.
        *scope.kept.lock().expect("kept") = [3u16].into_iter().collect();
        scope.changes.send_modify(|n| *n += 1);
        until("unit 1 dropped", || {
            discovery.watched_units() == Some(vec![3]) && discovery.pods_current()
        })
        .await;
        assert!(discovery.targets().instances.is_empty());
        assert_eq!(discovery.instance_count(), 0);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        while let Ok(Some((req, send))) =
            tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request()).await
        {
            assert!(is_watch(&req), "no list after a loss: {:?}", req.uri());
            held.push(send);
        }

        // Asked about an instance it no longer watches, the replica reads
        // it once (the owner's published status) and answers from that
        // for a few seconds.
        let acme_key = InstanceKey::new("kura", "acme");
        assert!(discovery.stored_instance(&acme_key).is_none());
        let published = serde_json::to_value(instance(
            "kura",
            "acme",
            1,
            json!({"rolloutGate": {"targetImage": "ghcr.io/tuist/kura:0.6.0",
                "verdict": "healthy", "evaluatedAt": "2026-07-21T10:00:05Z"}}),
        ))
        .expect("encode");
        let answer = async {
            loop {
                let (req, send) = handle.next_request().await.expect("request");
                if is_watch(&req) {
                    held.push(send);
                    continue;
                }
                assert_eq!(
                    req.uri().path(),
                    "/apis/kura.tuist.dev/v1alpha1/namespaces/kura/kurainstances/acme"
                );
                send.send_response(list_response(published.clone()));
                break;
            }
        };
        let ((), ()) = tokio::join!(discovery.fetch(&acme_key), answer);
        let stored = discovery.stored_instance(&acme_key).expect("fetched");
        assert_eq!(
            stored
                .status
                .and_then(|s| s.rollout_gate)
                .map(|g| g.evaluated_at.to_string()),
            Some("2026-07-21T10:00:05Z".to_owned())
        );
        // Fresh: a second ask makes no request.
        tokio::time::timeout(
            std::time::Duration::from_secs(1),
            discovery.fetch(&acme_key),
        )
        .await
        .expect("answered from what was read");
        driver.abort();
    }

    #[test]
    fn the_fleet_is_estimated_from_the_units_watched() {
        assert_eq!(fleet_estimate(52, 1, 64), 3328);
        assert_eq!(fleet_estimate(1100, 21, 64), 3352);
        assert_eq!(fleet_estimate(3334, 64, 64), 3334);
        assert_eq!(fleet_estimate(0, 5, 64), 0);
    }

    #[tokio::test]
    async fn ready_only_once_both_initial_lists_are_in() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let config = DiscoveryConfig {
            publication: PublicationTarget::Instance,
            namespaces: vec![],
            instance_selector: None,
            pod_selector: Some("app.kubernetes.io/name=kura".into()),
            targets: TargetConfig::default(),
            units: None,
        };
        let (discovery, driver) = Discovery::start(client, &config, None);
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
        for req in [&pod_req, &inst_req] {
            let query = req.uri().query().unwrap_or_default();
            assert!(
                query.split('&').any(|p| p == "limit=100"),
                "lists are paged by {LIST_PAGE_SIZE}: {query}"
            );
        }

        let instance_obj =
            serde_json::to_value(instance("kura", "acme", 1, json!(null))).expect("encode");
        inst_send.send_response(list_response(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstanceList",
            "metadata": {"resourceVersion": "10"}, "items": [instance_obj]
        })));
        until("the instance list to land", || {
            discovery.targets().instances.len() == 1
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
        let t = discovery.targets();
        assert_eq!(t.instances[0].pods.len(), 1);
        assert_eq!(
            t.instances[0].pollable()[0].1,
            "10.0.0.1:4000".parse().expect("addr")
        );
        driver.abort();
    }
}
