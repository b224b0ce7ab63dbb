//! The shard label on instances and companions that lack it: unit
//! watches select objects by [`SHARD_LABEL`], so an object without it is
//! in no unit. One metadata-only watch per namespace scope and kind
//! (`!kura.tuist.dev/shard`) sees them; the replica that keeps the
//! object's unit labels it with its bucket, by a server-side apply of
//! that one label under its own field manager ([`STAMP_FIELD_MANAGER`]):
//! labels other managers own (the Tuist provisioner applies its own) are
//! left alone, and nothing is forced. The object then leaves this watch
//! and enters its unit's.
//!
//! Bounded: at most [`STAMPS_IN_FLIGHT`] patches at once, each object
//! once in flight; a failed stamp is tried again [`RESTAMP_AFTER`] later
//! while the object is still unlabelled. Without stamping (or before it
//! lands), an unlabelled instance is unmonitored, and counted in
//! `kura_agent_unlabelled_objects`.
//!
//! Unit by unit: the stamps wait in the order of their units, so on a
//! first install (every instance unlabelled) one unit is finished before
//! the next begins, and a unit's pod watch, which selects the pods by
//! the unit's instance names, waits until its unit has no instance left
//! to stamp ([`Stamper::pending_in`]) and lists the unit's pods once,
//! instead of once more for every instance stamped into it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::Notify;

use crate::model::units::{bucket_label, bucket_of};
use crate::model::{InstanceKey, PodScope, SHARD_LABEL, UnitCount};
use crate::telemetry::{self, label};

use super::discovery::{DiscoveryDriver, WatchState, api_in, driven, join_selectors};

/// The field manager of the shard label the agent stamps.
pub const STAMP_FIELD_MANAGER: &str = "kura-health-agent-shard-label";

/// At most this many label patches at once. A stamp is a small
/// metadata-only apply; on a first install a replica stamps every
/// instance of its units before their pods are listed, so this is sized
/// like the status writes' lower bound (4 made a 3,334-instance first
/// install wait 171 s for its stamps, at 19.5 a second).
pub const STAMPS_IN_FLIGHT: usize = 16;

/// A failed stamp is tried again after this long, if still wanted.
pub const RESTAMP_AFTER: Duration = Duration::from_secs(30);

/// Requests waiting for a stamp, at most (more are dropped and counted;
/// the object's next event, or the periodic retry, brings it back).
const QUEUE: usize = 4096;

/// Which kind an unlabelled object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A `KuraInstance`.
    Instance,
    /// A `KuraInstanceHealth` (the agent's companion).
    Companion,
}

impl Kind {
    fn resource(self) -> &'static str {
        match self {
            Kind::Instance => label::KURAINSTANCES,
            Kind::Companion => label::KURAINSTANCEHEALTHS,
        }
    }
}

/// The unlabelled objects every watch sees, and the stamps wanted.
#[derive(Default)]
struct Unlabelled {
    seen: BTreeSet<(Kind, InstanceKey)>,
    /// How many of `seen`'s instances each unit has.
    instances_by_unit: BTreeMap<u16, usize>,
    /// Stamps wanted and not begun, in the order of their units.
    queued: BTreeSet<(u16, Kind, InstanceKey)>,
    /// Stamps queued or begun and not finished.
    in_flight: HashSet<(Kind, InstanceKey)>,
}

impl Unlabelled {
    fn count_instance(&mut self, unit: u16, present: bool) {
        let n = self.instances_by_unit.entry(unit).or_default();
        if present {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.instances_by_unit.remove(&unit);
            }
        }
    }
}

/// Stamps the shard label (see the module documentation).
pub(super) struct Stamper {
    client: Client,
    scope: Arc<dyn PodScope>,
    count: UnitCount,
    stamp: bool,
    state: Mutex<Unlabelled>,
    /// Wakes a worker when a stamp is queued.
    wake: Notify,
}

