//! The body a pull-sync Kura node answers on `GET /status/cluster`
//! (contract/node-report.md, "Replication lag on pull-sync nodes"), and its
//! parser.
//!
//! The reader uses two keys of each `sync_links` row, `kind` and
//! `lag_entries`; only they can make a body invalid: a row without either,
//! a `kind` that is not a string, or a `lag_entries` that is not a count (a
//! negative, fractional or missing value) makes the body invalid, naming
//! the key (`sync_links[i].kind`). Every other key, at the top level or in
//! a row (`phase`, `settled`, `peer`, `region`, `frontier`, `frontier_ms`,
//! `unsupported`, `tenant_id`, `node`, `node_url`, `connected_nodes`,
//! `members`, `nodes`, `regions`, `gateway`, `feed`, and any unknown key),
//! is informational: it may be `null`, absent or of a type this version
//! does not expect, and never invalidates the body. It is kept (for
//! display) when well-formed and dropped otherwise. An unknown `kind` is
//! kept, not summed.
//!
//! Two ways in, one verdict:
//! - [`parse_cluster_status`] keeps the informational keys (in
//!   [`ClusterStatus`]);
//! - [`parse_cluster_lag_limited`] (the poller's, once per pull-sync pod per
//!   sweep) skips them unread and keeps no row: it builds no string and no
//!   tree, and returns exactly [`ClusterStatus::replication_lag_entries`] of
//!   what [`parse_cluster_status_limited`] would, or the same error.
//!
//! Where the contract is silent, this parser decides for the operator of a
//! gate (never for a pass by default):
//! - `sync_links` absent or `null`: the pod's lag is absent ("not
//!   measured"), never 0; an empty list measures 0 (the node pulls from
//!   nobody), and so does a list without `replica` rows;
//! - `sync_links` of another type, or a row that is not an object (so it has
//!   neither `kind` nor `lag_entries`), makes the body invalid;
//! - a `lag_entries` above 2^63−1 is invalid like a report's count above it
//!   ([`crate::api_int`]); the sum saturates there;
//! - `sync_links`, or a row's `kind` or `lag_entries`, given twice is refused
//!   as malformed (readers disagree on which counts). Any other repeated key
//!   is informational: its value is dropped (unknown keys are skipped
//!   unread), and so is an informational value with a key repeated inside;
//! - a body that is not UTF-8 is malformed, wherever the bad byte is;
//! - an informational string longer than [`MAX_TEXT_LEN`] bytes is dropped
//!   (a list of strings with one such entry, too); a `kind` that long is
//!   kept cut to that length (at a character boundary), as an unknown kind.

use crate::api_int::{self, API_INT_MAX};
use crate::report::{DEFAULT_BODY_LIMIT, MAX_TEXT_LEN};
use crate::strict_json::{self, StrictJsonError};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserializer as _, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::cell::RefCell;

/// The path a pull-sync Kura node serves its cluster status on.
pub const CLUSTER_PATH: &str = "/status/cluster";

/// The `kind` of a link whose lag is summed: a sibling of the same instance.
pub const REPLICA_KIND: &str = "replica";

/// The `kind` of a link to another region's gateway: never summed.
pub const REGION_KIND: &str = "region";

/// A link's `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// `replica`: a sibling of the same instance; its lag is summed.
    Replica,
    /// `region`: another region's gateway; crosses regions on purpose, not
    /// summed.
    Region,
    /// A value this version does not know: kept verbatim (cut to
    /// [`MAX_TEXT_LEN`] bytes), not summed.
    Other(String),
}

impl LinkKind {
    /// The kind a wire value names.
    pub fn from_wire(s: &str) -> Self {
        match s {
            REPLICA_KIND => LinkKind::Replica,
            REGION_KIND => LinkKind::Region,
            other => LinkKind::Other(cut(other).to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            LinkKind::Replica => REPLICA_KIND,
            LinkKind::Region => REGION_KIND,
            LinkKind::Other(s) => s,
        }
    }

    /// Whether a link of this kind counts in the node's replication lag.
    pub fn is_summed(&self) -> bool {
        *self == LinkKind::Replica
    }
}

impl Serialize for LinkKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `s` cut to at most [`MAX_TEXT_LEN`] bytes, at a character boundary.
fn cut(s: &str) -> &str {
    crate::text::cut_at_char_boundary(s, MAX_TEXT_LEN)
}

/// One row of `sync_links`: a link this node pulls from. `kind` and
/// `lag_entries` are always there (a row without them makes the body
/// invalid); the rest is informational, `None` when absent or not
/// well-formed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncLink {
    /// `kind`.
    pub kind: LinkKind,
    /// `lag_entries`: feed entries this node is behind the peer.
    pub lag_entries: u64,
    /// `phase`: `bootstrapping`, `forward`, `retrying` or a newer value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `peer`: the URL the link pulls from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// `region` of the peer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `settled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<bool>,
    /// `frontier`: `pending`, `reported`, `abandoned` or a newer value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frontier: Option<String>,
    /// `frontier_ms` (Kura writes `null` unless `frontier` is `reported`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frontier_ms: Option<u64>,
    /// `unsupported`: the peer predates pull sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<bool>,
}

