//! The HTML overview page: one row per instance, every value escaped, no
//! external assets.

use crate::model::WriteRecord;
use crate::view::{InstanceView, MembersSummary, Readiness};
use jiff::Timestamp;
use std::fmt::Write as _;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "–",
    }
}

/// Renders the overview at `now` (for sample ages), with the sharding
/// section when sharding is on.
pub fn overview(
    instances: &[InstanceView],
    readiness: &Readiness,
    members: Option<&MembersSummary>,
    now: Timestamp,
) -> String {
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kura-agent</title>\
<style>body{font-family:sans-serif}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style></head><body>\n\
<h1>kura-agent</h1>\n",
    );
    let _ = writeln!(
        html,
        "<p>ready: {}</p>",
        if readiness.ready { "yes" } else { "no" }
    );
    if !readiness.reasons.is_empty() {
        html.push_str("<ul>\n");
        for r in &readiness.reasons {
            let _ = writeln!(html, "<li>{}</li>", escape(r));
        }
        html.push_str("</ul>\n");
    }
    html.push_str(
        "<table>\n<tr><th>instance</th><th>ready</th><th>serving</th><th>sampled/expected</th>\
<th>pressure</th><th>verdict</th><th>signal</th><th>sample age</th><th>last write</th></tr>\n",
    );
    for v in instances {
        let h = v.health.as_ref();
        let id = format!("{}/{}", v.namespace, v.name);
        let sampled = h.map_or_else(
            || "–".to_owned(),
            |h| format!("{}/{}", h.sampled_pods, h.expected_pods),
        );
        let pressure = h.map_or_else(|| "–".to_owned(), |h| h.memory_pressure_state.to_string());
        let verdict = v.gate.as_ref().map_or("–", |g| g.verdict.as_str());
        let signal = v
            .gate
            .as_ref()
            .and_then(|g| g.signal)
            .map_or("–", |s| s.as_str());
        let age = h.and_then(|h| h.sampled_at).map_or_else(
            || "no sample".to_owned(),
            |at| format!("{}s", now.duration_since(at).as_secs()),
        );
        let write = v.last_write.as_ref().map_or_else(
            || "–".to_owned(),
            |w| match &w.result {
                WriteRecord::Applied => "applied".to_owned(),
                WriteRecord::Pruned { .. } => "PRUNED".to_owned(),
                WriteRecord::Failed { kind, .. } => format!("failed: {kind}"),
            },
        );
        let _ = writeln!(
            html,
            "<tr><td><a href=\"/debug/instances/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td>\
<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&id),
            escape(&id),
            yes_no(h.map(|h| h.ready)),
            yes_no(h.map(|h| h.serving)),
            escape(&sampled),
            escape(&pressure),
            escape(verdict),
            escape(signal),
            escape(&age),
            escape(&write),
        );
    }
    html.push_str("</table>\n<p><a href=\"/debug/instances\">JSON</a> · <a href=\"/metrics\">metrics</a></p>\n");
    if let Some(members) = members {
        html.push_str(&members_section(members));
    }
    html.push_str("</body></html>\n");
    html
}

/// The sharding section: this replica, its Lease, the live members.
fn members_section(v: &MembersSummary) -> String {
    let mut h = String::from("<h2>members</h2>\n");
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
            .map_or_else(|| "–".to_owned(), |t| t.to_string()),
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
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain"), "plain");
    }
}
