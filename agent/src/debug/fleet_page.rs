//! The fleet overview (`/`): counts by standing on top, then one row per
//! instance, hard stops and unhealthy instances first, with the verdict as
//! a word and a colour, the signal, a one-line evidence summary, ready and
//! serving, sampled/expected pods, pressure, sample age, target and
//! baseline image, healthy since, last write and the owning replica.
//!
//! Filters (namespace, standing, text) and sorting come from the query
//! string, so they work without script: rows that do not match are
//! rendered `hidden`, and the column headers are sort links. The inline
//! script does the same in place.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::Timestamp;

use crate::debug::html::{
    self, Page, age, clock, encode_component, escape, instance_href, query_pairs, yes_no,
};
use crate::debug::signals::{sample_age, summary};
use crate::model::{InstanceKey, WriteRecord};
use crate::view::{InstanceView, MembersSummary, Readiness, Since, Standing};

/// A sortable column of the fleet table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `namespace/name`.
    Instance,
    /// The standing, worst first by default.
    Verdict,
    /// The signal.
    Signal,
    /// Ready and serving.
    Ready,
    /// Sampled / expected pods (sorted by pods missing).
    Pods,
    /// Memory pressure.
    Pressure,
    /// Sample age.
    Age,
    /// `spec.image`.
    Target,
    /// The baseline's image.
    Baseline,
    /// Healthy since.
    HealthySince,
    /// The last write's time.
    LastWrite,
    /// The owning replica.
    Owner,
}

impl Column {
    const ALL: [Column; 12] = [
        Column::Instance,
        Column::Verdict,
        Column::Signal,
        Column::Ready,
        Column::Pods,
        Column::Pressure,
        Column::Age,
        Column::Target,
        Column::Baseline,
        Column::HealthySince,
        Column::LastWrite,
        Column::Owner,
    ];

    fn token(self) -> &'static str {
        match self {
            Column::Instance => "instance",
            Column::Verdict => "verdict",
            Column::Signal => "signal",
            Column::Ready => "ready",
            Column::Pods => "pods",
            Column::Pressure => "pressure",
            Column::Age => "age",
            Column::Target => "target",
            Column::Baseline => "baseline",
            Column::HealthySince => "healthy_since",
            Column::LastWrite => "last_write",
            Column::Owner => "owner",
        }
    }

    /// The direction a first click sorts in: worst first where there is a
    /// worst.
    fn first_descending(self) -> bool {
        matches!(
            self,
            Column::Verdict | Column::Pods | Column::Pressure | Column::Age | Column::LastWrite
        )
    }
}

/// The fleet page's query: filters, sorting, refresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this standing.
    pub standing: Option<Standing>,
    /// Only rows containing this text (case-insensitive).
    pub text: String,
    /// Sorted by this column.
    pub sort: Column,
    /// Descending.
    pub descending: bool,
    /// Auto-refresh on.
    pub refresh: bool,
}

impl Default for FleetQuery {
    fn default() -> Self {
        FleetQuery {
            namespace: None,
            standing: None,
            text: String::new(),
            sort: Column::Verdict,
            descending: true,
            refresh: true,
        }
    }
}

impl FleetQuery {
    /// Reads `ns`, `verdict`, `q`, `sort`, `dir` and `refresh`; anything
    /// unknown keeps its default.
    pub fn parse(query: &str) -> FleetQuery {
        let mut q = FleetQuery::default();
        let mut dir: Option<bool> = None;
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "ns" if !v.is_empty() => q.namespace = Some(v),
                "verdict" => q.standing = Standing::from_token(&v),
                "q" => q.text = v.trim().to_owned(),
                "sort" => {
                    if let Some(c) = Column::ALL.into_iter().find(|c| c.token() == v) {
                        q.sort = c;
                    }
                }
                "dir" => dir = Some(v == "desc"),
                "refresh" => q.refresh = v != "off",
                _ => {}
            }
        }
        q.descending = dir.unwrap_or_else(|| q.sort.first_descending());
        q
    }

    /// This query as a URL of the fleet page, with `sort`/`refresh`
    /// replaced when given.
    fn href(&self, sort: Option<(Column, bool)>, refresh: Option<bool>) -> String {
        let (column, descending) = sort.unwrap_or((self.sort, self.descending));
        let mut parts: Vec<String> = Vec::new();
        if let Some(ns) = &self.namespace {
            parts.push(format!("ns={}", encode_component(ns)));
        }
        if let Some(s) = self.standing {
            parts.push(format!("verdict={}", s.token()));
        }
        if !self.text.is_empty() {
            parts.push(format!("q={}", encode_component(&self.text)));
        }
        parts.push(format!("sort={}", column.token()));
        parts.push(format!("dir={}", if descending { "desc" } else { "asc" }));
        if !refresh.unwrap_or(self.refresh) {
            parts.push("refresh=off".to_owned());
        }
        format!("/?{}", parts.join("&"))
    }
}

