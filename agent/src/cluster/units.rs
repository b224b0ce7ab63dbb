//! Unit watches: with sharding by unit, a replica watches the instances,
//! pods and companions of the watch units it keeps, and nothing else,
//! each unit selected on the API server by a label selector
//! ([`UnitCount::selector`] for instances and companions; the unit's
//! instance names, or its shard label, for pods).
//!
//! When the kept units change ([`PodScope::changes`]), the watches of the
//! units gained start (only those are listed) and the units lost stop
//! (their store scopes are dropped whole). A 410 Gone re-lists one unit.
//! Targets are read only once every kept unit's lists are in
//! ([`UnitWatches::current`]), so an instance task never starts without
//! its pods.
//!
//! Pods by instance name (`instance-label`, Kura's controller's
//! `app.kubernetes.io/instance` on every pod of a StatefulSet named like
//! its instance): a unit's pod watch starts once its instance watch has
//! listed and the unit has no instance left for this replica to stamp
//! (at most [`STAMP_WAIT`]), and starts again (listing that one unit's
//! pods, swapped in whole) when an instance not yet selected comes in,
//! coalesced over [`POD_RESTART_COALESCE`] and, again, after its unit's
//! stamps. On a first install, where every instance comes in by its
//! stamp, a unit's pods are so listed once, not once per instance.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Semaphore, watch};

use crate::model::{InstanceKey, PodScope, PublicationTarget, UnitCount};
use crate::telemetry::{self, label};

use super::discovery::{
    COMPANIONS, INSTANCES, LIST_PAGE_SIZE, PODS, WatchState, api_in, driven, join_selectors, locked,
};
use super::instances::{companion_key_of, key_of};
use super::stamp::Stamper;
use super::store::{FactStore, ScopeMap};
use super::wire::{CompanionObject, InstanceObject, PodObject};

/// How a unit's pods are selected on the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodSelection {
    /// By the unit's instance names in `app.kubernetes.io/instance`, the
    /// label Kura's controller puts on every pod (needs no pod label of
    /// ours).
    #[default]
    InstanceLabel,
    /// By the shard label on the pods, like the instances (once Kura's
    /// controller stamps its pods).
    ShardLabel,
}

impl std::str::FromStr for PodSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "instance-label" => Ok(PodSelection::InstanceLabel),
            "shard-label" => Ok(PodSelection::ShardLabel),
            other => Err(format!(
                "{other:?}: expected instance-label, shard-label or all"
            )),
        }
    }
}

/// How units are watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitWatchConfig {
    /// How the buckets are grouped into units (every replica the same).
    pub count: UnitCount,
    /// How a unit's pods are selected.
    pub pods: PodSelection,
    /// Whether instances (and companions) without the shard label are
    /// labelled by the replica that keeps their unit.
    pub stamp: bool,
}

/// The label Kura's controller puts on every pod of an instance, valued
/// with the instance's (its StatefulSet's) name.
pub const INSTANCE_NAME_LABEL: &str = "app.kubernetes.io/instance";

/// A unit's pod watch starts again at most this often when instances come
/// in (bulk onboarding lists the unit once, not once per instance).
pub const POD_RESTART_COALESCE: Duration = Duration::from_secs(2);

/// A unit's pod watch waits at most this long for its unit's stamps
/// (a stamp that fails is tried again only 30 s later: the pods of what
/// is already labelled are listed meanwhile).
pub const STAMP_WAIT: Duration = Duration::from_secs(20);

/// How often a pod watch waiting for its unit's stamps looks again.
const STAMP_POLL: Duration = Duration::from_millis(100);

/// At most this many units list at once (the rest wait their turn).
pub const UNIT_LISTS_IN_FLIGHT: usize = 8;

