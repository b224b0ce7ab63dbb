//! The node report a Kura pod answers on `GET /status/rollout`, in every
//! generation (contract/node-report.md), and its one strict parser.
//!
//! Unknown keys are ignored whatever their value, `null` included (newer
//! builds add informational keys that may be null, e.g. `gateway_grpc_port`).
//! A known key with the wrong type (`null` too: none of them is ever null)
//! or an impossible value, or a missing required key, is an error that names
//! the field; only the lenient `serving_authority` drops what it cannot
//! read. Absent optional keys stay `None`: absent is never zero. A known key
//! given twice is an error too ([`ReportError::Duplicate`]), and so is a
//! count above 2^63−1, the largest integer the Kubernetes API server stores
//! ([`crate::api_int`]).

use crate::api_int::{self, API_INT_MAX};
use crate::strict_json::{self, StrictJsonError, StrictValue};
use schemars::JsonSchema;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer as _, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::cell::RefCell;

/// The path a Kura node serves this report on.
pub const REPORT_PATH: &str = "/status/rollout";

/// Default limit on a report body, in bytes (64 KiB).
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// Longest string accepted for `backfill_initial_cycle` and the identity
/// strings of `serving_authority`; longer values are refused or dropped so a
/// hostile pod cannot make the agent keep large strings per pod.
pub const MAX_TEXT_LEN: usize = 128;

/// The lifecycle state a node reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Not yet latched serving.
    Joining,
    /// Latched serving.
    Serving,
    /// A drain was requested.
    Draining,
}

impl NodeState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Joining => "joining",
            NodeState::Serving => "serving",
            NodeState::Draining => "draining",
        }
    }
}

/// `backfill_initial_cycle`: known values, or a value a newer Kura may add.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BackfillCycle {
    /// Peer links have not settled yet.
    Pending,
    /// Every link settled.
    Complete,
    /// A link gave up after real failures.
    Degraded,
    /// A value this version does not know (kept verbatim, bounded length).
    Other(String),
}

impl BackfillCycle {
    /// Parse the wire value; unknown values are kept as [`BackfillCycle::Other`].
    pub fn from_wire(s: &str) -> Self {
        match s {
            "pending" => BackfillCycle::Pending,
            "complete" => BackfillCycle::Complete,
            "degraded" => BackfillCycle::Degraded,
            other => BackfillCycle::Other(other.to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            BackfillCycle::Pending => "pending",
            BackfillCycle::Complete => "complete",
            BackfillCycle::Degraded => "degraded",
            BackfillCycle::Other(s) => s,
        }
    }
}

impl Serialize for BackfillCycle {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl JsonSchema for BackfillCycle {
    fn schema_name() -> Cow<'static, str> {
        "BackfillCycle".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TEXT_LEN,
            "description": "\"pending\", \"complete\", \"degraded\", or a value a newer Kura adds"
        })
    }
}

/// `serving_authority` of the newest builds. Read leniently: inner keys of
/// unexpected type are dropped, not errors. The fence state (`enabled`,
/// `valid`, `epoch`, `observed.phase`) folds into the aggregate's
/// `servingAuthority`, which gate checks 16 (`serving_fenced`) and 17
/// (`no_valid_writer`) read (contract/node-report.md, gate.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(transform = api_int::declare_stored_range)]
pub struct ServingAuthority {
    /// `capability`, when a string.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// `enabled`, when a bool: true only on nodes started with fenced serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `identity`, when an object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<ServingIdentity>,
    /// `epoch`, when an integer in 0..=2^63−1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// `valid`, when a bool: whether the node holds a valid grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    /// `observed`, when an object with a string `phase` (`Preparing`,
    /// `Serving`, `Quiescing`, `Revoking`, `Fencing`, or a newer one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedGrant>,
}

/// `serving_authority.observed`: the grant the node last saw. Only its phase
/// is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ObservedGrant {
    /// `phase`, verbatim (bounded length).
    pub phase: String,
}