/// A sort key: numbers sort as numbers, texts as texts, and a missing key
/// sorts last either way (as the script does).
#[derive(Debug, Clone, PartialEq)]
enum Key {
    Num(i64),
    Text(String),
    Missing,
}

impl Key {
    fn attr(&self) -> String {
        match self {
            Key::Num(n) => format!(" data-k=\"{n}\""),
            Key::Text(t) => format!(" data-k=\"{}\"", escape(t)),
            Key::Missing => String::new(),
        }
    }

    fn cmp(&self, other: &Key, descending: bool) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let ord = match (self, other) {
            (Key::Missing, Key::Missing) => return Ordering::Equal,
            (Key::Missing, _) => return Ordering::Greater,
            (_, Key::Missing) => return Ordering::Less,
            (Key::Num(a), Key::Num(b)) => a.cmp(b),
            (a, b) => a.text().cmp(&b.text()),
        };
        if descending { ord.reverse() } else { ord }
    }

    fn text(&self) -> String {
        match self {
            Key::Num(n) => n.to_string(),
            Key::Text(t) => t.clone(),
            Key::Missing => String::new(),
        }
    }
}

/// One cell: its sort key and its markup.
struct Cell {
    key: Key,
    html: String,
    class: &'static str,
}

/// One instance's row.
struct Row {
    namespace: String,
    standing: Standing,
    cells: Vec<Cell>,
    text: String,
}

fn secs(t: Timestamp) -> Key {
    Key::Num(t.as_second())
}

fn text_key(v: Option<&str>) -> Key {
    v.map_or(Key::Missing, |s| Key::Text(s.to_owned()))
}

