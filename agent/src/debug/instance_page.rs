//! The instance page (`/instances/{namespace}/{name}`): the verdict as a
//! sentence, every gated signal with its baseline, band top, current value
//! and result, the last hour as a chart, the pods, discovery's notes, and
//! links to the JSON and the Prometheus series.

use std::fmt::Write as _;

use jiff::Timestamp;

use crate::debug::chart;
use crate::debug::html::{
    self, Page, age, clock, clock_text, encode_component, escape, instance_href, seconds_between,
    yes_no,
};
use crate::debug::signals::{Outcome, check_rows};
use crate::model::{MembersSnapshot, WriteRecord};
use crate::view::{HistoryView, InstanceView, Readiness, Standing};

/// What the instance page shows.
pub struct Instance<'a> {
    /// The instance.
    pub view: &'a InstanceView,
    /// Its history (absent before the first sweep).
    pub history: Option<&'a HistoryView>,
    /// The agent's readiness.
    pub readiness: &'a Readiness,
    /// Sharding, when on.
    pub members: Option<&'a MembersSnapshot>,
    /// Render time.
    pub now: Timestamp,
    /// Auto-refresh on.
    pub refresh: bool,
    /// What the agent says about publishing this instance: contested,
    /// or disagreeing with Kura's controller (one line each).
    pub publication_notes: &'a [String],
}

/// The verdict as a sentence, e.g. "unhealthy since 10:42:03: fd timeouts
/// 66, band top 8, baseline 8 captured 10:21:50 on ghcr.io/tuist/kura:0.41.2".
pub fn sentence(v: &InstanceView, history: Option<&HistoryView>, now: Timestamp) -> String {
    let Some(g) = v.gate.as_deref() else {
        return "<strong>no verdict yet</strong>: the agent has not judged this instance."
            .to_owned();
    };
    let standing = Standing::of(Some(g));
    let since = match standing {
        Standing::Healthy => g.healthy_since.map(|at| (at, false)),
        _ => history
            .map(|h| h.since)
            .filter(|s| s.standing == standing)
            .map(|s| (s.at, s.first_sweep)),
    };
    let mut out = format!("<strong>{}</strong>", standing.word());
    if let Some((at, first)) = since {
        let _ = write!(out, " since {}", clock(at, now));
        if first {
            out.push_str(" (at least: this agent's first sweep of it)");
        }
    }
    let captured = match (g.baseline_captured_at, g.baseline_image.as_deref()) {
        (Some(at), Some(image)) => Some(format!(
            "captured {} on <span class=\"img\">{}</span>",
            clock(at, now),
            escape(image)
        )),
        _ => None,
    };
    match g.evidence.first() {
        Some(e) => {
            let _ = write!(out, ": {}", escape(&e.figures()));
            let counter = e.signal.is_banded();
            if counter && let Some(c) = &captured {
                let _ = write!(out, " {c}");
            }
        }
        None if standing == Standing::Healthy => {
            let _ = write!(
                out,
                ": every gated signal passes on <span class=\"img\">{}</span>",
                escape(&g.target_image)
            );
            if let Some(c) = &captured {
                let _ = write!(out, "; baseline {c}");
            }
        }
        None => {
            if let Some(s) = g.signal {
                let _ = write!(out, ": <code>{s}</code>");
            }
        }
    }
    out
}

