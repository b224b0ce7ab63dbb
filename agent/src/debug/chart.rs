//! The instance page's history chart, drawn on the server as inline SVG:
//! one panel per charted counter (the bucket maxima as a line with a point
//! per bucket, the band top as a dashed step line), and the verdict as a
//! colour strip underneath, each bucket titled and the strip's runs also
//! written out as text (colour never carries a verdict alone).

use std::fmt::Write as _;

use jiff::Timestamp;

use crate::debug::html::{clock_text, escape};
use crate::view::{BandTops, HistoryPoint, HistoryView, Standing};

/// Drawing area of a panel, in SVG user units.
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 20.0;

/// One charted counter.
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// The field's name in `status.rolloutHealth`.
    pub field: &'static str,
    /// Its label.
    pub label: &'static str,
    value: fn(&HistoryPoint) -> Option<u64>,
    band: fn(&BandTops) -> Option<u64>,
}

/// The four charted counters, in page order (the replication lag next to
/// the outbox: the pull-era backlog beside the push-era one).
pub const COUNTERS: [Counter; 4] = [
    Counter {
        field: "fdTimeoutCount",
        label: "fd timeouts",
        value: |p| p.fd_timeouts,
        band: |b| b.fd_timeouts,
    },
    Counter {
        field: "peerConnectionFailures",
        label: "peer connection failures",
        value: |p| p.peer_failures,
        band: |b| b.peer_failures,
    },
    Counter {
        field: "outboxMessages",
        label: "outbox messages",
        value: |p| p.outbox,
        band: |b| b.outbox,
    },
    Counter {
        field: "replicationLagEntries",
        label: "replication lag entries",
        value: |p| p.replication_lag,
        band: |b| b.replication_lag,
    },
];

fn x_of(i: usize, n: usize) -> f64 {
    let inner = WIDTH - LEFT - RIGHT;
    LEFT + inner * (i as f64 + 0.5) / n.max(1) as f64
}

fn x_at(t: Timestamp, h: &HistoryView) -> f64 {
    let span = (h.end.as_second() - h.start.as_second()).max(1) as f64;
    let f = ((t.as_second() - h.start.as_second()) as f64 / span).clamp(0.0, 1.0);
    LEFT + (WIDTH - LEFT - RIGHT) * f
}

/// A "nice" axis top at or above `max` (1, 2 or 5 times a power of ten).
fn nice_top(max: u64) -> u64 {
    let max = max.max(1);
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            let top = step.saturating_mul(m);
            if top >= max {
                return top;
            }
        }
        if step > u64::MAX / 10 {
            return u64::MAX;
        }
        step *= 10;
    }
}

/// The band tops in force over the window, as `(from, to, top)` spans.
fn band_spans(
    h: &HistoryView,
    band: fn(&BandTops) -> Option<u64>,
) -> Vec<(Timestamp, Timestamp, u64)> {
    let mut spans = Vec::new();
    for (i, change) in h.bands.iter().enumerate() {
        let from = change.from.max(h.start);
        let to = h
            .bands
            .get(i + 1)
            .map_or(h.end, |next| next.from.min(h.end));
        if let Some(top) = band(&change.tops)
            && from < to
        {
            spans.push((from, to, top));
        }
    }
    spans
}