/// `serving_authority.identity`: who answered. Nodes without fenced serving
/// write empty strings for `instance_uid`, `pod_uid` and `host`; an empty
/// string names nothing and is read as absent (`None`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ServingIdentity {
    /// `instance_uid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_uid: Option<String>,
    /// `pod_uid`: the pod that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// `incarnation` (string or integer on the wire, kept as text): changes
    /// on every process restart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// `host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// One parsed node report. Fields every generation carries are plain values;
/// the rest are `Option`, `None` meaning the node did not report it.
///
/// It serializes back to the wire form (absent keys left out), which is what
/// the simulator serves; [`parse_report`] is the only way in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(
    title = "Kura node report (GET /status/rollout)",
    transform = api_int::declare_stored_range
)]
pub struct NodeReport {
    /// `generation`: process-local peer-set generation.
    pub generation: u64,
    /// `ready`.
    pub ready: bool,
    /// `state`.
    pub state: NodeState,
    /// `ring_members`: known peers + 1.
    pub ring_members: u64,
    /// `ring_fingerprint`: 16 lowercase hex chars (G3+).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{16}$"))]
    pub ring_fingerprint: Option<String>,
    /// `initial_discovery_completed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_discovery_completed: Option<bool>,
    /// `writer_lock_owned`.
    pub writer_lock_owned: bool,
    /// `bootstrap_known_peers` (G1, G2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_known_peers: Option<u64>,
    /// `bootstrap_completed_peers` (G1, G2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_completed_peers: Option<u64>,
    /// `bootstrap_inflight_peers` (G1, G2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_inflight_peers: Option<u64>,
    /// `http_inflight_requests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_inflight_requests: Option<u64>,
    /// `grpc_inflight_requests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_inflight_requests: Option<u64>,
    /// `outbox_messages`: a gauge; absent on the newest nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox_messages: Option<u64>,
    /// `outbox_capacity` (some G3 builds): at capacity the node sheds client
    /// writes. Absent means unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox_capacity: Option<u64>,
    /// `memory_pressure_state`: 0, 1 or 2.
    #[schemars(range(min = 0, max = 2))]
    pub memory_pressure_state: u8,
    /// `fd_timeout_count`: per-process counter.
    pub fd_timeout_count: u64,
    /// `peer_connection_failure_count`: per-process counter (G3+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_connection_failure_count: Option<u64>,
    /// `backfill_initial_cycle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_initial_cycle: Option<BackfillCycle>,
    /// `backfill_backfilling_peers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_backfilling_peers: Option<u64>,
    /// `backfill_budget_exhausted_real_peers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_budget_exhausted_real_peers: Option<u64>,
    /// `backfill_budget_exhausted_capability_peers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_budget_exhausted_capability_peers: Option<u64>,
    /// `backfill_ring_fullness_percent`: normally 0–100, but Kura does not
    /// clamp it, so a larger value is read as sent; clamp it where it is
    /// shown ([`NodeReport::ring_fullness_percent`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill_ring_fullness_percent: Option<u64>,
    /// `serving_authority` (newest builds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_authority: Option<ServingAuthority>,
}

impl NodeReport {
    /// The report's `serving_authority.identity.incarnation`, if any.
    pub fn incarnation(&self) -> Option<&str> {
        self.identity().and_then(|i| i.incarnation.as_deref())
    }

    /// The report's `serving_authority.identity.pod_uid`, if any.
    pub fn pod_uid(&self) -> Option<&str> {
        self.identity().and_then(|i| i.pod_uid.as_deref())
    }

    /// `backfill_ring_fullness_percent` clamped to 100, for display.
    pub fn ring_fullness_percent(&self) -> Option<u64> {
        self.backfill_ring_fullness_percent.map(|p| p.min(100))
    }

    /// The fence state of a node that runs fenced serving (`enabled` true):
    /// `None` on every other node.
    pub fn fence(&self) -> Option<&ServingAuthority> {
        self.serving_authority
            .as_ref()
            .filter(|a| a.enabled == Some(true))
    }

    fn identity(&self) -> Option<&ServingIdentity> {
        self.serving_authority.as_ref()?.identity.as_ref()
    }

    /// Which report generation (1–4) the keys present suggest. Diagnostic
    /// only: decisions never depend on it.
    pub fn shape_generation(&self) -> u8 {
        if self.ring_fingerprint.is_some() {
            if self.outbox_messages.is_none() { 4 } else { 3 }
        } else if self.backfill_initial_cycle.is_some() || self.backfill_backfilling_peers.is_some()
        {
            2
        } else {
            1
        }
    }
}

