//! The fleet overview (`/`): counts by standing on top, then one row per
//! instance, hard stops and unhealthy instances first, with the verdict as
//! a word and a colour, the signal, a one-line evidence summary, ready and
//! serving, sampled/expected pods, pressure, sample age, target and
//! baseline image, healthy since, last write and the owning replica.
//!
//! Filters (namespace, standing, text), sorting and the window of rows
//! come from the query string ([`fleet_query`]) and are applied on the
//! server to the whole fleet before the window is chosen
//! ([`fleet_window`]): at most `limit` rows (200 by default, at most 500),
//! worst first, from `offset`, with links to the previous and next
//! windows. The counts are of the whole fleet. A fleet that fits the window
//! is shown whole, the rows that do not match rendered `hidden`, and the
//! inline script filters and sorts it in place; a larger one the script
//! leaves to the server (the form is submitted, the header links followed).
//! The column headers are sort links either way.
//!
//! [`fleet_query`]: crate::debug::fleet_query
//! [`fleet_window`]: crate::debug::fleet_window

use std::fmt::Write as _;

use jiff::Timestamp;

use crate::debug::fleet_query::{Change, Column, DEFAULT_LIMIT, FleetQuery};
use crate::debug::fleet_window::{Key, Shown, Window, sort_key, target_image};
use crate::debug::html::{self, Page, age, clock, escape, instance_href, yes_no};
use crate::debug::signals::{sample_age, summary};
use crate::model::{MembersSnapshot, WriteRecord};
use crate::view::{PublicationState, Readiness, Standing};

/// One cell: its sort key and its markup.
struct Cell<'a> {
    key: Key<'a>,
    html: String,
    class: &'static str,
}

/// One instance's row.
struct Row<'a> {
    namespace: &'a str,
    standing: Standing,
    cells: Vec<Cell<'a>>,
    matches: bool,
}

