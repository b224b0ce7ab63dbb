//! The shadow gate configuration on the pages (`run --shadow-gate-config`):
//! on the fleet page, the instances the shadow judges differently, first
//! and bounded ([`fleet_section`]); on the instance page, the live and the
//! shadow verdict side by side with their evidence and bands
//! ([`instance_section`]). Both render nothing when no shadow runs, so
//! the pages are unchanged without one. The shadow verdict is never
//! published: the pages say so beside it.

use std::fmt::Write as _;

use kura_schemas::{RolloutGate, ShadowConfigSource};

use crate::debug::html::{escape, instance_href};
use crate::model::GateLimits;
use crate::view::{InstanceView, ShadowView, Standing};

/// At most this many disagreeing instances are listed on the fleet page
/// (the count says how many there are).
pub const MAX_FLEET_DISAGREEMENTS: usize = 50;

/// What the fleet page shows of the shadow configuration, gathered with
/// the window under the view's read lock.
#[derive(Debug, Clone, Default)]
pub struct ShadowSummary {
    /// Instances with a shadow verdict.
    pub judged: usize,
    /// Instances whose shadow verdict or signal differs from the live one.
    pub disagreeing: usize,
    /// The first [`MAX_FLEET_DISAGREEMENTS`] of them, worst live standing
    /// first, then by `namespace/name`.
    pub rows: Vec<InstanceView>,
}

impl ShadowSummary {
    /// Counts one instance and keeps it when it disagrees (call
    /// [`ShadowSummary::finish`] after the last one).
    pub fn count<'a>(&mut self, v: &'a InstanceView, kept: &mut Vec<&'a InstanceView>) {
        if v.shadow.is_none() {
            return;
        }
        self.judged += 1;
        if v.shadow_disagrees() {
            self.disagreeing += 1;
            kept.push(v);
        }
    }

    /// Orders the disagreements kept, bounds them and copies them out.
    pub fn finish(&mut self, mut kept: Vec<&InstanceView>) {
        kept.sort_by(|a, b| {
            Standing::of(b.gate.as_deref())
                .cmp(&Standing::of(a.gate.as_deref()))
                .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
        });
        kept.truncate(MAX_FLEET_DISAGREEMENTS);
        self.rows = kept.into_iter().cloned().collect();
    }
}

fn verdict_cell(gate: Option<&RolloutGate>) -> String {
    let standing = Standing::of(gate);
    let signal = gate
        .and_then(|g| g.signal)
        .map(|s| format!(" <code>{s}</code>"))
        .unwrap_or_default();
    format!(
        "<span class=\"badge {}\">{}</span>{signal}",
        standing.token(),
        standing.word()
    )
}

fn evidence_cell(gate: Option<&RolloutGate>) -> String {
    match gate {
        None => "not judged yet".to_owned(),
        Some(g) if g.evidence.is_empty() && g.signal.is_none() => {
            "every gated signal passes".to_owned()
        }
        Some(g) if g.evidence.is_empty() => g.signal.map(|s| s.to_string()).unwrap_or_default(),
        Some(g) => g
            .evidence
            .iter()
            .map(|e| escape(&e.figures()))
            .collect::<Vec<_>>()
            .join("<br>"),
    }
}

fn source_word(source: ShadowConfigSource) -> &'static str {
    match source {
        ShadowConfigSource::File => "the shadow file",
        ShadowConfigSource::FileAndAnnotation => {
            "the instance's gate-config annotation over the shadow file"
        }
    }
}

