//! Publishes events.k8s.io/v1 Events, folding a repeat into a series, the
//! way kube-runtime's `events::Recorder` does, with a cache that holds only
//! what a repeat needs.
//!
//! A repeat of the same type, reason and action about the same object,
//! from this reporter, within [`SERIES_TTL`] of the last one, is one
//! Event series: the first is a CREATE, each repeat a PATCH that raises
//! `series.count` and moves `series.lastObservedTime` (the note stays the
//! first one's, as with the Recorder). kube-runtime's Recorder keeps every Event object it
//! published in the last [`SERIES_TTL`], note and object reference
//! included: an agent that captures every instance's baseline at start
//! held all of them. [`SeriesCache`] keeps a digest of the key, the
//! Event's creation time (its name follows from it) and its count, and at
//! most [`MAX_SERIES`] of them: past that the series seen longest ago is
//! forgotten, and its next repeat starts a new Event instead of patching
//! (one more object in `kubectl events`, never a lost one).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// A repeat within this long of the series' last Event joins the series
/// (kube-runtime's Recorder: 6 minutes).
pub const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);
/// At most this many series are remembered (a key, a name and a count
/// each).
pub const MAX_SERIES: usize = 16_384;
/// Expired series are swept out at most this often.
const PRUNE_EVERY: SignedDuration = SignedDuration::from_secs(10);

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Informational.
    Normal,
    /// Something an operator should look at.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event to publish about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason (`RolloutUnhealthy`).
    pub reason: String,
    /// What happened, for a human (at most 1 kB).
    pub note: Option<String>,
    /// CamelCase action (the signal, for a failing check).
    pub action: String,
    /// Not sent: the image it is about, part of its series' key (a
    /// repeat about another image is a new Event; see
    /// [`Transition::image`](crate::model::Transition::image)).
    pub image: Option<String>,
}

/// Who reports: the controller's name and this replica's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// `reportingController`.
    pub controller: String,
    /// `reportingInstance`.
    pub instance: String,
}

/// What makes a repeat part of a series (the reporter is fixed per
/// recorder): the regarded object's kind, namespace, name and UID, and the
/// Event's type, reason, action and image. Kept as a 128-bit digest of
/// those, not the strings: an agent starting on a large fleet publishes an
/// Event or two per instance and remembers each series for
/// [`SERIES_TTL`], so the strings were most of the cache. Two different
/// keys share a digest with a probability of about 2^-128 per pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeriesKey([u64; 2]);

impl SeriesKey {
    /// The key of `event` about `regarding`.
    pub fn of(event: &Event, regarding: &ObjectReference) -> Self {
        let digest = |salt: u64| {
            let mut h = std::hash::DefaultHasher::new();
            salt.hash(&mut h);
            // Each part hashed with its length (str's Hash writes a
            // terminator), so no two splits of one text collide.
            regarding.kind.as_deref().hash(&mut h);
            regarding.namespace.as_deref().hash(&mut h);
            regarding.name.as_deref().hash(&mut h);
            regarding.uid.as_deref().hash(&mut h);
            event.type_.hash(&mut h);
            event.reason.hash(&mut h);
            event.action.hash(&mut h);
            event.image.as_deref().hash(&mut h);
            h.finish()
        };
        SeriesKey([digest(0x6b75_7261), digest(0x7365_7269_6573)])
    }
}

/// A remembered series: when its Event was created (which names it), its
/// count, its last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// The creation time in nanoseconds, the suffix of the Event's name
    /// ([`event_name`]).
    pub created: i128,
    /// How many times it was observed (1: created, no series yet).
    pub count: i32,
    /// When it was last observed.
    pub last: Timestamp,
}

/// The series published in the last [`SERIES_TTL`], bounded by a
/// capacity. Pure: time is an argument.
#[derive(Debug)]
pub struct SeriesCache {
    entries: HashMap<SeriesKey, Series>,
    capacity: usize,
    pruned_at: Option<Timestamp>,
}

impl SeriesCache {
    /// An empty cache of at most `capacity` series (at least one).
    pub fn new(capacity: usize) -> Self {
        SeriesCache {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            pruned_at: None,
        }
    }

    /// How many series are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The live series `key` continues at `now`, if any (one seen last
    /// [`SERIES_TTL`] or longer ago is not).
    pub fn get(&mut self, key: &SeriesKey, now: Timestamp) -> Option<&Series> {
        self.prune(now);
        self.entries
            .get(key)
            .filter(|s| s.last.saturating_add(SERIES_TTL).is_ok_and(|t| t > now))
    }

