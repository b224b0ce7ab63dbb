//! The IO half of sharding: this replica's own Lease (renewed every third
//! of its duration with one server-side apply), a watch of the group's
//! Leases, and [`Shard`], the shared handle that answers "do I own this
//! instance now?" for the run loop, the status writer and the debug
//! endpoint.
//!
//! API cost per replica: one PATCH per renewal (`duration / 3`, so 0.2/s at
//! the default 15 s), one LIST at start and one long-running WATCH of the
//! group's Leases (re-opened by the API server every few minutes), and one
//! DELETE at graceful shutdown. Nothing scales with the number of
//! instances.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::membership::{
    Departures, LeaseRecord, Membership, Observed, OwnLease, PlanCache, ScopeHold, Timing,
    view_is_fresh,
};
use crate::model::members::{
    LeaseSnapshot, MemberSnapshot, MembersSnapshot, OwnLeaseSnapshot, OwnershipChange,
};
use crate::model::units::{BadUnitCount, UnitCount};
use crate::model::{InstanceKey, KeptUnits, MembersSource, PodScope, WriteGate};
use crate::telemetry::{self, label};

/// The label that groups the Leases of one agent deployment.
pub const GROUP_LABEL: &str = "kura.tuist.dev/agent-group";
/// The field manager of Lease renewals.
pub const LEASE_FIELD_MANAGER: &str = "kura-health-agent-lease";
/// Ownership changes kept for the debug endpoint.
pub const RECENT_CHANGES: usize = 64;
/// The `ownership changed` log names at most this many instances (the
/// first, in key order) and counts the rest: a replica's first read
/// gains thousands at once.
pub const LOGGED_CHANGES: usize = 32;
/// The Lease annotation carrying the unit count its holder assigns with:
/// replicas own units only while every member publishes the same count.
pub const UNITS_ANNOTATION: &str = "kura.tuist.dev/shard-units";
/// The Lease annotation saying its holder assigns units with exact balance
/// ([`BALANCE_EXACT`]; absent on agents before it): a set of members is
/// assigned with exact balance only when every one carries it
/// ([`super::assign::Balance::of`]).
pub const BALANCE_ANNOTATION: &str = "kura.tuist.dev/shard-balance";
/// The value of [`BALANCE_ANNOTATION`] for exact balance.
pub const BALANCE_EXACT: &str = "exact";
/// The default unit count (`--shard-units`).
pub const DEFAULT_UNITS: u32 = 64;

/// Why sharding could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardError {
    /// No namespace for the Leases.
    #[error("sharding needs a lease namespace: set --lease-namespace or POD_NAMESPACE")]
    NoNamespace,
    /// A lease duration the API cannot express or too short to renew.
    #[error("lease duration {0:?} must be whole seconds between 3 s and 1 h")]
    BadDuration(Duration),
    /// A unit count that is not a power of two from 1 to 256.
    #[error(transparent)]
    BadUnits(#[from] BadUnitCount),
}

/// Sharding settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// Namespace of the Leases (the agent's own).
    pub namespace: String,
    /// The group: the value of [`GROUP_LABEL`] and the Lease name prefix.
    pub group: String,
    /// This replica's identity (`holderIdentity`, and `rolloutHealth.agent`).
    pub identity: String,
    /// `leaseDurationSeconds`.
    pub lease_duration: Duration,
    /// Time between renewals (a third of the duration).
    pub renew_every: Duration,
    /// This replica stops writing this long before its Lease could expire
    /// in the others' eyes (a fifth of the duration).
    pub margin: Duration,
    /// A newly acquired Lease gains instances only after this long (two
    /// renewal intervals), so the old owners have stopped first.
    pub settle: Duration,
    /// A replica whose Lease watch shows its own `renewTime` older than
    /// this (one and a half renewal intervals) stops acting: its view of
    /// the members may be stale. Shorter than `settle`.
    pub staleness: Duration,
    /// How the instances are grouped into the units the replicas own
    /// (published on the Lease as [`UNITS_ANNOTATION`]).
    pub units: UnitCount,
}

