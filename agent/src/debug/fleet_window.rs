//! Which instances the fleet page shows: the filters applied to the whole
//! fleet, then the window of rows in the sorted order (worst first by
//! default), chosen from cheap sort keys read in place under the view's
//! read lock. Only the instances in the window are copied out and
//! rendered, so a page costs in proportion to the rows it shows; the
//! counts by standing, the namespaces and the pods are of the whole fleet.
//!
//! A fleet no larger than the window is shown whole, the rows that do not
//! match the filters marked hidden, so that the page's script can filter
//! and sort it in place ([`Window::complete`]).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, btree_map};

use jiff::Timestamp;

use crate::debug::fleet_query::{Column, FleetQuery};
use crate::debug::html::escape;
use crate::debug::shadow::ShadowSummary;
use crate::debug::signals::{sample_age, summary};
use crate::model::InstanceKey;
use crate::view::{FleetView, InstanceView, Since, Standing};

/// A sort key: numbers sort as numbers, texts as texts, and a missing key
/// sorts last either way (as the script does). Borrowed from the view, so
/// that keying every instance allocates nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Key<'a> {
    /// A number.
    Num(i64),
    /// A text.
    Text(&'a str),
    /// An instance's `namespace/name`, compared as that text.
    Id(&'a str, &'a str),
    /// No value: last either way.
    Missing,
}

impl Key<'_> {
    /// The `data-k` attribute the script sorts by (empty when missing).
    pub fn attr(&self) -> String {
        match self {
            Key::Num(n) => format!(" data-k=\"{n}\""),
            Key::Text(t) => format!(" data-k=\"{}\"", escape(t)),
            Key::Id(ns, name) => format!(" data-k=\"{}/{}\"", escape(ns), escape(name)),
            Key::Missing => String::new(),
        }
    }

    /// Compares two keys of one column; missing keys last either way.
    pub fn cmp(&self, other: &Key<'_>, descending: bool) -> Ordering {
        let ord = match (self, other) {
            (Key::Missing, Key::Missing) => return Ordering::Equal,
            (Key::Missing, _) => return Ordering::Greater,
            (_, Key::Missing) => return Ordering::Less,
            (Key::Num(a), Key::Num(b)) => a.cmp(b),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            (Key::Id(a, b), Key::Id(c, d)) => id_bytes(a, b).cmp(id_bytes(c, d)),
            (a, b) => a.text().cmp(&b.text()),
        };
        if descending { ord.reverse() } else { ord }
    }

    fn text(&self) -> String {
        match self {
            Key::Num(n) => n.to_string(),
            Key::Text(t) => (*t).to_owned(),
            Key::Id(ns, name) => format!("{ns}/{name}"),
            Key::Missing => String::new(),
        }
    }
}

fn id_bytes<'a>(namespace: &'a str, name: &'a str) -> impl Iterator<Item = u8> + 'a {
    namespace
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(name.bytes())
}

/// `v`'s key in `column` (`owner`: the owning replica's name, the same for
/// every row).
pub fn sort_key<'a>(
    v: &'a InstanceView,
    column: Column,
    owner: &'a str,
    now: Timestamp,
) -> Key<'a> {
    let h = v.health.as_deref();
    let g = v.gate.as_deref();
    match column {
        Column::Instance => Key::Id(&v.namespace, &v.name),
        Column::Verdict => Key::Num(i64::from(Standing::of(g) as u8)),
        Column::Signal => text_key(g.and_then(|g| g.signal).map(|s| s.as_str())),
        Column::Ready => h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(u8::from(h.ready) * 2 + u8::from(h.serving)))
        }),
        Column::Pods => h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(h.expected_pods) - i64::from(h.sampled_pods))
        }),
        Column::Pressure => h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(h.memory_pressure_state))
        }),
        Column::Age => sample_age(h, now).map_or(Key::Missing, |s| {
            Key::Num(i64::try_from(s).unwrap_or(i64::MAX))
        }),
        Column::Target => text_key(target_image(v)),
        Column::Baseline => text_key(g.and_then(|g| g.baseline_image.as_deref())),
        Column::HealthySince => g
            .and_then(|g| g.healthy_since)
            .map_or(Key::Missing, |t| Key::Num(t.as_second())),
        Column::LastWrite => v
            .last_write
            .as_ref()
            .map_or(Key::Missing, |w| Key::Num(w.at.as_second())),
        Column::Owner => Key::Text(owner),
    }
}

fn text_key(v: Option<&str>) -> Key<'_> {
    v.map_or(Key::Missing, Key::Text)
}

/// The image an instance is going to: the verdict's target, else
/// `spec.image`.
pub fn target_image(v: &InstanceView) -> Option<&str> {
    v.gate
        .as_deref()
        .map(|g| g.target_image.as_str())
        .or(v.spec_image.as_deref())
}

/// What the text filter searches, lowercased: the instance, its verdict
/// and signal, the evidence summary, the target and baseline images.
pub fn filter_text(v: &InstanceView) -> String {
    let g = v.gate.as_deref();
    format!(
        "{}/{} {} {} {} {} {}",
        v.namespace,
        v.name,
        Standing::of(g).word(),
        g.and_then(|g| g.signal).map_or("", |s| s.as_str()),
        summary(g),
        target_image(v).unwrap_or_default(),
        g.and_then(|g| g.baseline_image.as_deref())
            .unwrap_or_default()
    )
    .to_lowercase()
}

/// One instance in the window.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The instance (copied out of the view).
    pub view: InstanceView,
    /// Since when it stands as it does.
    pub since: Option<Since>,
    /// Whether it matches the filters (false only in a complete window).
    pub matches: bool,
}