fn row<'a>(shown: &'a Shown, owner: &'a str, now: Timestamp) -> Row<'a> {
    let v = &shown.view;
    let h = v.health.as_deref();
    let g = v.gate.as_deref();
    let standing = Standing::of(g);
    let key = |column| sort_key(v, column, owner, now);
    let mut cells = Vec::with_capacity(HEADERS.len());
    // instance
    cells.push(Cell {
        key: key(Column::Instance),
        html: format!(
            "<a href=\"{}\">{}/{}</a>",
            escape(&instance_href(&v.namespace, &v.name)),
            escape(&v.namespace),
            escape(&v.name)
        ),
        class: "",
    });
    // verdict
    let since_html = match (standing, g.and_then(|g| g.healthy_since), shown.since) {
        (Standing::Healthy, Some(at), _) => {
            format!("<span class=\"since\">since {}</span>", clock(at, now))
        }
        (_, _, Some(s)) if s.standing == standing => {
            format!("<span class=\"since\">since {}</span>", clock(s.at, now))
        }
        _ => String::new(),
    };
    cells.push(Cell {
        key: key(Column::Verdict),
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
        key: key(Column::Signal),
        html: signal.map_or_else(|| "–".to_owned(), |s| format!("<code>{s}</code>")),
        class: "",
    });
    // evidence (not sortable)
    cells.push(Cell {
        key: Key::Missing,
        html: escape(&summary(g)),
        class: "evidence",
    });
    // ready / serving
    cells.push(Cell {
        key: key(Column::Ready),
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
        key: key(Column::Pods),
        html: h.map_or_else(
            || "–".to_owned(),
            |h| format!("{}/{}", h.sampled_pods, h.expected_pods),
        ),
        class: "num",
    });
    // pressure
    cells.push(Cell {
        key: key(Column::Pressure),
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
    cells.push(Cell {
        key: key(Column::Age),
        html: sample_age(h, now).map_or_else(|| "no sample".to_owned(), age),
        class: "num",
    });
    // target image
    cells.push(Cell {
        key: key(Column::Target),
        html: target_image(v).map_or_else(
            || "–".to_owned(),
            |t| format!("<span class=\"img\">{}</span>", escape(t)),
        ),
        class: "",
    });
    // baseline image
    let baseline = g.and_then(|g| g.baseline_image.as_deref());
    cells.push(Cell {
        key: key(Column::Baseline),
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
    cells.push(Cell {
        key: key(Column::HealthySince),
        html: g
            .and_then(|g| g.healthy_since)
            .map_or_else(|| "–".to_owned(), |t| clock(t, now)),
        class: "",
    });
    // last write
    cells.push(Cell {
        key: key(Column::LastWrite),
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
        key: key(Column::Owner),
        html: escape(owner),
        class: "",
    });
    Row {
        namespace: &v.namespace,
        standing,
        cells,
        matches: shown.matches,
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

/// What the fleet page shows.
pub struct Fleet<'a> {
    /// The window of the fleet ([`gather`](crate::debug::fleet_window::gather)).
    pub window: &'a Window,
    /// The owning replica's name ([`html::owner`]), as the window was
    /// sorted with.
    pub owner: &'a str,
    /// The agent's readiness.
    pub readiness: &'a Readiness,
    /// Sharding, when on.
    pub members: Option<&'a MembersSnapshot>,
    /// Render time.
    pub now: Timestamp,
    /// Where the agent publishes, what is contested, where Kura's
    /// controller disagrees.
    pub publication: &'a PublicationState,
}

/// `n` with thousands separators: `5,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Renders the fleet page for `query`.
pub fn render(fleet: &Fleet<'_>, query: &FleetQuery) -> String {
    let now = fleet.now;
    let window = fleet.window;
    let rows: Vec<Row<'_>> = window
        .rows
        .iter()
        .map(|r| row(r, fleet.owner, now))
        .collect();

    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>Fleet <span class=\"muted\">· {} instances, {} pods</span></h1>\n<ul class=\"counts\" id=\"counts\" data-live>",
        window.total, window.pods
    );
    for s in Standing::WORST_FIRST {
        let _ = write!(
            body,
            "<li><a class=\"{}\" href=\"/?verdict={}\"><span class=\"n\">{}</span><span class=\"w\">{}</span></a></li>",
            s.token(),
            s.token(),
            window.counts.get(&s).copied().unwrap_or(0),
            s.word()
        );
    }
    body.push_str("</ul>\n");
    body.push_str(&publication_line(fleet.publication));
    body.push_str(&crate::debug::shadow::fleet_section(&window.shadow));
    filter_form(&mut body, window, query);
    window_nav(&mut body, window, query);

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
                    escape(&query.href(Change {
                        sort: Some((c, next_desc)),
                        ..Change::default()
                    })),
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
            escape(r.namespace),
            r.standing.token(),
            if r.matches { "" } else { " hidden" }
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
    if window.total == 0 {
        body.push_str("<p class=\"empty\">No instances yet: the agent has not found or swept any KuraInstance.</p>\n");
    }
    body.push_str(
        "<h2>Endpoints</h2><p class=\"links\"><a href=\"/debug/instances\">all instances as JSON</a>\
<a href=\"/metrics\">Prometheus metrics</a><a href=\"/readyz\">readiness</a></p>\n",
    );
    if let Some(members) = fleet.members {
        body.push_str(&members_section(members, now));
    }
    let toggle_href = query.href(Change {
        refresh: Some(!query.refresh),
        ..Change::default()
    });
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

/// The filters: a plain GET form (a new filter starts at the first row,
/// with the same sort and window size).
fn filter_form(body: &mut String, window: &Window, query: &FleetQuery) {
    body.push_str(
        "<form class=\"filters\" id=\"filters\" method=\"get\" action=\"/\" role=\"search\">",
    );
    body.push_str("<label>namespace<select name=\"ns\"><option value=\"\">all</option>");
    for ns in &window.namespaces {
        let _ = write!(
            body,
            "<option value=\"{0}\"{1}>{0}</option>",
            escape(ns),
            if query.namespace.as_deref() == Some(ns.as_str()) {
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
    let limit = if query.limit == DEFAULT_LIMIT {
        String::new()
    } else {
        format!(
            "<input type=\"hidden\" name=\"limit\" value=\"{}\">",
            query.limit
        )
    };
    let _ = writeln!(
        body,
        "</select></label><label>text<input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"instance, signal, image, evidence\"></label>\
<input type=\"hidden\" name=\"sort\" value=\"{}\"><input type=\"hidden\" name=\"dir\" value=\"{}\">{limit}{}\
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
}

/// How many rows are shown of how many, and, when the fleet is larger
/// than the window, links to the first, previous and next windows. In a
/// complete window the script rewrites the count as it filters; a
/// windowed one (`data-window`) it leaves to the server.
fn window_nav(body: &mut String, window: &Window, query: &FleetQuery) {
    if window.complete {
        let _ = writeln!(
            body,
            "<div id=\"shown\" data-live>showing {} of {}</div>",
            window.matching, window.total
        );
        return;
    }
    let first = window.offset + 1;
    let last = window.offset + window.rows.len();
    let of = if window.matching == window.total {
        format!("{} instances", thousands(window.total))
    } else {
        format!(
            "{} matching of {} instances",
            thousands(window.matching),
            thousands(window.total)
        )
    };
    let shown = if window.rows.is_empty() {
        format!("showing none of {of} (past the last row)")
    } else if first == last {
        format!("showing {} of {of}", thousands(first))
    } else {
        format!("showing {}–{} of {of}", thousands(first), thousands(last))
    };
    let _ = write!(
        body,
        "<div id=\"shown\" data-live data-window>{shown}<nav class=\"pages\" aria-label=\"pages\">"
    );
    let link = |body: &mut String, offset: usize, rel: &str, text: String| {
        let _ = write!(
            body,
            "<a rel=\"{rel}\" href=\"{}\">{text}</a>",
            escape(&query.href(Change {
                offset: Some(offset),
                ..Change::default()
            }))
        );
    };
    if window.offset > 0 {
        let last_start = window.matching.saturating_sub(1) / query.limit * query.limit;
        link(body, 0, "first", "first".to_owned());
        let previous = window.offset.saturating_sub(query.limit).min(last_start);
        link(body, previous, "prev", format!("previous {}", query.limit));
    }
    let next = window.offset.saturating_add(query.limit);
    if next < window.matching {
        let n = query.limit.min(window.matching - next);
        link(body, next, "next", format!("next {}", thousands(n)));
    }
    body.push_str("</nav></div>\n");
}

/// Where the agent publishes (the target, who chose it and why), and how
/// many instances are contested or disagree with Kura's controller.
fn publication_line(p: &PublicationState) -> String {
    let Some(choice) = &p.choice else {
        return String::new();
    };
    let mut h = format!(
        "<p class=\"muted\" id=\"publication\">publishes on: <strong>{}</strong> ({}: {})",
        match choice.target {
            crate::model::PublicationTarget::Instance => "the KuraInstances' status",
            crate::model::PublicationTarget::Companion => "companion KuraInstanceHealth objects",
        },
        escape(choice.chosen_by),
        escape(&choice.reason),
    );
    if !p.contested.is_empty() {
        let _ = write!(
            h,
            " · <span class=\"fail\">{} instance(s) contested by another writer of status.rolloutHealth: not written (StatusContested)</span>",
            p.contested.len()
        );
    }
    if !p.disagreements.is_empty() {
        let _ = write!(
            h,
            " · <span class=\"fail\">{} instance(s) where Kura's controller disagrees on ready or serving</span>",
            p.disagreements.len()
        );
    }
    h.push_str("</p>\n");
    h
}

/// The sharding section: this replica, its Lease, the live members.
fn members_section(v: &MembersSnapshot, now: Timestamp) -> String {
    let mut h = String::from("<h2>Members</h2>\n");
    let _ = writeln!(
        h,
        "<p>this replica: {} · group {} · own lease {} (until {}) · owns {} instances · {} ownership changes</p>",
        escape(&v.identity),
        escape(&v.group),
        if v.own_lease.current {
            "current"
        } else {
            "NOT current: writes stopped"
        },
        v.own_lease
            .writes_allowed_until
            .map_or_else(|| "–".to_owned(), |t| clock(t, now)),
        v.owned.len(),
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
    fn thousands_are_separated() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(200), "200");
        assert_eq!(thousands(5_000), "5,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
