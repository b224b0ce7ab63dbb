//! Per-instance Prometheus series, rendered straight from the
//! [`FleetView`](crate::debug::FleetView) at scrape time.
//!
//! Rendering from the view (instead of registering gauges in the `metrics`
//! recorder) makes removal exact: an instance that leaves the view leaves
//! `/metrics` on the next scrape, never frozen at its last value. Labels are
//! `namespace` and `instance` only (plus a fixed-set `verdict`/`signal`, and
//! `image` for the version distribution): nothing with unbounded
//! cardinality such as pod names or IPs.
//!
//! A value the aggregate does not have (e.g. `outboxMessages` on the newest
//! nodes) is not exported at all: absent is never 0.

use std::collections::BTreeMap;
use std::fmt::Write;

use jiff::Timestamp;
use kura_schemas::{AgentVerdict, Signal};

use crate::debug::InstanceView;

/// Every per-instance series name with its help text and type.
pub const SERIES: [(&str, &str); 14] = [
    (
        "kura_instance_ready",
        "1 when every expected pod was sampled and reports ready.",
    ),
    (
        "kura_instance_serving",
        "1 when every expected pod was sampled and is serving.",
    ),
    (
        "kura_instance_ring_consistent",
        "1 when every expected pod was sampled and all see the same ring.",
    ),
    (
        "kura_instance_sampled_pods",
        "Pods with a valid report in the last sweep.",
    ),
    (
        "kura_instance_expected_pods",
        "spec.replicas of the instance.",
    ),
    (
        "kura_instance_memory_pressure_state",
        "Highest memory pressure state over the sampled pods (2 = critical).",
    ),
    (
        "kura_instance_outbox_messages",
        "Sum of outbox_messages; absent when no pod reports it.",
    ),
    (
        "kura_instance_fd_timeouts",
        "Reset-clamped sum of fd_timeout_count.",
    ),
    (
        "kura_instance_peer_connection_failures",
        "Reset-clamped sum of peer_connection_failure_count; absent when no pod reports it.",
    ),
    (
        "kura_instance_sample_age_seconds",
        "Age of the oldest valid sample of the last aggregate, at scrape time.",
    ),
    (
        "kura_instance_gate_verdict",
        "1 for the instance's current gate verdict (healthy, unhealthy, hard_stop), 0 for the others.",
    ),
    (
        "kura_instance_gate_signal",
        "1 for the signal holding the instance (fixed set), absent when healthy.",
    ),
    (
        "kura_instance_baseline_fd_timeouts",
        "Effective fd-timeout baseline the gate compares against; absent without a baseline.",
    ),
    (
        "kura_instances_by_image",
        "Instances by spec.image (the fleet's version distribution).",
    ),
];

fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, name: &str) {
    if let Some((_, help)) = SERIES.iter().find(|(n, _)| *n == name) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
    }
}

/// Renders every per-instance series for `instances` at `now`.
pub fn render(instances: &[InstanceView], now: Timestamp) -> String {
    let mut out = String::new();
    let labels: Vec<String> = instances
        .iter()
        .map(|v| {
            format!(
                "namespace=\"{}\",instance=\"{}\"",
                escape_label(&v.namespace),
                escape_label(&v.name)
            )
        })
        .collect();
    type Value = fn(&InstanceView, Timestamp) -> Option<f64>;
    let plain: [(&str, Value); 10] = [
        ("kura_instance_ready", |v, _| {
            v.health.as_ref().map(|h| f64::from(u8::from(h.ready)))
        }),
        ("kura_instance_serving", |v, _| {
            v.health.as_ref().map(|h| f64::from(u8::from(h.serving)))
        }),
        ("kura_instance_ring_consistent", |v, _| {
            v.health
                .as_ref()
                .map(|h| f64::from(u8::from(h.ring_consistent)))
        }),
        ("kura_instance_sampled_pods", |v, _| {
            v.health.as_ref().map(|h| f64::from(h.sampled_pods))
        }),
        ("kura_instance_expected_pods", |v, _| {
            v.health.as_ref().map(|h| f64::from(h.expected_pods))
        }),
        ("kura_instance_memory_pressure_state", |v, _| {
            v.health
                .as_ref()
                .map(|h| f64::from(h.memory_pressure_state))
        }),
        ("kura_instance_outbox_messages", |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.outbox_messages)
                .map(|n| n as f64)
        }),
        ("kura_instance_fd_timeouts", |v, _| {
            v.health.as_ref().map(|h| h.fd_timeout_count as f64)
        }),
        ("kura_instance_peer_connection_failures", |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.peer_connection_failures)
                .map(|n| n as f64)
        }),
        ("kura_instance_sample_age_seconds", |v, now| {
            let at = v.health.as_ref()?.sampled_at?;
            Some(now.duration_since(at).as_secs_f64())
        }),
    ];
    for (name, value) in plain {
        header(&mut out, name);
        for (v, l) in instances.iter().zip(&labels) {
            if let Some(x) = value(v, now) {
                let _ = writeln!(out, "{name}{{{l}}} {x}");
            }
        }
    }
    header(&mut out, "kura_instance_baseline_fd_timeouts");
    for (v, l) in instances.iter().zip(&labels) {
        if let Some(b) = v
            .gate
            .as_ref()
            .and_then(|g| g.effective_baseline.fd_timeout_count)
        {
            let _ = writeln!(out, "kura_instance_baseline_fd_timeouts{{{l}}} {b}");
        }
    }
    header(&mut out, "kura_instance_gate_verdict");
    for (v, l) in instances.iter().zip(&labels) {
        let Some(gate) = &v.gate else { continue };
        for verdict in [
            AgentVerdict::Healthy,
            AgentVerdict::Unhealthy,
            AgentVerdict::HardStop,
        ] {
            let x = u8::from(gate.verdict == verdict);
            let _ = writeln!(
                out,
                "kura_instance_gate_verdict{{{l},verdict=\"{}\"}} {x}",
                verdict.as_str()
            );
        }
    }
    header(&mut out, "kura_instance_gate_signal");
    for (v, l) in instances.iter().zip(&labels) {
        if let Some(signal) = v.gate.as_ref().and_then(|g| g.signal) {
            debug_assert!(Signal::ALL.contains(&signal));
            let _ = writeln!(
                out,
                "kura_instance_gate_signal{{{l},signal=\"{signal}\"}} 1"
            );
        }
    }
    header(&mut out, "kura_instances_by_image");
    let mut by_image: BTreeMap<&str, u64> = BTreeMap::new();
    for v in instances {
        if let Some(image) = &v.spec_image {
            *by_image.entry(image.as_str()).or_default() += 1;
        }
    }
    for (image, n) in by_image {
        let _ = writeln!(
            out,
            "kura_instances_by_image{{image=\"{}\"}} {n}",
            escape_label(image)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn an_empty_view_renders_only_headers() {
        let text = render(&[], Timestamp::UNIX_EPOCH);
        assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
    }
}