/// What the fleet page shows of the fleet.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// The rows, in order.
    pub rows: Vec<Shown>,
    /// Instances by standing, the whole fleet.
    pub counts: BTreeMap<Standing, usize>,
    /// Every namespace with an instance.
    pub namespaces: Vec<String>,
    /// Instances in the fleet.
    pub total: usize,
    /// Pods in the fleet.
    pub pods: usize,
    /// Instances matching the filters.
    pub matching: usize,
    /// The first row's position among the matching instances.
    pub offset: usize,
    /// True when the fleet fits the window: every instance is a row (the
    /// ones that do not match hidden) and `offset` is 0.
    pub complete: bool,
    /// The shadow configuration's disagreements, the whole fleet (none
    /// judged without a shadow configuration).
    pub shadow: ShadowSummary,
}

/// An instance keyed for sorting.
struct Candidate<'a> {
    key: Key<'a>,
    standing: Standing,
    view: &'a InstanceView,
    matches: bool,
}

/// The page's order: the sort column, then worst first, then by
/// `namespace/name` (a total order, so that windows do not overlap).
fn order(a: &Candidate<'_>, b: &Candidate<'_>, descending: bool) -> Ordering {
    a.key
        .cmp(&b.key, descending)
        .then_with(|| b.standing.cmp(&a.standing))
        .then_with(|| {
            id_bytes(&a.view.namespace, &a.view.name).cmp(id_bytes(&b.view.namespace, &b.view.name))
        })
}

/// Chooses the window for `query` among `instances` (read in place):
/// counts and filters over all of them, a partial selection of the first
/// `offset + limit` in order, and copies of the rows shown only.
pub fn select(
    instances: btree_map::Values<'_, InstanceKey, InstanceView>,
    query: &FleetQuery,
    owner: &str,
    now: Timestamp,
) -> Window {
    let total = instances.len();
    let complete = total <= query.limit;
    let needle = query.text.to_lowercase();
    let mut counts: BTreeMap<Standing, usize> = BTreeMap::new();
    let mut namespaces: BTreeSet<&str> = BTreeSet::new();
    let mut pods = 0;
    let mut matching = 0;
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    let mut shadow = ShadowSummary::default();
    let mut disagreeing = Vec::new();
    for v in instances {
        shadow.count(v, &mut disagreeing);
        let standing = Standing::of(v.gate.as_deref());
        *counts.entry(standing).or_default() += 1;
        namespaces.insert(&v.namespace);
        pods += v.pods.len();
        let matches = query
            .namespace
            .as_deref()
            .is_none_or(|ns| ns == &*v.namespace)
            && query.standing.is_none_or(|s| s == standing)
            && (needle.is_empty() || filter_text(v).contains(&needle));
        matching += usize::from(matches);
        if matches || complete {
            candidates.push(Candidate {
                key: sort_key(v, query.sort, owner, now),
                standing,
                view: v,
                matches,
            });
        }
    }
    let descending = query.descending;
    let offset = if complete { 0 } else { query.offset };
    let end = if complete {
        candidates.len()
    } else {
        offset.saturating_add(query.limit).min(candidates.len())
    };
    if end > 0 && end < candidates.len() {
        candidates.select_nth_unstable_by(end - 1, |a, b| order(a, b, descending));
        candidates.truncate(end);
    }
    candidates.sort_unstable_by(|a, b| order(a, b, descending));
    let rows = candidates
        .get(offset.min(candidates.len())..)
        .unwrap_or_default()
        .iter()
        .map(|c| Shown {
            view: c.view.clone(),
            since: None,
            matches: c.matches,
        })
        .collect();
    Window {
        rows,
        counts,
        namespaces: namespaces.into_iter().map(str::to_owned).collect(),
        total,
        pods,
        matching,
        offset,
        complete,
        shadow: {
            shadow.finish(disagreeing);
            shadow
        },
    }
}

/// The window for `query` from `view`: [`select`] under the read lock,
/// then since when each row stands as it does.
pub fn gather(view: &FleetView, query: &FleetQuery, owner: &str, now: Timestamp) -> Window {
    let mut window = view.read_instances(|all| select(all, query, owner, now));
    let keys: Vec<InstanceKey> = window
        .rows
        .iter()
        .map(|r| {
            InstanceKey::new(
                std::sync::Arc::clone(&r.view.namespace),
                std::sync::Arc::clone(&r.view.name),
            )
        })
        .collect();
    for (row, since) in window.rows.iter_mut().zip(view.since_of(&keys)) {
        row.since = since;
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_keys_sort_last_both_ways() {
        assert_eq!(Key::Missing.cmp(&Key::Num(1), false), Ordering::Greater);
        assert_eq!(Key::Missing.cmp(&Key::Num(1), true), Ordering::Greater);
        assert_eq!(Key::Num(2).cmp(&Key::Num(10), false), Ordering::Less);
        assert_eq!(Key::Num(2).cmp(&Key::Num(10), true), Ordering::Greater);
        assert_eq!(
            Key::Text("b").cmp(&Key::Text("a"), false),
            Ordering::Greater
        );
    }

    #[test]
    fn instance_keys_compare_as_their_text() {
        // "a-b/x" < "a/x" as text ('-' < '/'), though "a" < "a-b".
        assert_eq!(
            Key::Id("a-b", "x").cmp(&Key::Id("a", "x"), false),
            "a-b/x".cmp("a/x")
        );
        assert_eq!(
            Key::Id("a", "x").cmp(&Key::Id("a", "y"), true),
            Ordering::Greater
        );
        assert_eq!(Key::Id("k", "<i>").attr(), " data-k=\"k/&lt;i&gt;\"");
    }
}