/// One counter's panel.
pub fn panel(h: &HistoryView, c: &Counter, now: Timestamp) -> String {
    let n = h.points.len();
    let values: Vec<Option<u64>> = h.points.iter().map(c.value).collect();
    let spans = band_spans(h, c.band);
    let max = values
        .iter()
        .flatten()
        .copied()
        .chain(spans.iter().map(|s| s.2))
        .max();
    let top = nice_top(max.unwrap_or(1).saturating_add(max.unwrap_or(1) / 10));
    let y = |v: u64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - (v as f64 / top as f64).min(1.0));
    let latest = values.iter().rev().flatten().next().copied();
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure class=\"chart\" data-field=\"{}\"><figcaption>{} <span class=\"muted\">({}): {}</span></figcaption>\
<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{} over the last hour\">",
        c.field,
        c.label,
        c.field,
        latest.map_or_else(|| "not reported".to_owned(), |v| format!("now {v}")),
        c.label,
    );
    // Axes and grid.
    let y0 = y(0);
    let _ = write!(
        svg,
        "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/>\
<line class=\"axis\" x1=\"{LEFT}\" y1=\"{y0:.1}\" x2=\"{:.1}\" y2=\"{y0:.1}\"/>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{top}</text>\
<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
        y(top),
        WIDTH - RIGHT,
        y(top),
        WIDTH - RIGHT,
        LEFT - 6.0,
        y(top) + 4.0,
        LEFT - 6.0,
        y0 + 4.0,
    );
    for (x, label) in [
        (LEFT, clock_text(h.start, now)),
        ((LEFT + WIDTH - RIGHT) / 2.0, "−30 min".to_owned()),
        (WIDTH - RIGHT, "now".to_owned()),
    ] {
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - 5.0,
            escape(&label)
        );
    }
    // The band top: a dashed step line with its value at the right.
    if !spans.is_empty() {
        let mut points = String::new();
        for (k, (from, to, top_value)) in spans.iter().enumerate() {
            let yy = y(*top_value);
            if k > 0 {
                points.push(' ');
            }
            let _ = write!(
                points,
                "{:.1},{yy:.1} {:.1},{yy:.1}",
                x_at(*from, h),
                x_at(*to, h)
            );
        }
        let _ = write!(
            svg,
            "<polyline class=\"band\" points=\"{points}\"><title>band top</title></polyline>"
        );
        if let Some((_, _, last)) = spans.last() {
            let _ = write!(
                svg,
                "<text class=\"band-label\" x=\"{:.1}\" y=\"{:.1}\">band top {last}</text>",
                WIDTH - RIGHT + 4.0,
                y(*last) + 4.0
            );
        }
    }
    // The series: a line through consecutive buckets, a point per bucket.
    let mut run: Vec<String> = Vec::new();
    let mut lines = String::new();
    let flush = |run: &mut Vec<String>, lines: &mut String| {
        if run.len() > 1 {
            let _ = write!(
                lines,
                "<polyline class=\"series\" points=\"{}\"/>",
                run.join(" ")
            );
        }
        run.clear();
    };
    let mut dots = String::new();
    for (i, (p, v)) in h.points.iter().zip(&values).enumerate() {
        match v {
            Some(v) => {
                let (xx, yy) = (x_of(i, n), y(*v));
                run.push(format!("{xx:.1},{yy:.1}"));
                let _ = write!(
                    dots,
                    "<circle class=\"pt\" cx=\"{xx:.1}\" cy=\"{yy:.1}\" r=\"2.2\"><title>{} {}: {v}</title></circle>",
                    clock_text(p.start, now),
                    c.label
                );
            }
            None => flush(&mut run, &mut lines),
        }
    }
    flush(&mut run, &mut lines);
    svg.push_str(&lines);
    svg.push_str(&dots);
    if latest.is_none() {
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">not reported in the last hour</text>",
            (LEFT + WIDTH - RIGHT) / 2.0,
            HEIGHT / 2.0
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// The verdict strip: one rectangle per bucket, and the runs as text.
pub fn strip(h: &HistoryView, now: Timestamp) -> String {
    let n = h.points.len().max(1);
    let inner = WIDTH - LEFT - RIGHT;
    let w = inner / n as f64;
    let mut svg = format!(
        "<figure class=\"strip\"><figcaption>verdict <span class=\"muted\">(worst per {} s bucket)</span></figcaption>\
<svg viewBox=\"0 0 {WIDTH} 34\" role=\"img\" aria-label=\"verdict over the last hour\">",
        h.bucket_seconds
    );
    for (i, p) in h.points.iter().enumerate() {
        let (class, word) = match p.standing {
            Some(s) => (s.token(), s.word()),
            None => ("none", "no sweep"),
        };
        let _ = write!(
            svg,
            "<rect class=\"st-{class}\" x=\"{:.2}\" y=\"2\" width=\"{:.2}\" height=\"16\"><title>{}: {word}</title></rect>",
            LEFT + w * i as f64,
            w + 0.05,
            clock_text(p.start, now),
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{LEFT}\" y=\"31\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"31\" text-anchor=\"middle\">now</text></svg>",
        escape(&clock_text(h.start, now)),
        WIDTH - RIGHT
    );
    svg.push_str("<ol class=\"runs\">");
    for (standing, from, to) in runs(h) {
        let (class, word) = match standing {
            Some(s) => (s.token(), s.word()),
            None => ("", "no sweep"),
        };
        let until = if to >= h.end {
            "now".to_owned()
        } else {
            clock_text(to, now)
        };
        let _ = write!(
            svg,
            "<li class=\"{class}\">{word} {}–{}</li>",
            clock_text(from, now),
            until
        );
    }
    svg.push_str("</ol></figure>");
    svg
}

/// Consecutive buckets of one standing: `(standing, from, to)`.
pub fn runs(h: &HistoryView) -> Vec<(Option<Standing>, Timestamp, Timestamp)> {
    let mut out: Vec<(Option<Standing>, Timestamp, Timestamp)> = Vec::new();
    let step = jiff::SignedDuration::from_secs(h.bucket_seconds);
    for p in &h.points {
        let end = p.start.checked_add(step).unwrap_or(p.start);
        match out.last_mut() {
            Some(last) if last.0 == p.standing => last.2 = end,
            _ => out.push((p.standing, p.start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_top(0), 1);
        assert_eq!(nice_top(1), 1);
        assert_eq!(nice_top(3), 5);
        assert_eq!(nice_top(8), 10);
        assert_eq!(nice_top(66), 100);
        assert_eq!(nice_top(101), 200);
        assert_eq!(nice_top(u64::MAX), u64::MAX);
    }
}