/// Whether `value` can be a label value (what a pod selector by instance
/// name can select: at most 63 characters of `[A-Za-z0-9._-]`, starting
/// and ending alphanumeric).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The running watches of one kept unit; dropping it aborts them.
struct RunningUnit {
    watches: Vec<Arc<WatchState>>,
    /// Set (under the store's lock) before the unit's scopes are dropped:
    /// an event a watch still delivers is not applied after that.
    stopped: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

impl Drop for RunningUnit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kept units' watches and the epoch of the kept set they follow.
#[derive(Default)]
struct Running {
    /// The value of the scope's signal the running set was made for.
    epoch: Option<u64>,
    /// Every kept unit's lists were in once: from then on a unit still
    /// listing is no readiness matter unless its list fails.
    listed_once: bool,
    units: BTreeMap<u16, RunningUnit>,
}

/// What every unit's watches share.
struct Shared {
    client: Client,
    config: UnitWatchConfig,
    map: ScopeMap,
    /// The namespace scopes, in order (`None`: all namespaces).
    namespaces: Vec<Option<String>>,
    instance_selector: Option<String>,
    pod_selector: Option<String>,
    publication: PublicationTarget,
    store: Arc<Mutex<FactStore>>,
    image_changes: Arc<watch::Sender<u64>>,
    lists: Arc<Semaphore>,
    /// The stamper of the shard label, when this replica stamps.
    stamper: Option<Arc<Stamper>>,
}

/// The unit watches of one replica (see the module documentation).
pub(super) struct UnitWatches {
    shared: Arc<Shared>,
    running: Mutex<Running>,
}

impl UnitWatches {
    /// Unit watches over `store` (its scopes laid out by `map`), started
    /// by [`UnitWatches::follow`]; pod watches by instance name wait for
    /// `stamper`'s stamps of their unit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        client: Client,
        config: UnitWatchConfig,
        map: ScopeMap,
        instance_selector: Option<String>,
        pod_selector: Option<String>,
        publication: PublicationTarget,
        store: Arc<Mutex<FactStore>>,
        image_changes: Arc<watch::Sender<u64>>,
        stamper: Option<Arc<Stamper>>,
    ) -> Self {
        let namespaces = if map.namespaces.is_empty() {
            vec![None]
        } else {
            map.namespaces.iter().cloned().map(Some).collect()
        };
        UnitWatches {
            shared: Arc::new(Shared {
                client,
                config,
                map,
                namespaces,
                instance_selector,
                pod_selector,
                publication,
                store,
                image_changes,
                lists: Arc::new(Semaphore::new(UNIT_LISTS_IN_FLIGHT)),
                stamper,
            }),
            running: Mutex::new(Running::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Running> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows `scope`'s kept units for as long as it runs: starts and
    /// stops unit watches whenever they change. Must run within the tokio
    /// runtime (each unit's watches are a task of their own).
    pub(super) async fn follow(self: Arc<Self>, scope: Arc<dyn PodScope>) {
        let mut changes = scope.changes();
        loop {
            let epoch = *changes.borrow_and_update();
            let kept = scope.kept_units().map(|k| k.units).unwrap_or_default();
            self.reconcile(&kept, epoch);
            if changes.changed().await.is_err() {
                // The scope is gone: keep the units as they are.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Makes the running units `kept` (as of the scope's signal `epoch`):
    /// the lost stop first, their scopes dropped; the gained start.
    fn reconcile(&self, kept: &BTreeSet<u16>, epoch: u64) {
        let count = self.shared.config.count.get();
        let kept: BTreeSet<u16> = kept.iter().copied().filter(|u| *u < count).collect();
        let mut running = self.lock();
        let lost: Vec<u16> = running
            .units
            .keys()
            .filter(|u| !kept.contains(u))
            .copied()
            .collect();
        for unit in &lost {
            if let Some(stopping) = running.units.remove(unit) {
                {
                    let mut store = locked(&self.shared.store);
                    stopping.stopped.store(true, Ordering::Release);
                    for ns in 0..self.shared.namespaces.len() {
                        store.drop_scope(self.shared.map.scope(ns, *unit));
                    }
                }
                drop(stopping);
            }
        }
        let gained: Vec<u16> = kept
            .iter()
            .filter(|u| !running.units.contains_key(u))
            .copied()
            .collect();
        for unit in &gained {
            running.units.insert(*unit, start_unit(&self.shared, *unit));
        }
        running.epoch = Some(epoch);
        metrics::gauge!(telemetry::WATCHED_UNITS).set(running.units.len() as f64);
        if !lost.is_empty() || !gained.is_empty() {
            tracing::info!(units = count, gained = ?gained, lost = ?lost,
                watched = running.units.len(), "watch units changed");
        }
    }

    /// Whether the running units follow the kept set as of `epoch` and
    /// every one of them has its initial lists in.
    pub(super) fn current(&self, epoch: u64) -> bool {
        let mut running = self.lock();
        let current = running.epoch == Some(epoch)
            && running
                .units
                .values()
                .all(|u| u.watches.iter().all(|w| w.is_synced()));
        running.listed_once |= current;
        current
    }

    /// Whether the kept units were taken once.
    pub(super) fn started(&self) -> bool {
        self.lock().epoch.is_some()
    }

    /// The unit watches whose initial list is not in, e.g.
    /// `pods#0 unit 12`, with their last error; once every kept unit was
    /// listed, only those whose list fails (a unit gained later lists in
    /// a moment, and the replica stays ready meanwhile).
    pub(super) fn pending(&self) -> Vec<String> {
        let running = self.lock();
        let once = running.listed_once;
        running
            .units
            .values()
            .flat_map(|r| r.watches.iter())
            .filter(|w| !w.is_synced() && (!once || w.failing()))
            .map(|w| w.describe())
            .collect()
    }

    /// How many units are watched now, and of how many.
    pub(super) fn share(&self) -> (usize, usize) {
        (
            self.lock().units.len(),
            usize::from(self.shared.config.count.get()),
        )
    }

    /// The units watched now.
    #[cfg(test)]
    pub(super) fn watched(&self) -> Vec<u16> {
        self.lock().units.keys().copied().collect()
    }
}

/// Starts `unit`'s watches in every namespace scope, as one task.
fn start_unit(shared: &Arc<Shared>, unit: u16) -> RunningUnit {
    let stopped = Arc::new(AtomicBool::new(false));
    let mut watches = Vec::new();
    let mut drivers: Vec<super::discovery::DiscoveryDriver> = Vec::new();
    for (ns_index, namespace) in shared.namespaces.iter().enumerate() {
        let scope = shared.map.scope(ns_index, unit);
        let (names_tx, names_rx) = watch::channel(0u64);
        let names_tx = Arc::new(names_tx);

        let instances = Arc::new(WatchState::for_unit(INSTANCES, ns_index, unit));
        watches.push(Arc::clone(&instances));
        drivers.push(instance_watch(
            shared,
            namespace.as_deref(),
            unit,
            scope,
            Arc::clone(&instances),
            Arc::clone(&stopped),
            names_tx,
        ));

        if shared.publication == PublicationTarget::Companion {
            let state = Arc::new(WatchState::for_unit(COMPANIONS, ns_index, unit));
            watches.push(Arc::clone(&state));
            drivers.push(companion_watch(
                shared,
                namespace.as_deref(),
                unit,
                scope,
                state,
                Arc::clone(&stopped),
            ));
        }

        let pods = Arc::new(WatchState::for_unit(PODS, ns_index, unit));
        watches.push(Arc::clone(&pods));
        drivers.push(Box::pin(pod_loop(
            Arc::clone(shared),
            namespace.clone(),
            unit,
            scope,
            pods,
            instances,
            Arc::clone(&stopped),
            names_rx,
        )));
    }
    let lists = Arc::clone(&shared.lists);
    let all = watches.clone();
    let task = tokio::spawn(async move {
        // The unit's initial lists take a turn among the units listing;
        // once they are all in, the next unit lists.
        let permit = lists.acquire_owned().await.ok();
        let released = async move {
            while !all.iter().all(|w| w.is_synced()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(permit);
            std::future::pending::<()>().await;
        };
        futures::future::join(futures::future::join_all(drivers), released).await;
    });
    RunningUnit {
        watches,
        stopped,
        task: task.abort_handle(),
    }
}

/// Counts and logs an object whose shard label selected it into a unit
/// its name does not hash to: it is not kept (see docs/sharding.md).
fn mismatch(key: &InstanceKey, unit: u16, resource: &'static str) {
    if resource == COMPANIONS {
        metrics::counter!(telemetry::SHARD_LABEL_MISMATCHES_TOTAL,
            "resource" => label::KURAINSTANCEHEALTHS)
        .increment(1);
    } else {
        metrics::counter!(telemetry::SHARD_LABEL_MISMATCHES_TOTAL,
            "resource" => label::KURAINSTANCES)
        .increment(1);
    }
    tracing::warn!(instance = %key, unit, resource,
        "shard label does not match the instance's bucket: ignored");
}

/// Whether `ev` brings an object whose bucket is not in `unit` (its
/// label says otherwise): counted and logged, and not kept.
fn foreign<K>(
    ev: &watcher::Event<K>,
    key_of: impl Fn(&K) -> Option<InstanceKey>,
    count: UnitCount,
    unit: u16,
    resource: &'static str,
) -> bool {
    if let watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) = ev
        && let Some(key) = key_of(obj)
        && count.unit_of_key(&key) != unit
    {
        mismatch(&key, unit, resource);
        return true;
    }
    false
}

/// `unit`'s instance watch: events applied to `scope` until stopped; a
/// new instance (and the initial list) wakes the unit's pod watch.
fn instance_watch(
    shared: &Arc<Shared>,
    namespace: Option<&str>,
    unit: u16,
    scope: usize,
    state: Arc<WatchState>,
    stopped: Arc<AtomicBool>,
    names: Arc<watch::Sender<u64>>,
) -> super::discovery::DiscoveryDriver {
    let selector = join_selectors(
        Some(&shared.config.count.selector(unit)),
        shared.instance_selector.as_deref(),
    );
    let api: Api<InstanceObject> = api_in(&shared.client, namespace);
    let config = watcher::Config::default()
        .page_size(LIST_PAGE_SIZE)
        .labels(&selector);
    let store = Arc::clone(&shared.store);
    let signal = Arc::clone(&shared.image_changes);
    let count = shared.config.count;
    driven(
        watcher::watcher(api, config).default_backoff(),
        state,
        move |ev| {
            if foreign(ev, key_of, count, unit, INSTANCES) {
                return;
            }
            let applied = {
                let mut store = locked(&store);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                store.apply_instance(scope, ev)
            };
            if applied.image_changed {
                signal.send_modify(|n| *n = n.wrapping_add(1));
            }
            if applied.added || matches!(ev, watcher::Event::InitDone) {
                names.send_modify(|n| *n = n.wrapping_add(1));
            }
        },
    )
}

/// `unit`'s companion watch (companion mode).
fn companion_watch(
    shared: &Arc<Shared>,
    namespace: Option<&str>,
    unit: u16,
    scope: usize,
    state: Arc<WatchState>,
    stopped: Arc<AtomicBool>,
) -> super::discovery::DiscoveryDriver {
    let api: Api<CompanionObject> = api_in(&shared.client, namespace);
    let config = watcher::Config::default()
        .page_size(LIST_PAGE_SIZE)
        .labels(&shared.config.count.selector(unit));
    let store = Arc::clone(&shared.store);
    let count = shared.config.count;
    driven(
        watcher::watcher(api, config).default_backoff(),
        state,
        move |ev| {
            if foreign(ev, companion_key_of, count, unit, COMPANIONS) {
                return;
            }
            let mut store = locked(&store);
            if !stopped.load(Ordering::Acquire) {
                store.apply_companion(scope, ev);
            }
        },
    )
}

/// `unit`'s pod watch in one namespace scope (see the module
/// documentation): by shard label, one watch for good; by instance
/// name, a watch of the names the instance watch holds, started again
/// when a name not selected comes in.
#[allow(clippy::too_many_arguments)]
async fn pod_loop(
    shared: Arc<Shared>,
    namespace: Option<String>,
    unit: u16,
    scope: usize,
    state: Arc<WatchState>,
    instances: Arc<WatchState>,
    stopped: Arc<AtomicBool>,
    mut names: watch::Receiver<u64>,
) {
    let api: Api<PodObject> = api_in(&shared.client, namespace.as_deref());
    let count = shared.config.count;
    // The pods are selected by the instances' names: wait for their list.
    while !instances.is_synced() {
        if names.changed().await.is_err() {
            return;
        }
    }
    loop {
        let selected: Option<Vec<Arc<str>>> = match shared.config.pods {
            PodSelection::ShardLabel => None,
            PodSelection::InstanceLabel => {
                stamps_done(&shared, unit).await;
                names.borrow_and_update();
                let selectable: Vec<Arc<str>> = locked(&shared.store)
                    .instance_names(scope)
                    .into_iter()
                    .filter(|n| is_label_value(n))
                    .collect();
                if selectable.is_empty() {
                    // Nothing to select: the unit has no pods.
                    {
                        let mut store = locked(&shared.store);
                        if stopped.load(Ordering::Acquire) {
                            return;
                        }
                        let none = |_: &InstanceKey| false;
                        store.apply_pod(scope, &watcher::Event::Init, &none);
                        store.apply_pod(scope, &watcher::Event::InitDone, &none);
                    }
                    state.observe(Ok(()), true);
                    if names.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(selectable)
            }
        };
        let by_unit = match &selected {
            None => count.selector(unit),
            Some(names) => format!("{INSTANCE_NAME_LABEL} in ({})", names.join(",")),
        };
        let selector = join_selectors(Some(&by_unit), shared.pod_selector.as_deref());
        let config = watcher::Config::default()
            .page_size(LIST_PAGE_SIZE)
            .labels(&selector);
        let store = Arc::clone(&shared.store);
        let halt = Arc::clone(&stopped);
        let run = driven(
            watcher::watcher(api.clone(), config).default_backoff(),
            Arc::clone(&state),
            move |ev| {
                let keeps = |key: &InstanceKey| count.unit_of_key(key) == unit;
                let mut store = locked(&store);
                if !halt.load(Ordering::Acquire) {
                    store.apply_pod(scope, ev, &keeps);
                }
            },
        );
        let Some(selected) = selected else {
            return run.await;
        };
        let grew = async {
            loop {
                if names.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                let now = locked(&shared.store).instance_names(scope);
                if now
                    .iter()
                    .any(|n| is_label_value(n) && selected.binary_search(n).is_err())
                {
                    break;
                }
            }
            // Coalesce a burst of new instances into one list (the
            // stamps of the unit's other instances are waited for when
            // the loop starts again).
            tokio::time::sleep(POD_RESTART_COALESCE).await;
        };
        tokio::select! {
            () = run => return,
            () = grew => {
                tracing::debug!(unit, scope, "instances came in: listing the unit's pods again");
            }
        }
    }
}

/// Returns once `unit` has no instance left for this replica to stamp,
/// or after [`STAMP_WAIT`].
async fn stamps_done(shared: &Shared, unit: u16) {
    let Some(stamper) = &shared.stamper else {
        return;
    };
    let since = tokio::time::Instant::now();
    let mut waited = false;
    while stamper.pending_in(unit) && since.elapsed() < STAMP_WAIT {
        waited = true;
        tokio::time::sleep(STAMP_POLL).await;
    }
    if waited {
        tracing::debug!(
            unit,
            waited_ms = since.elapsed().as_millis() as u64,
            "waited for the unit's shard-label stamps before listing its pods"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_checked_like_the_api_server_does() {
        for ok in ["acme", "a", "kura-0", "a.b_c-d", &"x".repeat(63)] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a/b", "a b", &"x".repeat(64), "ä"] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn pod_selections_parse() {
        assert_eq!(
            "instance-label".parse::<PodSelection>(),
            Ok(PodSelection::InstanceLabel)
        );
        assert_eq!(
            "shard-label".parse::<PodSelection>(),
            Ok(PodSelection::ShardLabel)
        );
        assert!("all".parse::<PodSelection>().is_err());
    }
}