fn row(v: &InstanceView, since: Option<&Since>, owner: &str, now: Timestamp) -> Row {
    let h = v.health.as_deref();
    let g = v.gate.as_deref();
    let standing = Standing::of(g);
    let id = format!("{}/{}", v.namespace, v.name);
    let mut cells = Vec::with_capacity(Column::ALL.len() + 1);
    // instance
    cells.push(Cell {
        key: Key::Text(id.clone()),
        html: format!(
            "<a href=\"{}\">{}</a>",
            escape(&instance_href(&v.namespace, &v.name)),
            escape(&id)
        ),
        class: "",
    });
    // verdict
    let since_html = match (standing, g.and_then(|g| g.healthy_since), since) {
        (Standing::Healthy, Some(at), _) => {
            format!("<span class=\"since\">since {}</span>", clock(at, now))
        }
        (_, _, Some(s)) if s.standing == standing => {
            format!("<span class=\"since\">since {}</span>", clock(s.at, now))
        }
        _ => String::new(),
    };
    cells.push(Cell {
        key: Key::Num(i64::from(standing as u8)),
        html: format!(
            "<span class=\"badge {}\">{}</span>{since_html}",
            standing.token(),
            standing.word()
        ),
        class: "",
    });
    // signal
    let signal = g.and_then(|g| g.signal).map(|s| s.as_str());
    cells.push(Cell {
        key: text_key(signal),
        html: signal.map_or_else(|| "–".to_owned(), |s| format!("<code>{s}</code>")),
        class: "",
    });
    // evidence (not sortable)
    let evidence = summary(g);
    cells.push(Cell {
        key: Key::Missing,
        html: escape(&evidence),
        class: "evidence",
    });
    // ready / serving
    cells.push(Cell {
        key: h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(u8::from(h.ready) * 2 + u8::from(h.serving)))
        }),
        html: format!(
            "{} / {}{}",
            yes_no(h.map(|h| h.ready)),
            yes_no(h.map(|h| h.serving)),
            // Ready and serving say nothing of who may write: on a fenced
            // instance, the grant's state beside them.
            h.and_then(|h| h.serving_authority.as_ref())
                .map_or_else(String::new, |a| format!(
                    "<span class=\"since\">{}</span>",
                    escape(&kura_schemas::FenceEvidence::from(a).describe())
                ))
        ),
        class: "",
    });
    // sampled / expected
    cells.push(Cell {
        key: h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(h.expected_pods) - i64::from(h.sampled_pods))
        }),
        html: h.map_or_else(
            || "–".to_owned(),
            |h| format!("{}/{}", h.sampled_pods, h.expected_pods),
        ),
        class: "num",
    });
    // pressure
    cells.push(Cell {
        key: h.map_or(Key::Missing, |h| {
            Key::Num(i64::from(h.memory_pressure_state))
        }),
        html: h.map_or_else(
            || "–".to_owned(),
            |h| match h.memory_pressure_state {
                0 => "0".to_owned(),
                1 => "1 elevated".to_owned(),
                p => format!("{p} critical"),
            },
        ),
        class: "num",
    });
    // sample age
    let sample = sample_age(h, now);
    cells.push(Cell {
        key: sample.map_or(Key::Missing, |s| {
            Key::Num(i64::try_from(s).unwrap_or(i64::MAX))
        }),
        html: sample.map_or_else(|| "no sample".to_owned(), age),
        class: "num",
    });
    // target image
    let target = g
        .map(|g| g.target_image.as_str())
        .or(v.spec_image.as_deref());
    cells.push(Cell {
        key: text_key(target),
        html: target.map_or_else(
            || "–".to_owned(),
            |t| format!("<span class=\"img\">{}</span>", escape(t)),
        ),
        class: "",
    });
    // baseline image
    let baseline = g.and_then(|g| g.baseline_image.as_deref());
    cells.push(Cell {
        key: text_key(baseline),
        html: match (baseline, g.and_then(|g| g.baseline_captured_at)) {
            (Some(b), Some(at)) => format!(
                "<span class=\"img\">{}</span><span class=\"since\">captured {}</span>",
                escape(b),
                clock(at, now)
            ),
            (Some(b), None) => format!("<span class=\"img\">{}</span>", escape(b)),
            _ => "none yet".to_owned(),
        },
        class: "",
    });
    // healthy since
    let healthy = g.and_then(|g| g.healthy_since);
    cells.push(Cell {
        key: healthy.map_or(Key::Missing, secs),
        html: healthy.map_or_else(|| "–".to_owned(), |t| clock(t, now)),
        class: "",
    });
    // last write
    cells.push(Cell {
        key: v.last_write.as_ref().map_or(Key::Missing, |w| secs(w.at)),
        html: v.last_write.as_ref().map_or_else(
            || "–".to_owned(),
            |w| {
                let what = match &w.result {
                    WriteRecord::Applied => "applied".to_owned(),
                    WriteRecord::Pruned { .. } => "PRUNED (CRD too old)".to_owned(),
                    WriteRecord::Failed { kind, .. } => format!("failed: {}", escape(kind)),
                };
                format!("{what} <span class=\"since\">{}</span>", clock(w.at, now))
            },
        ),
        class: "",
    });
    // owner
    cells.push(Cell {
        key: Key::Text(owner.to_owned()),
        html: escape(owner),
        class: "",
    });
    let text = format!(
        "{id} {} {} {evidence} {} {}",
        standing.word(),
        signal.unwrap_or_default(),
        target.unwrap_or_default(),
        baseline.unwrap_or_default()
    )
    .to_lowercase();
    Row {
        namespace: v.namespace.clone(),
        standing,
        cells,
        text,
    }
}

/// Headers of the table, in cell order (`None`: not sortable).
const HEADERS: [(&str, Option<Column>, bool); 13] = [
    ("instance", Some(Column::Instance), false),
    ("verdict", Some(Column::Verdict), false),
    ("signal", Some(Column::Signal), false),
    ("evidence", None, false),
    ("ready / serving", Some(Column::Ready), false),
    ("sampled / expected", Some(Column::Pods), true),
    ("pressure", Some(Column::Pressure), true),
    ("sample age", Some(Column::Age), true),
    ("target image", Some(Column::Target), false),
    ("baseline image", Some(Column::Baseline), false),
    ("healthy since", Some(Column::HealthySince), false),
    ("last write", Some(Column::LastWrite), false),
    ("owner", Some(Column::Owner), false),
];

fn cell_index(column: Column) -> usize {
    HEADERS
        .iter()
        .position(|(_, c, _)| *c == Some(column))
        .unwrap_or(0)
}

/// What the fleet page shows.
pub struct Fleet<'a> {
    /// Every instance.
    pub instances: &'a [InstanceView],
    /// Since when each stands as it does.
    pub since: &'a BTreeMap<InstanceKey, Since>,
    /// The agent's readiness.
    pub readiness: &'a Readiness,
    /// Sharding, when on.
    pub members: Option<&'a MembersSummary>,
    /// Render time.
    pub now: Timestamp,
}

