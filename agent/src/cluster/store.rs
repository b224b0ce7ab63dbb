//! The watches' caches, pure: what discovery keeps of every watched
//! instance ([`InstanceEntry`]) and pod ([`PodFacts`], indexed by the
//! instance they belong to), fed one watch event at a time, and a change
//! log of the instances whose targets moved.
//!
//! Only a change of what a target is made of is a change: an instance's
//! `spec.image`, `spec.replicas`, `metadata.generation`, gate-config
//! annotation or readable status fields; a pod's name, UID, IP, Kura
//! image, restart count, phase (finished or not), owner, or its deletion.
//! The agent's own status writes, a heartbeat, a label or another
//! manager's condition leave the [revision](FactStore::revision) where it
//! is, so the loop re-reads nothing for them, and what did change is
//! named per instance ([`FactStore::changed_since`]), so the loop re-reads
//! only those instances.
//!
//! A re-list (the watch's `Init` … `InitDone`) is collected aside and
//! swapped in whole when it completes, each instance whose entry or pods
//! differ then logged as changed, like a reflector store's atomic swap.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use kube::runtime::watcher;

use crate::model::{
    Contest, ControllerHealth, InstanceKey, InstanceTarget, PublicationTarget, UnitCount,
};
use kura_schemas::KuraInstanceStatus;

use super::instances::{
    InstanceEntry, SkippedInstance, companion_key_of, companion_status, entry_reading, key_of,
};
use super::pods::{PodFacts, TargetConfig, facts_of};
use super::stored::{Lifecycle, REREADING_NOTE, Reread, Stage};
use super::wire::{CompanionObject, InstanceObject, PodObject};

/// How many changes the log keeps: a reader further behind re-reads
/// every target (a key per target).
const CHANGE_LOG: usize = 1024;

/// The result of [`FactStore::targets`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Targets {
    /// Usable instances, sorted by namespace and name.
    pub instances: Vec<InstanceTarget>,
    /// Instances left out, with reasons.
    pub skipped: Vec<SkippedInstance>,
}

/// A pod's key in its scope: namespace and name.
type PodKey = (String, String);

/// Each kept pod's instance, by namespace and pod name. A pod's entry is
/// its name and the instance's key as the store already holds it
/// ([`interned`]): a `(String, String)` pod key and an instance key of its
/// own per pod would be more memory for every pod of the fleet.
#[derive(Debug, Default)]
struct Owners {
    by_namespace: HashMap<Arc<str>, HashMap<Box<str>, InstanceKey>>,
}

impl Owners {
    fn get(&self, (namespace, name): &PodKey) -> Option<&InstanceKey> {
        self.by_namespace
            .get(namespace.as_str())?
            .get(name.as_str())
    }

    /// Records `owner` as the pod's instance (a namespace's name is
    /// allocated once, with its first pod).
    fn insert(&mut self, (namespace, name): PodKey, owner: InstanceKey) {
        let pods = match self.by_namespace.get_mut(namespace.as_str()) {
            Some(pods) => pods,
            None => self.by_namespace.entry(namespace.into()).or_default(),
        };
        pods.insert(name.into_boxed_str(), owner);
    }

    fn remove(&mut self, (namespace, name): &PodKey) {
        let Some(pods) = self.by_namespace.get_mut(namespace.as_str()) else {
            return;
        };
        pods.remove(name.as_str());
        if pods.is_empty() {
            self.by_namespace.remove(namespace.as_str());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_namespace.values().map(HashMap::len).sum()
    }
}
/// The pods of one instance, sorted by name: a few each, so a sorted
/// `Vec` (a `BTreeMap` leaf holds room for many more entries than an
/// instance has pods, for every instance of the fleet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PodsOf(Vec<PodFacts>);

impl PodsOf {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|p| (*p.identity.name).cmp(name))
    }
    fn get(&self, name: &str) -> Option<&PodFacts> {
        self.find(name).ok().map(|i| &self.0[i])
    }
    fn insert(&mut self, facts: PodFacts) {
        match self.find(&facts.identity.name) {
            Ok(i) => self.0[i] = facts,
            Err(i) => self.0.insert(i, facts),
        }
    }
    fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.0.remove(i);
        }
    }
}

/// The instances and pods of one watch scope (a namespace, or all).
#[derive(Debug, Default)]
struct Scope {
    instances: HashMap<InstanceKey, InstanceEntry>,
    pods: HashMap<InstanceKey, PodsOf>,
    owners: Owners,
    /// A re-list of instances in progress.
    instance_relist: Option<HashMap<InstanceKey, InstanceEntry>>,
    /// The instances of that re-list read without their status (released
    /// when their entry came in).
    instance_relist_unread: HashSet<InstanceKey>,
    /// A re-list of pods in progress.
    pod_relist: Option<(HashMap<InstanceKey, PodsOf>, Owners)>,
    /// Companion mode: the agent's status as each companion carries it
    /// (released instances' left out), by instance.
    companions: HashMap<InstanceKey, Box<KuraInstanceStatus>>,
    /// A re-list of companions in progress.
    companion_relist: Option<HashMap<InstanceKey, Box<KuraInstanceStatus>>>,
    /// The companions of that re-list read with their status, and those
    /// read without it (released when they came in).
    companion_relist_read: HashSet<InstanceKey>,
    companion_relist_unread: HashSet<InstanceKey>,
    /// Companion mode: which instances have a companion, released ones
    /// too, by [`FactStore::presence`] hash (a collision only makes the
    /// writer try the status first, as when it does not know).
    companion_present: HashSet<u64>,
    /// That set, re-listed.
    companion_present_relist: Option<HashSet<u64>>,
    /// The companion watch has listed once: absence from
    /// `companion_present` means no companion.
    companions_listed: bool,
}

impl Scope {
    /// The status `key`'s target continues from: the instance's own in
    /// `instance` mode, its companion's in `companion` mode.
    fn status_of<'a>(
        &'a self,
        target: PublicationTarget,
        key: &InstanceKey,
        entry: &'a InstanceEntry,
    ) -> Option<&'a KuraInstanceStatus> {
        match target {
            PublicationTarget::Instance => entry.status.as_deref(),
            PublicationTarget::Companion => self.companions.get(key).map(|b| &**b),
        }
    }
}

/// `key`'s hash in a companion presence set.
fn presence(hasher: &impl std::hash::BuildHasher, key: &InstanceKey) -> u64 {
    hasher.hash_one((&*key.namespace, &*key.name))
}

/// What applying one instance event found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// An instance seen before now has another `spec.image` (an
    /// instance seen for the first time is no change).
    pub image_changed: bool,
    /// An instance the scope did not hold before came in.
    pub added: bool,
}

/// Which store scope holds an instance: one per watched namespace (one
/// for all namespaces when none is configured), and with unit watches one
/// per namespace and watch unit (`namespace index × units + unit`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeMap {
    /// The watched namespaces; empty: all, one namespace scope.
    pub namespaces: Vec<String>,
    /// The watch units, when each unit is watched apart.
    pub units: Option<UnitCount>,
}

impl ScopeMap {
    /// How many scopes the map has.
    pub fn len(&self) -> usize {
        self.namespaces.len().max(1) * self.units_per_namespace()
    }

    fn units_per_namespace(&self) -> usize {
        self.units.map_or(1, |u| usize::from(u.get()))
    }

    /// The namespace scope of `namespace` (its index among the watched
    /// namespaces; 0 when all are watched).
    pub fn namespace_index(&self, namespace: &str) -> Option<usize> {
        if self.namespaces.is_empty() {
            return Some(0);
        }
        self.namespaces.iter().position(|n| n == namespace)
    }

    /// The scope of namespace scope `namespace_index` and `unit` (the
    /// namespace scope itself without unit watches).
    pub fn scope(&self, namespace_index: usize, unit: u16) -> usize {
        match self.units {
            Some(_) => namespace_index * self.units_per_namespace() + usize::from(unit),
            None => namespace_index,
        }
    }

