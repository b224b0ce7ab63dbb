//! Per-instance Prometheus series, rendered straight from the
//! [`FleetView`](crate::view::FleetView) at scrape time.
//!
//! Rendering from the view (instead of registering gauges in the `metrics`
//! recorder) makes removal exact: an instance that leaves the view leaves
//! `/metrics` on the next scrape, never frozen at its last value. Labels are
//! `kura_namespace` and `kura_instance` only (plus a fixed-set `verdict`/`signal`, and
//! `image` for the version distribution): nothing with unbounded
//! cardinality such as pod names or IPs.
//!
//! With a shadow gate configuration (`run --shadow-gate-config`) the
//! shadow verdict has its own families, `kura_instance_shadow_gate_verdict`,
//! `kura_instance_shadow_gate_signal` and `kura_instance_shadow_disagrees`,
//! each labelled `config="shadow"`; the live verdict's families keep their
//! names and labels. A shadow series under the live name would be picked up
//! by every query already written against it (an Argo `AnalysisTemplate`'s
//! `max(kura_instance_gate_verdict{verdict="healthy"})` would pass a
//! rollout the live gate holds), so the shadow reaches no consumer that
//! does not ask for it by name.
//!
//! A value the aggregate does not have (e.g. `outboxMessages` on the newest
//! nodes, or a baseline before the first image change) is not exported at
//! all: absent is never 0.
//!
//! The instance's labels are `kura_namespace` and `kura_instance`, not
//! `namespace` and `instance`: Prometheus sets those two on every scraped
//! series itself (the target's namespace and address), so a scrape without
//! `honorLabels` would rename ours to `exported_*` and every query on them
//! would match nothing (issue 31). These names collide with nothing a scrape
//! adds, whatever its settings.

use std::collections::BTreeMap;
use std::fmt::Write;

use jiff::Timestamp;
use kura_schemas::{AgentVerdict, Signal};

use crate::model::InstanceKey;
use crate::telemetry::label::SHADOW;
use crate::view::{FleetView, InstanceView};

/// One per-instance gauge whose value comes from the instance alone.
struct Gauge {
    name: &'static str,
    help: &'static str,
    value: fn(&InstanceView, Timestamp) -> Option<f64>,
}