/// `feed`: this node's own change feed, as its consumers pull it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Feed {
    /// `enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `head`: the newest entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<u64>,
    /// `floor`: the oldest entry still served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<u64>,
    /// `consumers` (rows that are not objects are dropped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumers: Option<Vec<FeedConsumer>>,
}

/// One row of `feed.consumers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FeedConsumer {
    /// `peer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// `cursor`: the last entry the consumer took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// `pinned`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
}

/// A parsed `/status/cluster` body. Only `sync_links` decides anything;
/// the other fields are informational, `None` when absent or not
/// well-formed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// `sync_links`, in body order; `None` when absent or `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_links: Option<Vec<SyncLink>>,
    /// `status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `generation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// `ring_members`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ring_members: Option<u64>,
    /// `tenant_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// `node`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `node_url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_url: Option<String>,
    /// `region`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `gateway`: whether this node is its region's gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<bool>,
    /// `connected_nodes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_nodes: Option<Vec<String>>,
    /// `members`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    /// `nodes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// `regions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<String>>,
    /// `feed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feed: Option<Feed>,
}

impl ClusterStatus {
    /// The node's replication lag: the sum of `lag_entries` over its links
    /// of kind `replica` (saturating at 2^63−1), `None` when the body has no
    /// `sync_links` (not measured, never 0).
    pub fn replication_lag_entries(&self) -> Option<u64> {
        let links = self.sync_links.as_ref()?;
        Some(api_int::saturating_sum(
            links
                .iter()
                .filter(|l| l.kind.is_summed())
                .map(|l| l.lag_entries),
        ))
    }
}