fn facts(v: &InstanceView, owner: &str, now: Timestamp) -> String {
    let h = v.health.as_deref();
    let g = v.gate.as_deref();
    let dash = || "–".to_owned();
    let mut items: Vec<(&str, String)> = vec![
        (
            "target image",
            g.map(|g| g.target_image.as_str())
                .or(v.spec_image.as_deref())
                .map_or_else(dash, |t| {
                    format!("<span class=\"img\">{}</span>", escape(t))
                }),
        ),
        (
            "baseline",
            match g {
                Some(g) => match (&g.baseline_image, g.baseline_captured_at) {
                    (Some(image), Some(at)) => format!(
                        "<span class=\"img\">{}</span> captured {}{}",
                        escape(image),
                        clock(at, now),
                        if g.soak_eligible {
                            ", soak-eligible"
                        } else {
                            ", NOT soak-eligible (counters not compared)"
                        }
                    ),
                    _ => {
                        "none yet: taken when spec.image changes while the agent watches".to_owned()
                    }
                },
                None => dash(),
            },
        ),
        (
            "verdict evaluated",
            g.map_or_else(dash, |g| clock(g.evaluated_at, now)),
        ),
        (
            "sample age",
            match h.and_then(|h| h.sampled_at) {
                Some(at) => format!(
                    "{} (sampled {})",
                    age(seconds_between(at, now)),
                    clock(at, now)
                ),
                None => "no sample".to_owned(),
            },
        ),
        (
            "pods sampled",
            h.map_or_else(dash, |h| {
                format!("{} of {}", h.sampled_pods, h.expected_pods)
            }),
        ),
        (
            "ready / serving",
            format!(
                "{} / {}",
                yes_no(h.map(|h| h.ready)),
                yes_no(h.map(|h| h.serving))
            ),
        ),
        (
            "healthy since",
            g.and_then(|g| g.healthy_since)
                .map_or_else(dash, |t| clock(t, now)),
        ),
        (
            "last write",
            v.last_write.as_ref().map_or_else(
                || "none yet".to_owned(),
                |w| {
                    let what = match &w.result {
                        WriteRecord::Applied => "applied".to_owned(),
                        WriteRecord::Pruned { missing } => {
                            format!("PRUNED (CRD too old): {}", escape(&missing.join(", ")))
                        }
                        WriteRecord::Failed { kind, message } => {
                            format!("failed ({}): {}", escape(kind), escape(message))
                        }
                    };
                    format!("{what}, {}", clock(w.at, now))
                },
            ),
        ),
        ("owner", escape(owner)),
        (
            "counter resets",
            h.map_or_else(dash, |h| h.counter_resets.to_string()),
        ),
    ];
    if let Some(h) = h {
        items.push(("ring members", h.ring_members.to_string()));
        items.push(("agent", escape(&h.agent)));
    }
    let mut out = String::from("<dl class=\"facts\" id=\"facts\" data-live>");
    for (k, v) in items {
        let _ = write!(out, "<dt>{k}</dt><dd>{v}</dd>");
    }
    out.push_str("</dl>");
    out
}