fn flag(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// The plain per-instance gauges, in render order.
const GAUGES: [Gauge; 25] = [
    Gauge {
        name: "kura_instance_ready",
        help: "1 when every expected pod was sampled and reports ready.",
        value: |v, _| v.health.as_ref().map(|h| flag(h.ready)),
    },
    Gauge {
        name: "kura_instance_serving",
        help: "1 when every expected pod was sampled and is serving.",
        value: |v, _| v.health.as_ref().map(|h| flag(h.serving)),
    },
    Gauge {
        name: "kura_instance_ring_consistent",
        help: "1 when every expected pod was sampled and all see the same ring.",
        value: |v, _| v.health.as_ref().map(|h| flag(h.ring_consistent)),
    },
    Gauge {
        name: "kura_instance_sampled_pods",
        help: "Pods with a valid report in the last sweep.",
        value: |v, _| v.health.as_ref().map(|h| f64::from(h.sampled_pods)),
    },
    Gauge {
        name: "kura_instance_expected_pods",
        help: "spec.replicas of the instance.",
        value: |v, _| v.health.as_ref().map(|h| f64::from(h.expected_pods)),
    },
    Gauge {
        name: "kura_instance_memory_pressure_state",
        help: "Highest memory pressure state over the sampled pods (2 = critical).",
        value: |v, _| {
            v.health
                .as_ref()
                .map(|h| f64::from(h.memory_pressure_state))
        },
    },
    Gauge {
        name: "kura_instance_bootstrap_inflight_peers",
        help: "Sum of bootstrap_inflight_peers (gate check 9 fails above 0); absent when no pod reports it.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.bootstrap_inflight_peers)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_backfill_pending",
        help: "1 while the initial catch-up has not settled: backfillInitialCycle pending or a value this agent does not know (gate check 10); 0 when complete or degraded; absent when no pod reports it.",
        value: |v, _| {
            v.health
                .as_ref()
                .filter(|h| !h.backfill_initial_cycle.is_empty())
                .map(|h| {
                    flag(kura_gate::checks::backfill_pending(
                        &h.backfill_initial_cycle,
                    ))
                })
        },
    },
    Gauge {
        name: "kura_instance_backfill_degraded",
        help: "1 when any sampled pod reports a degraded backfill (gate check 11).",
        value: |v, _| v.health.as_ref().map(|h| flag(h.backfill_degraded)),
    },
    Gauge {
        name: "kura_instance_backfill_budget_exhausted_peers",
        help: "Sum of backfill_budget_exhausted_peers (gate check 12 fails above 0); absent when no pod reports it.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.backfill_budget_exhausted_peers)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_outbox_messages",
        help: "Sum of outbox_messages; absent when no pod reports it.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.outbox_messages)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_replication_lag_entries",
        help: "Sum of the pull-sync pods' replication lag (GET /status/cluster, lag_entries of replica links; gate check 18); absent when no pod reports one.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.replication_lag_entries)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_fenced_pods",
        help: "Sampled pods that run fenced serving (serving_authority.enabled); absent when none does.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.serving_authority.as_ref())
                .map(|a| f64::from(a.enabled_pods))
        },
    },
    Gauge {
        name: "kura_instance_valid_writers",
        help: "Fenced pods holding a valid grant (gate check 17 fails at 0); absent without fenced serving.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.serving_authority.as_ref())
                .map(|a| f64::from(a.valid_writers))
        },
    },
    Gauge {
        name: "kura_instance_serving_fenced",
        help: "1 while the fenced-serving grant is in Fencing: no pod may write (gate check 16, a hard stop); 0 otherwise; absent without fenced serving.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.serving_authority.as_ref())
                .map(|a| flag(a.is_fencing()))
        },
    },
    Gauge {
        name: "kura_instance_fd_timeouts",
        help: "Reset-clamped sum of fd_timeout_count.",
        value: |v, _| v.health.as_ref().map(|h| h.fd_timeout_count as f64),
    },
    Gauge {
        name: "kura_instance_peer_connection_failures",
        help: "Reset-clamped sum of peer_connection_failure_count; absent when no pod reports it.",
        value: |v, _| {
            v.health
                .as_ref()
                .and_then(|h| h.peer_connection_failures)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_sample_age_seconds",
        help: "Age of the oldest valid sample of the last aggregate, at scrape time; absent without a valid sample.",
        // Never negative: a wall clock stepped back between the sweep and
        // the scrape (NTP, a resumed VM) reads as a fresh sample, not as a
        // sample from the future (the gate judges future skew itself).
        value: |v, now| {
            let at = v.health.as_ref()?.sampled_at?;
            Some(now.duration_since(at).as_secs_f64().max(0.0))
        },
    },
    Gauge {
        name: "kura_instance_baseline_outbox_messages",
        help: "Effective outbox baseline the gate compares against; absent without one.",
        value: |v, _| {
            v.gate
                .as_ref()
                .and_then(|g| g.effective_baseline.outbox_messages)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_baseline_replication_lag_entries",
        help: "Replication-lag baseline the gate compares against; absent without one.",
        value: |v, _| {
            v.gate
                .as_ref()
                .and_then(|g| g.effective_baseline.replication_lag_entries)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_baseline_fd_timeouts",
        help: "Effective fd-timeout baseline the gate compares against; absent without one.",
        value: |v, _| {
            v.gate
                .as_ref()
                .and_then(|g| g.effective_baseline.fd_timeout_count)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_baseline_peer_connection_failures",
        help: "Effective peer-failure baseline the gate compares against; absent without one.",
        value: |v, _| {
            v.gate
                .as_ref()
                .and_then(|g| g.effective_baseline.peer_connection_failures)
                .map(|n| n as f64)
        },
    },
    Gauge {
        name: "kura_instance_soak_eligible",
        help: "1 when the instance was healthy at baseline capture (held to its baseline), 0 when not; absent without a verdict.",
        value: |v, _| v.gate.as_ref().map(|g| flag(g.soak_eligible)),
    },
    Gauge {
        name: "kura_instance_healthy_seconds",
        help: "How long the gate verdict had been healthy without a break at the last sweep (evaluatedAt minus healthySince, the agent's clock); 0 when not healthy; absent without a verdict.",
        // The soak of the Argo Rollouts Prometheus templates: a flap between
        // two scrapes (or two measurements) resets healthySince, so the
        // series says what sampling the verdict cannot.
        value: |v, _| {
            v.gate.as_ref().map(|g| match g.healthy_since {
                Some(since) if g.verdict == AgentVerdict::Healthy => {
                    g.evaluated_at.duration_since(since).as_secs_f64().max(0.0)
                }
                _ => 0.0,
            })
        },
    },
    Gauge {
        name: "kura_instance_converged",
        help: "1 when every tracked pod runs spec.image, 0 when one runs another image; absent when that is unknown.",
        value: |v, _| converged(v).map(flag),
    },
];

/// `kura_instance_gate_verdict{verdict}`.
pub const GATE_VERDICT: &str = "kura_instance_gate_verdict";
/// `kura_instance_gate_signal{signal}`.
pub const GATE_SIGNAL: &str = "kura_instance_gate_signal";
/// `kura_instance_shadow_gate_verdict{config="shadow",verdict}`.
pub const SHADOW_GATE_VERDICT: &str = "kura_instance_shadow_gate_verdict";
/// `kura_instance_shadow_gate_signal{config="shadow",signal}`.
pub const SHADOW_GATE_SIGNAL: &str = "kura_instance_shadow_gate_signal";
/// `kura_instance_shadow_disagrees{config="shadow"}`.
pub const SHADOW_DISAGREES: &str = "kura_instance_shadow_disagrees";
/// `kura_instances_running{image}` (was `kura_instances_by_image`).
pub const INSTANCES_BY_IMAGE: &str = "kura_instances_running";
/// `kura_instances_targeting{image}` (was `kura_instances_by_target_image`).
pub const INSTANCES_BY_TARGET_IMAGE: &str = "kura_instances_targeting";
/// `kura_instances_mixed_images`.
pub const INSTANCES_MIXED_IMAGES: &str = "kura_instances_mixed_images";

/// The series with a label beyond `namespace`/`instance`, and the
/// fleet-wide ones, with their help texts.
const LABELLED: [(&str, &str); 8] = [
    (
        GATE_VERDICT,
        "1 for the instance's current gate verdict (healthy, unhealthy, hard_stop), 0 for the others; absent without a verdict.",
    ),
    (
        GATE_SIGNAL,
        "1 for the signal holding the instance (fixed set), absent when healthy.",
    ),
    (
        SHADOW_GATE_VERDICT,
        "1 for the shadow gate configuration's verdict on the instance (--shadow-gate-config; never published), 0 for the others; absent without a shadow verdict.",
    ),
    (
        SHADOW_GATE_SIGNAL,
        "1 for the signal holding the instance under the shadow gate configuration, absent when the shadow finds it healthy.",
    ),
    (
        SHADOW_DISAGREES,
        "1 when the shadow gate configuration's verdict or signal differs from the live one, 0 when they agree; absent without a shadow verdict.",
    ),
    (
        INSTANCES_BY_IMAGE,
        "Instances whose every tracked pod runs this image (the fleet's observed version distribution).",
    ),
    (
        INSTANCES_BY_TARGET_IMAGE,
        "Instances by spec.image (the version they are asked to run).",
    ),
    (
        INSTANCES_MIXED_IMAGES,
        "Instances whose tracked pods run more than one image (mid-rollout).",
    ),
];

/// Every series name this module renders, in render order.
#[cfg(test)]
fn series_names() -> impl Iterator<Item = &'static str> {
    GAUGES
        .iter()
        .map(|g| g.name)
        .chain(LABELLED.iter().map(|(n, _)| *n))
}

/// The verdicts a [`GATE_VERDICT`] series is rendered for, every one of
/// them per instance.
pub const VERDICTS: [AgentVerdict; 4] = AgentVerdict::ALL;

/// What the instance's tracked pods run: `Some(image)` when every one runs
/// the same known image, `Err(())` when they run different known images,
/// `None` when there is no pod or an image is unknown (and no two known
/// images differ).
fn observed_image(v: &InstanceView) -> Option<Result<&str, ()>> {
    let mut seen: Option<&str> = None;
    let mut unknown = v.pods.is_empty();
    for image in v.pods.iter().map(|p| p.pod.image.as_deref()) {
        match (image, seen) {
            (None, _) => unknown = true,
            (Some(i), None) => seen = Some(i),
            (Some(i), Some(s)) if i != s => return Some(Err(())),
            (Some(_), Some(_)) => {}
        }
    }
    if unknown { None } else { seen.map(Ok) }
}

/// Whether every tracked pod runs `spec.image`: false as soon as one
/// runs another known image, unknown without pods or with a pod of
/// unknown image.
fn converged(v: &InstanceView) -> Option<bool> {
    let spec = v.spec_image.as_deref()?;
    let images = v.pods.iter().map(|p| p.pod.image.as_deref());
    if images.clone().flatten().any(|i| i != spec) {
        Some(false)
    } else if v.pods.is_empty() || images.clone().any(|i| i.is_none()) {
        None
    } else {
        Some(true)
    }
}

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

fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

fn labelled_header(out: &mut String, name: &str) {
    if let Some((_, help)) = LABELLED.iter().find(|(n, _)| *n == name) {
        header(out, name, help);
    }
}

/// The label set `kura_namespace="…",kura_instance="…"` of one instance.
fn instance_labels(v: &InstanceView) -> String {
    format!(
        "kura_namespace=\"{}\",kura_instance=\"{}\"",
        escape_label(&v.namespace),
        escape_label(&v.name)
    )
}

/// One family's series of `instances`: a plain gauge, the verdict, the
/// signal. Every family is gauge-typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Gauge(usize),
    Verdict,
    Signal,
    ShadowVerdict,
    ShadowSignal,
    ShadowDisagrees,
}

impl Family {
    /// The family after this one (`None`: the fleet-wide image counts
    /// come next).
    fn next(self) -> Option<Family> {
        match self {
            Family::Gauge(i) if i + 1 < GAUGES.len() => Some(Family::Gauge(i + 1)),
            Family::Gauge(_) => Some(Family::Verdict),
            Family::Verdict => Some(Family::Signal),
            Family::Signal => Some(Family::ShadowVerdict),
            Family::ShadowVerdict => Some(Family::ShadowSignal),
            Family::ShadowSignal => Some(Family::ShadowDisagrees),
            Family::ShadowDisagrees => None,
        }
    }

    fn header(self, out: &mut String) {
        match self {
            Family::Gauge(i) => header(out, GAUGES[i].name, GAUGES[i].help),
            Family::Verdict => labelled_header(out, GATE_VERDICT),
            Family::Signal => labelled_header(out, GATE_SIGNAL),
            Family::ShadowVerdict => labelled_header(out, SHADOW_GATE_VERDICT),
            Family::ShadowSignal => labelled_header(out, SHADOW_GATE_SIGNAL),
            Family::ShadowDisagrees => labelled_header(out, SHADOW_DISAGREES),
        }
    }

    fn rows<'a>(
        self,
        out: &mut String,
        instances: impl Iterator<Item = &'a InstanceView>,
        now: Timestamp,
    ) {
        for v in instances {
            match self {
                Family::Gauge(i) => {
                    let gauge = &GAUGES[i];
                    if let Some(x) = (gauge.value)(v, now) {
                        let _ = writeln!(out, "{}{{{}}} {x}", gauge.name, instance_labels(v));
                    }
                }
                Family::Verdict => {
                    let Some(gate) = &v.gate else { continue };
                    let l = instance_labels(v);
                    for verdict in VERDICTS {
                        let x = u8::from(gate.verdict == verdict);
                        let _ = writeln!(
                            out,
                            "{GATE_VERDICT}{{{l},verdict=\"{}\"}} {x}",
                            verdict.as_str()
                        );
                    }
                }
                Family::Signal => {
                    if let Some(signal) = v.gate.as_ref().and_then(|g| g.signal) {
                        debug_assert!(Signal::ALL.contains(&signal));
                        let l = instance_labels(v);
                        let _ = writeln!(out, "{GATE_SIGNAL}{{{l},signal=\"{signal}\"}} 1");
                    }
                }
                Family::ShadowVerdict => {
                    let Some(shadow) = &v.shadow else { continue };
                    let l = instance_labels(v);
                    for verdict in VERDICTS {
                        let x = u8::from(shadow.gate.verdict == verdict);
                        let _ = writeln!(
                            out,
                            "{SHADOW_GATE_VERDICT}{{{l},config=\"{SHADOW}\",verdict=\"{}\"}} {x}",
                            verdict.as_str()
                        );
                    }
                }
                Family::ShadowSignal => {
                    if let Some(signal) = v.shadow.as_ref().and_then(|s| s.gate.signal) {
                        let l = instance_labels(v);
                        let _ = writeln!(
                            out,
                            "{SHADOW_GATE_SIGNAL}{{{l},config=\"{SHADOW}\",signal=\"{signal}\"}} 1"
                        );
                    }
                }
                Family::ShadowDisagrees => {
                    if v.shadow.is_some() {
                        let l = instance_labels(v);
                        let x = u8::from(v.shadow_disagrees());
                        let _ = writeln!(out, "{SHADOW_DISAGREES}{{{l},config=\"{SHADOW}\"}} {x}");
                    }
                }
            }
        }
    }
}