    /// The scope that holds `key`, if its namespace is watched.
    pub fn scope_of(&self, key: &InstanceKey) -> Option<usize> {
        let ns = self.namespace_index(&key.namespace)?;
        Some(self.scope(ns, self.units.map_or(0, |u| u.unit_of_key(key))))
    }
}

/// The caches of every watch scope and the change log. See the module
/// documentation.
#[derive(Debug)]
pub struct FactStore {
    config: TargetConfig,
    scopes: Vec<Scope>,
    revision: u64,
    log: VecDeque<(u64, InstanceKey)>,
    /// Every instance's stored-status stage (Held, Released, Rereading):
    /// whether events' statuses are read, whether a target is handed out,
    /// whether a GET's answer still counts ([`super::stored`]).
    lifecycle: Lifecycle,
    /// The instances whose entry carries a contest, kept as entries change
    /// (a re-list recounts), so the contest watch, every second, reads
    /// these and not every instance.
    contested_keys: HashSet<InstanceKey>,
    /// Where the agent publishes: where the statuses come from.
    target: PublicationTarget,
    /// Hashes instance keys for `companion_present`.
    presence_hasher: std::collections::hash_map::RandomState,
    /// Which scope holds a key, when known ([`FactStore::with_scopes`]).
    map: Option<ScopeMap>,
}

impl FactStore {
    /// An empty store of `scopes` watch scopes, reading pods with `config`,
    /// the agent publishing on the instances.
    pub fn new(scopes: usize, config: TargetConfig) -> Self {
        FactStore {
            config,
            scopes: (0..scopes.max(1)).map(|_| Scope::default()).collect(),
            revision: 0,
            log: VecDeque::new(),
            lifecycle: Lifecycle::default(),
            contested_keys: HashSet::new(),
            target: PublicationTarget::Instance,
            presence_hasher: std::collections::hash_map::RandomState::new(),
            map: None,
        }
    }

    /// An empty store of `map`'s scopes, reading pods with `config`, the
    /// agent publishing on the instances.
    pub fn with_scopes(map: ScopeMap, config: TargetConfig) -> Self {
        let mut store = FactStore::new(map.len(), config);
        store.map = Some(map);
        store
    }

    /// Forgets everything scope `scope` holds (its unit is no longer
    /// watched): its instances leave the targets (logged as changed, their
    /// stored-status stages forgotten, as on a delete), its pods and
    /// companions go, and a re-list in progress is dropped. Events of its
    /// stopped watches must not be applied after this.
    pub fn drop_scope(&mut self, scope: usize) {
        let Some(s) = self.scopes.get_mut(scope) else {
            return;
        };
        let old = std::mem::take(s);
        let mut changed: Vec<InstanceKey> = old.instances.keys().cloned().collect();
        changed.extend(
            old.pods
                .keys()
                .filter(|k| !old.instances.contains_key(*k))
                .cloned(),
        );
        for key in old.instances.keys() {
            self.lifecycle.gone(key);
            self.contested_keys.remove(key);
        }
        for key in changed {
            self.mark(key);
        }
    }

    /// The names of scope `scope`'s instances, sorted, each once: what a
    /// unit's pod watch selects by `app.kubernetes.io/instance`.
    pub fn instance_names(&self, scope: usize) -> Vec<Arc<str>> {
        let Some(s) = self.scopes.get(scope) else {
            return Vec::new();
        };
        let mut names: Vec<Arc<str>> = s.instances.keys().map(|k| Arc::clone(&k.name)).collect();
        names.sort();
        names.dedup();
        names
    }

    /// The store for publication `target`: in `companion` mode the
    /// statuses come from the companions ([`FactStore::apply_companion`]).
    pub fn with_target(mut self, target: PublicationTarget) -> Self {
        self.target = target;
        self
    }