/// Renders the fleet page for `query`.
pub fn render(fleet: &Fleet<'_>, query: &FleetQuery) -> String {
    let now = fleet.now;
    let owner = html::owner(fleet.members);
    let mut rows: Vec<Row> = fleet
        .instances
        .iter()
        .map(|v| {
            let key = InstanceKey::new(v.namespace.clone(), v.name.clone());
            row(v, fleet.since.get(&key), &owner, now)
        })
        .collect();
    let sort_index = cell_index(query.sort);
    rows.sort_by(|a, b| {
        a.cells[sort_index]
            .key
            .cmp(&b.cells[sort_index].key, query.descending)
            .then_with(|| b.standing.cmp(&a.standing))
            .then_with(|| a.cells[0].key.cmp(&b.cells[0].key, false))
    });
    let mut counts: BTreeMap<Standing, usize> = BTreeMap::new();
    for r in &rows {
        *counts.entry(r.standing).or_default() += 1;
    }
    let namespaces: BTreeSet<&str> = rows.iter().map(|r| r.namespace.as_str()).collect();
    let pods: usize = fleet.instances.iter().map(|v| v.pods.len()).sum();

    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>Fleet <span class=\"muted\">· {} instances, {} pods</span></h1>\n<ul class=\"counts\" id=\"counts\" data-live>",
        rows.len(),
        pods
    );
    for s in Standing::WORST_FIRST {
        let _ = write!(
            body,
            "<li><a class=\"{}\" href=\"/?verdict={}\"><span class=\"n\">{}</span><span class=\"w\">{}</span></a></li>",
            s.token(),
            s.token(),
            counts.get(&s).copied().unwrap_or(0),
            s.word()
        );
    }
    body.push_str("</ul>\n");

    // Filters: a plain GET form.
    body.push_str(
        "<form class=\"filters\" id=\"filters\" method=\"get\" action=\"/\" role=\"search\">",
    );
    body.push_str("<label>namespace<select name=\"ns\"><option value=\"\">all</option>");
    for ns in &namespaces {
        let _ = write!(
            body,
            "<option value=\"{0}\"{1}>{0}</option>",
            escape(ns),
            if query.namespace.as_deref() == Some(*ns) {
                " selected"
            } else {
                ""
            }
        );
    }
    body.push_str(
        "</select></label><label>verdict<select name=\"verdict\"><option value=\"\">all</option>",
    );
    for s in Standing::WORST_FIRST {
        let _ = write!(
            body,
            "<option value=\"{}\"{}>{}</option>",
            s.token(),
            if query.standing == Some(s) {
                " selected"
            } else {
                ""
            },
            s.word()
        );
    }
    let _ = writeln!(
        body,
        "</select></label><label>text<input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"instance, signal, image, evidence\"></label>\
<input type=\"hidden\" name=\"sort\" value=\"{}\"><input type=\"hidden\" name=\"dir\" value=\"{}\">{}\
<button type=\"submit\">Apply</button></form>",
        escape(&query.text),
        query.sort.token(),
        if query.descending { "desc" } else { "asc" },
        if query.refresh {
            ""
        } else {
            "<input type=\"hidden\" name=\"refresh\" value=\"off\">"
        },
    );

    let needle = query.text.to_lowercase();
    let visible = |r: &Row| {
        query
            .namespace
            .as_deref()
            .is_none_or(|ns| ns == r.namespace)
            && query.standing.is_none_or(|s| s == r.standing)
            && (needle.is_empty() || r.text.contains(&needle))
    };
    let shown = rows.iter().filter(|r| visible(r)).count();
    let _ = writeln!(
        body,
        "<div id=\"shown\">showing {shown} of {}</div>",
        rows.len()
    );

    body.push_str("<div class=\"scroll\"><table id=\"fleet\"><caption>Instances, hard stops and unhealthy first. Verdicts are words; colour only repeats them.</caption><thead><tr>");
    for (label, column, numeric) in HEADERS {
        let class = if numeric { " class=\"num\"" } else { "" };
        match column {
            None => {
                let _ = write!(body, "<th scope=\"col\"{class}>{label}</th>");
            }
            Some(c) => {
                let active = c == query.sort;
                let next_desc = if active {
                    !query.descending
                } else {
                    c.first_descending()
                };
                let aria = if active {
                    if query.descending {
                        " aria-sort=\"descending\""
                    } else {
                        " aria-sort=\"ascending\""
                    }
                } else {
                    ""
                };
                let _ = write!(
                    body,
                    "<th scope=\"col\"{class}{aria} data-sort=\"{}\" data-dir=\"{}\"><a href=\"{}\">{label}</a></th>",
                    c.token(),
                    if c.first_descending() { "desc" } else { "asc" },
                    escape(&query.href(Some((c, next_desc)), None)),
                );
            }
        }
    }
    body.push_str("</tr></thead>\n<tbody id=\"rows\" data-live>\n");
    for r in &rows {
        let _ = write!(
            body,
            "<tr class=\"row-{}\" data-ns=\"{}\" data-standing=\"{}\"{}>",
            r.standing.token(),
            escape(&r.namespace),
            r.standing.token(),
            if visible(r) { "" } else { " hidden" }
        );
        for (i, c) in r.cells.iter().enumerate() {
            let tag = if i == 0 { "th scope=\"row\"" } else { "td" };
            let close = if i == 0 { "th" } else { "td" };
            let class = if c.class.is_empty() {
                String::new()
            } else {
                format!(" class=\"{}\"", c.class)
            };
            let _ = write!(body, "<{tag}{class}{}>{}</{close}>", c.key.attr(), c.html);
        }
        body.push_str("</tr>\n");
    }
    body.push_str("</tbody></table></div>\n");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">No instances yet: the agent has not found or swept any KuraInstance.</p>\n");
    }
    body.push_str(
        "<h2>Endpoints</h2><p class=\"links\"><a href=\"/debug/instances\">all instances as JSON</a>\
<a href=\"/metrics\">Prometheus metrics</a><a href=\"/readyz\">readiness</a></p>\n",
    );
    if let Some(members) = fleet.members {
        body.push_str(&members_section(members, now));
    }
    let toggle_href = query.href(None, Some(!query.refresh));
    html::shell(
        &Page {
            title: "kura-agent · fleet",
            refresh: Some(query.refresh),
            toggle_href: &toggle_href,
            now,
            readiness: fleet.readiness,
            members: fleet.members,
        },
        &body,
    )
}