/// The fleet-wide families: instances by observed image, by target
/// image, and with mixed images (one pass over every instance; a few
/// lines of output).
fn image_families<'a>(out: &mut String, instances: impl Iterator<Item = &'a InstanceView>) {
    let mut by_image: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_target: BTreeMap<&str, u64> = BTreeMap::new();
    let mut mixed = 0u64;
    for v in instances {
        match observed_image(v) {
            Some(Ok(image)) => *by_image.entry(image).or_default() += 1,
            Some(Err(())) => mixed += 1,
            None => {}
        }
        if let Some(image) = &v.spec_image {
            *by_target.entry(image.as_str()).or_default() += 1;
        }
    }
    for (name, counts) in [
        (INSTANCES_BY_IMAGE, by_image),
        (INSTANCES_BY_TARGET_IMAGE, by_target),
    ] {
        labelled_header(out, name);
        for (image, n) in counts {
            let _ = writeln!(out, "{name}{{image=\"{}\"}} {n}", escape_label(image));
        }
    }
    labelled_header(out, INSTANCES_MIXED_IMAGES);
    let _ = writeln!(out, "{INSTANCES_MIXED_IMAGES} {mixed}");
}

/// Renders every per-instance series for `instances` at `now`, in the
/// Prometheus text format (every family gauge-typed; a family with no
/// value keeps only its header).
pub fn render(instances: &[InstanceView], now: Timestamp) -> String {
    let mut out = String::new();
    let mut family = Some(Family::Gauge(0));
    while let Some(f) = family {
        f.header(&mut out);
        f.rows(&mut out, instances.iter(), now);
        family = f.next();
    }
    image_families(&mut out, instances.iter());
    out
}