    /// Remembers that `series` was published for `key`; at capacity the
    /// series seen longest ago is forgotten first.
    pub fn record(&mut self, key: SeriesKey, series: Series) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, series);
    }

    /// Drops expired series, at most once per [`PRUNE_EVERY`] (a scan of
    /// the cache; a stale entry in between is filtered by [`Self::get`]).
    fn prune(&mut self, now: Timestamp) {
        if self
            .pruned_at
            .is_some_and(|at| at.saturating_add(PRUNE_EVERY).is_ok_and(|t| t > now))
        {
            return;
        }
        self.pruned_at = Some(now);
        self.entries
            .retain(|_, s| s.last.saturating_add(SERIES_TTL).is_ok_and(|t| t > now));
    }
}

/// An Event's name: `<object>.<nanoseconds in hex>` of its creation, as
/// kube-runtime names them.
pub fn event_name(regarding: &ObjectReference, reporter: &Reporter, created: i128) -> String {
    format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or(&reporter.controller),
        created
    )
}

/// The Event object for a first occurrence at `now`, named by
/// [`event_name`].
pub fn new_event(
    event: &Event,
    regarding: &ObjectReference,
    reporter: &Reporter,
    now: Timestamp,
) -> K8sEvent {
    K8sEvent {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        note: event.note.clone(),
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(event_name(regarding, reporter, now.as_nanosecond())),
            ..ObjectMeta::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        type_: Some(event.type_.as_str().to_owned()),
        ..K8sEvent::default()
    }
}

/// The merge patch that adds one observation to a series.
pub fn series_patch(count: i32, now: Timestamp) -> serde_json::Value {
    let series = EventSeries {
        count,
        last_observed_time: MicroTime(now),
    };
    serde_json::json!({ "series": series })
}

/// Publishes Events through one client, one call at a time.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    series: SeriesCache,
}

impl EventRecorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        EventRecorder {
            client,
            reporter,
            series: SeriesCache::new(MAX_SERIES),
        }
    }

    /// Publishes `event` about `regarding` now: a CREATE, or a PATCH of
    /// the live series it repeats. A failed call leaves the cache as it
    /// was (the next repeat tries the same again).
    pub async fn publish(
        &mut self,
        event: &Event,
        regarding: &ObjectReference,
        timeout: Duration,
    ) -> Result<(), PublishError> {
        let now = Timestamp::now();
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let key = SeriesKey::of(event, regarding);
        let (created, count) = match self.series.get(&key, now).copied() {
            Some(series) => {
                let count = series.count.saturating_add(1);
                let patch = series_patch(count, now);
                let name = event_name(regarding, &self.reporter, series.created);
                call(
                    timeout,
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?;
                (series.created, count)
            }
            None => {
                let object = new_event(event, regarding, &self.reporter, now);
                call(timeout, api.create(&PostParams::default(), &object)).await?;
                (now.as_nanosecond(), 1)
            }
        };
        self.series.record(
            key,
            Series {
                created,
                count,
                last: now,
            },
        );
        Ok(())
    }

    /// How many series are remembered (for tests and the memory note).
    pub fn remembered(&self) -> usize {
        self.series.len()
    }
}

async fn call<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<(), PublishError> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(PublishError::Api(Box::new(error))),
        Err(_) => Err(PublishError::TimedOut(timeout)),
    }
}