impl Stamper {
    /// A stamper for `scope`'s units (`count` of them), and the future
    /// that runs its patches and retries (drop it to stop). Without
    /// `stamp`, the unlabelled objects are only counted.
    pub(super) fn start(
        client: Client,
        scope: Arc<dyn PodScope>,
        count: UnitCount,
        stamp: bool,
    ) -> (Arc<Stamper>, DiscoveryDriver) {
        let stamper = Arc::new(Stamper {
            client,
            scope,
            count,
            stamp,
            state: Mutex::new(Unlabelled::default()),
            wake: Notify::new(),
        });
        let worker = Arc::clone(&stamper);
        let driver: DiscoveryDriver = Box::pin(async move {
            let retry = Arc::clone(&worker);
            let retries = async move {
                let mut tick = tokio::time::interval(RESTAMP_AFTER);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut kept = retry.scope.changes();
                loop {
                    // Again every so often (a failed stamp), and at once
                    // when the kept units change: an unlabelled object
                    // seen before this replica kept its unit (at start-up
                    // every one) is stamped now, not a retry later.
                    tokio::select! {
                        _ = tick.tick() => {}
                        changed = kept.changed() => {
                            if changed.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                    }
                    retry.want_all();
                }
            };
            let workers = (0..STAMPS_IN_FLIGHT).map(|_| {
                let worker = Arc::clone(&worker);
                async move {
                    loop {
                        match worker.next() {
                            Some(item) => worker.stamp_one(item).await,
                            None => worker.wake.notified().await,
                        }
                    }
                }
            });
            futures::future::join(retries, futures::future::join_all(workers)).await;
        });
        (stamper, driver)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Unlabelled> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records an unlabelled object seen (`present`) or gone, and asks
    /// for its stamp when this replica keeps its unit.
    fn saw(&self, kind: Kind, key: InstanceKey, present: bool) {
        let unit = self.count.unit_of_key(&key);
        let count = {
            let mut s = self.lock();
            let entry = (kind, key.clone());
            let changed = if present {
                s.seen.insert(entry)
            } else {
                s.seen.remove(&entry)
            };
            if changed && kind == Kind::Instance {
                s.count_instance(unit, present);
            }
            s.seen.len()
        };
        metrics::gauge!(telemetry::UNLABELLED_OBJECTS).set(count as f64);
        if present {
            self.want(kind, key);
        }
    }

    /// A list of unlabelled objects begins again: forget the kind's.
    fn relist(&self, kind: Kind) {
        let mut s = self.lock();
        s.seen.retain(|(k, _)| *k != kind);
        if kind == Kind::Instance {
            s.instances_by_unit.clear();
        }
    }

    /// Whether `unit` has an instance this replica is to stamp: stamping
    /// is on, the unit is kept here and an instance of it is seen
    /// unlabelled. Its pods are listed once that is over.
    pub(super) fn pending_in(&self, unit: u16) -> bool {
        self.stamp
            && self
                .scope
                .kept_units()
                .is_some_and(|k| k.units.contains(&unit))
            && self.lock().instances_by_unit.contains_key(&unit)
    }

    /// Queues `key`'s stamp if stamping, its unit kept here, and not
    /// already queued or in flight.
    fn want(&self, kind: Kind, key: InstanceKey) {
        if !self.stamp || !self.scope.keeps(&key) {
            return;
        }
        let unit = self.count.unit_of_key(&key);
        {
            let mut s = self.lock();
            if s.queued.len() >= QUEUE {
                drop(s);
                metrics::counter!(telemetry::SHARD_LABEL_STAMPS_TOTAL, "result" => label::DROPPED)
                    .increment(1);
                return;
            }
            if !s.in_flight.insert((kind, key.clone())) {
                return;
            }
            s.queued.insert((unit, kind, key));
        }
        self.wake.notify_one();
    }

    /// The next stamp to make: the first queued, in unit order.
    fn next(&self) -> Option<(Kind, InstanceKey)> {
        self.lock()
            .queued
            .pop_first()
            .map(|(_, kind, key)| (kind, key))
    }

    /// Asks again for every unlabelled object's stamp (the periodic
    /// retry, and whenever the kept units change).
    fn want_all(&self) {
        let seen: Vec<(Kind, InstanceKey)> = self.lock().seen.iter().cloned().collect();
        for (kind, key) in seen {
            self.want(kind, key);
        }
    }

    async fn stamp_one(&self, (kind, key): (Kind, InstanceKey)) {
        let value = bucket_label(bucket_of(&key));
        let result = match kind {
            Kind::Instance => {
                patch_label::<kura_schemas::KuraInstance>(&self.client, &key, &value).await
            }
            Kind::Companion => {
                patch_label::<kura_schemas::KuraInstanceHealth>(&self.client, &key, &value).await
            }
        };
        self.lock().in_flight.remove(&(kind, key.clone()));
        match result {
            Ok(()) => {
                metrics::counter!(telemetry::SHARD_LABEL_STAMPS_TOTAL, "result" => label::OK)
                    .increment(1);
                tracing::info!(instance = %key, resource = kind.resource(), bucket = %value,
                    "shard label stamped");
            }
            Err(error) => {
                metrics::counter!(telemetry::SHARD_LABEL_STAMPS_TOTAL, "result" => label::ERROR)
                    .increment(1);
                tracing::warn!(instance = %key, resource = kind.resource(), %error,
                    "stamping the shard label failed; tried again later");
            }
        }
    }

    /// The watch of `kind`'s unlabelled objects in `namespace` (all for
    /// `None`), narrowed by `selector` too.
    pub(super) fn watch(
        self: &Arc<Self>,
        kind: Kind,
        namespace: Option<&str>,
        selector: Option<&str>,
        state: Arc<WatchState>,
    ) -> DiscoveryDriver {
        let labels = join_selectors(Some(&format!("!{SHARD_LABEL}")), selector);
        let config = watcher::Config::default()
            .page_size(super::discovery::LIST_PAGE_SIZE)
            .labels(&labels);
        match kind {
            Kind::Instance => {
                self.watch_of::<kura_schemas::KuraInstance>(kind, namespace, config, state)
            }
            Kind::Companion => {
                self.watch_of::<kura_schemas::KuraInstanceHealth>(kind, namespace, config, state)
            }
        }
    }

    fn watch_of<K>(
        self: &Arc<Self>,
        kind: Kind,
        namespace: Option<&str>,
        config: watcher::Config,
        state: Arc<WatchState>,
    ) -> DiscoveryDriver
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let api: Api<PartialObjectMeta<K>> = api_in(&self.client, namespace);
        let me = Arc::clone(self);
        driven(
            watcher::watcher(api, config).default_backoff(),
            state,
            move |ev| {
                let key = |o: &PartialObjectMeta<K>| {
                    Some(InstanceKey::new(
                        o.metadata.namespace.clone()?,
                        o.metadata.name.clone()?,
                    ))
                };
                match ev {
                    watcher::Event::Init => me.relist(kind),
                    watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                        if let Some(k) = key(o) {
                            me.saw(kind, k, true);
                        }
                    }
                    watcher::Event::Delete(o) => {
                        if let Some(k) = key(o) {
                            me.saw(kind, k, false);
                        }
                    }
                    watcher::Event::InitDone => {}
                }
            },
        )
    }
}