/// Instances rendered per chunk of a streamed scrape.
pub const CHUNK_INSTANCES: usize = 256;

/// A scrape of the whole fleet rendered a chunk at a time (one family of
/// at most [`CHUNK_INSTANCES`] instances), each chunk read from the view
/// under its read lock and sent before the next is rendered: a scrape
/// holds one chunk instead of the whole body (which grows with the
/// fleet) plus a copy of every instance's view. The text is the
/// one [`render`] gives for a view that does not change during the
/// scrape; one that does (a sweep recorded between two chunks) shows
/// each series as it was when its chunk was read, as a scrape of
/// separately updated gauges would.
#[derive(Debug, Clone)]
pub struct FleetScrape {
    /// The family being rendered (`None`: the image counts, then done).
    family: Option<Family>,
    /// The last instance of the family already rendered.
    after: Option<InstanceKey>,
    done: bool,
}

impl Default for FleetScrape {
    fn default() -> Self {
        FleetScrape {
            family: Some(Family::Gauge(0)),
            after: None,
            done: false,
        }
    }
}

impl FleetScrape {
    /// The next chunk of text read from `view` at `now`; `None` when the
    /// scrape is complete.
    pub fn next_chunk(&mut self, view: &FleetView, now: Timestamp) -> Option<String> {
        if self.done {
            return None;
        }
        let mut out = String::new();
        let Some(family) = self.family else {
            view.read_instances(|all| image_families(&mut out, all));
            self.done = true;
            return Some(out);
        };
        if self.after.is_none() {
            family.header(&mut out);
        }
        let last = view.read_instances_after(self.after.as_ref(), |rest| {
            let chunk: Vec<&InstanceView> = rest.take(CHUNK_INSTANCES).collect();
            family.rows(&mut out, chunk.iter().copied(), now);
            (chunk.len() == CHUNK_INSTANCES)
                .then(|| {
                    chunk.last().map(|v| {
                        InstanceKey::new(
                            std::sync::Arc::clone(&v.namespace),
                            std::sync::Arc::clone(&v.name),
                        )
                    })
                })
                .flatten()
        });
        match last {
            Some(key) => self.after = Some(key),
            None => {
                self.after = None;
                self.family = family.next();
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::PodView;
    use kura_schemas::{BaselineCounters, RolloutGate, RolloutHealth};
    use std::sync::Arc;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pod(name: &str, image: Option<&str>) -> PodView {
        PodView {
            pod: Arc::new(crate::model::PodIdentity {
                name: name.into(),
                uid: format!("uid-{name}").into(),
                restart_count: 0,
                image: image.map(Into::into),
                ip: Some("10.1.2.3".into()),
            }),
            received_at: ts("2026-07-21T10:00:00Z"),
            error: None,
            outbox_messages: None,
            outbox_capacity: None,
            ring_fullness_percent: None,
            fence: None,
            report: None,
        }
    }

    fn health() -> RolloutHealth {
        serde_json::from_value(serde_json::json!({
            "schemaVersion": 1,
            "observedAt": "2026-07-21T10:00:10Z",
            "sampledAt": "2026-07-21T10:00:05Z",
            "observedGeneration": 3,
            "expectedPods": 2,
            "sampledPods": 2,
            "ready": true,
            "serving": true,
            "writerLockOwned": true,
            "initialDiscoveryCompleted": true,
            "generationConsistent": true,
            "ringConsistent": false,
            "ringMembers": 2,
            "bootstrapInflightPeers": 1,
            "backfillInitialCycle": "completed",
            "backfillingPeers": 0,
            "backfillDegraded": false,
            "backfillBudgetExhaustedPeers": null,
            "outboxMessages": 70,
            "fdTimeoutCount": 4,
            "peerConnectionFailures": null,
            "memoryPressureState": 2,
            "inflightRequests": 0,
            "counterResets": 0,
            "pods": [],
            "retiredCounters": {"fdTimeoutCount": 0, "peerConnectionFailures": null},
            "agent": "test"
        }))
        .expect("health")
    }

    fn gate() -> RolloutGate {
        RolloutGate {
            target_image: "img:2".into(),
            baseline_image: Some("img:1".into()),
            baseline_captured_at: Some(ts("2026-07-21T09:00:00Z")),
            baseline: BaselineCounters {
                replication_lag_entries: None,
                outbox_messages: Some(60),
                fd_timeout_count: Some(5),
                peer_connection_failures: None,
            },
            effective_baseline: BaselineCounters {
                replication_lag_entries: None,
                outbox_messages: Some(60),
                fd_timeout_count: Some(3),
                peer_connection_failures: None,
            },
            soak_eligible: true,
            verdict: AgentVerdict::HardStop,
            signal: Some(Signal::MemoryPressureCritical),
            healthy_since: None,
            evaluated_at: ts("2026-07-21T10:00:10Z"),
            evidence: vec![],
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    fn instance(name: &str, spec: &str, pods: Vec<PodView>) -> InstanceView {
        InstanceView {
            namespace: "kura".into(),
            name: name.into(),
            spec_image: Some(spec.into()),
            swept_at: Some(ts("2026-07-21T10:00:10Z")),
            pods,
            health: Some(Arc::new(health())),
            gate: Some(Arc::new(gate())),
            last_write: None,
            notes: vec![],
            shadow: None,
        }
    }

    /// The sample lines of `series`, without the name.
    fn values<'a>(text: &'a str, series: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.strip_prefix(series))
            .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
            .collect()
    }

    /// A view of `n` instances (every third without a verdict, every
    /// fifth with another target image, one name to escape).
    fn fleet(n: usize) -> FleetView {
        use crate::view::SweepRecord;
        let view = FleetView::new();
        for i in 0..n {
            let name = if i == 7 {
                "odd\"name".to_owned()
            } else {
                format!("i-{i:04}")
            };
            view.record_sweep(
                &InstanceKey::new("kura", name.as_str()),
                SweepRecord {
                    spec_image: if i % 5 == 0 { "img:1" } else { "img:2" },
                    current_pods: &[],
                    samples: &[],
                    health: Some(Arc::new(health())),
                    gate: (i % 3 != 0).then(|| Arc::new(gate())),
                    notes: vec![],
                    limits: None,
                    at: ts("2026-07-21T10:00:10Z"),
                },
            );
        }
        view
    }

    fn streamed(view: &FleetView, now: Timestamp) -> (String, usize) {
        let mut scrape = FleetScrape::default();
        let (mut text, mut chunks) = (String::new(), 0);
        while let Some(chunk) = scrape.next_chunk(view, now) {
            assert!(chunks < 10_000, "the scrape does not end");
            text.push_str(&chunk);
            chunks += 1;
        }
        (text, chunks)
    }

    #[test]
    fn a_streamed_scrape_is_the_whole_rendering_a_chunk_at_a_time() {
        let now = ts("2026-07-21T10:00:35Z");
        for n in [0, 1, CHUNK_INSTANCES, CHUNK_INSTANCES * 2 + 3] {
            let view = fleet(n);
            let (text, chunks) = streamed(&view, now);
            assert_eq!(text, render(&view.snapshot(), now), "{n} instances");
            // Every family takes ceil(n / chunk) chunks (one at least),
            // plus one for the image counts.
            // The gauges, the verdict and the signal, and the shadow's
            // verdict, signal and disagreement.
            let families = GAUGES.len() + 5;
            let per_family =
                n.div_ceil(CHUNK_INSTANCES).max(1) + usize::from(n > 0 && n % CHUNK_INSTANCES == 0);
            assert_eq!(chunks, families * per_family + 1, "{n} instances");
        }
    }

    #[test]
    fn a_chunk_holds_at_most_one_chunk_of_instances() {
        let now = ts("2026-07-21T10:00:35Z");
        let view = fleet(CHUNK_INSTANCES * 4);
        let mut scrape = FleetScrape::default();
        let whole = render(&view.snapshot(), now).len();
        let mut largest = 0;
        while let Some(chunk) = scrape.next_chunk(&view, now) {
            largest = largest.max(chunk.len());
        }
        // The largest family (the verdict: four lines an instance) in a
        // quarter of the fleet, against the whole text.
        assert!(
            largest * 20 < whole,
            "largest chunk {largest} of {whole} bytes"
        );
    }

    #[test]
    fn an_instance_leaving_mid_scrape_is_not_rendered_twice_nor_breaks_the_walk() {
        let now = ts("2026-07-21T10:00:35Z");
        let view = fleet(CHUNK_INSTANCES * 2);
        let mut scrape = FleetScrape::default();
        let mut text = scrape.next_chunk(&view, now).expect("first chunk");
        // The chunk's last instance leaves; the walk resumes after its key.
        let gone = format!("i-{:04}", CHUNK_INSTANCES - 1);
        view.retain(|k| *k.name != *gone);
        while let Some(chunk) = scrape.next_chunk(&view, now) {
            text.push_str(&chunk);
        }
        let ready: Vec<&str> = values(&text, "kura_instance_ready");
        assert_eq!(ready.len(), CHUNK_INSTANCES * 2, "{} lines", ready.len());
        assert_eq!(
            values(&text, "kura_instance_serving").len(),
            CHUNK_INSTANCES * 2 - 1
        );
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn an_empty_view_renders_headers_and_zero_mixed() {
        let text = render(&[], Timestamp::UNIX_EPOCH);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples, vec!["kura_instances_mixed_images 0"], "{text}");
        for name in series_names() {
            assert!(
                text.contains(&format!("# TYPE {name} gauge\n")),
                "{name} has no header"
            );
        }
    }

    #[test]
    fn every_series_name_is_distinct_and_prefixed() {
        let names: Vec<&str> = series_names().collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(names.iter().all(|n| n.starts_with("kura_instance")));
    }

    #[test]
    fn one_instance_renders_its_values_and_absent_stays_absent() {
        let v = instance(
            "acme",
            "img:2",
            vec![pod("acme-0", Some("img:2")), pod("acme-1", Some("img:2"))],
        );
        let text = render(&[v], ts("2026-07-21T10:00:35Z"));
        let l = "{kura_namespace=\"kura\",kura_instance=\"acme\"}";
        let one = |series: &str| values(&text, series);
        assert_eq!(one("kura_instance_ready"), vec![format!("{l} 1")]);
        assert_eq!(one("kura_instance_ring_consistent"), vec![format!("{l} 0")]);
        assert_eq!(
            one("kura_instance_memory_pressure_state"),
            vec![format!("{l} 2")]
        );
        assert_eq!(
            one("kura_instance_bootstrap_inflight_peers"),
            vec![format!("{l} 1")]
        );
        assert_eq!(
            one("kura_instance_outbox_messages"),
            vec![format!("{l} 70")]
        );
        assert_eq!(one("kura_instance_fd_timeouts"), vec![format!("{l} 4")]);
        assert_eq!(
            one("kura_instance_sample_age_seconds"),
            vec![format!("{l} 30")]
        );
        assert_eq!(
            one("kura_instance_baseline_outbox_messages"),
            vec![format!("{l} 60")]
        );
        // The effective baseline, not the captured one.
        assert_eq!(
            one("kura_instance_baseline_fd_timeouts"),
            vec![format!("{l} 3")]
        );
        assert_eq!(one("kura_instance_soak_eligible"), vec![format!("{l} 1")]);
        assert_eq!(one("kura_instance_converged"), vec![format!("{l} 1")]);
        // Absent in the aggregate: absent here, never 0.
        assert!(one("kura_instance_peer_connection_failures").is_empty());
        assert!(one("kura_instance_baseline_peer_connection_failures").is_empty());
        assert!(one("kura_instance_backfill_budget_exhausted_peers").is_empty());
        let mut verdicts = one(GATE_VERDICT);
        verdicts.sort_unstable();
        assert_eq!(
            verdicts,
            vec![
                "{kura_namespace=\"kura\",kura_instance=\"acme\",verdict=\"hard_stop\"} 1",
                "{kura_namespace=\"kura\",kura_instance=\"acme\",verdict=\"healthy\"} 0",
                "{kura_namespace=\"kura\",kura_instance=\"acme\",verdict=\"suspended\"} 0",
                "{kura_namespace=\"kura\",kura_instance=\"acme\",verdict=\"unhealthy\"} 0",
            ]
        );
        assert_eq!(
            one(GATE_SIGNAL),
            vec![
                "{kura_namespace=\"kura\",kura_instance=\"acme\",signal=\"memory_pressure_critical\"} 1"
            ]
        );
        assert_eq!(one(INSTANCES_BY_IMAGE), vec!["{image=\"img:2\"} 1"]);
    }

    #[test]
    fn healthy_seconds_is_the_unbroken_healthy_time_at_the_last_sweep() {
        let l = "{kura_namespace=\"kura\",kura_instance=\"acme\"}";
        let mut v = instance("acme", "img:2", vec![pod("acme-0", Some("img:2"))]);
        // A hard stop: not healthy, 0 (not absent: there is a verdict).
        let text = render(std::slice::from_ref(&v), ts("2026-07-21T10:00:35Z"));
        assert_eq!(
            values(&text, "kura_instance_healthy_seconds"),
            vec![format!("{l} 0")]
        );
        // Healthy since 10:00:00, judged at 10:00:10: 10 s, whatever the
        // scrape's time (the agent's sweep is what it measures).
        let mut gate = RolloutGate::clone(v.gate.as_ref().expect("gate"));
        gate.verdict = AgentVerdict::Healthy;
        gate.signal = None;
        gate.healthy_since = Some(ts("2026-07-21T10:00:00Z"));
        v.gate = Some(gate.clone().into());
        let text = render(std::slice::from_ref(&v), ts("2026-07-21T10:05:00Z"));
        assert_eq!(
            values(&text, "kura_instance_healthy_seconds"),
            vec![format!("{l} 10")]
        );
        // A healthySince left over on an unhealthy verdict counts nothing.
        gate.verdict = AgentVerdict::Unhealthy;
        v.gate = Some(gate.into());
        let text = render(std::slice::from_ref(&v), ts("2026-07-21T10:05:00Z"));
        assert_eq!(
            values(&text, "kura_instance_healthy_seconds"),
            vec![format!("{l} 0")]
        );
    }

    #[test]
    fn an_instance_without_aggregate_or_verdict_exports_no_value() {
        let mut v = instance("new", "img:1", vec![]);
        v.health = None;
        v.gate = None;
        let text = render(&[v], ts("2026-07-21T10:00:35Z"));
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("kura_instance=\"new\""))
            .collect();
        assert!(samples.is_empty(), "{samples:?}");
        assert_eq!(
            values(&text, INSTANCES_BY_TARGET_IMAGE),
            vec!["{image=\"img:1\"} 1"]
        );
        assert!(values(&text, INSTANCES_BY_IMAGE).is_empty());
    }

    #[test]
    fn the_version_distribution_counts_observed_images() {
        let fleet = [
            instance("a", "img:2", vec![pod("a-0", Some("img:2"))]),
            instance("b", "img:2", vec![pod("b-0", Some("img:1"))]),
            instance(
                "c",
                "img:2",
                vec![pod("c-0", Some("img:2")), pod("c-1", Some("img:1"))],
            ),
            instance(
                "d",
                "img:2",
                vec![pod("d-0", Some("img:2")), pod("d-1", None)],
            ),
            instance("e", "img:1", vec![pod("e-0", Some("img:1"))]),
        ];
        let text = render(&fleet, ts("2026-07-21T10:00:35Z"));
        assert_eq!(
            values(&text, INSTANCES_BY_IMAGE),
            vec!["{image=\"img:1\"} 2", "{image=\"img:2\"} 1"]
        );
        assert_eq!(
            values(&text, INSTANCES_BY_TARGET_IMAGE),
            vec!["{image=\"img:1\"} 1", "{image=\"img:2\"} 4"]
        );
        assert_eq!(values(&text, INSTANCES_MIXED_IMAGES), vec![" 1"]);
        let converged = values(&text, "kura_instance_converged");
        assert_eq!(
            converged,
            vec![
                "{kura_namespace=\"kura\",kura_instance=\"a\"} 1",
                "{kura_namespace=\"kura\",kura_instance=\"b\"} 0",
                "{kura_namespace=\"kura\",kura_instance=\"c\"} 0",
                "{kura_namespace=\"kura\",kura_instance=\"e\"} 1",
            ],
            "d has a pod of unknown image: unknown, not converged"
        );
    }

    #[test]
    fn a_removed_instance_leaves_no_series() {
        let a = instance("a", "img:2", vec![pod("a-0", Some("img:2"))]);
        let b = instance("b", "img:3", vec![pod("b-0", Some("img:3"))]);
        let now = ts("2026-07-21T10:00:35Z");
        let before = render(&[a.clone(), b], now);
        assert!(before.contains("kura_instance=\"b\""));
        assert!(before.contains("image=\"img:3\""));
        let after = render(&[a], now);
        assert!(!after.contains("kura_instance=\"b\""), "{after}");
        assert!(!after.contains("img:3"), "{after}");
    }

    #[test]
    fn a_shadow_verdict_has_its_own_series_and_the_live_ones_stay_as_they_are() {
        let plain = instance("acme", "img:2", vec![pod("acme-0", Some("img:2"))]);
        let without = render(std::slice::from_ref(&plain), ts("2026-07-21T10:00:35Z"));
        let mut shadowed = plain.clone();
        let mut healthy = gate();
        healthy.verdict = AgentVerdict::Healthy;
        healthy.signal = None;
        shadowed.shadow = Some(Box::new(crate::view::ShadowView {
            gate: Arc::new(healthy),
            config_source: kura_schemas::ShadowConfigSource::File,
            limits: crate::model::GateLimits {
                max_sample_age_seconds: 60,
                future_skew_seconds: 60,
                outbox_band_top: None,
                replication_lag_band_top: None,
                fd_timeout_band_top: None,
                peer_failure_band_top: None,
                counters_compared: true,
            },
        }));
        let with = render(std::slice::from_ref(&shadowed), ts("2026-07-21T10:00:35Z"));
        // No shadow: no shadow sample at all.
        for name in [SHADOW_GATE_VERDICT, SHADOW_GATE_SIGNAL, SHADOW_DISAGREES] {
            assert!(values(&without, name).is_empty(), "{name}: {without}");
        }
        // The live families are the same lines with or without a shadow.
        for name in [GATE_VERDICT, GATE_SIGNAL] {
            assert_eq!(values(&with, name), values(&without, name), "{name}");
            assert!(!values(&with, name).iter().any(|l| l.contains("config=")));
        }
        let l = "kura_namespace=\"kura\",kura_instance=\"acme\",config=\"shadow\"";
        let mut verdicts = values(&with, SHADOW_GATE_VERDICT);
        verdicts.sort_unstable();
        assert_eq!(
            verdicts,
            vec![
                format!("{{{l},verdict=\"hard_stop\"}} 0"),
                format!("{{{l},verdict=\"healthy\"}} 1"),
                format!("{{{l},verdict=\"suspended\"}} 0"),
                format!("{{{l},verdict=\"unhealthy\"}} 0"),
            ]
        );
        assert!(
            values(&with, SHADOW_GATE_SIGNAL).is_empty(),
            "healthy: no signal"
        );
        assert_eq!(values(&with, SHADOW_DISAGREES), vec![format!("{{{l}}} 1")]);
    }
}