fn signals_table(v: &InstanceView, history: Option<&HistoryView>) -> String {
    let rows = check_rows(
        v.health.as_deref(),
        v.gate.as_deref(),
        history.and_then(|h| h.limits.as_ref()),
    );
    let mut out = String::from("<div class=\"scroll\" id=\"signals\" data-live>");
    if rows.is_empty() {
        out.push_str("<p class=\"empty\">No aggregate or verdict yet.</p></div>");
        return out;
    }
    out.push_str(
        "<table><caption>Every server check of the gate, in contract order, as judged at the verdict's time.</caption>\
<thead><tr><th scope=\"col\">check</th><th scope=\"col\">signal</th><th scope=\"col\">what</th>\
<th scope=\"col\" class=\"num\">baseline</th><th scope=\"col\" class=\"num\">band top / limit</th>\
<th scope=\"col\" class=\"num\">current</th><th scope=\"col\">result</th></tr></thead><tbody>",
    );
    for r in rows {
        let (class, result) = match &r.outcome {
            Outcome::Pass => ("pass", "pass".to_owned()),
            Outcome::Fail => ("fail", "FAIL".to_owned()),
            Outcome::NotCompared(why) => ("skip", format!("not compared: {why}")),
        };
        let _ = write!(
            out,
            "<tr{}><td>{}</td><th scope=\"row\"><code>{}</code></th><td>{}</td><td class=\"num\">{}</td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"result {class}\">{}</td></tr>",
            if class == "fail" {
                " class=\"failing\""
            } else {
                ""
            },
            r.check,
            r.signal,
            r.what,
            escape(&r.baseline),
            escape(&r.limit),
            escape(&r.current),
            escape(&result),
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

fn history_section(v: &InstanceView, history: Option<&HistoryView>, now: Timestamp) -> String {
    let mut out = String::from("<div id=\"history\" data-live>");
    let Some(h) = history else {
        out.push_str("<p class=\"empty\">No sweep yet.</p></div>");
        return out;
    };
    let sample = match v.health.as_deref().and_then(|h| h.sampled_at) {
        Some(at) => format!("sample age {}", age(seconds_between(at, now))),
        None => "no sample".to_owned(),
    };
    let limit = h
        .limits
        .map(|l| format!(" (stale after {} s)", l.max_sample_age_seconds))
        .unwrap_or_default();
    let _ = write!(
        out,
        "<p class=\"muted\">{} to now, {} buckets of {} s, each the largest value and the worst verdict of the sweeps in it; the band top dashed. {sample}{limit}.</p><div class=\"charts\">",
        clock_text(h.start, now),
        h.points.len(),
        h.bucket_seconds
    );
    for c in &chart::COUNTERS {
        out.push_str(&chart::panel(h, c, now));
    }
    out.push_str("</div>");
    out.push_str(&chart::strip(h, now));
    out.push_str("</div>");
    out
}

fn pods_table(v: &InstanceView, now: Timestamp) -> String {
    let mut out = String::from("<div class=\"scroll\" id=\"pods\" data-live>");
    if v.pods.is_empty() {
        out.push_str("<p class=\"empty\">No pods tracked.</p></div>");
        return out;
    }
    out.push_str(
        "<table><caption>The last sample of every pod: raw counters as the pod reports them, clamped as the agent sums them across restarts.</caption>\
<thead><tr><th scope=\"col\">pod</th><th scope=\"col\">image</th><th scope=\"col\">ready / state</th>\
<th scope=\"col\" class=\"num\">generation</th><th scope=\"col\">ring</th><th scope=\"col\" class=\"num\">pressure</th>\
<th scope=\"col\" class=\"num\">fd timeouts raw → clamped</th><th scope=\"col\" class=\"num\">peer failures raw → clamped</th>\
<th scope=\"col\" class=\"num\">outbox / capacity</th><th scope=\"col\" class=\"num\">replication lag</th><th scope=\"col\" class=\"num\">ring fullness</th><th scope=\"col\">fence</th>\
<th scope=\"col\" class=\"num\">restarts</th><th scope=\"col\">last error</th><th scope=\"col\" class=\"num\">sampled</th></tr></thead><tbody>",
    );
    let health_pods = v
        .health
        .as_deref()
        .map(|h| h.pods.as_slice())
        .unwrap_or(&[]);
    for p in &v.pods {
        let ph = health_pods.iter().find(|x| *x.name == *p.pod.name);
        // The report's fields as the aggregate's pod entry carries them
        // (from the pod's last valid report; raw counters beside clamped),
        // or, for a pod it has no entry for, as the view kept them.
        let r = p.report.as_deref();
        let dash = || "–".to_owned();
        let num = |v: Option<u64>| v.map_or_else(dash, |v| v.to_string());
        let ready = r.map(|r| r.ready).or_else(|| ph.and_then(|ph| ph.ready));
        let state = r
            .map(|r| r.state.as_str())
            .or_else(|| ph.and_then(|ph| ph.state.as_deref()));
        let fingerprint = r
            .and_then(|r| r.ring_fingerprint.as_deref())
            .or_else(|| ph.and_then(|ph| ph.ring_fingerprint.as_deref()));
        let members = r
            .map(|r| r.ring_members)
            .or_else(|| ph.and_then(|ph| ph.ring_members));
        let ring = match (members, fingerprint) {
            (Some(m), Some(f)) => format!(
                "{m} members · <code title=\"{}\">{}</code>",
                escape(f),
                escape(&f.chars().take(8).collect::<String>())
            ),
            (Some(m), None) => format!("{m} members"),
            _ => dash(),
        };
        let fd = format!(
            "{} → {}",
            num(r
                .map(|r| r.fd_timeout_count)
                .or_else(|| ph.and_then(|ph| ph.fd_timeout_count_raw))),
            num(ph.and_then(|ph| ph.fd_timeout_count))
        );
        let peers = format!(
            "{} → {}",
            num(r
                .and_then(|r| r.peer_connection_failure_count)
                .or_else(|| ph.and_then(|ph| ph.peer_connection_failures_raw))),
            num(ph.and_then(|ph| ph.peer_connection_failures))
        );
        let outbox = match (p.outbox_messages, p.outbox_capacity) {
            (Some(m), Some(c)) => format!("{m} / {c}"),
            (Some(m), None) => m.to_string(),
            (None, Some(c)) => format!("– / {c}"),
            (None, None) => dash(),
        };
        // GET /status/cluster of a pull-sync pod; absent is not 0.
        let lag = ph
            .and_then(|ph| ph.replication_lag_entries)
            .map_or_else(|| "not measured".to_owned(), |v| v.to_string());
        let fence = p.fence.as_ref().map_or_else(
            || "not fenced".to_owned(),
            |f| {
                format!(
                    "{} · epoch {} · valid {}",
                    escape(f.phase.as_deref().unwrap_or("phase not reported")),
                    num(f.epoch),
                    yes_no(f.valid)
                )
            },
        );
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td class=\"img\">{}</td><td>{} / {}</td><td class=\"num\">{}</td><td>{ring}</td>\
<td class=\"num\">{}</td><td class=\"num\">{fd}</td><td class=\"num\">{peers}</td><td class=\"num\">{outbox}</td>\
<td class=\"num\">{lag}</td><td class=\"num\">{}</td><td>{fence}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&p.pod.name),
            escape(p.pod.image.as_deref().unwrap_or("–")),
            yes_no(ready),
            escape(state.unwrap_or("–")),
            num(r
                .map(|r| r.generation)
                .or_else(|| ph.and_then(|ph| ph.generation))),
            r.map(|r| r.memory_pressure_state)
                .or_else(|| ph.and_then(|ph| ph.memory_pressure_state))
                .map_or_else(dash, |p| p.to_string()),
            p.ring_fullness_percent
                .map_or_else(dash, |f| format!("{f} %")),
            p.pod.restart_count,
            p.error.as_deref().map_or_else(
                || "–".to_owned(),
                |e| format!("<span class=\"fail\">{}</span>", escape(e))
            ),
            age(seconds_between(p.received_at, now)),
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

/// Renders the instance page.
pub fn render(page: &Instance<'_>) -> String {
    let v = page.view;
    let now = page.now;
    let owner = html::owner(page.members);
    let standing = Standing::of(v.gate.as_deref());
    let id = format!("{}/{}", v.namespace, v.name);
    let href = instance_href(&v.namespace, &v.name);
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/\">← fleet</a></p><h1>{} <span class=\"badge {}\" id=\"badge\" data-live>{}</span></h1>\
<p class=\"sentence {}\" id=\"sentence\" data-live>{}</p>",
        escape(&id),
        standing.token(),
        standing.word(),
        standing.token(),
        sentence(v, page.history, now),
    );
    body.push_str(&facts(v, &owner, now));
    if !page.publication_notes.is_empty() {
        body.push_str("<ul class=\"notes\" id=\"publication\">");
        for n in page.publication_notes {
            let _ = write!(body, "<li class=\"fail\">{}</li>", escape(n));
        }
        body.push_str("</ul>");
    }
    body.push_str(&crate::debug::shadow::instance_section(
        v,
        page.history.and_then(|h| h.limits.as_ref()),
    ));
    body.push_str("<h2>Gated signals</h2>");
    body.push_str(&signals_table(v, page.history));
    body.push_str("<h2>Last hour</h2>");
    body.push_str(&history_section(v, page.history, now));
    body.push_str("<h2>Pods</h2>");
    body.push_str(&pods_table(v, now));
    body.push_str("<h2>Discovery notes</h2><ul class=\"notes\" id=\"notes\" data-live>");
    if v.notes.is_empty() {
        body.push_str("<li class=\"muted\">none</li>");
    }
    for n in &v.notes {
        let _ = write!(body, "<li>{}</li>", escape(n));
    }
    body.push_str("</ul>");
    let selector = format!(
        "{{kura_namespace=\"{}\",kura_instance=\"{}\"}}",
        v.namespace.replace('\\', "\\\\").replace('"', "\\\""),
        v.name.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let _ = write!(
        body,
        "<h2>Raw data</h2><p class=\"links\"><a href=\"/debug/instances/{}/{}\">this instance as JSON</a>\
<a href=\"{}/metrics\">its Prometheus series</a>\
<a href=\"/api/v1/instances/{}/{}/timeline\" download=\"{}.timeline.json\">download this rollout</a></p>\
<p class=\"muted\">The rollout is the gate inputs judged since the current baseline, tick by tick, with the verdicts published: \
<code>kura-gate replay</code> reads it (schemas/json/instance-timeline.schema.json).</p>\
<p class=\"muted\">PromQL: <code>kura_instance_fd_timeouts{}</code></p>",
        encode_component(&v.namespace),
        encode_component(&v.name),
        escape(&href),
        encode_component(&v.namespace),
        encode_component(&v.name),
        escape(&format!("{}.{}", v.namespace, v.name)),
        escape(&selector),
    );
    let title = format!("kura-agent · {id}");
    let toggle_href = if page.refresh {
        format!("{href}?refresh=off")
    } else {
        href.clone()
    };
    html::shell(
        &Page {
            title: &title,
            refresh: Some(page.refresh),
            toggle_href: &toggle_href,
            now,
            readiness: page.readiness,
            members: page.members,
        },
        &body,
    )
}

/// The page for an instance the agent does not know.
pub fn not_found(namespace: &str, name: &str, readiness: &Readiness, now: Timestamp) -> String {
    let body = format!(
        "<p><a href=\"/\">← fleet</a></p><h1>{}/{}</h1><p class=\"empty\">This agent does not track that instance \
(it may not exist, may belong to another replica, or may not have been swept yet).</p>",
        escape(namespace),
        escape(name)
    );
    html::shell(
        &Page {
            title: "kura-agent · no such instance",
            refresh: None,
            toggle_href: "/",
            now,
            readiness,
            members: None,
        },
        &body,
    )
}