/// Why a `/status/cluster` body is not usable. Every variant about a key
/// names it (`sync_links[i].key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The body is larger than the limit; it was not parsed.
    #[error("body of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size seen.
        size: usize,
        /// The limit in force.
        limit: usize,
    },
    /// Not JSON (or not UTF-8), `sync_links` or a row's `kind` or
    /// `lag_entries` given twice, or a byte-order mark.
    #[error("body is not valid JSON: {0}")]
    Malformed(#[from] StrictJsonError),
    /// JSON, but not an object.
    #[error("body is JSON but not an object")]
    NotAnObject,
    /// `sync_links` or one of its rows is unreadable: a row without `kind`
    /// or `lag_entries`, or with one of the wrong type.
    #[error("field `{field}` {reason}")]
    Invalid {
        /// The key, e.g. `sync_links[0].lag_entries`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// Parse a `/status/cluster` body with the default size limit.
pub fn parse_cluster_status(body: &[u8]) -> Result<ClusterStatus, ClusterError> {
    parse_cluster_status_limited(body, DEFAULT_BODY_LIMIT)
}

/// Parse a `/status/cluster` body, refusing bodies over `limit` bytes before
/// parsing; informational keys are kept when well-formed.
pub fn parse_cluster_status_limited(
    body: &[u8],
    limit: usize,
) -> Result<ClusterStatus, ClusterError> {
    let read = read_body(body, limit, Keep::All)?;
    Ok(ClusterStatus {
        sync_links: read.links.map(|l| l.rows),
        ..read.info
    })
}

/// The replication lag of a `/status/cluster` body
/// ([`ClusterStatus::replication_lag_entries`]), refusing bodies over
/// `limit` bytes: the same verdict as [`parse_cluster_status_limited`],
/// with the informational keys skipped unread and no row kept.
pub fn parse_cluster_lag_limited(body: &[u8], limit: usize) -> Result<Option<u64>, ClusterError> {
    Ok(read_body(body, limit, Keep::Lag)?.links.map(|l| l.lag))
}

/// Validate an already-decoded JSON value as a `/status/cluster` body (the
/// `cluster` of a `kura-agent aggregate` input document, read with
/// [`strict_json::from_document`]): the same rules as the wire parser.
pub fn cluster_from_value(value: &Value) -> Result<ClusterStatus, ClusterError> {
    let obj = value.as_object().ok_or(ClusterError::NotAnObject)?;
    let mut status = ClusterStatus::default();
    for (key, v) in obj {
        if let TopKey::Info(k) = TopKey::of(key) {
            set_info(&mut status, k, v);
        }
    }
    status.sync_links = match obj.get("sync_links") {
        None | Some(Value::Null) => None,
        Some(Value::Array(rows)) => Some(
            rows.iter()
                .enumerate()
                .map(|(i, row)| link_from_value(i, row))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(links_not_an_array()),
    };
    Ok(status)
}

fn link_from_value(i: usize, row: &Value) -> Result<SyncLink, ClusterError> {
    let obj: &Map<String, Value> = row.as_object().ok_or_else(|| row_not_an_object(i))?;
    let kind = obj.get("kind").map(|v| v.as_str().map(LinkKind::from_wire));
    let lag = obj.get("lag_entries").map(count);
    let (kind, lag_entries) = reader_keys(i, kind, lag)?;
    let mut link = SyncLink::new(kind, lag_entries);
    for (key, v) in obj {
        if let Some(k) = LinkInfo::of(key) {
            link.set(k, v);
        }
    }
    Ok(link)
}

/// Whether the informational keys are read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Only the lag: informational keys skipped unread, no row kept.
    Lag,
    /// Everything well-formed.
    All,
}

/// What a wire read gives.
struct Body {
    links: Option<Links>,
    /// The informational top-level keys (`sync_links` is in `links`).
    info: ClusterStatus,
}

/// `sync_links` as read: the rows ([`Keep::All`] only) and the lag.
#[derive(Default)]
struct Links {
    rows: Vec<SyncLink>,
    lag: u64,
}

/// What a read found that is not its result: the first repeated reader key
/// (the read stops there) and the first invalid row (the read goes on, so
/// that a body that is not JSON says so first).
#[derive(Default)]
struct Found {
    duplicate: Option<String>,
    invalid: Option<ClusterError>,
}

fn read_body(body: &[u8], limit: usize, keep: Keep) -> Result<Body, ClusterError> {
    if body.len() > limit {
        return Err(ClusterError::TooLarge {
            size: body.len(),
            limit,
        });
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        // Not an object: say what it is instead.
        return Err(match strict_json::from_slice(body) {
            Ok(_) => ClusterError::NotAnObject,
            Err(e) => ClusterError::Malformed(e),
        });
    }
    // Skipped values are not checked for UTF-8 by serde_json: check the
    // whole body once, so the verdict cannot depend on what is skipped.
    let text = std::str::from_utf8(body).map_err(|e| {
        let at = &body[..e.valid_up_to()];
        let line = at.iter().filter(|b| **b == b'\n').count() + 1;
        let column = at.len() - at.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1) + 1;
        ClusterError::Malformed(StrictJsonError::Syntax {
            message: format!("invalid UTF-8 at line {line} column {column}"),
            line,
            column,
        })
    })?;
    let found = RefCell::new(Found::default());
    let mut de = serde_json::Deserializer::from_str(text);
    let read = de
        .deserialize_map(TopVisitor {
            keep,
            found: &found,
        })
        .and_then(|read| de.end().map(|()| read));
    let Found { duplicate, invalid } = found.into_inner();
    match (read, invalid) {
        (Ok(_), Some(invalid)) => Err(invalid),
        (Ok(read), None) => Ok(read),
        (Err(e), _) => Err(ClusterError::Malformed(strict_json::classify(e, duplicate))),
    }
}

/// A top-level key.
#[derive(Clone, Copy)]
enum TopKey {
    SyncLinks,
    Info(Info),
    Other,
}

/// An informational top-level key the parser keeps.
#[derive(Clone, Copy)]
enum Info {
    Status,
    Generation,
    RingMembers,
    TenantId,
    Node,
    NodeUrl,
    Region,
    Gateway,
    ConnectedNodes,
    Members,
    Nodes,
    Regions,
    Feed,
}

impl TopKey {
    fn of(key: &str) -> TopKey {
        TopKey::Info(match key {
            "sync_links" => return TopKey::SyncLinks,
            "status" => Info::Status,
            "generation" => Info::Generation,
            "ring_members" => Info::RingMembers,
            "tenant_id" => Info::TenantId,
            "node" => Info::Node,
            "node_url" => Info::NodeUrl,
            "region" => Info::Region,
            "gateway" => Info::Gateway,
            "connected_nodes" => Info::ConnectedNodes,
            "members" => Info::Members,
            "nodes" => Info::Nodes,
            "regions" => Info::Regions,
            "feed" => Info::Feed,
            _ => return TopKey::Other,
        })
    }
}

/// An informational key of a `sync_links` row.
#[derive(Clone, Copy)]
enum LinkInfo {
    Phase,
    Peer,
    Region,
    Settled,
    Frontier,
    FrontierMs,
    Unsupported,
}

/// A key of a `sync_links` row.
#[derive(Clone, Copy)]
enum LinkKey {
    Kind,
    LagEntries,
    Info(LinkInfo),
    Other,
}

impl LinkInfo {
    fn of(key: &str) -> Option<LinkInfo> {
        Some(match key {
            "phase" => LinkInfo::Phase,
            "peer" => LinkInfo::Peer,
            "region" => LinkInfo::Region,
            "settled" => LinkInfo::Settled,
            "frontier" => LinkInfo::Frontier,
            "frontier_ms" => LinkInfo::FrontierMs,
            "unsupported" => LinkInfo::Unsupported,
            _ => return None,
        })
    }
}

impl LinkKey {
    fn of(key: &str) -> LinkKey {
        match key {
            "kind" => LinkKey::Kind,
            "lag_entries" => LinkKey::LagEntries,
            other => LinkInfo::of(other).map_or(LinkKey::Other, LinkKey::Info),
        }
    }
}

/// Informational keys given twice in one object: their bits.
#[derive(Default)]
struct Seen(u16);

impl Seen {
    /// Marks `bit`; whether it was marked already.
    fn again(&mut self, bit: u8) -> bool {
        let was = self.0 & (1 << bit) != 0;
        self.0 |= 1 << bit;
        was
    }
}

/// Reads an object key without allocating (an escaped key is unescaped by
/// serde_json into its scratch buffer).
struct KeyOf<K>(fn(&str) -> K);

impl<'de, K> DeserializeSeed<'de> for KeyOf<K> {
    type Value = K;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        d.deserialize_str(self)
    }
}