impl ShardConfig {
    /// Settings derived from the lease duration (renew every third, margin
    /// a fifth, settle two renewal intervals, staleness one and a half).
    pub fn new(
        namespace: impl Into<String>,
        group: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
    ) -> Result<Self, ShardError> {
        let secs = lease_duration.as_secs();
        if lease_duration.subsec_nanos() != 0 || !(3..=3600).contains(&secs) {
            return Err(ShardError::BadDuration(lease_duration));
        }
        let namespace = namespace.into();
        if namespace.trim().is_empty() {
            return Err(ShardError::NoNamespace);
        }
        Ok(ShardConfig {
            namespace,
            group: group.into(),
            identity: identity.into(),
            lease_duration,
            renew_every: lease_duration / 3,
            margin: lease_duration / 5,
            settle: lease_duration * 2 / 3,
            staleness: lease_duration / 2,
            units: UnitCount::new(DEFAULT_UNITS)?,
        })
    }

    /// The same settings with `units` units.
    #[must_use]
    pub fn with_units(self, units: UnitCount) -> Self {
        ShardConfig { units, ..self }
    }

    /// The name of this replica's Lease.
    pub fn lease_name(&self) -> String {
        lease_name(&self.group, &self.identity)
    }
}

/// `<group>-<identity>`, lowercased, every character outside `[a-z0-9-.]`
/// replaced by `-`, at most 253 characters, no leading or trailing `-`/`.`
/// (a valid object name for any identity a pod can have).
pub fn lease_name(group: &str, identity: &str) -> String {
    let raw = format!("{group}-{identity}").to_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(253);
    name.trim_matches(|c| c == '-' || c == '.').to_owned()
}

/// The membership view of a Lease object.
pub fn lease_record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.as_ref();
    LeaseRecord {
        name: lease.name_any(),
        holder: spec.and_then(|s| s.holder_identity.clone()),
        acquire_time: spec.and_then(|s| s.acquire_time.as_ref()).map(|t| t.0),
        renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        duration_seconds: spec.and_then(|s| s.lease_duration_seconds),
        units: lease.annotations().get(UNITS_ANNOTATION).cloned(),
        exact: lease
            .annotations()
            .get(BALANCE_ANNOTATION)
            .is_some_and(|v| v.trim() == BALANCE_EXACT),
    }
}

#[derive(Debug)]
struct State {
    own: OwnLease,
    acquired_at: Option<Timestamp>,
    renewals_ok: u64,
    renewals_failed: u64,
    last_error: Option<String>,
    owned: BTreeSet<InstanceKey>,
    changes: VecDeque<OwnershipChange>,
    changes_total: u64,
    released: bool,
    /// This replica's own Lease has been held a renewal interval: from
    /// then on (for good) it keeps units ([`Shard::refresh_scope`]).
    gathered: bool,
    /// The membership the pods are kept for, and the targets read under
    /// ([`Shard::refresh_scope`]).
    scope: Option<Membership>,
    /// How the kept units follow the membership after an unsteady view.
    scope_hold: ScopeHold,
    /// Departures seen in the Lease view, and when it was first listed.
    departures: Departures,
    /// The scheme conflict last logged.
    conflict: Option<String>,
}

/// The shared sharding handle. See the module documentation.
pub struct Shard {
    config: ShardConfig,
    lease_name: String,
    store: Store<Lease>,
    synced: AtomicBool,
    state: Mutex<State>,
    /// Moves whenever the units the pods are kept for change.
    scope_changes: tokio::sync::watch::Sender<u64>,
    /// The unit plans of the last memberships.
    plans: PlanCache,
}

impl PodScope for Shard {
    /// The pods of an instance whose unit this replica keeps
    /// ([`PodScope::kept_units`]); none before the first scope.
    fn keeps(&self, key: &InstanceKey) -> bool {
        let s = self.lock();
        s.gathered
            && s.scope
                .as_ref()
                .is_some_and(|m| m.plan.kept.contains(&m.count.unit_of_key(key)))
    }

    /// Moves only when the kept units change (not at every membership
    /// change: a join or leave that leaves this replica's units alone
    /// re-lists nothing).
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.scope_changes.subscribe()
    }

    /// The units this replica owns or is about to own under the scope's
    /// membership: its units under the live, the settled or the live and
    /// recently departed members' assignment (none before the first
    /// scope).
    fn kept_units(&self) -> Option<KeptUnits> {
        let s = self.lock();
        Some(KeptUnits {
            count: self.config.units,
            units: s
                .scope
                .as_ref()
                .filter(|_| s.gathered)
                .map(|m| m.plan.kept.clone())
                .unwrap_or_default(),
        })
    }
}

/// The future that renews this replica's Lease and watches the group's;
/// runs until dropped.
pub type ShardDriver = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