/// Why an Event was not published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The API server refused or failed the call.
    #[error("{0}")]
    Api(Box<kube::Error>),
    /// No answer in time.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn event(reason: &str, action: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some("n".into()),
            action: action.into(),
            image: None,
        }
    }

    fn regarding(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("kura.tuist.dev/v1alpha1".into()),
            kind: Some("KuraInstance".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn series(created: i128, count: i32, last: Timestamp) -> Series {
        Series {
            created,
            count,
            last,
        }
    }

    #[test]
    fn a_repeat_within_the_ttl_continues_the_series_and_one_after_it_does_not() {
        let mut cache = SeriesCache::new(8);
        let t0 = ts("2026-12-04T10:00:00Z");
        let key = SeriesKey::of(&event("RolloutUnhealthy", "FdTimeouts"), &regarding("a"));
        cache.record(key, series(1, 1, t0));
        let before = t0
            .saturating_add(SignedDuration::from_secs(359))
            .expect("t");
        assert_eq!(cache.get(&key, before).map(|s| s.count), Some(1));
        let at = t0.saturating_add(SERIES_TTL).expect("t");
        assert!(
            cache.get(&key, at).is_none(),
            "6 minutes later: a new Event"
        );
        assert_eq!(cache.len(), 1, "pruned at most every {PRUNE_EVERY:?}");
        let later = at.saturating_add(PRUNE_EVERY).expect("t");
        assert!(cache.get(&key, later).is_none());
        assert!(cache.is_empty(), "the expired series was dropped");
    }

    #[test]
    fn the_note_is_not_part_of_the_key_but_reason_action_and_object_are() {
        let a = event("RolloutUnhealthy", "FdTimeouts");
        let mut other_note = a.clone();
        other_note.note = Some("different evidence".into());
        assert_eq!(
            SeriesKey::of(&a, &regarding("x")),
            SeriesKey::of(&other_note, &regarding("x"))
        );
        for (e, r) in [
            (event("RolloutUnhealthy", "SampleStale"), regarding("x")),
            (event("RolloutHealthy", "FdTimeouts"), regarding("x")),
            (a.clone(), regarding("y")),
        ] {
            assert_ne!(SeriesKey::of(&a, &regarding("x")), SeriesKey::of(&e, &r));
        }
        let mut normal = a.clone();
        normal.type_ = EventType::Normal;
        assert_ne!(
            SeriesKey::of(&a, &regarding("x")),
            SeriesKey::of(&normal, &regarding("x"))
        );
    }

    /// A rollout's `RolloutHealthy` on the new image is a new Event with its
    /// own note, not a count added to the old image's series (`kubectl
    /// describe` showed the old image's note twice); repeats about one
    /// image still fold.
    #[test]
    fn an_event_about_another_image_starts_another_series() {
        let on = |image: &str| Event {
            type_: EventType::Normal,
            reason: "RolloutHealthy".into(),
            note: Some(format!("healthy on {image}")),
            action: "Judge".into(),
            image: Some(image.into()),
        };
        let x = regarding("x");
        assert_ne!(
            SeriesKey::of(&on("kura:1"), &x),
            SeriesKey::of(&on("kura:2"), &x)
        );
        assert_eq!(
            SeriesKey::of(&on("kura:2"), &x),
            SeriesKey::of(&on("kura:2"), &x)
        );
    }

    #[test]
    fn at_capacity_the_series_seen_longest_ago_is_forgotten() {
        let mut cache = SeriesCache::new(2);
        let t0 = ts("2026-12-04T10:00:00Z");
        let at = |s: i64| t0.saturating_add(SignedDuration::from_secs(s)).expect("t");
        let k = |n: &str| SeriesKey::of(&event("BaselineCaptured", "Capture"), &regarding(n));
        cache.record(k("old"), series(1, 1, at(0)));
        cache.record(k("mid"), series(1, 1, at(1)));
        // Re-recording a known key does not evict.
        cache.record(k("old"), series(1, 2, at(2)));
        assert_eq!(cache.len(), 2);
        cache.record(k("new"), series(1, 1, at(3)));
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get(&k("mid"), at(4)).is_none(),
            "mid was seen longest ago"
        );
        assert_eq!(cache.get(&k("old"), at(4)).map(|s| s.count), Some(2));
        assert!(cache.get(&k("new"), at(4)).is_some());
    }

    /// A series is remembered as a digest, a time, a count: no strings
    /// (the series of a large fleet's start-up were about half a KB each
    /// with the key's and the name's texts).
    #[test]
    fn a_remembered_series_holds_no_text() {
        let entry = std::mem::size_of::<SeriesKey>() + std::mem::size_of::<Series>();
        assert!(entry <= 64, "{entry} B");
        // Its repeat is patched under the name its Event was created with.
        let reporter = Reporter {
            controller: "kura-agent".into(),
            instance: "agent-0".into(),
        };
        let now = ts("2026-12-04T10:00:00.5Z");
        let created = new_event(&event("R", "A"), &regarding("a"), &reporter, now);
        assert_eq!(
            created.metadata.name.as_deref(),
            Some(event_name(&regarding("a"), &reporter, now.as_nanosecond()).as_str())
        );
    }

    #[test]
    fn a_first_event_is_named_and_shaped_as_kube_runtime_did() {
        let now = ts("2026-12-04T10:00:00.123456Z");
        let reporter = Reporter {
            controller: "kura-agent".into(),
            instance: "agent-0".into(),
        };
        let e = new_event(
            &event("RolloutUnhealthy", "FdTimeouts"),
            &regarding("a"),
            &reporter,
            now,
        );
        assert_eq!(
            e.metadata.name.as_deref(),
            Some(format!("a.{:x}", now.as_nanosecond()).as_str())
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reporting_controller.as_deref(), Some("kura-agent"));
        assert_eq!(e.reporting_instance.as_deref(), Some("agent-0"));
        assert_eq!(e.event_time, Some(MicroTime(now)));
        assert!(e.series.is_none());
        assert_eq!(
            series_patch(3, now),
            serde_json::json!({"series": {"count": 3, "lastObservedTime": "2026-12-04T10:00:00.123456Z"}})
        );
    }
}