impl<K> Visitor<'_> for KeyOf<K> {
    type Value = K;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<K, E> {
        Ok((self.0)(key))
    }
}

/// Records a repeated reader key and returns the error that stops the read
/// (serde_json adds its position).
fn repeated<E: de::Error>(found: &RefCell<Found>, key: &str) -> E {
    found
        .borrow_mut()
        .duplicate
        .get_or_insert_with(|| key.to_owned());
    E::custom(format!("key {key:?} appears more than once in one object"))
}

/// Records the first invalid row or `sync_links`.
fn invalid_found(found: &RefCell<Found>, e: ClusterError) {
    found.borrow_mut().invalid.get_or_insert(e);
}

/// An informational value read from its raw text: `None` when it is not
/// JSON this reader takes (a number out of range, nesting too deep, a key
/// repeated inside it).
fn info_value(raw: &RawValue) -> Option<Value> {
    strict_json::from_slice(raw.get().as_bytes()).ok()
}

struct TopVisitor<'a> {
    keep: Keep,
    found: &'a RefCell<Found>,
}

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = Body;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a cluster status object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut links_seen = false;
        let mut links = None;
        let mut info = ClusterStatus::default();
        let mut seen = Seen::default();
        while let Some(key) = map.next_key_seed(KeyOf(TopKey::of))? {
            match key {
                TopKey::SyncLinks => {
                    if links_seen {
                        return Err(repeated(self.found, "sync_links"));
                    }
                    links_seen = true;
                    links = map.next_value_seed(LinksSeed {
                        keep: self.keep,
                        found: self.found,
                    })?;
                }
                TopKey::Info(k) if self.keep == Keep::All => {
                    let raw = map.next_value::<&RawValue>()?;
                    if seen.again(k as u8) {
                        set_info(&mut info, k, &Value::Null);
                    } else if let Some(v) = info_value(raw) {
                        set_info(&mut info, k, &v);
                    }
                }
                TopKey::Info(_) | TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Body { links, info })
    }
}

/// `sync_links`: `null`, or an array of rows; anything else is recorded as
/// invalid (and skipped).
struct LinksSeed<'a> {
    keep: Keep,
    found: &'a RefCell<Found>,
}

impl<'de> DeserializeSeed<'de> for LinksSeed<'_> {
    type Value = Option<Links>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<Links>, D::Error> {
        d.deserialize_any(self)
    }
}

impl LinksSeed<'_> {
    fn not_an_array<E>(&self) -> Result<Option<Links>, E> {
        invalid_found(self.found, links_not_an_array());
        Ok(None)
    }
}