/// The fleet page's shadow section: how many instances the shadow judges
/// differently, and the first of them with both verdicts and evidences.
/// Empty when no instance has a shadow verdict.
pub fn fleet_section(summary: &ShadowSummary) -> String {
    if summary.judged == 0 {
        return String::new();
    }
    let mut out = format!(
        "<section id=\"shadow\" data-live><h2>Shadow configuration</h2>\
<p>The shadow gate configuration judges {} of {} instances differently from the live one \
(shown here only: never written to status, conditions or Events).</p>",
        summary.disagreeing, summary.judged
    );
    if summary.rows.is_empty() {
        out.push_str("</section>\n");
        return out;
    }
    out.push_str(
        "<div class=\"scroll\"><table id=\"shadow-disagreements\"><caption>Disagreements, \
worst live verdict first.</caption><thead><tr><th scope=\"col\">instance</th>\
<th scope=\"col\">live verdict</th><th scope=\"col\">live evidence</th>\
<th scope=\"col\">shadow verdict</th><th scope=\"col\">shadow evidence</th></tr></thead><tbody>",
    );
    for v in &summary.rows {
        let shadow = v.shadow.as_ref().map(|s| &*s.gate);
        let _ = write!(
            out,
            "<tr class=\"shadow-disagrees\"><th scope=\"row\"><a href=\"{}\">{}/{}</a></th>\
<td>{}</td><td class=\"evidence\">{}</td><td>{}</td><td class=\"evidence\">{}</td></tr>",
            escape(&instance_href(&v.namespace, &v.name)),
            escape(&v.namespace),
            escape(&v.name),
            verdict_cell(v.gate.as_deref()),
            evidence_cell(v.gate.as_deref()),
            verdict_cell(shadow),
            evidence_cell(shadow),
        );
    }
    out.push_str("</tbody></table></div>");
    if summary.disagreeing > summary.rows.len() {
        let _ = write!(
            out,
            "<p class=\"muted\">The first {} are listed; every one is in the verdict API \
(<code>shadow</code>) and in <code>kura_instance_shadow_disagrees</code>.</p>",
            summary.rows.len()
        );
    }
    out.push_str("</section>\n");
    out
}

fn band(top: Option<u64>) -> String {
    top.map_or_else(|| "–".to_owned(), |t| t.to_string())
}

fn bands(limits: Option<&GateLimits>) -> [(String, String); 4] {
    [
        (
            "fd timeouts band top",
            limits.and_then(|l| l.fd_timeout_band_top),
        ),
        ("outbox band top", limits.and_then(|l| l.outbox_band_top)),
        (
            "replication lag band top",
            limits.and_then(|l| l.replication_lag_band_top),
        ),
        (
            "peer failures band top",
            limits.and_then(|l| l.peer_failure_band_top),
        ),
    ]
    .map(|(name, top)| (name.to_owned(), band(top)))
}

/// The instance page's shadow section: the live and the shadow verdict
/// side by side, disagreement first in words. `live_limits`: the limits
/// the live verdict compared against. Empty without a shadow verdict.
pub fn instance_section(v: &InstanceView, live_limits: Option<&GateLimits>) -> String {
    let Some(shadow) = v.shadow.as_ref() else {
        return String::new();
    };
    let ShadowView {
        gate,
        config_source,
        limits,
    } = &**shadow;
    let disagrees = v.shadow_disagrees();
    let mut out = format!(
        "<h2>Shadow configuration</h2><section id=\"shadow\" data-live><p class=\"{}\">{}</p>",
        if disagrees {
            "shadow-disagrees"
        } else {
            "shadow-agrees"
        },
        if disagrees {
            format!(
                "<strong>The shadow configuration disagrees</strong>: it judges this instance \
<strong>{}</strong> where the live configuration judges it {}. The shadow verdict is shown \
here only, never written to status, conditions or Events.",
                Standing::of(Some(gate)).word(),
                Standing::of(v.gate.as_deref()).word()
            )
        } else {
            "The shadow configuration agrees with the live one.".to_owned()
        }
    );
    out.push_str(
        "<table id=\"shadow-side-by-side\"><thead><tr><th scope=\"col\"></th>\
<th scope=\"col\">live (published)</th><th scope=\"col\">shadow (never published)</th></tr></thead><tbody>",
    );
    let _ = write!(
        out,
        "<tr><th scope=\"row\">verdict</th><td>{}</td><td>{}</td></tr>\
<tr><th scope=\"row\">evidence</th><td class=\"evidence\">{}</td><td class=\"evidence\">{}</td></tr>",
        verdict_cell(v.gate.as_deref()),
        verdict_cell(Some(gate)),
        evidence_cell(v.gate.as_deref()),
        evidence_cell(Some(gate)),
    );
    for ((name, live), (_, shadow)) in bands(live_limits).into_iter().zip(bands(Some(limits))) {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{name}</th><td class=\"num\">{live}</td><td class=\"num\">{shadow}</td></tr>"
        );
    }
    let _ = write!(
        out,
        "<tr><th scope=\"row\">configuration</th><td>the cluster's (--gate-config{})</td><td>{}</td></tr>",
        if *config_source == ShadowConfigSource::FileAndAnnotation {
            " and the annotation"
        } else {
            ""
        },
        source_word(*config_source)
    );
    if let Some(error) = &gate.config_error {
        let _ = write!(
            out,
            "<tr><th scope=\"row\">config error</th><td></td><td>{}</td></tr>",
            escape(error)
        );
    }
    out.push_str("</tbody></table></section>");
    out
}