/// Why a body is not a valid node report. Every variant that concerns a key
/// names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The body is larger than the limit; it was not parsed.
    #[error("body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size seen (at least `limit + 1`).
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The body is not JSON (or not UTF-8, or nested too deeply).
    #[error("body is not valid JSON: {0}")]
    Malformed(String),
    /// The body starts with a UTF-8 byte-order mark (JSON on the wire must
    /// not have one).
    #[error("body starts with a UTF-8 byte-order mark")]
    ByteOrderMark,
    /// The body is JSON but not an object.
    #[error("body is JSON but not an object")]
    NotAnObject,
    /// A known key appears twice, or a key appears twice inside a known
    /// key's value: readers disagree on which one counts, so the report is
    /// invalid.
    #[error(
        "field `{field}`{} appears more than once (line {line}, column {column})",
        key.as_ref().map(|k| format!(": key {k:?}")).unwrap_or_default()
    )]
    Duplicate {
        /// The known key.
        field: &'static str,
        /// The key repeated inside its value (cut to 64 characters), when
        /// it is not `field` itself.
        key: Option<String>,
        /// 1-based line of the repetition.
        line: usize,
        /// 1-based column just after the repeated key.
        column: usize,
    },
    /// A key every generation carries is missing.
    #[error("field `{field}` is missing")]
    Missing {
        /// The key.
        field: &'static str,
    },
    /// A known key has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The key.
        field: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// A known key has a value outside its domain.
    #[error("field `{field}` has an impossible value: {reason}")]
    Invalid {
        /// The key.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl ReportError {
    /// The key this error is about, if any.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ReportError::Missing { field }
            | ReportError::WrongType { field, .. }
            | ReportError::Invalid { field, .. }
            | ReportError::Duplicate { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Parse a report body with the default size limit.
pub fn parse_report(body: &[u8]) -> Result<NodeReport, ReportError> {
    parse_report_limited(body, DEFAULT_BODY_LIMIT)
}

/// Parse a report body, refusing bodies over `limit` bytes before parsing.
///
/// One pass: the object is decoded straight into its known keys (numbers and
/// booleans allocate nothing, unknown keys are skipped unread). A known key
/// that appears twice, or a key repeated inside a known key's value, makes
/// the report invalid ([`ReportError::Duplicate`]): readers disagree on which
/// of two equal keys counts, so neither is taken.
pub fn parse_report_limited(body: &[u8], limit: usize) -> Result<NodeReport, ReportError> {
    if body.len() > limit {
        return Err(ReportError::TooLarge {
            size: body.len(),
            limit,
        });
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        // Not an object: say what it is instead.
        return match strict_json::from_slice(body) {
            Ok(_) => Err(ReportError::NotAnObject),
            Err(StrictJsonError::ByteOrderMark) => Err(ReportError::ByteOrderMark),
            Err(e) => Err(ReportError::Malformed(e.to_string())),
        };
    }
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = de
        .deserialize_map(KnownKeysVisitor {
            duplicate: &duplicate,
            inner: RefCell::new(None),
        })
        .and_then(|keys| de.end().map(|()| keys));
    match read {
        Ok(keys) => validate(&keys),
        Err(e) => Err(match duplicate.into_inner() {
            Some(d) => ReportError::Duplicate {
                field: d.field,
                key: d.inner,
                line: e.line(),
                column: e.column(),
            },
            None => ReportError::Malformed(e.to_string()),
        }),
    }
}

/// Validate an already-decoded JSON value as a report (used for reports
/// embedded in other documents, e.g. `kura-agent aggregate` input). Read
/// such documents with [`strict_json::from_document`], so that a repeated
/// key is refused there as it is on the wire.
pub fn report_from_value(value: &Value) -> Result<NodeReport, ReportError> {
    validate(value.as_object().ok_or(ReportError::NotAnObject)?)
}

/// Access to a report's keys, whichever way it was decoded.
trait Lookup {
    fn get(&self, key: &str) -> Option<&Value>;
}

impl Lookup for Map<String, Value> {
    fn get(&self, key: &str) -> Option<&Value> {
        Map::get(self, key)
    }
}

/// A repeated key found while reading a report.
struct Duplicate {
    /// The known key at fault.
    field: &'static str,
    /// The key repeated inside its value, when it is not the known key
    /// itself.
    inner: Option<String>,
}

/// Generates [`KNOWN_KEYS`] and [`KnownKey`] (the key names, matched without
/// allocating) from one list.
macro_rules! known_keys {
    ($($key:ident),* $(,)?) => {
        /// Every key the parser reads, in the order of [`NodeReport`]'s fields.
        pub const KNOWN_KEYS: &[&str] = &[$(stringify!($key),)*];

        /// A known key of the report object; its discriminant indexes
        /// [`KNOWN_KEYS`] and [`KnownKeys`].
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy)]
        enum KnownKey {
            $($key,)*
        }

        impl KnownKey {
            /// The known key `key` names, if any.
            fn of(key: &str) -> Option<KnownKey> {
                match key {
                    $(stringify!($key) => Some(KnownKey::$key),)*
                    _ => None,
                }
            }
        }
    };
}