impl<'de> Visitor<'de> for LinksSeed<'_> {
    type Value = Option<Links>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("sync_links")
    }

    fn visit_unit<E>(self) -> Result<Option<Links>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Links>, A::Error> {
        let mut links = Links::default();
        let mut i = 0;
        while let Some(row) = seq.next_element_seed(RowSeed {
            i,
            keep: self.keep,
            found: self.found,
        })? {
            if let Some(link) = row {
                if link.kind.is_summed() {
                    links.lag = api_int::saturating_add(links.lag, link.lag_entries);
                }
                if self.keep == Keep::All {
                    links.rows.push(link);
                }
            }
            i += 1;
        }
        Ok(Some(links))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Links>, A::Error> {
        IgnoredAny.visit_map(map)?;
        self.not_an_array()
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<Links>, E> {
        self.not_an_array()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<Links>, E> {
        self.not_an_array()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<Links>, E> {
        self.not_an_array()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<Links>, E> {
        self.not_an_array()
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<Links>, E> {
        self.not_an_array()
    }
}

/// One row of `sync_links`: the link, or `None` when it is invalid
/// (recorded).
struct RowSeed<'a> {
    i: usize,
    keep: Keep,
    found: &'a RefCell<Found>,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = Option<SyncLink>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<SyncLink>, D::Error> {
        d.deserialize_any(self)
    }
}

impl RowSeed<'_> {
    fn not_an_object<E>(&self) -> Result<Option<SyncLink>, E> {
        invalid_found(self.found, row_not_an_object(self.i));
        Ok(None)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = Option<SyncLink>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a sync link")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<SyncLink>, A::Error> {
        let mut kind: Option<Option<LinkKind>> = None;
        let mut lag: Option<Result<u64, String>> = None;
        // Informational values, kept aside until the row is known valid.
        let mut info: Vec<(LinkInfo, Value)> = Vec::new();
        let mut seen = Seen::default();
        while let Some(key) = map.next_key_seed(KeyOf(LinkKey::of))? {
            match key {
                LinkKey::Kind => {
                    if kind.is_some() {
                        return Err(repeated(self.found, "kind"));
                    }
                    kind = Some(kind_of(map.next_value::<&RawValue>()?));
                }
                LinkKey::LagEntries => {
                    if lag.is_some() {
                        return Err(repeated(self.found, "lag_entries"));
                    }
                    lag = Some(count_of(map.next_value::<&RawValue>()?));
                }
                LinkKey::Info(k) if self.keep == Keep::All => {
                    let raw = map.next_value::<&RawValue>()?;
                    let value = if seen.again(k as u8) {
                        Value::Null
                    } else {
                        info_value(raw).unwrap_or(Value::Null)
                    };
                    info.push((k, value));
                }
                LinkKey::Info(_) | LinkKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        match reader_keys(self.i, kind, lag) {
            Ok((kind, lag_entries)) => {
                let mut link = SyncLink::new(kind, lag_entries);
                for (k, v) in &info {
                    link.set(*k, v);
                }
                Ok(Some(link))
            }
            Err(e) => {
                invalid_found(self.found, e);
                Ok(None)
            }
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<SyncLink>, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        self.not_an_object()
    }

    fn visit_unit<E>(self) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }

    fn visit_str<E>(self, _: &str) -> Result<Option<SyncLink>, E> {
        self.not_an_object()
    }
}

/// A row's `kind` from its raw text: `Some` when it is a string.
fn kind_of(raw: &RawValue) -> Option<LinkKind> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    // Borrowed when it has no escape: no allocation for `replica`.
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(LinkKind::from_wire(s)),
        Err(_) => serde_json::from_str::<String>(text)
            .ok()
            .map(|s| LinkKind::from_wire(&s)),
    }
}

/// A row's `lag_entries` from its raw text, read as [`count`] reads a
/// value.
fn count_of(raw: &RawValue) -> Result<u64, String> {
    let text = raw.get();
    if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Err(NOT_A_COUNT.to_owned());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => count(&v),
        Err(_) => Err(format!("{} is out of range", cut(text))),
    }
}

const NOT_A_COUNT: &str = "must be a non-negative integer";

/// A count: an integer in 0..=2^63−1, or why not.
fn count(v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => match n.as_u64() {
            Some(u) if api_int::fits(u) => Ok(u),
            Some(u) => Err(format!("{u} is out of range: above 2^63-1 ({API_INT_MAX})")),
            None if n.is_i64() => Err(format!("negative count {n}")),
            None => Err(format!("{n} is not an integer")),
        },
        _ => Err(NOT_A_COUNT.to_owned()),
    }
}

