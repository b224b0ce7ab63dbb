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

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::mpsc;

use crate::model::units::{bucket_label, bucket_of};
use crate::model::{InstanceKey, PodScope, SHARD_LABEL};
use crate::telemetry::{self, label};

use super::discovery::{DiscoveryDriver, WatchState, api_in, driven, join_selectors};

/// The field manager of the shard label the agent stamps.
pub const STAMP_FIELD_MANAGER: &str = "kura-health-agent-shard-label";

/// At most this many label patches at once.
pub const STAMPS_IN_FLIGHT: usize = 4;

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

/// The unlabelled objects every watch sees, and the stamps in flight.
#[derive(Default)]
struct Unlabelled {
    seen: BTreeSet<(Kind, InstanceKey)>,
    in_flight: HashSet<(Kind, InstanceKey)>,
}

/// Stamps the shard label (see the module documentation).
pub(super) struct Stamper {
    client: Client,
    scope: Arc<dyn PodScope>,
    stamp: bool,
    state: Mutex<Unlabelled>,
    queue: mpsc::Sender<(Kind, InstanceKey)>,
}

impl Stamper {
    /// A stamper for `scope`'s units, and the future that runs its
    /// patches and retries (drop it to stop). Without `stamp`, the
    /// unlabelled objects are only counted.
    pub(super) fn start(
        client: Client,
        scope: Arc<dyn PodScope>,
        stamp: bool,
    ) -> (Arc<Stamper>, DiscoveryDriver) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let stamper = Arc::new(Stamper {
            client,
            scope,
            stamp,
            state: Mutex::new(Unlabelled::default()),
            queue: tx,
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
            let patches = tokio_stream_of(rx).for_each_concurrent(STAMPS_IN_FLIGHT, move |item| {
                let worker = Arc::clone(&worker);
                async move { worker.stamp_one(item).await }
            });
            futures::future::join(retries, patches).await;
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
        let count = {
            let mut s = self.lock();
            if present {
                s.seen.insert((kind, key.clone()));
            } else {
                s.seen.remove(&(kind, key.clone()));
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
        self.lock().seen.retain(|(k, _)| *k != kind);
    }

    /// Queues `key`'s stamp if stamping, its unit kept here, and not
    /// already in flight.
    fn want(&self, kind: Kind, key: InstanceKey) {
        if !self.stamp || !self.scope.keeps(&key) {
            return;
        }
        if !self.lock().in_flight.insert((kind, key.clone())) {
            return;
        }
        if self.queue.try_send((kind, key.clone())).is_err() {
            self.lock().in_flight.remove(&(kind, key));
            metrics::counter!(telemetry::SHARD_LABEL_STAMPS_TOTAL, "result" => label::DROPPED)
                .increment(1);
        }
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

/// The receiver as a stream.
fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

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