/// The sharding section: this replica, its Lease, the live members.
fn members_section(v: &MembersSummary, now: Timestamp) -> String {
    let mut h = String::from("<h2>Members</h2>\n");
    let _ = writeln!(
        h,
        "<p>this replica: {} · group {} · own lease {} (until {}) · owns {} instances · {} ownership changes</p>",
        escape(&v.identity),
        escape(&v.group),
        if v.own_lease_current {
            "current"
        } else {
            "NOT current: writes stopped"
        },
        v.writes_allowed_until
            .map_or_else(|| "–".to_owned(), |t| clock(t, now)),
        v.owned,
        v.ownership_changes_total,
    );
    h.push_str("<ul>\n");
    for m in &v.members {
        let _ = writeln!(
            h,
            "<li>{}{}{}</li>",
            escape(&m.id),
            if m.me { " (this replica)" } else { "" },
            if m.settled { "" } else { " (joining)" }
        );
    }
    h.push_str("</ul>\n<p><a href=\"/debug/members\">members JSON</a></p>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_with_defaults_and_round_trip() {
        let q = FleetQuery::parse("");
        assert_eq!(q, FleetQuery::default());
        assert_eq!(q.sort, Column::Verdict);
        assert!(q.descending);
        let q =
            FleetQuery::parse("ns=kura&verdict=hard_stop&q=fd+time&sort=age&dir=asc&refresh=off");
        assert_eq!(q.namespace.as_deref(), Some("kura"));
        assert_eq!(q.standing, Some(Standing::HardStop));
        assert_eq!(q.text, "fd time");
        assert_eq!(q.sort, Column::Age);
        assert!(!q.descending);
        assert!(!q.refresh);
        let href = q.href(None, None);
        assert_eq!(FleetQuery::parse(href.trim_start_matches("/?")), q);
        assert_eq!(
            FleetQuery::parse("sort=bogus&verdict=bogus").standing,
            None,
            "unknown values keep the defaults"
        );
        assert!(
            FleetQuery::parse("sort=age").descending,
            "age: oldest first"
        );
    }

    #[test]
    fn missing_keys_sort_last_both_ways() {
        use std::cmp::Ordering;
        assert_eq!(Key::Missing.cmp(&Key::Num(1), false), Ordering::Greater);
        assert_eq!(Key::Missing.cmp(&Key::Num(1), true), Ordering::Greater);
        assert_eq!(Key::Num(2).cmp(&Key::Num(10), false), Ordering::Less);
        assert_eq!(Key::Num(2).cmp(&Key::Num(10), true), Ordering::Greater);
        assert_eq!(
            Key::Text("b".into()).cmp(&Key::Text("a".into()), false),
            Ordering::Greater
        );
    }
}