/// A row's two reader keys, checked in a fixed order (`kind`, then
/// `lag_entries`) whatever their order in the body: `kind` is `None` when
/// missing, `Some(None)` when not a string.
fn reader_keys(
    i: usize,
    kind: Option<Option<LinkKind>>,
    lag: Option<Result<u64, String>>,
) -> Result<(LinkKind, u64), ClusterError> {
    let key = |k: &str| format!("sync_links[{i}].{k}");
    let kind = match kind {
        None => return Err(invalid(key("kind"), "is missing")),
        Some(None) => return Err(invalid(key("kind"), "must be a string")),
        Some(Some(kind)) => kind,
    };
    match lag {
        None => Err(invalid(key("lag_entries"), "is missing")),
        Some(Err(reason)) => Err(invalid(key("lag_entries"), reason)),
        Some(Ok(lag)) => Ok((kind, lag)),
    }
}

fn invalid(field: String, reason: impl Into<String>) -> ClusterError {
    ClusterError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn links_not_an_array() -> ClusterError {
    invalid("sync_links".into(), "must be an array or null")
}

fn row_not_an_object(i: usize) -> ClusterError {
    invalid(format!("sync_links[{i}]"), "must be an object")
}

/// An informational string: kept when at most [`MAX_TEXT_LEN`] bytes.
fn text(v: &Value) -> Option<String> {
    v.as_str()
        .filter(|s| s.len() <= MAX_TEXT_LEN)
        .map(str::to_owned)
}

/// An informational count: an integer in 0..=2^63−1.
fn number(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| api_int::fits(*n))
}

/// An informational list of strings: kept when every entry is a [`text`].
fn texts(v: &Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(text).collect()
}

fn feed(v: &Value) -> Option<Feed> {
    let o = v.as_object()?;
    Some(Feed {
        enabled: o.get("enabled").and_then(Value::as_bool),
        head: o.get("head").and_then(number),
        floor: o.get("floor").and_then(number),
        consumers: o.get("consumers").and_then(Value::as_array).map(|rows| {
            rows.iter()
                .filter_map(Value::as_object)
                .map(|c| FeedConsumer {
                    peer: c.get("peer").and_then(text),
                    cursor: c.get("cursor").and_then(number),
                    pinned: c.get("pinned").and_then(Value::as_bool),
                })
                .collect()
        }),
    })
}

/// Sets the informational field `key` from `v` (`None` unless well-formed).
fn set_info(s: &mut ClusterStatus, key: Info, v: &Value) {
    match key {
        Info::Status => s.status = text(v),
        Info::Generation => s.generation = number(v),
        Info::RingMembers => s.ring_members = number(v),
        Info::TenantId => s.tenant_id = text(v),
        Info::Node => s.node = text(v),
        Info::NodeUrl => s.node_url = text(v),
        Info::Region => s.region = text(v),
        Info::Gateway => s.gateway = v.as_bool(),
        Info::ConnectedNodes => s.connected_nodes = texts(v),
        Info::Members => s.members = texts(v),
        Info::Nodes => s.nodes = texts(v),
        Info::Regions => s.regions = texts(v),
        Info::Feed => s.feed = feed(v),
    }
}

impl SyncLink {
    /// A link with its reader keys and no informational value.
    fn new(kind: LinkKind, lag_entries: u64) -> Self {
        SyncLink {
            kind,
            lag_entries,
            phase: None,
            peer: None,
            region: None,
            settled: None,
            frontier: None,
            frontier_ms: None,
            unsupported: None,
        }
    }