impl Shard {
    /// Sets up the Lease watch and the renew loop. Nothing is owned until
    /// the first renewal succeeded and the initial Lease list is in
    /// ([`Shard::is_ready`]).
    pub fn start(client: Client, config: ShardConfig) -> (Arc<Shard>, ShardDriver) {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let (reader, writer) = reflector::store::<Lease>();
        let shard = Arc::new(Shard {
            lease_name: config.lease_name(),
            state: Mutex::new(State {
                own: OwnLease {
                    last_renewed: None,
                    duration: config.lease_duration,
                    margin: config.margin,
                },
                acquired_at: None,
                renewals_ok: 0,
                renewals_failed: 0,
                last_error: None,
                owned: BTreeSet::new(),
                changes: VecDeque::new(),
                changes_total: 0,
                released: false,
                gathered: false,
                scope: None,
                scope_hold: ScopeHold::default(),
                departures: Departures::default(),
                conflict: None,
            }),
            scope_changes: tokio::sync::watch::Sender::new(0),
            plans: PlanCache::default(),
            config,
            store: reader,
            synced: AtomicBool::new(false),
        });
        let watch = {
            let shard = shard.clone();
            let cfg =
                watcher::Config::default().labels(&format!("{GROUP_LABEL}={}", shard.config.group));
            reflector::reflector(
                writer,
                watcher::watcher(api.clone(), cfg)
                    .modify(|l| l.managed_fields_mut().clear())
                    .default_backoff(),
            )
            .for_each(move |ev| {
                match ev {
                    Ok(watcher::Event::InitDone) => {
                        shard.observe(true);
                        if !shard.synced.swap(true, Ordering::AcqRel) {
                            tracing::info!("initial lease list received");
                        }
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Ok(_) => shard.observe(false),
                    Err(error) => {
                        metrics::counter!(telemetry::WATCH_ERRORS_TOTAL, "resource" => label::LEASES)
                            .increment(1);
                        tracing::warn!(%error, "lease watch error; retrying with backoff");
                    }
                }
                std::future::ready(())
            })
        };
        let renew = {
            let shard = shard.clone();
            async move {
                let mut tick = tokio::time::interval(shard.config.renew_every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    shard.renew_once(&api).await;
                }
            }
        };
        let driver: ShardDriver = Box::pin(async move {
            futures::future::join(watch, renew).await;
        });
        (shard, driver)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn renew_once(&self, api: &Api<Lease>) {
        let now = Timestamp::now();
        let acquired = {
            let s = self.lock();
            if s.released {
                return;
            }
            // A Lease that lapsed (by this replica's own reckoning, which is
            // earlier than anyone else's) is acquired anew: the others may
            // have taken its instances, so it must settle again before it
            // gains them back.
            match s.acquired_at {
                Some(at) if s.own.is_current(now) => at,
                _ => now,
            }
        };
        let secs = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    GROUP_LABEL.to_owned(),
                    self.config.group.clone(),
                )])),
                annotations: Some(BTreeMap::from([
                    (UNITS_ANNOTATION.to_owned(), self.config.units.to_string()),
                    (BALANCE_ANNOTATION.to_owned(), BALANCE_EXACT.to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(MicroTime(acquired)),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
        };
        let params = PatchParams::apply(LEASE_FIELD_MANAGER).force();
        let result = tokio::time::timeout(
            self.config.renew_every,
            api.patch(&self.lease_name, &params, &Patch::Apply(&lease)),
        )
        .await;
        let error = match result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {:?}", self.config.renew_every)),
        };
        let mut s = self.lock();
        if s.released {
            return;
        }
        match error {
            None => {
                metrics::counter!(telemetry::LEASE_RENEWALS_TOTAL, "result" => label::OK)
                    .increment(1);
                if s.acquired_at != Some(acquired) {
                    tracing::info!(lease = %self.lease_name, namespace = %self.config.namespace,
                        "lease acquired");
                }
                s.acquired_at = Some(acquired);
                s.own.last_renewed = Some(now);
                s.renewals_ok += 1;
                s.last_error = None;
            }
            Some(e) => {
                metrics::counter!(telemetry::LEASE_RENEWALS_TOTAL, "result" => label::ERROR)
                    .increment(1);
                s.renewals_failed += 1;
                let current = s.own.is_current(Timestamp::now());
                tracing::warn!(error = %e, lease = %self.lease_name, still_current = current,
                    "lease renewal failed");
                if !current {
                    tracing::error!(lease = %self.lease_name,
                        "own lease no longer current: no status writes until it is renewed");
                }
                s.last_error = Some(e);
            }
        }
    }

    /// Graceful leave: stop renewing, refuse writes from now on, and delete
    /// the Lease so the other members take over at once instead of after
    /// the Lease expires.
    pub async fn release(&self, client: Client) {
        {
            let mut s = self.lock();
            s.released = true;
            s.own.last_renewed = None;
        }
        let api: Api<Lease> = Api::namespaced(client, &self.config.namespace);
        match tokio::time::timeout(
            Duration::from_secs(5),
            api.delete(&self.lease_name, &DeleteParams::default()),
        )
        .await
        {
            Ok(Ok(_)) => tracing::info!(lease = %self.lease_name, "lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "lease not deleted; it will expire"),
            Err(_) => tracing::warn!("lease deletion timed out; it will expire"),
        }
    }

    /// Whether the first renewal succeeded and the initial Lease list is
    /// in: before that the replica owns nothing and the run loop waits.
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Acquire) && self.lock().acquired_at.is_some()
    }

    /// Why the shard is not ready, for `/readyz`; empty when it is, or when
    /// it is ready but its own Lease lapsed (then it says so).
    pub fn not_ready_reasons(&self, now: Timestamp) -> Vec<String> {
        let mut out = Vec::new();
        if !self.synced.load(Ordering::Acquire) {
            out.push("lease list not received yet".to_owned());
        }
        let s = self.lock();
        if s.acquired_at.is_none() {
            out.push(match &s.last_error {
                Some(e) => format!("own lease not acquired yet (last error: {e})"),
                None => "own lease not acquired yet".to_owned(),
            });
        } else if s.own.is_current(now)
            && !view_is_fresh(
                &self.leases(),
                &self.config.identity,
                self.config.staleness,
                now,
            )
        {
            out.push("lease watch is stale: writes stopped until it catches up".to_owned());
        } else if !s.own.is_current(now) && !s.released {
            out.push(match &s.last_error {
                Some(e) => {
                    format!("own lease not renewed in time: writes stopped (last error: {e})")
                }
                None => "own lease not renewed in time: writes stopped".to_owned(),
            });
        }
        out
    }

    /// The group's Leases as cached by the watch.
    pub fn leases(&self) -> Vec<LeaseRecord> {
        let mut v: Vec<LeaseRecord> = self.store.state().iter().map(|l| lease_record(l)).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn timing(&self) -> Timing {
        Timing {
            settle: self.config.settle,
            staleness: self.config.staleness,
        }
    }

    /// Takes the Lease view as it stands into the departures (a Lease
    /// gone or acquired anew); `complete`: a complete list just came in.
    fn observe(&self, complete: bool) {
        let leases = self.leases();
        let now = Timestamp::now();
        let mut s = self.lock();
        s.departures
            .observe(&leases, complete, now, self.config.settle);
    }

    /// How long a newly acquired Lease waits before it gains units.
    pub fn settle(&self) -> Duration {
        self.config.settle
    }

    /// The membership at `now`.
    pub fn membership(&self, now: Timestamp) -> Membership {
        let leases = self.leases();
        let mut s = self.lock();
        // The store may have moved since the watch's last event was
        // handled: a departure is never missed.
        let complete = false;
        s.departures
            .observe(&leases, complete, now, self.config.settle);
        let m = Membership::at(
            &self.config.identity,
            Observed {
                leases: &leases,
                departures: &s.departures,
            },
            &s.own,
            self.timing(),
            self.config.units,
            now,
            &self.plans,
        );
        if m.conflict != s.conflict {
            match &m.conflict {
                Some(why) => {
                    tracing::warn!(reason = %why, "sharding schemes disagree: owning no unit")
                }
                None => {
                    tracing::info!(units = %self.config.units, "every member assigns the same units again")
                }
            }
            s.conflict.clone_from(&m.conflict);
        }
        m
    }

    /// Takes the membership at `now` as the one the pods are kept for and
    /// the targets read under; when its members changed, the pod scope's
    /// signal moves (the pods are listed again before the targets are
    /// read). Called by the run loop's readiness check, so ownership
    /// never moves before the pods it needs are listed.
    ///
    /// At start-up no unit is kept until this replica's own Lease has been
    /// held one renewal interval: the replicas started with it are seen by
    /// then, so each unit is listed once, by its final owner, not first by
    /// every replica that briefly saw itself alone. Owning starts later
    /// still (after `settle`), so this delays no write.
    pub fn refresh_scope(&self, now: Timestamp) {
        let fresh = self.membership(now);
        let units_changed = {
            let mut s = self.lock();
            let gathered = s.gathered
                || s.acquired_at.is_some_and(|at| {
                    now.duration_since(at)
                        .unsigned_abs()
                        .ge(&self.config.renew_every)
                        && now >= at
                });
            let gathered_now = gathered && !s.gathered;
            s.gathered = gathered;
            let fresh = s.scope_hold.narrow(fresh, now, self.config.lease_duration);
            let same = s
                .scope
                .as_ref()
                .is_some_and(|m| m.same_group(&fresh) && m.plan == fresh.plan);
            if same {
                gathered_now
            } else {
                let changed = s
                    .scope
                    .as_ref()
                    .is_none_or(|m| m.plan.kept != fresh.plan.kept);
                if changed {
                    tracing::info!(units = ?fresh.plan.kept, count = %fresh.count,
                        "the units this replica keeps changed");
                }
                s.scope = Some(fresh);
                changed || gathered_now
            }
        };
        if units_changed {
            self.scope_changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The membership the targets are read under: the members of the
    /// last [`Shard::refresh_scope`], with this replica's own Lease as it
    /// stands at `now`.
    pub fn scoped_membership(&self, now: Timestamp) -> Membership {
        let fresh = self.membership(now);
        match self.lock().scope.clone() {
            Some(scope) => Membership {
                own_current: fresh.own_current,
                fence: fresh.fence,
                ..scope
            },
            None => fresh,
        }
    }

    /// Records the owned set the run loop acts on; counts and logs what was
    /// gained and lost, and sets the membership gauges.
    pub fn record_owned(
        &self,
        owned: BTreeSet<InstanceKey>,
        membership: &Membership,
        now: Timestamp,
    ) {
        let members: Vec<String> = membership.live.iter().map(|m| m.id.clone()).collect();
        metrics::gauge!(telemetry::AGENT_MEMBERS).set(members.len() as f64);
        metrics::gauge!(telemetry::OWNED_INSTANCES).set(owned.len() as f64);
        metrics::gauge!(telemetry::OWNED_UNITS).set(membership.owned_units().len() as f64);
        let mut s = self.lock();
        let gained: Vec<InstanceKey> = owned.difference(&s.owned).cloned().collect();
        let lost: Vec<InstanceKey> = s.owned.difference(&owned).cloned().collect();
        for (keys, change) in [(&gained, label::GAINED), (&lost, label::LOST)] {
            if keys.is_empty() {
                continue;
            }
            metrics::counter!(telemetry::OWNERSHIP_CHANGES_TOTAL, "change" => change)
                .increment(keys.len() as u64);
            let fence = membership.fence.map(|f| f.to_string());
            let named: Vec<String> = keys
                .iter()
                .take(LOGGED_CHANGES)
                .map(ToString::to_string)
                .collect();
            tracing::info!(change, count = keys.len(), instances = ?named,
                unnamed = keys.len() - named.len(),
                members = ?members, fence = ?fence, "ownership changed");
            // Only the last RECENT_CHANGES can stay in the ring.
            s.changes_total += keys.len() as u64;
            for k in &keys[keys.len().saturating_sub(RECENT_CHANGES)..] {
                if s.changes.len() == RECENT_CHANGES {
                    s.changes.pop_front();
                }
                s.changes.push_back(OwnershipChange {
                    at: now,
                    instance: k.to_string(),
                    change,
                    members: members.clone(),
                });
            }
        }
        s.owned = owned;
    }

    /// What `/debug/members` shows.
    pub fn view(&self, now: Timestamp) -> MembersSnapshot {
        let membership = self.membership(now);
        let leases = self.leases();
        let s = self.lock();
        let settled: BTreeSet<&str> = membership.settled.iter().map(|m| m.id.as_str()).collect();
        MembersSnapshot {
            identity: self.config.identity.clone(),
            group: self.config.group.clone(),
            lease_namespace: self.config.namespace.clone(),
            lease_name: self.lease_name.clone(),
            ready: self.synced.load(Ordering::Acquire) && s.acquired_at.is_some(),
            own_lease: OwnLeaseSnapshot {
                acquired_at: s.acquired_at,
                last_renewed: s.own.last_renewed,
                writes_allowed_until: s.own.valid_until(),
                current: s.own.is_current(now),
                renewals_ok: s.renewals_ok,
                renewals_failed: s.renewals_failed,
                last_error: s.last_error.clone(),
            },
            members: membership
                .live
                .iter()
                .map(|m| MemberSnapshot {
                    id: m.id.clone(),
                    settled: settled.contains(m.id.as_str()),
                    me: m.id == self.config.identity,
                    units: membership.plan.live.units_of(&m.id).count(),
                    published_units: leases
                        .iter()
                        .find(|l| l.holder_id() == Some(m.id.as_str()))
                        .and_then(|l| l.units.clone()),
                    exact_balance: m.exact,
                })
                .collect(),
            leases: leases
                .into_iter()
                .map(|l| LeaseSnapshot {
                    current: l.is_current(now),
                    expires_at: l.expires_at(),
                    name: l.name,
                    holder: l.holder,
                    acquire_time: l.acquire_time,
                    renew_time: l.renew_time,
                    duration_seconds: l.duration_seconds,
                })
                .collect(),
            owned: s.owned.iter().map(ToString::to_string).collect(),
            ownership_changes_total: s.changes_total,
            recent_changes: s.changes.iter().rev().cloned().collect(),
            units: Some(self.config.units.get()),
            owned_units: membership.owned_units().into_iter().collect(),
            departed: membership.departed.iter().map(|m| m.id.clone()).collect(),
            scheme_conflict: membership.conflict.clone(),
        }
    }
}

impl WriteGate for Shard {
    fn check(&self, key: &InstanceKey, now: Timestamp) -> Result<(), String> {
        if !self.is_ready() {
            return Err("own lease not acquired".to_owned());
        }
        let m = self.membership(now);
        if let Some(fence) = m.fence {
            return Err(fence.to_string());
        }
        if let Some(why) = &m.conflict {
            return Err(format!("sharding schemes disagree: {why}"));
        }
        if !m.owns(key) {
            return Err(format!(
                "not the owner of unit {} (owner: {})",
                m.count.unit_of_key(key),
                m.owner_of(key).map_or("none", |o| o.id.as_str())
            ));
        }
        Ok(())
    }
}

impl MembersSource for Shard {
    fn members(&self, now: Timestamp) -> MembersSnapshot {
        self.view(now)
    }

    fn owner_of(&self, key: &InstanceKey, now: Timestamp) -> Option<String> {
        self.membership(now).owner_of(key).map(|m| m.id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(
            lease_name("kura-health-agent", "kura-health-agent-7d9f-x2"),
            "kura-health-agent-kura-health-agent-7d9f-x2"
        );
        assert_eq!(lease_name("g", "Node_A:1"), "g-node-a-1");
        assert_eq!(lease_name("g", "x_").len(), 3);
        assert!(lease_name("g", &"a".repeat(400)).len() <= 253);
    }

    #[test]
    fn config_derives_intervals_and_rejects_odd_durations() {
        let c = ShardConfig::new("ns", "g", "me", Duration::from_secs(15)).expect("config");
        assert_eq!(c.renew_every, Duration::from_secs(5));
        assert_eq!(c.margin, Duration::from_secs(3));
        assert_eq!(c.settle, Duration::from_secs(10));
        assert_eq!(c.staleness, Duration::from_millis(7500));
        assert!(c.staleness < c.settle && c.margin < c.renew_every);
        assert_eq!(c.units.get(), 64);
        let c = c.with_units(UnitCount::new(256).expect("count"));
        assert_eq!(c.units.get(), 256);
        assert_eq!(
            ShardConfig::new("ns", "g", "me", Duration::from_millis(1500)),
            Err(ShardError::BadDuration(Duration::from_millis(1500)))
        );
        assert_eq!(
            ShardConfig::new(" ", "g", "me", Duration::from_secs(15)),
            Err(ShardError::NoNamespace)
        );
    }

    #[test]
    fn lease_objects_become_records() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g-a", "namespace": "ns",
                         "annotations": {"kura.tuist.dev/shard-units": "64"}},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                     "acquireTime": "2026-07-21T10:00:00.000000Z",
                     "renewTime": "2026-07-21T10:00:05.123456Z"}
        }))
        .expect("lease");
        let r = lease_record(&lease);
        assert_eq!(r.holder.as_deref(), Some("a"));
        assert_eq!(r.duration_seconds, Some(15));
        assert_eq!(r.units.as_deref(), Some("64"));
        let now: Timestamp = "2026-07-21T10:00:20.123455Z".parse().expect("ts");
        assert!(r.is_current(now));
        let later: Timestamp = "2026-07-21T10:00:20.123456Z".parse().expect("ts");
        assert!(!r.is_current(later));
    }
}