    /// Applies one event of scope `scope`'s companion watch (companion
    /// mode): the agent's status as the companion carries it, kept for
    /// instances whose status is kept. A companion read whole ends a
    /// re-read of its status and logs its instance as changed. A re-list
    /// is swapped in whole, keeping a status read again meanwhile.
    pub fn apply_companion(&mut self, scope: usize, event: &watcher::Event<CompanionObject>) {
        if scope >= self.scopes.len() {
            return;
        }
        let read = |obj: &CompanionObject| {
            let key = companion_key_of(obj)?;
            let (status, warnings) = companion_status(obj);
            if !warnings.is_empty() {
                tracing::warn!(instance = %key, warnings = ?warnings,
                    "fields of the companion's status could not be read");
            }
            Some((key, status.map(Box::new)))
        };
        let mut changed = Vec::new();
        let s = &mut self.scopes[scope];
        match event {
            watcher::Event::Init => {
                s.companion_relist = Some(HashMap::new());
                s.companion_relist_read.clear();
                s.companion_relist_unread.clear();
                s.companion_present_relist = Some(HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                if let (Some(present), Some(key)) =
                    (s.companion_present_relist.as_mut(), companion_key_of(obj))
                {
                    present.insert(presence(&self.presence_hasher, &key));
                }
                let released = companion_key_of(obj).filter(|k| self.lifecycle.released(k));
                if let Some(key) = released {
                    s.companion_relist_unread.insert(key);
                } else if let (Some(relist), Some((key, status))) =
                    (s.companion_relist.as_mut(), read(obj))
                {
                    s.companion_relist_read.insert(key.clone());
                    if let Some(status) = status {
                        relist.insert(key, status);
                    }
                }
            }
            watcher::Event::InitDone => {
                if let Some(present) = s.companion_present_relist.take() {
                    s.companion_present = present;
                    s.companions_listed = true;
                }
                if let Some(mut new) = s.companion_relist.take() {
                    // Read without its status but kept now (read again
                    // meanwhile): the status read since stands.
                    for key in s.companion_relist_unread.drain() {
                        if self.lifecycle.stage(&key) == Stage::Held
                            && let Some(old) = s.companions.remove(&key)
                        {
                            new.insert(key, old);
                        }
                    }
                    for key in s.companion_relist_read.drain() {
                        if self.lifecycle.released(&key) {
                            new.remove(&key);
                        } else if self.lifecycle.read_whole(&key) {
                            changed.push(key);
                        }
                    }
                    s.companions = new;
                }
            }
            watcher::Event::Apply(obj) => {
                if let Some(key) = companion_key_of(obj) {
                    s.companion_present
                        .insert(presence(&self.presence_hasher, &key));
                }
                // A released instance's companion is this replica's own
                // write coming back: not read at all.
                let released = companion_key_of(obj).is_some_and(|k| self.lifecycle.released(&k));
                if !released && let Some((key, status)) = read(obj) {
                    match status {
                        Some(status) => {
                            s.companions.insert(key.clone(), status);
                        }
                        None => {
                            s.companions.remove(&key);
                        }
                    }
                    if self.lifecycle.read_whole(&key) {
                        changed.push(key);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some(key) = companion_key_of(obj) {
                    s.companion_present
                        .remove(&presence(&self.presence_hasher, &key));
                    s.companions.remove(&key);
                }
            }
        }
        for key in changed {
            self.mark(key);
        }
    }

    /// The instances another manager contests (instance mode: it owns a
    /// field under `status.rolloutHealth`), with that manager and the
    /// instance's UID.
    pub fn contested(&self) -> Vec<Contest> {
        if self.target != PublicationTarget::Instance {
            return Vec::new();
        }
        let mut out: Vec<_> = self
            .contested_keys
            .iter()
            .filter_map(|k| {
                let entry = self.scopes.iter().find_map(|s| s.instances.get(k))?;
                let c = entry.contest.as_deref()?;
                Some(Contest {
                    key: k.clone(),
                    manager: c.manager.clone(),
                    uid: c.uid.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// The UID of the watched instance `key` (companion mode).
    pub fn instance_uid(&self, key: &InstanceKey) -> Option<Box<str>> {
        self.scopes
            .iter()
            .find_map(|s| s.instances.get(key)?.companion.as_deref()?.uid.clone())
    }

    /// Companion mode: whether `key` is known to have no companion (every
    /// scope's companion watch has listed and none has it). `false` when
    /// unknown, or in instance mode.
    pub fn companion_absent(&self, key: &InstanceKey) -> bool {
        if self.target != PublicationTarget::Companion {
            return false;
        }
        let hash = presence(&self.presence_hasher, key);
        let absent_in = |s: &Scope| s.companions_listed && !s.companion_present.contains(&hash);
        match self.map.as_ref() {
            // Only the key's own scope can hold its companion.
            Some(map) => map
                .scope_of(key)
                .and_then(|i| self.scopes.get(i))
                .is_some_and(absent_in),
            None => self.scopes.iter().all(absent_in),
        }
    }

    /// The manager contesting `key` (instance mode), if any.
    pub fn contested_by(&self, key: &InstanceKey) -> Option<Box<str>> {
        if self.target != PublicationTarget::Instance {
            return None;
        }
        self.scopes
            .iter()
            .find_map(|s| Some(s.instances.get(key)?.contest.as_deref()?.manager.clone()))
    }

    /// Kura's controller's own numbers of every instance that has them
    /// (companion mode), with the instance's UID.
    pub fn controller_healths(&self) -> Vec<(InstanceKey, ControllerHealth)> {
        self.scopes
            .iter()
            .flat_map(|s| s.instances.iter())
            .filter_map(|(k, e)| Some((k.clone(), e.companion.as_deref()?.controller?)))
            .collect()
    }

    /// Stops keeping `key`'s status (and drops the one kept): this
    /// replica's task sweeps the instance, restored from that status, and
    /// its engine holds all the status says (Released). Every status the
    /// watch brings for it from now on is read (its warnings are part of
    /// the target) and let go: a status kept here besides the engine's
    /// would be a second copy for every instance.
    pub fn release_status(&mut self, key: &InstanceKey) {
        self.lifecycle.release(key);
        for s in &mut self.scopes {
            if let Some(entry) = s.instances.get_mut(key) {
                entry.status = None;
            }
            s.companions.remove(key);
        }
    }

    /// Keeps `key`'s status again (its task stopped or ended; `last` is
    /// what it last published, answered meanwhile). Returns the GET to
    /// make when the status was released and the instance is still here
    /// (Rereading): until it is in, no target of the instance is handed
    /// out ([`FactStore::status_pending`]).
    pub fn keep_status(
        &mut self,
        key: &InstanceKey,
        last: Option<KuraInstanceStatus>,
    ) -> Option<Reread> {
        let present = self.scopes.iter().any(|s| s.instances.contains_key(key));
        self.lifecycle.keep(key, present, last)
    }

    /// Whether `key`'s status is being read again ([`FactStore::keep_status`]).
    pub fn status_pending(&self, key: &InstanceKey) -> bool {
        self.lifecycle.stage(key) == Stage::Rereading
    }

    /// Whether `reread`'s answer still counts (no watch event, delete or
    /// release since): a GET waiting for its turn is not made otherwise.
    pub fn reread_wanted(&self, reread: &Reread) -> bool {
        self.lifecycle.wanted(reread)
    }

    /// Gives up reading `key`'s status again (the read cannot be made): a
    /// task may start without it.
    pub fn abandon_reread(&mut self, key: &InstanceKey) {
        if self.lifecycle.read_whole(key) {
            self.mark(key.clone());
        }
    }

    /// The GET of `reread` answered `obj` (`None`: not found). Applied
    /// only while still wanted (returned), and then only its status: the
    /// instance's shape is the watch's alone, so a late answer never
    /// brings back a deleted instance nor an older `spec.image`. The
    /// instance is logged as changed, so the loop reads its target.
    pub fn reread_instance(
        &mut self,
        scope: usize,
        reread: &Reread,
        obj: Option<&InstanceObject>,
    ) -> bool {
        if scope >= self.scopes.len() || !self.lifecycle.answered(reread) {
            return false;
        }
        if self.target == PublicationTarget::Instance
            && let Some(entry) = self.scopes[scope].instances.get_mut(&reread.key)
        {
            entry.status = obj.and_then(|o| entry_reading(o, self.target, true).status);
        }
        self.mark(reread.key.clone());
        true
    }

    /// [`FactStore::reread_instance`] for a companion (companion mode).
    pub fn reread_companion(
        &mut self,
        scope: usize,
        reread: &Reread,
        obj: Option<&CompanionObject>,
    ) -> bool {
        if scope >= self.scopes.len() || !self.lifecycle.answered(reread) {
            return false;
        }
        let status = obj.and_then(|o| companion_status(o).0).map(Box::new);
        let companions = &mut self.scopes[scope].companions;
        match status {
            Some(status) => {
                companions.insert(reread.key.clone(), status);
            }
            None => {
                companions.remove(&reread.key);
            }
        }
        self.mark(reread.key.clone());
        true
    }

    /// The entry of a watched instance, its status let go when released.
    fn entry_for(&self, key: &InstanceKey, obj: &InstanceObject) -> InstanceEntry {
        let released = self.lifecycle.released(key);
        let mut entry = entry_reading(obj, self.target, !released);
        if released {
            entry.status = None;
        }
        entry
    }

    /// A number that moves exactly when some instance's target changed.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The instances whose targets changed after `revision` (once each),
    /// or `None` when the log no longer reaches back that far.
    pub fn changed_since(&self, revision: u64) -> Option<Vec<InstanceKey>> {
        if revision > self.revision {
            return None;
        }
        if revision == self.revision {
            return Some(Vec::new());
        }
        match self.log.front() {
            Some((first, _)) if *first <= revision + 1 => {}
            _ => return None,
        }
        let mut seen = HashSet::new();
        Some(
            self.log
                .iter()
                .filter(|(r, _)| *r > revision)
                .filter(|(_, k)| seen.insert(k.clone()))
                .map(|(_, k)| k.clone())
                .collect(),
        )
    }

    fn mark(&mut self, key: InstanceKey) {
        self.revision += 1;
        self.log.push_back((self.revision, key));
        while self.log.len() > CHANGE_LOG {
            self.log.pop_front();
        }
    }

    /// Applies one event of scope `scope`'s instance watch.
    pub fn apply_instance(
        &mut self,
        scope: usize,
        event: &watcher::Event<InstanceObject>,
    ) -> Applied {
        if scope >= self.scopes.len() {
            return Applied::default();
        }
        let mut changed = Vec::new();
        let mut applied = Applied::default();
        let mut relisted = false;
        let instance_mode = self.target == PublicationTarget::Instance;
        let keyed = match event {
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                key_of(obj).map(|key| (self.entry_for(&key, obj), key))
            }
            _ => None,
        };
        let s = &mut self.scopes[scope];
        match event {
            watcher::Event::Init => {
                s.instance_relist = Some(HashMap::new());
                s.instance_relist_unread.clear();
            }
            watcher::Event::InitApply(_) => {
                if let (Some(relist), Some((entry, key))) = (s.instance_relist.as_mut(), keyed) {
                    if self.lifecycle.released(&key) {
                        s.instance_relist_unread.insert(key.clone());
                    }
                    relist.insert(key, entry);
                }
            }
            watcher::Event::InitDone => {
                if let Some(mut new) = s.instance_relist.take() {
                    // Each entry's status as the stages stand now, not as
                    // they stood when the entry came in.
                    for (key, entry) in &mut new {
                        if s.instance_relist_unread.remove(key) {
                            // Read released; kept since (read again
                            // meanwhile): the status read since stands,
                            // or is still being read.
                            if self.lifecycle.stage(key) == Stage::Held {
                                entry.status = s.instances.get(key).and_then(|o| o.status.clone());
                            }
                        } else if self.lifecycle.released(key) {
                            entry.status = None;
                        } else if instance_mode && self.lifecycle.read_whole(key) {
                            changed.push(key.clone());
                        }
                    }
                    s.instance_relist_unread.clear();
                    for (key, old) in &s.instances {
                        match new.get(key) {
                            None => {
                                self.lifecycle.gone(key);
                                changed.push(key.clone());
                            }
                            Some(n) => {
                                if n.shape != old.shape {
                                    changed.push(key.clone());
                                }
                                applied.image_changed |= image_moved(old, n);
                            }
                        }
                    }
                    let before = changed.len();
                    changed.extend(
                        new.keys()
                            .filter(|k| !s.instances.contains_key(*k))
                            .cloned(),
                    );
                    applied.added |= changed.len() > before;
                    s.instances = new;
                    relisted = true;
                }
            }
            watcher::Event::Apply(_) => {
                if let Some((entry, key)) = keyed {
                    if entry.contest.is_some() {
                        self.contested_keys.insert(key.clone());
                    } else {
                        self.contested_keys.remove(&key);
                    }
                    match s.instances.get_mut(&key) {
                        Some(old) => {
                            applied.image_changed = image_moved(old, &entry);
                            if old.shape != entry.shape {
                                changed.push(key.clone());
                            }
                            *old = entry;
                        }
                        None => {
                            s.instances.insert(key.clone(), entry);
                            changed.push(key.clone());
                            applied.added = true;
                        }
                    }
                    // Read whole, status and all (not released): a
                    // re-read under way ends, whatever the object holds.
                    if instance_mode && self.lifecycle.read_whole(&key) {
                        changed.push(key);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                if let Some(key) = key_of(obj)
                    && s.instances.remove(&key).is_some()
                {
                    self.lifecycle.gone(&key);
                    self.contested_keys.remove(&key);
                    changed.push(key);
                }
            }
        }
        if relisted {
            self.contested_keys = self
                .scopes
                .iter()
                .flat_map(|s| s.instances.iter())
                .filter(|(_, e)| e.contest.is_some())
                .map(|(k, _)| k.clone())
                .collect();
        }
        for key in changed {
            self.mark(key);
        }
        applied
    }

    /// Applies one event of scope `scope`'s pod watch; a pod of an
    /// instance `keeps` refuses is not kept (it is gone from the store if
    /// it was there).
    pub fn apply_pod(
        &mut self,
        scope: usize,
        event: &watcher::Event<PodObject>,
        keeps: &dyn Fn(&InstanceKey) -> bool,
    ) {
        let config = &self.config;
        let facts_of = |pod: &PodObject| facts_of(pod, config).filter(|(owner, _)| keeps(owner));
        let Some(s) = self.scopes.get_mut(scope) else {
            return;
        };
        let mut changed = Vec::new();
        match event {
            watcher::Event::Init => s.pod_relist = Some((HashMap::new(), Owners::default())),
            watcher::Event::InitApply(pod) => {
                if let (Some((pods, owners)), Some(pk), Some((owner, facts))) =
                    (s.pod_relist.as_mut(), pod_key(pod), facts_of(pod))
                {
                    let owner = interned(owner, &s.instances, pods);
                    pods.entry(owner.clone()).or_default().insert(facts);
                    owners.insert(pk, owner);
                }
            }
            watcher::Event::InitDone => {
                if let Some((pods, owners)) = s.pod_relist.take() {
                    for (key, old) in &s.pods {
                        if pods.get(key) != Some(old) {
                            changed.push(key.clone());
                        }
                    }
                    changed.extend(pods.keys().filter(|k| !s.pods.contains_key(*k)).cloned());
                    s.pods = pods;
                    s.owners = owners;
                }
            }
            watcher::Event::Apply(pod) => {
                if let Some(pk) = pod_key(pod) {
                    let new = facts_of(pod)
                        .map(|(owner, facts)| (interned(owner, &s.instances, &s.pods), facts));
                    upsert_pod(s, pk, new, &mut changed);
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some(pk) = pod_key(pod) {
                    upsert_pod(s, pk, None, &mut changed);
                }
            }
        }
        for key in changed {
            self.mark(key);
        }
    }

    /// Every instance's current target (with the status it was last seen
    /// with), sorted by namespace and name, and the instances skipped.
    pub fn targets(&self) -> Targets {
        let max = self.config.max_pods_per_instance;
        let mut out = Targets::default();
        for s in &self.scopes {
            for (key, entry) in &s.instances {
                match &entry.shape {
                    // Withheld while its status is being read again: a
                    // task must not start without it.
                    Ok(_) if self.status_pending(key) => out.skipped.push(SkippedInstance {
                        key: key.clone(),
                        reason: "status being read again".to_owned(),
                    }),
                    Ok(_) => out.instances.extend(target(
                        s.pods.get(key),
                        entry,
                        s.status_of(self.target, key, entry),
                        max,
                    )),
                    Err(reason) => out.skipped.push(SkippedInstance {
                        key: key.clone(),
                        reason: reason.clone(),
                    }),
                }
            }
        }
        // Unstable, in place: a key is in one scope once, and std's
        // stable sort allocates scratch as large as the vector (up to
        // 8 MB) while every target is built.
        out.instances
            .sort_unstable_by(|a, b| a.name_order().cmp(&b.name_order()));
        out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// The current targets of `keys` that exist and are usable, with the
    /// status each was last seen with; an instance whose status is being
    /// read again is left out (it is named as changed once it is in).
    pub fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
        keys.iter()
            .filter(|key| !self.status_pending(key))
            .filter_map(|key| {
                self.scopes.iter().find_map(|s| {
                    let entry = s.instances.get(key)?;
                    target(
                        s.pods.get(key),
                        entry,
                        s.status_of(self.target, key, entry),
                        self.config.max_pods_per_instance,
                    )
                })
            })
            .collect()
    }

    /// Every usable instance with its stored status, without pods.
    pub fn stored(&self) -> Vec<InstanceTarget> {
        let mut out: Vec<InstanceTarget> = self
            .scopes
            .iter()
            .flat_map(|s| {
                s.instances
                    .iter()
                    .filter_map(|(k, e)| self.stored_target(s, k, e))
            })
            .collect();
        out.sort_unstable_by(|a, b| a.name_order().cmp(&b.name_order()));
        out
    }

    /// One usable instance with its stored status, without pods.
    pub fn stored_one(&self, key: &InstanceKey) -> Option<InstanceTarget> {
        self.scopes.iter().find_map(|s| {
            let entry = s.instances.get(key)?;
            self.stored_target(s, key, entry)
        })
    }

    /// `key`'s stored view; while its status is being read again, the
    /// last status this replica published, with a note saying so.
    fn stored_target(
        &self,
        s: &Scope,
        key: &InstanceKey,
        entry: &InstanceEntry,
    ) -> Option<InstanceTarget> {
        if !self.status_pending(key) {
            return target(None, entry, s.status_of(self.target, key, entry), 0);
        }
        let mut t = target(None, entry, self.lifecycle.last(key), 0)?;
        t.status_warnings.push(REREADING_NOTE.to_owned());
        Some(t)
    }

    /// The instances the store holds, in every scope.
    pub fn instance_count(&self) -> usize {
        self.scopes.iter().map(|s| s.instances.len()).sum()
    }

    /// What the store holds: instances, pods.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        self.scopes.iter().fold((0, 0), |(i, p), s| {
            (i + s.instances.len(), p + s.owners.len())
        })
    }
}

/// The stored view of an instance read by one GET (not watched): its
/// status the instance's own in `instance` mode, `companion`'s in
/// `companion` mode. `None` when the instance is not usable.
pub fn stored_of(
    instance: &InstanceObject,
    companion: Option<&CompanionObject>,
    publication: PublicationTarget,
) -> Option<InstanceTarget> {
    let entry = entry_reading(instance, publication, true);
    let status: Option<KuraInstanceStatus> = match publication {
        PublicationTarget::Instance => entry.status.as_deref().cloned(),
        PublicationTarget::Companion => companion.and_then(|c| companion_status(c).0),
    };
    target(None, &entry, status.as_ref(), 0)
}

/// Whether `old` and `new` are one instance with another `spec.image`.
fn image_moved(old: &InstanceEntry, new: &InstanceEntry) -> bool {
    matches!((&old.shape, &new.shape), (Ok(a), Ok(b)) if a.spec_image != b.spec_image)
}

/// `key` as the store already holds it (its instance's key, or the key
/// of the instance's other pods), else `key` itself.
fn interned(
    key: InstanceKey,
    instances: &HashMap<InstanceKey, InstanceEntry>,
    pods: &HashMap<InstanceKey, PodsOf>,
) -> InstanceKey {
    instances
        .get_key_value(&key)
        .map(|(k, _)| k)
        .or_else(|| pods.get_key_value(&key).map(|(k, _)| k))
        .map_or(key, InstanceKey::clone)
}

fn pod_key(pod: &PodObject) -> Option<PodKey> {
    Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?))
}

/// Puts a pod's new facts (`None`: it is gone, finished or no instance's)
/// in place, noting in `changed` every instance whose pods moved.
fn upsert_pod(
    s: &mut Scope,
    pk: PodKey,
    new: Option<(InstanceKey, PodFacts)>,
    changed: &mut Vec<InstanceKey>,
) {
    let old_owner = s.owners.get(&pk).cloned();
    if let (Some(old), Some((owner, facts))) = (&old_owner, &new)
        && old == owner
    {
        let pods = s.pods.entry(owner.clone()).or_default();
        if pods.get(&pk.1) != Some(facts) {
            pods.insert(facts.clone());
            changed.push(owner.clone());
        }
        return;
    }
    if let Some(old) = old_owner {
        s.owners.remove(&pk);
        if let Some(pods) = s.pods.get_mut(&old) {
            pods.remove(&pk.1);
            if pods.0.is_empty() {
                s.pods.remove(&old);
            }
        }
        changed.push(old);
    }
    if let Some((owner, facts)) = new {
        s.pods.entry(owner.clone()).or_default().insert(facts);
        s.owners.insert(pk, owner.clone());
        changed.push(owner);
    }
}

/// The target of a usable instance; its pods from `pods` (the first
/// `max` by name; the others counted as dropped).
/// `status` is what the target continues from ([`Scope::status_of`]).
fn target(
    pods: Option<&PodsOf>,
    entry: &InstanceEntry,
    status: Option<&KuraInstanceStatus>,
    max: usize,
) -> Option<InstanceTarget> {
    let shape = entry.shape.as_ref().ok()?;
    let all = pods.map_or(0, |p| p.0.len());
    let pods: Vec<_> = pods
        .into_iter()
        .flat_map(|p| p.0.iter())
        .take(max)
        .map(PodFacts::target)
        .collect();
    Some(InstanceTarget {
        info: shape.info.clone(),
        spec_image: shape.spec_image.clone(),
        node_local_network: shape.node_local_network,
        pods_dropped: all - pods.len(),
        pods,
        previous_status: status.cloned().map(Box::new),
        status_warnings: shape.status_warnings.clone(),
        gate_config: shape.gate_config.clone(),
        traits: shape.traits.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::instances::tests::instance;
    use crate::cluster::pods::tests::pod;
    use crate::model::{
        GATE_CONFIG_ANNOTATION, InstanceInfo, NoAddress, PodIdentity, SampleResult,
    };
    use jiff::Timestamp;
    use serde_json::json;
    use watcher::Event;

    fn all(_: &InstanceKey) -> bool {
        true
    }

    fn key(name: &str) -> InstanceKey {
        InstanceKey::new("kura", name)
    }

    /// A store of one scope holding `instances` and `pods` from an initial
    /// list.
    fn listed(
        instances: Vec<InstanceObject>,
        pods: Vec<PodObject>,
        cfg: TargetConfig,
    ) -> FactStore {
        let mut store = FactStore::new(1, cfg);
        store.apply_instance(0, &Event::Init);
        for i in instances {
            store.apply_instance(0, &Event::InitApply(i));
        }
        store.apply_instance(0, &Event::InitDone);
        store.apply_pod(0, &Event::Init, &all);
        for p in pods {
            store.apply_pod(0, &Event::InitApply(p), &all);
        }
        store.apply_pod(0, &Event::InitDone, &all);
        store
    }

    #[test]
    fn a_pods_owner_is_the_key_the_store_holds_not_a_copy() {
        let mut store = listed(
            vec![instance("kura", "acme", 2, json!(null))],
            vec![pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))],
            TargetConfig::default(),
        );
        // A pod of an instance not seen yet, then another of it (watched).
        for p in ["beta-0", "beta-1"] {
            store.apply_pod(
                0,
                &Event::Apply(pod("kura", p, "beta", Some("10.0.0.2"), json!({}))),
                &all,
            );
        }
        let s = &store.scopes[0];
        let owner = |p: &str| s.owners.get(&("kura".into(), p.into())).expect("owner");
        let (acme, _) = s.instances.get_key_value(&key("acme")).expect("acme");
        assert!(Arc::ptr_eq(&owner("acme-0").name, &acme.name));
        assert!(Arc::ptr_eq(&owner("acme-0").namespace, &acme.namespace));
        let (beta, _) = s.pods.get_key_value(&key("beta")).expect("beta's pods");
        assert!(Arc::ptr_eq(&owner("beta-0").name, &beta.name));
        assert!(Arc::ptr_eq(&owner("beta-1").name, &beta.name));
        assert_eq!(store.counts(), (1, 3));
        // Gone: its entry goes, and the namespace's with the last.
        for p in ["acme-0", "beta-0", "beta-1"] {
            store.apply_pod(
                0,
                &Event::Delete(pod("kura", p, "x", None, json!({}))),
                &all,
            );
        }
        assert_eq!(store.counts(), (1, 0));
        assert!(store.scopes[0].owners.by_namespace.is_empty());
    }

    #[test]
    fn unit_scopes_hold_their_units_and_a_dropped_unit_leaves_whole() {
        let units = UnitCount::new(4).expect("count");
        let map = ScopeMap {
            namespaces: vec!["kura".into(), "other".into()],
            units: Some(units),
        };
        assert_eq!(map.len(), 8);
        // kura/acme is bucket 111 (unit 1 of 4); other/x is not watched.
        let acme = key("acme");
        assert_eq!(map.scope_of(&acme), Some(1));
        assert_eq!(
            map.scope_of(&InstanceKey::new("other", "acme")),
            Some(4 + units.unit_of_key(&InstanceKey::new("other", "acme")) as usize)
        );
        assert_eq!(map.scope_of(&InstanceKey::new("nope", "acme")), None);
        let plain = ScopeMap {
            namespaces: vec![],
            units: None,
        };
        assert_eq!((plain.len(), plain.scope_of(&acme)), (1, Some(0)));

        let mut store = FactStore::with_scopes(map, TargetConfig::default())
            .with_target(PublicationTarget::Companion);
        store.apply_instance(1, &Event::Init);
        store.apply_instance(
            1,
            &Event::InitApply(instance("kura", "acme", 2, json!(null))),
        );
        let applied = store.apply_instance(1, &Event::InitDone);
        assert!(applied.added, "a list that brings instances adds them");
        store.apply_pod(1, &Event::Init, &all);
        store.apply_pod(
            1,
            &Event::InitApply(pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))),
            &all,
        );
        store.apply_pod(1, &Event::InitDone, &all);
        store.apply_companion(1, &Event::Init);
        store.apply_companion(1, &Event::InitDone);
        assert!(
            store.companion_absent(&acme),
            "known from its own unit's list, whatever the others"
        );
        assert_eq!(store.instance_names(1), vec![Arc::<str>::from("acme")]);
        let again =
            store.apply_instance(1, &Event::Apply(instance("kura", "acme", 3, json!(null))));
        assert!(!again.added, "an instance seen before is not added");
        assert_eq!(store.targets().instances.len(), 1);

        let revision = store.revision();
        store.drop_scope(1);
        assert!(store.targets().instances.is_empty());
        assert_eq!(store.counts(), (0, 0));
        assert!(store.instance_names(1).is_empty());
        assert_eq!(store.changed_since(revision), Some(vec![acme.clone()]));
        assert!(!store.companion_absent(&acme), "unknown again");
        // Dropping a scope out of range, or twice, does nothing.
        store.drop_scope(1);
        store.drop_scope(99);
        assert_eq!(store.revision(), revision + 1);
    }

    #[test]
    fn pods_are_matched_by_statefulset_owner_and_namespace() {
        let instances = vec![
            instance("kura", "acme", 2, json!(null)),
            instance("kura", "beta", 1, json!(null)),
        ];
        let pods = vec![
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
        let t = listed(instances, pods, TargetConfig::default()).targets();
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
        let names: Vec<_> = acme.pods.iter().map(|p| &*p.identity.name).collect();
        assert_eq!(names, ["acme-0", "acme-1"]);
        assert_eq!(
            acme.pods[0].addr,
            Ok("10.0.0.1:4000".parse().expect("addr"))
        );
        assert_eq!(
            *acme.pods[0].identity,
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
    fn pods_without_address_become_failed_samples_not_silence() {
        let t = listed(
            vec![instance("kura", "acme", 2, json!(null))],
            vec![
                pod("kura", "acme-0", "acme", None, json!({})),
                pod("kura", "acme-1", "acme", Some("fe80::1"), json!({})),
                pod("kura", "acme-2", "acme", Some("not-an-ip"), json!({})),
            ],
            TargetConfig::default(),
        )
        .targets();
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
        tuned.metadata.annotations =
            Some([(GATE_CONFIG_ANNOTATION.to_owned(), text.to_owned())].into());
        let mut broken = instance("kura", "broken", 1, json!(null));
        broken.metadata.annotations =
            Some([(GATE_CONFIG_ANNOTATION.to_owned(), "{not json".to_owned())].into());
        let plain = instance("kura", "plain", 1, json!(null));
        let t = listed(vec![tuned, broken, plain], vec![], TargetConfig::default()).targets();
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
    fn invalid_instances_are_listed_as_skipped_in_order() {
        let mut no_gen = instance("kura", "nogen", 1, json!(null));
        no_gen.metadata.generation = None;
        let t = listed(
            vec![instance("kura", "zero", 0, json!(null)), no_gen],
            vec![],
            TargetConfig::default(),
        )
        .targets();
        assert!(t.instances.is_empty());
        let reasons: Vec<_> = t
            .skipped
            .iter()
            .map(|s| (&*s.key.name, s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("nogen", "metadata.generation missing"),
                ("zero", "spec.replicas 0 is below 1")
            ]
        );
    }

    #[test]
    fn pods_beyond_the_cap_are_counted_not_kept() {
        let pods = (0..5)
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
        let t = listed(vec![instance("kura", "acme", 3, json!(null))], pods, cfg).targets();
        assert_eq!(t.instances[0].pods.len(), 3);
        assert_eq!(t.instances[0].pods_dropped, 2);
    }

    #[test]
    fn status_writes_labels_and_other_containers_change_nothing() {
        let mut store = listed(
            vec![instance("kura", "acme", 1, json!(null))],
            vec![pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))],
            TargetConfig::default(),
        );
        let rev = store.revision();
        // The agent's own status write, and another manager's condition.
        let gate = json!({"targetImage": "i", "verdict": "healthy", "evaluatedAt": "2026-07-21T10:00:00Z"});
        store.apply_instance(
            0,
            &Event::Apply(instance(
                "kura",
                "acme",
                1,
                json!({"rolloutGate": gate, "conditions": [{"type": "Ready", "status": "True",
                    "lastTransitionTime": "2026-07-21T10:00:00Z", "reason": "R", "message": ""}]}),
            )),
        );
        // A pod's label, its conditions, the sidecar's restarts.
        store.apply_pod(
            0,
            &Event::Apply(pod(
                "kura",
                "acme-0",
                "acme",
                Some("10.0.0.1"),
                json!({"metadata": {"labels": {"x": "y"}},
                       "status": {"conditions": [{"type": "Ready", "status": "False"}],
                                  "containerStatuses": [{"name": "sidecar", "restartCount": 10},
                                                        {"name": "kura", "restartCount": 2}]}}),
            )),
            &all,
        );
        assert_eq!(store.revision(), rev, "nothing a target is made of moved");
        assert_eq!(store.changed_since(rev), Some(vec![]));
        // The status is kept all the same, for a task that starts later.
        let stored = store.stored_one(&key("acme")).expect("stored");
        assert!(
            stored
                .previous_status
                .and_then(|s| s.rollout_gate)
                .is_some()
        );
    }

    #[test]
    fn a_released_status_is_not_kept_and_is_read_again_before_a_task_restarts() {
        let gate = json!({"targetImage": "i", "verdict": "healthy", "evaluatedAt": "2026-07-21T10:00:00Z"});
        let with_gate = |verdict: &str| {
            let mut g = gate.clone();
            g["verdict"] = json!(verdict);
            instance("kura", "acme", 1, json!({ "rolloutGate": g }))
        };
        let mut store = listed(
            vec![
                with_gate("healthy"),
                instance("kura", "beta", 1, json!(null)),
            ],
            vec![pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))],
            TargetConfig::default(),
        );
        let gate_of = |store: &FactStore| {
            store
                .stored_one(&key("acme"))
                .and_then(|t| t.previous_status)
                .and_then(|s| s.rollout_gate)
                .map(|g| g.verdict)
        };
        assert!(gate_of(&store).is_some(), "kept until released");
        store.release_status(&key("acme"));
        assert_eq!(gate_of(&store), None, "let go at once");
        let rev = store.revision();
        // The task's own writes: read, not kept, no change.
        store.apply_instance(0, &Event::Apply(with_gate("unhealthy")));
        assert_eq!(gate_of(&store), None);
        assert_eq!(store.revision(), rev);
        assert!(!store.status_pending(&key("acme")));
        // Another instance is not touched.
        assert!(
            store.keep_status(&key("beta"), None).is_none(),
            "never released: nothing to read"
        );
        // The task stops: its status is read again before a task restarts.
        assert!(store.keep_status(&key("acme"), None).is_some());
        assert!(store.status_pending(&key("acme")));
        store.apply_instance(0, &Event::Apply(with_gate("unhealthy")));
        assert!(!store.status_pending(&key("acme")));
        assert_eq!(
            gate_of(&store).map(|v| format!("{v:?}")),
            Some("Unhealthy".to_owned())
        );
        assert_eq!(
            store.changed_since(rev),
            Some(vec![key("acme")]),
            "named as changed, so the loop reads its target (and status) again"
        );
        // A re-list under way does not end a re-read: its entries are not
        // in the targets until it completes.
        store.release_status(&key("acme"));
        assert!(store.keep_status(&key("acme"), None).is_some());
        let rev = store.revision();
        store.apply_instance(0, &Event::Init);
        store.apply_instance(0, &Event::InitApply(with_gate("healthy")));
        assert!(store.status_pending(&key("acme")), "the re-list is not in");
        assert_eq!(store.changed_since(rev), Some(vec![]));
        store.apply_instance(
            0,
            &Event::InitApply(instance("kura", "beta", 1, json!(null))),
        );
        store.apply_instance(0, &Event::InitDone);
        assert!(!store.status_pending(&key("acme")));
        assert_eq!(store.changed_since(rev), Some(vec![key("acme")]));
        assert!(gate_of(&store).is_some());
        // A re-list brings statuses in for kept instances only.
        store.release_status(&key("acme"));
        store.apply_instance(0, &Event::Init);
        store.apply_instance(0, &Event::InitApply(with_gate("healthy")));
        store.apply_instance(0, &Event::InitDone);
        assert_eq!(gate_of(&store), None);
        // Released, then the instance is deleted: nothing to read again.
        store.apply_instance(0, &Event::Delete(with_gate("healthy")));
        assert!(store.keep_status(&key("acme"), None).is_none());
        assert!(!store.status_pending(&key("acme")));
    }

    #[test]
    fn a_reread_given_up_lets_the_task_start() {
        let mut store = listed(
            vec![instance("kura", "acme", 1, json!(null))],
            vec![],
            TargetConfig::default(),
        );
        store.release_status(&key("acme"));
        assert!(store.keep_status(&key("acme"), None).is_some());
        let rev = store.revision();
        store.abandon_reread(&key("acme"));
        assert!(!store.status_pending(&key("acme")));
        assert_eq!(store.changed_since(rev), Some(vec![key("acme")]));
    }

    #[test]
    fn what_targets_are_made_of_moves_them_per_instance() {
        let mut store = listed(
            vec![
                instance("kura", "acme", 1, json!(null)),
                instance("kura", "beta", 1, json!(null)),
            ],
            vec![pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))],
            TargetConfig::default(),
        );
        let rev = store.revision();
        // A restart of acme's Kura container.
        store.apply_pod(
            0,
            &Event::Apply(pod(
                "kura",
                "acme-0",
                "acme",
                Some("10.0.0.1"),
                json!({"status": {"containerStatuses": [{"name": "kura", "restartCount": 3}]}}),
            )),
            &all,
        );
        assert_eq!(store.changed_since(rev), Some(vec![key("acme")]));
        let rev = store.revision();
        // beta's new generation and image: a change, and an image change.
        let mut beta = instance("kura", "beta", 1, json!(null));
        beta.metadata.generation = Some(4);
        beta.spec = Some(json!({"image": "ghcr.io/tuist/kura:0.7.0", "replicas": 1}));
        assert!(store.apply_instance(0, &Event::Apply(beta)).image_changed);
        // A new pod of beta, and acme's pod deleted.
        store.apply_pod(
            0,
            &Event::Apply(pod("kura", "beta-0", "beta", None, json!({}))),
            &all,
        );
        store.apply_pod(
            0,
            &Event::Delete(pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))),
            &all,
        );
        assert_eq!(
            store.changed_since(rev),
            Some(vec![key("beta"), key("acme")])
        );
        let t = store.targets_of(&[key("acme"), key("beta"), key("gone")]);
        assert_eq!(t.len(), 2);
        assert!(t[0].pods.is_empty());
        assert_eq!(t[1].pods.len(), 1);
        assert_eq!(t[1].info.generation, 4);
        // Deleting an instance is a change; a log too far behind is none.
        store.apply_instance(0, &Event::Delete(instance("kura", "beta", 1, json!(null))));
        assert!(store.targets_of(&[key("beta")]).is_empty());
        assert_eq!(store.changed_since(store.revision() + 1), None);
        // A reader further behind than the log reaches re-reads all.
        let before = store.revision();
        for i in 0..=CHANGE_LOG {
            let restarts =
                json!({"status": {"containerStatuses": [{"name": "kura", "restartCount": i}]}});
            store.apply_pod(
                0,
                &Event::Apply(pod("kura", "acme-0", "acme", None, restarts)),
                &all,
            );
        }
        assert_eq!(store.changed_since(before), None);
        assert_eq!(
            store.changed_since(store.revision() - 1),
            Some(vec![key("acme")])
        );
    }

    #[test]
    fn spec_image_changes_are_told_apart_from_other_changes() {
        let with_image = |name: &str, image: &str| {
            let mut o = instance("kura", name, 1, json!(null));
            o.spec = Some(json!({"image": image, "replicas": 1}));
            o
        };
        let mut store = FactStore::new(1, TargetConfig::default());
        let mut apply = |ev: Event<InstanceObject>| store.apply_instance(0, &ev).image_changed;
        // First sight (initial list or a new instance): no change.
        assert!(!apply(Event::Init));
        assert!(!apply(Event::InitApply(with_image("a", "v1"))));
        assert!(!apply(Event::InitDone));
        assert!(!apply(Event::Apply(with_image("b", "v1"))));
        // A status write: the same image, no change.
        let mut written = with_image("a", "v1");
        written.status = serde_json::value::to_raw_value(&json!({"phase": "Running"})).ok();
        assert!(!apply(Event::Apply(written)));
        // An upgrade, then the same object again.
        assert!(apply(Event::Apply(with_image("a", "v2"))));
        assert!(!apply(Event::Apply(with_image("a", "v2"))));
        // A re-list shows a change made while the watch was away, and
        // forgets an instance deleted meanwhile.
        assert!(!apply(Event::Init));
        assert!(!apply(Event::InitApply(with_image("a", "v3"))));
        assert!(apply(Event::InitDone));
        assert!(
            !apply(Event::Apply(with_image("b", "v9"))),
            "b is new again"
        );
        assert!(!apply(Event::Delete(with_image("b", "v9"))));
        assert!(!apply(Event::Apply(with_image("b", "v1"))));
        // An invalid spec is neither an image nor a change.
        let mut broken = with_image("c", "v1");
        broken.spec = Some(json!({"replicas": 1}));
        assert!(!apply(Event::Apply(broken)));
    }

    #[test]
    fn a_relist_swaps_in_whole_and_names_what_differs() {
        let mut store = listed(
            vec![
                instance("kura", "acme", 1, json!(null)),
                instance("kura", "beta", 1, json!(null)),
            ],
            vec![
                pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({})),
                pod("kura", "beta-0", "beta", Some("10.0.0.2"), json!({})),
            ],
            TargetConfig::default(),
        );
        let rev = store.revision();
        store.apply_pod(0, &Event::Init, &all);
        store.apply_pod(
            0,
            &Event::InitApply(pod("kura", "acme-0", "acme", Some("10.0.0.1"), json!({}))),
            &all,
        );
        // While the re-list runs, the old pods still answer.
        assert_eq!(store.targets_of(&[key("beta")])[0].pods.len(), 1);
        store.apply_pod(0, &Event::InitDone, &all);
        assert_eq!(store.changed_since(rev), Some(vec![key("beta")]));
        assert!(store.targets_of(&[key("beta")])[0].pods.is_empty());
        assert_eq!(store.counts(), (2, 1));
    }

    #[test]
    fn only_the_pods_of_kept_instances_are_held() {
        let only_acme = |k: &InstanceKey| &*k.name == "acme";
        let mut store = FactStore::new(1, TargetConfig::default());
        store.apply_pod(0, &Event::Init, &only_acme);
        for (p, owner) in [("acme-0", "acme"), ("beta-0", "beta")] {
            store.apply_pod(
                0,
                &Event::InitApply(pod("kura", p, owner, Some("10.0.0.1"), json!({}))),
                &only_acme,
            );
        }
        store.apply_pod(0, &Event::InitDone, &only_acme);
        assert_eq!(store.counts(), (0, 1));
        // A later event of a pod not kept is not kept either.
        store.apply_pod(
            0,
            &Event::Apply(pod("kura", "beta-1", "beta", None, json!({}))),
            &only_acme,
        );
        assert_eq!(store.counts(), (0, 1));
        // The scope moved to beta: the list made under it swaps in whole.
        let only_beta = |k: &InstanceKey| &*k.name == "beta";
        store.apply_pod(0, &Event::Init, &only_beta);
        for (p, owner) in [("acme-0", "acme"), ("beta-0", "beta"), ("beta-1", "beta")] {
            store.apply_pod(
                0,
                &Event::InitApply(pod("kura", p, owner, Some("10.0.0.1"), json!({}))),
                &only_beta,
            );
        }
        store.apply_pod(0, &Event::InitDone, &only_beta);
        assert_eq!(store.counts(), (0, 2));
    }

    fn companion(name: &str, verdict: &str) -> CompanionObject {
        serde_json::from_str(
            &json!({
                "apiVersion": "health.kura.tuist.dev/v1alpha1", "kind": "KuraInstanceHealth",
                "metadata": {"name": name, "namespace": "kura", "generation": 1},
                "status": {"rolloutGate": {"targetImage": "i", "verdict": verdict,
                                           "evaluatedAt": "2026-07-21T10:00:00Z"},
                           "observedGeneration": 1}
            })
            .to_string(),
        )
        .expect("companion")
    }

    fn verdict_of(store: &FactStore, name: &str) -> Option<String> {
        store
            .stored_one(&key(name))
            .and_then(|t| t.previous_status)
            .and_then(|s| s.rollout_gate)
            .map(|g| g.verdict.as_str().to_owned())
    }

    /// In companion mode the agent's status comes from the companion, the
    /// instance's `rolloutHealth` is Kura's controller's (read for the
    /// side-by-side numbers only), and a status read again completes when
    /// the companion brings it.
    #[test]
    fn companion_mode_reads_the_agents_status_from_the_companion() {
        let mut store =
            FactStore::new(1, TargetConfig::default()).with_target(PublicationTarget::Companion);
        let controller = json!({"phase": "Running",
            "rolloutHealth": {"ready": true, "serving": false, "sampledPods": 3,
                              "sampledAt": "2026-07-21T10:00:00Z"},
            "rolloutGate": {"targetImage": "i", "verdict": "hard_stop",
                            "evaluatedAt": "2026-07-21T10:00:00Z"}});
        store.apply_instance(0, &Event::Init);
        store.apply_instance(
            0,
            &Event::InitApply(instance("kura", "acme", 1, controller)),
        );
        store.apply_instance(0, &Event::InitDone);
        assert_eq!(
            verdict_of(&store, "acme"),
            None,
            "nothing of the instance's status is the agent's"
        );
        let theirs = store.controller_healths();
        assert_eq!(theirs.len(), 1);
        assert_eq!(theirs[0].1.ready, Some(true));
        assert_eq!(theirs[0].1.serving, Some(false));

        store.apply_companion(0, &Event::Init);
        store.apply_companion(0, &Event::InitApply(companion("acme", "healthy")));
        assert_eq!(
            verdict_of(&store, "acme"),
            None,
            "not before the list is in"
        );
        store.apply_companion(0, &Event::InitDone);
        assert_eq!(verdict_of(&store, "acme").as_deref(), Some("healthy"));

        // Released: the task holds it; the companion's updates are not kept.
        store.release_status(&key("acme"));
        store.apply_companion(0, &Event::Apply(companion("acme", "unhealthy")));
        assert_eq!(verdict_of(&store, "acme"), None);
        // Kept again: pending until the companion brings it, then changed.
        assert!(store.keep_status(&key("acme"), None).is_some());
        assert!(store.status_pending(&key("acme")));
        let rev = store.revision();
        store.apply_instance(
            0,
            &Event::Apply(instance("kura", "acme", 1, json!({"phase": "Running"}))),
        );
        assert!(
            store.status_pending(&key("acme")),
            "the instance brings no status of the agent's"
        );
        store.apply_companion(0, &Event::Apply(companion("acme", "unhealthy")));
        assert!(!store.status_pending(&key("acme")));
        assert_eq!(store.changed_since(rev), Some(vec![key("acme")]));
        assert_eq!(verdict_of(&store, "acme").as_deref(), Some("unhealthy"));
        // A deleted companion takes its status with it.
        store.apply_companion(0, &Event::Delete(companion("acme", "unhealthy")));
        assert_eq!(verdict_of(&store, "acme"), None);
        assert!(store.contested().is_empty(), "no contest in companion mode");
    }

    /// The companion watch says which companions are absent, once it has
    /// listed: the writer creates those before their first status apply.
    /// Released instances' companions count (their statuses are not kept,
    /// their presence is), and a re-list replaces the set whole.
    #[test]
    fn companion_absence_is_known_only_after_the_list() {
        let mut store =
            FactStore::new(1, TargetConfig::default()).with_target(PublicationTarget::Companion);
        assert!(
            !store.companion_absent(&key("acme")),
            "unknown before the list"
        );
        store.apply_companion(0, &Event::Init);
        store.apply_companion(0, &Event::InitApply(companion("acme", "healthy")));
        assert!(
            !store.companion_absent(&key("beta")),
            "unknown during the list"
        );
        store.apply_companion(0, &Event::InitDone);
        assert!(!store.companion_absent(&key("acme")));
        assert!(store.companion_absent(&key("beta")));

        store.release_status(&key("beta"));
        store.apply_companion(0, &Event::Apply(companion("beta", "healthy")));
        assert!(
            !store.companion_absent(&key("beta")),
            "a released one's too"
        );
        store.apply_companion(0, &Event::Delete(companion("acme", "healthy")));
        assert!(store.companion_absent(&key("acme")));

        // A re-list that no longer has beta: absent once it is in.
        store.apply_companion(0, &Event::Init);
        assert!(
            !store.companion_absent(&key("beta")),
            "the old set stands meanwhile"
        );
        store.apply_companion(0, &Event::InitApply(companion("acme", "healthy")));
        store.apply_companion(0, &Event::InitDone);
        assert!(store.companion_absent(&key("beta")));
        assert!(!store.companion_absent(&key("acme")));

        let instance_mode = FactStore::new(1, TargetConfig::default());
        assert!(
            !instance_mode.companion_absent(&key("acme")),
            "never in instance mode"
        );
    }

    /// In instance mode another manager of `status.rolloutHealth` is a
    /// contest, named with the instance's UID.
    #[test]
    fn instance_mode_names_another_manager_of_rollout_health() {
        let contested: InstanceObject = serde_json::from_value(json!({
            "apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstance",
            "metadata": {"name": "acme", "namespace": "kura", "generation": 1, "uid": "u-acme",
                "managedFields": [{"manager": "manager", "operation": "Update", "subresource": "status",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:rolloutHealth": {"f:ready": {}}}}}]},
            "spec": {"image": "i", "replicas": 1}
        }))
        .expect("instance");
        let mut store = listed(
            vec![contested.clone(), instance("kura", "beta", 1, json!(null))],
            vec![],
            TargetConfig::default(),
        );
        let found = store.contested();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, key("acme"));
        assert_eq!(&*found[0].manager, "manager");
        assert_eq!(found[0].uid.as_deref(), Some("u-acme"));
        assert_eq!(store.contested_by(&key("beta")), None);
        store.apply_instance(0, &Event::Apply(instance("kura", "acme", 1, json!(null))));
        assert!(store.contested().is_empty(), "the contest ends with it");
        // A re-list brings it back; a delete ends it.
        store.apply_instance(0, &Event::Init);
        store.apply_instance(0, &Event::InitApply(contested.clone()));
        store.apply_instance(0, &Event::InitDone);
        assert_eq!(store.contested().len(), 1);
        store.apply_instance(0, &Event::Delete(contested));
        assert!(store.contested().is_empty());
    }
}