    /// Sets the informational field `key` from `v` (`None` unless
    /// well-formed).
    fn set(&mut self, key: LinkInfo, v: &Value) {
        match key {
            LinkInfo::Phase => self.phase = text(v),
            LinkInfo::Peer => self.peer = text(v),
            LinkInfo::Region => self.region = text(v),
            LinkInfo::Settled => self.settled = v.as_bool(),
            LinkInfo::Frontier => self.frontier = text(v),
            LinkInfo::FrontierMs => self.frontier_ms = number(v),
            LinkInfo::Unsupported => self.unsupported = v.as_bool(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lag by both wire paths, which must agree.
    fn lag(body: &str) -> Result<Option<u64>, ClusterError> {
        let full = parse_cluster_status(body.as_bytes()).map(|c| c.replication_lag_entries());
        let fast = parse_cluster_lag_limited(body.as_bytes(), DEFAULT_BODY_LIMIT);
        assert_eq!(full, fast, "{body}");
        full
    }

    #[test]
    fn sums_replica_links_only() {
        let body = r#"{"status":"ok","sync_links":[
            {"kind":"replica","lag_entries":3,"phase":"forward"},
            {"kind":"replica","lag_entries":4,"phase":"retrying"},
            {"kind":"region","lag_entries":900,"phase":"forward"},
            {"kind":"mirror","lag_entries":70,"phase":"sideways"}]}"#;
        assert_eq!(lag(body), Ok(Some(7)));
        let kinds: Vec<LinkKind> = parse_cluster_status(body.as_bytes())
            .unwrap()
            .sync_links
            .unwrap()
            .into_iter()
            .map(|l| l.kind)
            .collect();
        assert_eq!(
            kinds,
            [
                LinkKind::Replica,
                LinkKind::Replica,
                LinkKind::Region,
                LinkKind::Other("mirror".into())
            ]
        );
    }

    #[test]
    fn absent_or_null_links_are_not_measured_and_no_replica_is_zero() {
        assert_eq!(lag(r#"{"status":"ok"}"#), Ok(None));
        assert_eq!(lag(r#"{"status":"ok","sync_links":null}"#), Ok(None));
        assert_eq!(lag(r#"{"sync_links":[]}"#), Ok(Some(0)));
        assert_eq!(
            lag(r#"{"sync_links":[{"kind":"region","lag_entries":5,"phase":"forward"}]}"#),
            Ok(Some(0))
        );
    }

    #[test]
    fn only_kind_and_lag_entries_make_the_body_invalid() {
        for (body, field) in [
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":-1}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":1.5}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":"3"}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":null}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"region","lag_entries":0},{"kind":7,"lag_entries":1}]}"#,
                "sync_links[1].kind",
            ),
            (
                r#"{"sync_links":[{"kind":null,"lag_entries":1}]}"#,
                "sync_links[0].kind",
            ),
            (
                r#"{"sync_links":[{"kind":"replica"}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"kind":"region","phase":"forward"}]}"#,
                "sync_links[0].lag_entries",
            ),
            (
                r#"{"sync_links":[{"lag_entries":1}]}"#,
                "sync_links[0].kind",
            ),
            // Both wrong: `kind` is named first, whatever the key order.
            (
                r#"{"sync_links":[{"lag_entries":-1,"kind":1}]}"#,
                "sync_links[0].kind",
            ),
            (r#"{"sync_links":[3]}"#, "sync_links[0]"),
            (r#"{"sync_links":[null]}"#, "sync_links[0]"),
            (r#"{"sync_links":[[{"kind":"replica"}]]}"#, "sync_links[0]"),
            (r#"{"sync_links":{}}"#, "sync_links"),
            (r#"{"sync_links":"none"}"#, "sync_links"),
            (
                r#"{"sync_links":[{"kind":"replica","lag_entries":9223372036854775808}]}"#,
                "sync_links[0].lag_entries",
            ),
        ] {
            match lag(body) {
                Err(ClusterError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn not_json_not_an_object_repeated_reader_keys_and_size_are_refused() {
        assert!(matches!(lag("<html>"), Err(ClusterError::Malformed(_))));
        assert_eq!(lag("[1]"), Err(ClusterError::NotAnObject));
        for body in [
            r#"{"sync_links":[{"kind":"replica","lag_entries":1,"lag_entries":0}]}"#,
            r#"{"sync_links":[{"kind":"replica","kind":"region","lag_entries":1}]}"#,
            r#"{"sync_links":[],"sync_links":[]}"#,
        ] {
            assert!(
                matches!(
                    lag(body),
                    Err(ClusterError::Malformed(StrictJsonError::DuplicateKey {
                        line: 1,
                        ..
                    }))
                ),
                "{body}"
            );
        }
        assert!(matches!(
            parse_cluster_status_limited(b"{}", 1),
            Err(ClusterError::TooLarge { size: 2, limit: 1 })
        ));
        assert!(matches!(
            lag(r#"{"sync_links":[]} x"#),
            Err(ClusterError::Malformed(_))
        ));
        assert!(matches!(lag("\u{feff}{}"), Err(ClusterError::Malformed(_))));
        // Not JSON is said before an invalid row.
        assert!(matches!(
            lag(r#"{"sync_links":[{"kind":1,"lag_entries":1}], x"#),
            Err(ClusterError::Malformed(_))
        ));
    }

    #[test]
    fn a_body_that_is_not_utf8_is_malformed_even_where_it_is_skipped() {
        let body = b"{\"unknown\":\"\xff\",\"sync_links\":[]}";
        for got in [
            parse_cluster_status(body).map(|c| c.replication_lag_entries()),
            parse_cluster_lag_limited(body, DEFAULT_BODY_LIMIT),
        ] {
            assert!(
                matches!(
                    got,
                    Err(ClusterError::Malformed(StrictJsonError::Syntax {
                        line: 1,
                        column: 13,
                        ..
                    }))
                ),
                "{got:?}"
            );
        }
    }

    #[test]
    fn informational_values_of_any_type_never_invalidate_and_are_dropped() {
        let body = r#"{"feed":{"head":"not a number","floor":7,"consumers":[1,{"peer":"p","cursor":-1}]},
            "members":7,"node":null,"nodes":["a",1],"regions":["eu"],"gateway":"yes",
            "node_url":"u","node_url":"v","tenant_id":{"deep":[[[1e400]]]},"status":1e400,
            "generation":-3,"unknown":null,"unknown":{"a":1,"a":2},
            "sync_links":[{"kind":"replica","lag_entries":5,"frontier":null,
            "frontier_ms":null,"settled":"true","region":7,"phase":["forward"],
            "peer":"http://a:4000","peer":"http://b:4000","unsupported":null,
            "cursor":{"x":[1]}},
            {"kind":"region","lag_entries":9,"frontier":"pending","frontier_ms":-1.5,
            "unsupported":false,"settled":true}]}"#;
        assert_eq!(lag(body), Ok(Some(5)));
        let status = parse_cluster_status(body.as_bytes()).unwrap();
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({
                "feed": {"floor": 7, "consumers": [{"peer": "p"}]},
                "regions": ["eu"],
                "sync_links": [
                    {"kind": "replica", "lag_entries": 5},
                    {"kind": "region", "lag_entries": 9, "frontier": "pending",
                     "unsupported": false, "settled": true}
                ]
            })
        );
        // The same body, decoded first (no repeated key there), reads the
        // same through the document path.
        let decoded: Value = serde_json::from_str(
            r#"{"feed":{"head":"x","floor":7,"consumers":[1,{"peer":"p","cursor":-1}]},
            "members":7,"node":null,"nodes":["a",1],"regions":["eu"],"gateway":"yes",
            "sync_links":[{"kind":"replica","lag_entries":5,"frontier":null,"settled":"true",
            "region":7,"phase":["forward"],"unsupported":null},
            {"kind":"region","lag_entries":9,"frontier":"pending","frontier_ms":-1.5,
            "unsupported":false,"settled":true}]}"#,
        )
        .unwrap();
        assert_eq!(cluster_from_value(&decoded), Ok(status));
    }

    #[test]
    fn well_formed_informational_values_are_kept() {
        let body = r#"{"status":"ok","generation":2,"ring_members":2,"tenant_id":"acme",
            "node":"eu-west","node_url":"http://kura-0:7443","region":"eu-west","gateway":true,
            "connected_nodes":["https://kura.us-east.example:7443"],"members":["http://kura-0:7443"],
            "nodes":[],"regions":["eu-west","us-east"],
            "feed":{"enabled":true,"head":48211,"floor":40000,
                    "consumers":[{"peer":"http://kura-1:7443","cursor":48208,"pinned":false}]},
            "sync_links":[{"frontier":"reported","frontier_ms":1796287650000,"kind":"replica",
            "lag_entries":3,"peer":"http://kura-1:7443","phase":"forward","region":"eu-west",
            "settled":true,"unsupported":false}]}"#;
        let status = parse_cluster_status(body.as_bytes()).unwrap();
        let round: Value = serde_json::to_value(&status).unwrap();
        assert_eq!(round, serde_json::from_str::<Value>(body).unwrap());
        assert_eq!(
            cluster_from_value(&serde_json::from_str(body).unwrap()),
            Ok(status)
        );
    }

    #[test]
    fn a_long_kind_is_kept_cut_at_a_character_boundary_and_not_summed() {
        let kind = "é".repeat(100);
        let body = format!(r#"{{"sync_links":[{{"kind":"{kind}","lag_entries":4}}]}}"#);
        assert_eq!(lag(&body), Ok(Some(0)));
        let status = parse_cluster_status(body.as_bytes()).unwrap();
        let kept = status.sync_links.unwrap()[0].kind.as_str().to_owned();
        assert_eq!(kept, "é".repeat(64));
        // An escaped `replica` is `replica`.
        assert_eq!(
            lag(r#"{"sync_links":[{"kind":"r\u0065plica","lag_entries":4}]}"#),
            Ok(Some(4))
        );
    }

    #[test]
    fn the_sum_saturates_at_the_api_ceiling() {
        let body = format!(
            r#"{{"sync_links":[{{"kind":"replica","lag_entries":{API_INT_MAX}}},{{"kind":"replica","lag_entries":1}}]}}"#
        );
        assert_eq!(lag(&body), Ok(Some(API_INT_MAX)));
    }
}