/// The body that sets `key`'s shard label to `value` on kind `K`, and
/// nothing else.
pub fn label_patch<K: Resource<DynamicType = ()>>(
    key: &InstanceKey,
    value: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {
            "name": key.name,
            "namespace": key.namespace,
            "labels": {SHARD_LABEL: value},
        },
    })
}

async fn patch_label<K>(client: &Client, key: &InstanceKey, value: &str) -> Result<(), kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), &key.namespace);
    let body = label_patch::<K>(key, value);
    tokio::time::timeout(
        Duration::from_secs(10),
        api.patch(
            &key.name,
            &PatchParams::apply(STAMP_FIELD_MANAGER),
            &Patch::Apply(&body),
        ),
    )
    .await
    .map_err(|_| kube::Error::Service("no answer within 10 s".into()))?
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::KeptUnits;
    use tokio::sync::watch;

    /// A pod scope keeping the units it is given.
    struct Keeps {
        count: UnitCount,
        units: BTreeSet<u16>,
        changes: watch::Sender<u64>,
    }

    impl PodScope for Keeps {
        fn keeps(&self, key: &InstanceKey) -> bool {
            self.units.contains(&self.count.unit_of_key(key))
        }
        fn changes(&self) -> watch::Receiver<u64> {
            self.changes.subscribe()
        }
        fn kept_units(&self) -> Option<KeptUnits> {
            Some(KeptUnits {
                count: self.count,
                units: self.units.clone(),
            })
        }
    }

    fn stamper(units: &[u16], stamp: bool) -> (Arc<Stamper>, UnitCount) {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let count = UnitCount::new(8).expect("count");
        let scope = Arc::new(Keeps {
            count,
            units: units.iter().copied().collect(),
            changes: watch::Sender::new(0),
        });
        let (stamper, _driver) =
            Stamper::start(Client::new(service, "default"), scope, count, stamp);
        (stamper, count)
    }

    /// Instance keys `kura/i-N` whose unit is `unit` of `count`, `n` of them.
    fn keys_in(count: UnitCount, unit: u16, n: usize) -> Vec<InstanceKey> {
        (0..)
            .map(|i| InstanceKey::new("kura", format!("i-{i}")))
            .filter(|k| count.unit_of_key(k) == unit)
            .take(n)
            .collect()
    }

    #[tokio::test]
    async fn stamps_go_unit_by_unit_and_a_unit_is_pending_until_its_last_is_stamped() {
        let (stamper, count) = stamper(&[2, 5], true);
        let five = keys_in(count, 5, 3);
        let two = keys_in(count, 2, 3);
        let other = keys_in(count, 4, 2);
        // Seen interleaved, as a list of a namespace brings them.
        for i in 0..3 {
            stamper.saw(Kind::Instance, five[i].clone(), true);
            stamper.saw(Kind::Instance, two[i].clone(), true);
        }
        for k in &other {
            stamper.saw(Kind::Instance, k.clone(), true);
        }
        assert!(stamper.pending_in(2) && stamper.pending_in(5));
        assert!(!stamper.pending_in(4), "unit 4 is kept elsewhere");
        assert!(!stamper.pending_in(3), "nothing to stamp in unit 3");
        // Unit 2's three, then unit 5's; unit 4's never (not kept here).
        let order: Vec<u16> = std::iter::from_fn(|| stamper.next())
            .map(|(kind, key)| {
                assert_eq!(kind, Kind::Instance);
                count.unit_of_key(&key)
            })
            .collect();
        assert_eq!(order, vec![2, 2, 2, 5, 5, 5]);
        // Queued or in flight, an object is not queued twice.
        stamper.want(Kind::Instance, two[0].clone());
        assert!(stamper.next().is_none());
        // A unit stays pending until its last instance leaves the
        // unlabelled watch (its stamp landed).
        for k in &two[..2] {
            stamper.saw(Kind::Instance, k.clone(), false);
        }
        assert!(stamper.pending_in(2));
        stamper.saw(Kind::Instance, two[2].clone(), false);
        assert!(!stamper.pending_in(2));
        assert!(stamper.pending_in(5));
        // A companion unlabelled does not hold the unit's pods back.
        let (stamper, _) = stamper_with_companion(count);
        assert!(!stamper.pending_in(2));
        // A relist forgets what it had seen.
        let (stamper, _) = super::tests::stamper(&[2], true);
        stamper.saw(Kind::Instance, two[0].clone(), true);
        stamper.relist(Kind::Instance);
        assert!(!stamper.pending_in(2));
    }

    fn stamper_with_companion(count: UnitCount) -> (Arc<Stamper>, UnitCount) {
        let (stamper, _) = stamper(&[2], true);
        stamper.saw(Kind::Companion, keys_in(count, 2, 1)[0].clone(), true);
        (stamper, count)
    }

    #[tokio::test]
    async fn without_stamping_nothing_is_queued_or_waited_for() {
        let (stamper, count) = stamper(&[2], false);
        stamper.saw(Kind::Instance, keys_in(count, 2, 1)[0].clone(), true);
        assert!(stamper.next().is_none());
        assert!(!stamper.pending_in(2));
    }

    #[test]
    fn the_patch_sets_the_one_label() {
        let key = InstanceKey::new("kura", "acme");
        let body = label_patch::<kura_schemas::KuraInstance>(&key, "6f");
        assert_eq!(body["apiVersion"], "kura.tuist.dev/v1alpha1");
        assert_eq!(body["kind"], "KuraInstance");
        assert_eq!(body["metadata"]["labels"], json!({SHARD_LABEL: "6f"}));
        assert_eq!(body["metadata"]["name"], "acme");
        assert!(body.get("spec").is_none() && body.get("status").is_none());
        let companion = label_patch::<kura_schemas::KuraInstanceHealth>(&key, "6f");
        assert_eq!(companion["kind"], "KuraInstanceHealth");
    }
}