/// The report's known keys, each as its raw JSON value when present (even
/// as `null`: null is a wrong type here, not absence), indexed by
/// [`KnownKey`].
struct KnownKeys([Option<Value>; KNOWN_KEYS.len()]);

impl KnownKey {
    fn name(self) -> &'static str {
        KNOWN_KEYS[self as usize]
    }
}

impl Lookup for KnownKeys {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0[KnownKey::of(key)? as usize].as_ref()
    }
}

impl<'de> Visitor<'de> for KnownKeysVisitor<'_> {
    type Value = KnownKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a report object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KnownKeys, A::Error> {
        let mut keys = KnownKeys(std::array::from_fn(|_| None));
        while let Some(key) = map.next_key_seed(KeyName)? {
            let Some(key) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let slot = &mut keys.0[key as usize];
            if slot.is_some() {
                return Err(self.repeated(key.name(), None));
            }
            *slot = Some(match key {
                // Lenient: read only what is used, skip the rest unread.
                KnownKey::serving_authority => {
                    let raw = map.next_value::<&serde_json::value::RawValue>()?;
                    crate::lenient_authority::read(raw)
                        .map_err(|inner| self.repeated(key.name(), Some(inner)))?
                }
                _ => self.value(key.name(), &mut map)?,
            });
        }
        Ok(keys)
    }
}

/// Fills [`KnownKeys`], recording the first repeated key in `duplicate`.
struct KnownKeysVisitor<'a> {
    duplicate: &'a RefCell<Option<Duplicate>>,
    /// Where a key repeated inside a known key's value is recorded.
    inner: RefCell<Option<String>>,
}

impl KnownKeysVisitor<'_> {
    /// Records a repeated key and returns the error that stops the read
    /// (serde_json adds its position).
    #[cold]
    #[inline(never)]
    fn repeated<E: de::Error>(&self, field: &'static str, inner: Option<String>) -> E {
        let message = match &inner {
            None => format!("field `{field}` appears more than once"),
            Some(key) => format!("field `{field}`: key {key:?} appears more than once"),
        };
        self.duplicate
            .borrow_mut()
            .get_or_insert(Duplicate { field, inner });
        E::custom(message)
    }

    /// A known key's value, read strictly (a key repeated inside it is
    /// recorded against `field`).
    fn value<'de, A: MapAccess<'de>>(
        &self,
        field: &'static str,
        map: &mut A,
    ) -> Result<Value, A::Error> {
        match map.next_value_seed(StrictValue {
            duplicate: &self.inner,
        }) {
            Ok(v) => Ok(v),
            Err(e) => match self.inner.take() {
                Some(key) => Err(self.repeated(field, Some(key))),
                None => Err(e),
            },
        }
    }
}

/// Reads an object key as a [`KnownKey`] without allocating (an escaped
/// key is unescaped by serde_json into a scratch buffer, still no
/// allocation of ours).
struct KeyName;

impl<'de> DeserializeSeed<'de> for KeyName {
    type Value = Option<KnownKey>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<KnownKey>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyName {
    type Value = Option<KnownKey>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<KnownKey>, E> {
        Ok(KnownKey::of(key))
    }
}

known_keys!(
    generation,
    ready,
    state,
    ring_members,
    ring_fingerprint,
    initial_discovery_completed,
    writer_lock_owned,
    bootstrap_known_peers,
    bootstrap_completed_peers,
    bootstrap_inflight_peers,
    http_inflight_requests,
    grpc_inflight_requests,
    outbox_messages,
    outbox_capacity,
    memory_pressure_state,
    fd_timeout_count,
    peer_connection_failure_count,
    backfill_initial_cycle,
    backfill_backfilling_peers,
    backfill_budget_exhausted_real_peers,
    backfill_budget_exhausted_capability_peers,
    backfill_ring_fullness_percent,
    serving_authority,
);

fn validate(obj: &impl Lookup) -> Result<NodeReport, ReportError> {
    let state_text = req_str(obj, "state")?;
    let state = match state_text {
        "joining" => NodeState::Joining,
        "serving" => NodeState::Serving,
        "draining" => NodeState::Draining,
        other => {
            return Err(ReportError::Invalid {
                field: "state",
                reason: format!("unknown state {:?}", truncate(other)),
            });
        }
    };
    let memory_pressure_state = {
        let v = req_u64(obj, "memory_pressure_state")?;
        if v > 2 {
            return Err(ReportError::Invalid {
                field: "memory_pressure_state",
                reason: format!("{v} is outside 0–2"),
            });
        }
        v as u8
    };
    let ring_fingerprint = match opt_str(obj, "ring_fingerprint")? {
        None => None,
        Some(f) => {
            if f.len() != 16 || !f.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(ReportError::Invalid {
                    field: "ring_fingerprint",
                    reason: format!("{:?} is not 16 lowercase hex chars", truncate(f)),
                });
            }
            Some(f.to_owned())
        }
    };
    let backfill_initial_cycle = match opt_str(obj, "backfill_initial_cycle")? {
        None => None,
        Some(s) => {
            if s.is_empty() || s.len() > MAX_TEXT_LEN {
                return Err(ReportError::Invalid {
                    field: "backfill_initial_cycle",
                    reason: format!("value of {} bytes", s.len()),
                });
            }
            Some(BackfillCycle::from_wire(s))
        }
    };
    Ok(NodeReport {
        generation: req_u64(obj, "generation")?,
        ready: req_bool(obj, "ready")?,
        state,
        ring_members: req_u64(obj, "ring_members")?,
        ring_fingerprint,
        initial_discovery_completed: opt_bool(obj, "initial_discovery_completed")?,
        writer_lock_owned: req_bool(obj, "writer_lock_owned")?,
        bootstrap_known_peers: opt_u64(obj, "bootstrap_known_peers")?,
        bootstrap_completed_peers: opt_u64(obj, "bootstrap_completed_peers")?,
        bootstrap_inflight_peers: opt_u64(obj, "bootstrap_inflight_peers")?,
        http_inflight_requests: opt_u64(obj, "http_inflight_requests")?,
        grpc_inflight_requests: opt_u64(obj, "grpc_inflight_requests")?,
        outbox_messages: opt_u64(obj, "outbox_messages")?,
        outbox_capacity: opt_u64(obj, "outbox_capacity")?,
        memory_pressure_state,
        fd_timeout_count: req_u64(obj, "fd_timeout_count")?,
        peer_connection_failure_count: opt_u64(obj, "peer_connection_failure_count")?,
        backfill_initial_cycle,
        backfill_backfilling_peers: opt_u64(obj, "backfill_backfilling_peers")?,
        backfill_budget_exhausted_real_peers: opt_u64(obj, "backfill_budget_exhausted_real_peers")?,
        backfill_budget_exhausted_capability_peers: opt_u64(
            obj,
            "backfill_budget_exhausted_capability_peers",
        )?,
        backfill_ring_fullness_percent: opt_u64(obj, "backfill_ring_fullness_percent")?,
        serving_authority: obj.get("serving_authority").and_then(serving_authority),
    })
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(32) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A count: an integer in 0..=2^63−1. Larger ones are refused because the
/// API server stores integers as int64 (see [`api_int`]): one pod's count
/// there would make every status write of its instance fail.
fn u64_of(field: &'static str, v: &Value) -> Result<u64, ReportError> {
    match v.as_u64() {
        Some(u) if api_int::fits(u) => Ok(u),
        _ => Err(count_error(field, v)),
    }
}

/// Why `v` is not a count (kept out of the hot path).
#[cold]
#[inline(never)]
fn count_error(field: &'static str, v: &Value) -> ReportError {
    let Value::Number(n) = v else {
        return ReportError::WrongType {
            field,
            expected: "a non-negative integer",
        };
    };
    let out_of_range = || {
        format!(
            "{n} is out of range: above 2^63-1 ({API_INT_MAX}), the largest integer the Kubernetes API server stores"
        )
    };
    let reason = if n.as_u64().is_some() {
        out_of_range()
    } else if n.is_i64() {
        format!("negative count {n}")
    } else if n
        .as_f64()
        .is_some_and(|f| f.fract() == 0.0 && f.abs() >= API_INT_MAX as f64)
    {
        out_of_range()
    } else {
        format!("{n} is not an integer")
    };
    ReportError::Invalid { field, reason }
}

fn req_u64(obj: &impl Lookup, field: &'static str) -> Result<u64, ReportError> {
    obj.get(field)
        .ok_or(ReportError::Missing { field })
        .and_then(|v| u64_of(field, v))
}

fn opt_u64(obj: &impl Lookup, field: &'static str) -> Result<Option<u64>, ReportError> {
    obj.get(field).map(|v| u64_of(field, v)).transpose()
}

fn bool_of(field: &'static str, v: &Value) -> Result<bool, ReportError> {
    v.as_bool().ok_or(ReportError::WrongType {
        field,
        expected: "a boolean",
    })
}

fn req_bool(obj: &impl Lookup, field: &'static str) -> Result<bool, ReportError> {
    obj.get(field)
        .ok_or(ReportError::Missing { field })
        .and_then(|v| bool_of(field, v))
}

fn opt_bool(obj: &impl Lookup, field: &'static str) -> Result<Option<bool>, ReportError> {
    obj.get(field).map(|v| bool_of(field, v)).transpose()
}

fn str_of<'a>(field: &'static str, v: &'a Value) -> Result<&'a str, ReportError> {
    v.as_str().ok_or(ReportError::WrongType {
        field,
        expected: "a string",
    })
}

fn req_str<'a>(obj: &'a impl Lookup, field: &'static str) -> Result<&'a str, ReportError> {
    obj.get(field)
        .ok_or(ReportError::Missing { field })
        .and_then(|v| str_of(field, v))
}

fn opt_str<'a>(obj: &'a impl Lookup, field: &'static str) -> Result<Option<&'a str>, ReportError> {
    obj.get(field).map(|v| str_of(field, v)).transpose()
}

/// Lenient read of `serving_authority`: anything unexpected is dropped, and
/// an empty identity string is absent (nodes without fenced serving write
/// `""`, which names nothing).
fn serving_authority(v: &Value) -> Option<ServingAuthority> {
    let obj = v.as_object()?;
    let text = |o: &Map<String, Value>, k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TEXT_LEN)
            .map(str::to_owned)
    };
    let identity = obj
        .get("identity")
        .and_then(Value::as_object)
        .map(|i| ServingIdentity {
            instance_uid: text(i, "instance_uid"),
            pod_uid: text(i, "pod_uid"),
            incarnation: match i.get("incarnation") {
                Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
                _ => text(i, "incarnation"),
            },
            host: text(i, "host"),
        });
    let observed = obj
        .get("observed")
        .and_then(Value::as_object)
        .and_then(|o| text(o, "phase"))
        .map(|phase| ObservedGrant { phase });
    Some(ServingAuthority {
        capability: text(obj, "capability"),
        enabled: obj.get("enabled").and_then(Value::as_bool),
        identity,
        epoch: obj
            .get("epoch")
            .and_then(Value::as_u64)
            .filter(|e| api_int::fits(*e)),
        valid: obj.get("valid").and_then(Value::as_bool),
        observed,
    })
}
