//! One instance's pure pipeline step: a sweep's samples → the aggregate
//! (`status.rolloutHealth`) → the gate's per-instance verdict
//! (`status.rolloutGate`). The run loop drives one engine per instance (so
//! do the demo, through the loop, and the benches); its whole state is what
//! the status publishes, so it restores from a published status after an
//! agent restart or a handover. `kura-agent check` combines the same
//! aggregation and judge itself, with a synthetic instance and its own
//! soak and timeout rules (`tools::check::judge`).
//!
//! Every engine judges with the cluster's gate configuration
//! ([`EngineConfig::gate`]) unless its instance carries its own in the
//! [`GATE_CONFIG_ANNOTATION`]: then that JSON object is merged over the
//! cluster's for this instance only ([`InstanceEngine::set_gate_annotation`]).
//! An annotation that does not parse is refused, never half-applied: the
//! cluster's configuration judges the instance and
//! `status.rolloutGate.configError` says why (the hook for anything else
//! that reports on the instance, such as a condition's message).
//!
//! With a shadow configuration ([`EngineConfig::shadow`], `kura-agent run
//! --shadow-gate-config`) every engine judges each sweep's aggregate a
//! second time with it, beside the live verdict: no second poll, no second
//! fold. The instance's annotation is merged over the shadow file as it is
//! over the cluster's file, so the shadow answers "this instance, were the
//! candidate file the cluster's". The shadow keeps its own verdict (its
//! baseline and soak clock follow its own judgements), never published:
//! after a restart or a handover, which restore from the status, it
//! starts again from the live verdict's baseline and soak clock
//! ([`InstanceEngine::restore`]).

use std::sync::Arc;

use crate::gate_text::ConfigFormat;
use jiff::Timestamp;
use kura_gate::instance::{hold_until_converged, judge_instance};
use kura_gate::{DocumentError, GateConfig, parse_config_over};
use kura_schemas::gate_status::MAX_CONFIG_ERROR_BYTES;
use kura_schemas::{
    AgentVerdict, KuraInstanceStatus, RolloutGate, RolloutHealth, ShadowConfigSource, Signal,
};

use crate::aggregate::{AggregateConfig, InstanceAggregator};
use crate::model::{
    GATE_CONFIG_ANNOTATION, GateLimits, InstanceInfo, InstanceKey, InstanceTraits, PodSample,
    SampleResult, ShadowJudgement,
};

/// What every instance's engine is held to; shared by all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// The aggregation's settings.
    pub aggregate: AggregateConfig,
    /// The gate's settings.
    pub gate: GateConfig,
    /// Written to `rolloutHealth.agent`.
    pub agent: String,
    /// The shadow gate configuration (`--shadow-gate-config`), judged
    /// beside [`EngineConfig::gate`] and never published; `None`: no
    /// shadow.
    pub shadow: Option<GateConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            aggregate: AggregateConfig::default(),
            gate: GateConfig::default(),
            agent: "kura-agent".to_owned(),
            shadow: None,
        }
    }
}

/// What one step of the engine (fold a sweep's samples, then judge the
/// aggregate) produced, in one value: [`InstanceEngine::step`]'s answer.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The aggregate (`status.rolloutHealth`), shared with the engine.
    pub health: Arc<RolloutHealth>,
    /// The verdict (`status.rolloutGate`), shared with the engine.
    pub gate: Arc<RolloutGate>,
    /// Whether the pods had converged on `spec.image` by the agent's rule
    /// ([`pods_converged`]; false while suspended).
    pub converged: bool,
    /// The limits the verdict compared against, for the pages.
    pub limits: GateLimits,
    /// The shadow configuration's verdict on the same aggregate, never
    /// published; `None` without a shadow.
    pub shadow: Option<ShadowJudgement>,
}

/// Per-instance state between sweeps. The last aggregate and verdict are
/// shared, immutable values: the run loop hands the same `Arc`s to the
/// fleet view and the status sink, so each exists once in memory.
#[derive(Debug, Clone)]
pub struct InstanceEngine {
    config: Arc<EngineConfig>,
    aggregator: InstanceAggregator,
    last_health: Option<Arc<RolloutHealth>>,
    last_gate: Option<Arc<RolloutGate>>,
    own_gate: OwnGateConfig,
    /// The shadow's state, when [`EngineConfig::shadow`] is set.
    shadow: Option<Box<ShadowState>>,
    /// Whether the last sweep's pods had converged on its `spec.image`
    /// (the agent's convergence rule, [`pods_converged`]).
    converged: bool,
}

/// What the shadow configuration keeps of one instance between sweeps.
#[derive(Debug, Clone, Default)]
struct ShadowState {
    /// The shadow's last verdict: its baseline, soak clock and target
    /// image carry on from it as the live one's do from theirs.
    last_gate: Option<Arc<RolloutGate>>,
    /// The annotation merged over the shadow file, when it merges.
    merged: Option<GateConfig>,
    /// Why the annotation could not be merged over the shadow file.
    error: Option<String>,
    /// Whether `last_gate` is the shadow's own judgement (not the live
    /// verdict a restored shadow starts from).
    judged: bool,
}

/// The instance's own gate configuration (its [`GATE_CONFIG_ANNOTATION`]),
/// kept parsed until the annotation's text changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OwnGateConfig {
    /// The annotation's text, as last seen.
    text: Option<String>,
    /// The cluster's configuration with the annotation merged over it, when
    /// the annotation is valid.
    merged: Option<GateConfig>,
    /// Why the annotation was refused (what `rolloutGate.configError` says).
    error: Option<String>,
}

/// What became of an instance's gate-config annotation when its text
/// changed ([`InstanceEngine::set_gate_annotation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnnotationChange {
    /// Valid: merged over the cluster's configuration for this instance.
    Applied,
    /// Gone: the cluster's configuration applies again.
    Removed,
    /// Refused: the cluster's configuration applies; the reason (as written
    /// to `status.rolloutGate.configError`).
    Refused(String),
}

/// The gate configuration of one instance: `annotation` (a JSON object of
/// `GateConfig` keys) merged over the cluster's `cluster`, through the
/// gate's one configuration parser ([`parse_config_over`]). The error names
/// the key and the reason, in one line.
pub fn instance_gate_config(cluster: &GateConfig, annotation: &str) -> Result<GateConfig, String> {
    let value = crate::gate_text::read_document(annotation, ConfigFormat::Json)
        .map_err(|(_, e)| format!("not valid JSON: {e}"))?;
    parse_config_over(cluster, &value).map_err(|e| config_error_text(&e))
}

/// A configuration document's error in one line: `key K: reason` (an
/// unknown key lists the known ones), or the document-level reason.
pub fn config_error_text(error: &DocumentError) -> String {
    kura_gate::document::config_error_line(error)
}

impl InstanceEngine {
    /// A fresh engine for an instance seen for the first time.
    pub fn new(config: Arc<EngineConfig>) -> Self {
        InstanceEngine {
            aggregator: InstanceAggregator::new(config.aggregate),
            shadow: config.shadow.as_ref().map(|_| Box::default()),
            config,
            last_health: None,
            last_gate: None,
            own_gate: OwnGateConfig::default(),
            converged: false,
        }
    }

    /// Continue from a published status (agent restart, or a new owner
    /// taking the instance over): counters, baseline and soak clock carry on.
    pub fn restore(status: Option<&KuraInstanceStatus>, config: Arc<EngineConfig>) -> Self {
        let health = status.and_then(|s| s.rollout_health.clone());
        let gate = status.and_then(|s| s.rollout_gate.clone());
        let mut engine = InstanceEngine {
            aggregator: match &health {
                Some(h) => InstanceAggregator::restore(h, config.aggregate),
                None => InstanceAggregator::new(config.aggregate),
            },
            config,
            last_health: health.map(Arc::new),
            last_gate: gate.map(Arc::new),
            own_gate: OwnGateConfig::default(),
            shadow: None,
            converged: false,
        };
        // The shadow never reached the status: it carries on from the
        // live verdict (same baseline, same soak clock).
        if engine.config.shadow.is_some() {
            engine.shadow = Some(Box::new(ShadowState {
                last_gate: engine.last_gate.clone(),
                ..ShadowState::default()
            }));
        }
        engine
    }

    /// Sets the instance's own gate configuration from the text of its
    /// [`GATE_CONFIG_ANNOTATION`] (`None`: no annotation). The text is
    /// parsed only when it changed; the change is returned, `None` when
    /// there is none. A refused annotation never stops the instance: the
    /// cluster's configuration judges it and every verdict says why in
    /// `rolloutGate.configError` until the annotation is fixed or removed.
    pub fn set_gate_annotation(&mut self, annotation: Option<&str>) -> Option<AnnotationChange> {
        if self.own_gate.text.as_deref() == annotation {
            return None;
        }
        if let (Some(shadow), Some(file)) = (self.shadow.as_deref_mut(), &self.config.shadow) {
            shadow.set_annotation(file, annotation);
        }
        let Some(text) = annotation else {
            self.own_gate = OwnGateConfig::default();
            return Some(AnnotationChange::Removed);
        };
        self.own_gate.text = Some(text.to_owned());
        match instance_gate_config(&self.config.gate, text) {
            Ok(merged) => {
                self.own_gate.merged = Some(merged);
                self.own_gate.error = None;
                Some(AnnotationChange::Applied)
            }
            Err(reason) => {
                let message = kura_schemas::text::cut_at_char_boundary(
                    &format!(
                        "annotation {GATE_CONFIG_ANNOTATION} refused, the cluster's gate config applies: {reason}"
                    ),
                    MAX_CONFIG_ERROR_BYTES,
                )
                .to_owned();
                self.own_gate.merged = None;
                self.own_gate.error = Some(message.clone());
                Some(AnnotationChange::Refused(message))
            }
        }
    }

    /// The configuration this instance is judged by: its own (the
    /// annotation merged over the cluster's) when valid, else the
    /// cluster's.
    pub fn gate_config(&self) -> &GateConfig {
        self.own_gate.merged.as_ref().unwrap_or(&self.config.gate)
    }

    /// The shadow configuration of this instance: its annotation merged
    /// over the shadow file when that merges, else the shadow file; `None`
    /// without a shadow.
    pub fn shadow_gate_config(&self) -> Option<&GateConfig> {
        let file = self.config.shadow.as_ref()?;
        let shadow = self.shadow.as_deref()?;
        Some(shadow.merged.as_ref().unwrap_or(file))
    }

    /// The shadow's verdict on the last sweep, with its limits and the
    /// configuration that judged; `None` without a shadow or before the
    /// first sweep since the engine started (a restored engine's shadow
    /// has judged nothing yet).
    pub fn shadow(&self) -> Option<ShadowJudgement> {
        let config = self.shadow_gate_config()?;
        let shadow = self.shadow.as_deref()?;
        let gate = shadow.last_gate.as_ref()?;
        if !shadow.judged {
            return None;
        }
        Some(ShadowJudgement {
            gate: Arc::clone(gate),
            limits: gate_limits(config, gate),
            source: if shadow.merged.is_some() {
                ShadowConfigSource::FileAndAnnotation
            } else {
                ShadowConfigSource::File
            },
        })
    }

    /// The last aggregate produced (or restored).
    pub fn health(&self) -> Option<&RolloutHealth> {
        self.last_health.as_deref()
    }

    /// The last verdict produced (or restored).
    pub fn gate(&self) -> Option<&RolloutGate> {
        self.last_gate.as_deref()
    }

    /// Whether the last sweep's pods had converged on its `spec.image` by
    /// the agent's rule ([`pods_converged`]; false before the first sweep
    /// and while suspended): what the timeline records as `converged`.
    pub fn converged(&self) -> bool {
        self.converged
    }

    /// The limits the last verdict compared against (`None` before the
    /// first verdict), for the fleet view.
    pub fn limits(&self) -> Option<GateLimits> {
        self.last_gate
            .as_ref()
            .map(|gate| gate_limits(self.gate_config(), gate))
    }

    /// Fold one sweep and judge it. When `spec_image` differs from the image
    /// the last verdict judged, the last aggregate taken on the old image
    /// becomes the baseline: this sweep's own, when every pod in it answered
    /// and still runs the old image (the loop sweeps at once when the watch
    /// shows the change, so that is the aggregate closest to the upgrade),
    /// else the aggregate before this sweep. Returns everything the step
    /// produced as one [`Judged`] (the aggregate and the verdict shared
    /// with the engine).
    pub fn step(
        &mut self,
        info: &InstanceInfo,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
    ) -> Judged {
        self.step_with(info, &InstanceTraits::default(), spec_image, samples, now)
    }

    /// [`InstanceEngine::step`] of an instance with its `traits`
    /// (rollout-health.md, "Instances the agent must treat apart"):
    /// - suspended: the aggregate is the suspended one (no pods, counters
    ///   kept) and the verdict `suspended` (signal `instance_suspended`),
    ///   with no baseline; the first sweep after a suspension judges a new
    ///   instance (no baseline survives it);
    /// - otherwise the verdict is held at `not_converged` while the pods
    ///   have not converged on `spec_image` ([`pods_converged`]), unless
    ///   a hard stop applies that is the target's: critical memory
    ///   pressure or a `Fencing` grant reported only by pods of another
    ///   image (a rollback's pods still on the image that stopped) is set
    ///   aside, and the evidence says so (issue 41).
    pub fn step_with(
        &mut self,
        info: &InstanceInfo,
        traits: &InstanceTraits,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
    ) -> Judged {
        let (health, gate) = self.fold_and_judge(info, traits, spec_image, samples, now);
        Judged {
            limits: gate_limits(self.gate_config(), &gate),
            shadow: self.shadow(),
            converged: self.converged,
            health,
            gate,
        }
    }

    /// The step itself: folds `samples` into the aggregate and judges it
    /// (live, then the shadow), keeping both as the engine's last; returns
    /// the live aggregate and verdict.
    fn fold_and_judge(
        &mut self,
        info: &InstanceInfo,
        traits: &InstanceTraits,
        spec_image: &str,
        samples: &[PodSample],
        now: Timestamp,
    ) -> (Arc<RolloutHealth>, Arc<RolloutGate>) {
        let name = InstanceKey::of(info).to_string();
        let health = self
            .aggregator
            .fold_with(info, traits, samples, now, &self.config.agent);
        if health.suspended {
            // No previous verdict: no baseline, soak clock or backlog run
            // survives a suspension (the gate answers `suspended`).
            self.converged = false;
            let mut gate = judge_instance(
                &name,
                None,
                spec_image,
                None,
                Some(&health),
                now,
                self.gate_config(),
            );
            gate.config_error.clone_from(&self.own_gate.error);
            if let Some(shadow) = self.shadow.as_deref_mut() {
                let mut judged = gate.clone();
                judged.config_error.clone_from(&shadow.error);
                shadow.last_gate = Some(Arc::new(judged));
                shadow.judged = true;
            }
            return self.keep(health, gate);
        }
        let (converged, detail) = pods_converged(&health, spec_image);
        self.converged = converged;
        let sweep = Judging {
            name: &name,
            spec_image,
            samples,
            health: &health,
            // After a suspension the instance starts over: no baseline
            // from before it.
            last_health: self.last_health.as_deref().filter(|h| !h.suspended),
            converged,
            detail,
            now,
        };
        let gate = sweep.judge(
            self.last_gate.as_deref(),
            self.gate_config(),
            self.own_gate.error.as_ref(),
        );
        if let (Some(shadow), Some(file)) = (self.shadow.as_deref_mut(), &self.config.shadow) {
            // The same aggregate, the same rules, the shadow's own last
            // verdict and configuration.
            let judged = sweep.judge(
                shadow.last_gate.as_deref(),
                shadow.merged.as_ref().unwrap_or(file),
                shadow.error.as_ref(),
            );
            shadow.last_gate = Some(Arc::new(judged));
            shadow.judged = true;
        }
        self.keep(health, gate)
    }

    /// Keeps `health` and `gate` as the last aggregate and verdict, and
    /// hands back the shared values.
    fn keep(
        &mut self,
        health: RolloutHealth,
        gate: RolloutGate,
    ) -> (Arc<RolloutHealth>, Arc<RolloutGate>) {
        let health = Arc::new(health);
        let gate = Arc::new(gate);
        self.last_health = Some(Arc::clone(&health));
        self.last_gate = Some(Arc::clone(&gate));
        (health, gate)
    }
}

/// One sweep of one instance as the live and the shadow configuration
/// judge it: the same aggregate, the same baseline rule and the same rules
/// of the agent's own, each from its own last verdict and configuration.
struct Judging<'a> {
    name: &'a str,
    spec_image: &'a str,
    samples: &'a [PodSample],
    health: &'a RolloutHealth,
    /// The aggregate before this sweep's (none across a suspension).
    last_health: Option<&'a RolloutHealth>,
    converged: bool,
    /// Which pods run what, when they have not converged.
    detail: Option<String>,
    now: Timestamp,
}

impl Judging<'_> {
    /// The verdict after `previous` (the judge's own last verdict) under
    /// `config`, carrying `config_error`. When `spec_image` differs from
    /// the image `previous` judged, this sweep's aggregate is the baseline
    /// if every pod in it still runs the old image, else the aggregate
    /// before it. A hard stop that only pods of another image report is
    /// set aside, and the verdict held at `not_converged` until the pods
    /// run `spec_image`.
    fn judge(
        &self,
        previous: Option<&RolloutGate>,
        config: &GateConfig,
        config_error: Option<&String>,
    ) -> RolloutGate {
        // No baseline, soak clock or backlog run survives a suspension.
        let previous = previous.filter(|g| g.verdict != AgentVerdict::Suspended);
        let fresh_baseline = previous.is_some_and(|g| {
            g.target_image != self.spec_image && all_on(self.samples, &g.target_image)
        });
        let baseline_source = if fresh_baseline {
            Some(self.health)
        } else {
            self.last_health
        };
        let mut gate = judge_instance(
            self.name,
            previous,
            self.spec_image,
            baseline_source,
            Some(self.health),
            self.now,
            config,
        );
        let mut detail = self.detail.clone();
        set_aside_off_target_hard_stop(
            &mut gate,
            self.health,
            self.spec_image,
            self.converged,
            &mut detail,
        );
        hold_until_converged(&mut gate, self.name, self.converged, detail);
        gate.config_error = config_error.cloned();
        gate
    }
}

impl ShadowState {
    /// Merges the instance's annotation (`None`: none) over the shadow
    /// `file`; a refusal leaves the file alone to judge and is kept as the
    /// shadow verdict's `configError`.
    fn set_annotation(&mut self, file: &GateConfig, annotation: Option<&str>) {
        match annotation.map(|text| instance_gate_config(file, text)) {
            None => {
                self.merged = None;
                self.error = None;
            }
            Some(Ok(merged)) => {
                self.merged = Some(merged);
                self.error = None;
            }
            Some(Err(reason)) => {
                self.merged = None;
                self.error = Some(kura_schemas::text::cut_at_char_boundary(
                    &format!(
                        "annotation {GATE_CONFIG_ANNOTATION} refused over the shadow gate config, the shadow file applies: {reason}"
                    ),
                    MAX_CONFIG_ERROR_BYTES,
                )
                .to_owned());
            }
        }
    }
}

/// The limits `gate` was judged against under `config`: the sample-age
/// limits and each counter's band top from the effective baseline (the
/// same arithmetic as the counter checks; a null baseline has no band).
pub fn gate_limits(config: &GateConfig, gate: &RolloutGate) -> GateLimits {
    let base = &gate.effective_baseline;
    GateLimits {
        max_sample_age_seconds: config.max_sample_age_seconds,
        future_skew_seconds: config.future_skew_seconds,
        outbox_band_top: base.outbox_messages.map(|b| config.outbox_band_top(b)),
        replication_lag_band_top: base
            .replication_lag_entries
            .map(|b| config.replication_lag_band_top(b)),
        fd_timeout_band_top: base.fd_timeout_count.map(|b| config.fd_timeout_band_top(b)),
        peer_failure_band_top: base
            .peer_connection_failures
            .map(|b| config.peer_failure_band_top(b)),
        counters_compared: gate.soak_eligible,
    }
}

/// At most this many pods are named in `not_converged`'s evidence.
const MAX_NAMED_PODS: usize = 8;

/// The agent's convergence rule on an aggregate (gate.md, "In the
/// agent"): converged when no current pod entry runs an image other than
/// `spec_image` and, when any pod was sampled, one of the sampled pods
/// runs it (with no pod sampled at all the sample checks already say
/// so, and keep saying it); otherwise also which pods run what, for the
/// evidence (`acme-1 runs img:1; no sampled pod runs img:2`).
pub fn pods_converged(health: &RolloutHealth, spec_image: &str) -> (bool, Option<String>) {
    let current = || health.pods.iter().filter(|p| !p.is_gone());
    let off: Vec<_> = current()
        .filter(|p| p.image.as_deref().is_some_and(|i| i != spec_image))
        .collect();
    let sampled = || current().filter(|p| p.error.is_none() && p.sampled_at.is_some());
    let none_sampled = sampled().next().is_none();
    let sampled_on = sampled().any(|p| p.image.as_deref() == Some(spec_image));
    if off.is_empty() && (sampled_on || none_sampled) {
        return (true, None);
    }
    let mut words: Vec<String> = off
        .iter()
        .take(MAX_NAMED_PODS)
        .map(|p| format!("{} runs {}", p.name, p.image.as_deref().unwrap_or("?")))
        .collect();
    if off.len() > MAX_NAMED_PODS {
        words.push(format!("{} more", off.len() - MAX_NAMED_PODS));
    }
    if !sampled_on {
        words.push(format!("no sampled pod runs {spec_image}"));
    }
    (false, Some(words.join("; ")))
}

/// The hard stop of checks 1 and 16 (`memory_pressure_critical`,
/// `serving_fenced`) raised only by pods that run another image than
/// `spec_image`, while the pods have not converged on it (issue 41,
/// "Rollback after a hard stop"): it is not the target's. After
/// `spec.image` goes back from an image that hard-stopped, its pods still
/// report the pressure or the fence until they are replaced; judging that
/// as the rolled-back target's hard stop would fail the rollback itself
/// (a web AnalysisTemplate `Failed`, Flux `Failed`, Argo CD `Degraded`).
/// The verdict then is the convergence hold (`not_converged`), whose
/// evidence says which hard stop was set aside. A pod on the target, or
/// one whose image is unknown, keeps the hard stop; so does an operator's
/// `update_paused` (check 19), which is about pods held on another image.
/// `detail` is the convergence evidence, extended with the reason.
fn set_aside_off_target_hard_stop(
    gate: &mut RolloutGate,
    health: &RolloutHealth,
    spec_image: &str,
    converged: bool,
    detail: &mut Option<String>,
) {
    if converged || gate.verdict != AgentVerdict::HardStop {
        return;
    }
    let trips: fn(&kura_schemas::PodHealth) -> bool = match gate.signal {
        Some(Signal::MemoryPressureCritical) => |p| p.memory_pressure_state.is_some_and(|m| m >= 2),
        Some(Signal::ServingFenced) => |p| {
            p.fence
                .as_ref()
                .is_some_and(|f| f.phase.as_deref() == Some("Fencing"))
        },
        _ => return,
    };
    let on_target =
        |p: &kura_schemas::PodHealth| p.image.as_deref().is_none_or(|i| i == spec_image);
    let current = || health.pods.iter().filter(|p| !p.is_gone());
    if current().any(|p| on_target(p) && trips(p)) || !current().any(|p| trips(p)) {
        return;
    }
    let signal = gate.signal.map(|s| s.as_str()).unwrap_or_default();
    let note = format!("{signal} set aside: only pods of another image report it");
    *detail = Some(match detail.take() {
        Some(d) => format!("{d}; {note}"),
        None => note,
    });
    gate.verdict = AgentVerdict::Unhealthy;
}

/// Whether `samples` is not empty and every one is a report from a pod
/// that runs `image` (by its pod spec).
fn all_on(samples: &[PodSample], image: &str) -> bool {
    !samples.is_empty()
        && samples.iter().all(|s| {
            s.pod.image.as_deref() == Some(image) && matches!(s.result, SampleResult::Report(_))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_schemas::{AgentVerdict, BaselineCounters};

    #[test]
    fn limits_follow_the_effective_baseline_and_the_config() {
        let config = GateConfig {
            fd_timeout_band: 2,
            max_sample_age_seconds: 90,
            ..GateConfig::default()
        };
        let gate = RolloutGate {
            target_image: "img:2".into(),
            baseline_image: Some("img:1".into()),
            baseline_captured_at: None,
            baseline: BaselineCounters {
                replication_lag_entries: None,
                outbox_messages: Some(1000),
                fd_timeout_count: Some(9),
                peer_connection_failures: None,
            },
            effective_baseline: BaselineCounters {
                replication_lag_entries: None,
                outbox_messages: Some(1000),
                fd_timeout_count: Some(8),
                peer_connection_failures: None,
            },
            soak_eligible: true,
            verdict: AgentVerdict::Healthy,
            signal: None,
            healthy_since: None,
            evaluated_at: Timestamp::UNIX_EPOCH,
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        };
        let l = gate_limits(&config, &gate);
        assert_eq!(l.max_sample_age_seconds, 90);
        assert_eq!(l.future_skew_seconds, 60);
        assert_eq!(l.fd_timeout_band_top, Some(10), "effective 8 + band 2");
        assert_eq!(l.outbox_band_top, Some(1100), "1000 + 10 %");
        assert_eq!(l.peer_failure_band_top, None, "a null baseline has no band");
        assert!(l.counters_compared);
    }

    use crate::model::PodIdentity;
    use jiff::SignedDuration;
    use kura_schemas::{Signal, parse_report};
    use kura_sim::SimNode;

    const V1: &str = "ghcr.io/tuist/kura:1.0.0";
    const V2: &str = "ghcr.io/tuist/kura:1.1.0";

    /// Instance `acme` of two pods.
    fn acme() -> InstanceInfo {
        InstanceInfo {
            expected_pods: 2,
            ..info("acme")
        }
    }

    fn info(name: &str) -> InstanceInfo {
        InstanceInfo {
            namespace: "kura".into(),
            name: name.into(),
            expected_pods: 1,
            generation: 1,
        }
    }

    /// A G1 fixture report with `fd` fd timeouts, from pod `i` on `image`.
    fn g1_sample(i: usize, image: &str, fd: u64, at: Timestamp) -> PodSample {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/reports/g1-bootstrap.json"
        );
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("json");
        v["fd_timeout_count"] = serde_json::json!(fd);
        let report = parse_report(&serde_json::to_vec(&v).expect("bytes")).expect("report");
        PodSample {
            replication_lag_entries: None,
            pod: std::sync::Arc::new(PodIdentity {
                name: format!("acme-{i}").into(),
                uid: format!("u-{i}").into(),
                restart_count: 0,
                image: Some(image.into()),
                ip: None,
            }),
            received_at: at,
            result: SampleResult::Report(Box::new(report)),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000).expect("ts") + SignedDuration::from_secs(s)
    }

    fn suspended() -> InstanceTraits {
        InstanceTraits {
            suspended: true,
            ..InstanceTraits::default()
        }
    }

    #[test]
    fn a_suspension_keeps_the_counters_and_no_baseline_survives_it() {
        let plain = InstanceTraits::default();
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        let Judged { health, .. } = engine.step_with(
            &acme(),
            &plain,
            V1,
            &[g1_sample(0, V1, 3, at(0)), g1_sample(1, V1, 4, at(0))],
            at(0),
        );
        assert_eq!(health.fd_timeout_count, 7);
        // Suspended: no pods, nothing sampled, the totals kept.
        let Judged { health, gate, .. } = engine.step_with(&acme(), &suspended(), V1, &[], at(30));
        assert!(health.suspended);
        assert_eq!(
            (health.expected_pods, health.sampled_pods, health.pods.len()),
            (0, 0, 0)
        );
        assert!(!health.ready && !health.serving && !health.ring_consistent);
        assert_eq!(health.fd_timeout_count, 7);
        assert_eq!(health.retired_counters.fd_timeout_count, 7);
        assert_eq!(gate.verdict, AgentVerdict::Suspended);
        assert_eq!(gate.signal, Some(Signal::InstanceSuspended));
        assert_eq!(gate.baseline_captured_at, None);
        assert!(!engine.converged());
        // The image changes while suspended: still suspended, no baseline.
        let Judged { gate, .. } = engine.step_with(&acme(), &suspended(), V2, &[], at(60));
        assert_eq!(
            (gate.verdict, gate.target_image.as_str()),
            (AgentVerdict::Suspended, V2)
        );
        assert_eq!(gate.baseline_image, None);
        // Back: a new instance's pods, judged as new (no baseline from
        // before the suspension), the totals never below what was published.
        let Judged { health, gate, .. } = engine.step_with(
            &acme(),
            &plain,
            V2,
            &[g1_sample(0, V2, 0, at(90)), g1_sample(1, V2, 1, at(90))],
            at(90),
        );
        assert!(!health.suspended);
        assert_eq!(health.fd_timeout_count, 8);
        assert_eq!(gate.baseline_image, None);
        assert_eq!(gate.baseline_captured_at, None);
        assert!(!gate.soak_eligible);
        assert_ne!(gate.verdict, AgentVerdict::Suspended);
        // A restart while suspended continues the suspension's totals.
        let mut restored = InstanceEngine::restore(
            Some(&KuraInstanceStatus {
                rollout_health: engine.health().cloned(),
                rollout_gate: engine.gate().cloned(),
                ..KuraInstanceStatus::default()
            }),
            Arc::new(EngineConfig::default()),
        );
        let Judged { health, .. } = restored.step_with(&acme(), &suspended(), V2, &[], at(120));
        assert_eq!(health.fd_timeout_count, 8);
    }

    #[test]
    fn pods_on_another_image_hold_the_verdict_at_not_converged() {
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &acme(),
            V1,
            &[g1_sample(0, V1, 1, at(0)), g1_sample(1, V1, 1, at(0))],
            at(0),
        );
        let Judged { gate, .. } = engine.step(
            &acme(),
            V2,
            &[g1_sample(0, V2, 1, at(30)), g1_sample(1, V1, 1, at(30))],
            at(30),
        );
        assert_eq!(gate.verdict, AgentVerdict::Unhealthy);
        assert_eq!(gate.signal, Some(Signal::NotConverged));
        assert_eq!(gate.healthy_since, None);
        let detail = gate.evidence[0].detail.clone().unwrap_or_default();
        assert!(detail.contains(&format!("acme-1 runs {V1}")), "{detail}");
        assert!(!engine.converged());
        // Every pod on the target, one of them sampled: converged.
        engine.step(
            &acme(),
            V2,
            &[g1_sample(0, V2, 1, at(60)), g1_sample(1, V2, 1, at(60))],
            at(60),
        );
        assert!(engine.converged());
        assert_ne!(
            engine.gate().map(|g| g.signal),
            Some(Some(Signal::NotConverged))
        );
        // Pods sampled, none known to run the target: never healthy for it.
        let health = engine.health().cloned().expect("health");
        let unknown: Vec<_> = health
            .pods
            .iter()
            .map(|p| {
                Arc::new(kura_schemas::PodHealth {
                    image: None,
                    ..(**p).clone()
                })
            })
            .collect();
        let (converged, detail) = pods_converged(
            &RolloutHealth {
                pods: unknown,
                ..health.clone()
            },
            V2,
        );
        assert!(!converged);
        assert_eq!(
            detail.as_deref(),
            Some(format!("no sampled pod runs {V2}").as_str())
        );
        // No pod sampled at all: the sample checks say so, not this rule.
        let (converged, _) = pods_converged(
            &RolloutHealth {
                pods: Vec::new(),
                ..health
            },
            V2,
        );
        assert!(converged);
    }

    /// [`g1_sample`] at memory pressure `pressure`.
    fn pressured(i: usize, image: &str, pressure: u8, at: Timestamp) -> PodSample {
        let mut s = g1_sample(i, image, 1, at);
        if let SampleResult::Report(r) = &mut s.result {
            r.memory_pressure_state = pressure;
        }
        s
    }

    /// Issue 41, "Rollback after a hard stop": `spec.image` goes back from
    /// an image whose pods hit critical memory pressure. While those pods
    /// remain they are not the rolled-back target's: the verdict is the
    /// convergence hold, never the old image's hard stop nor healthy; a
    /// pod of the target at pressure 2 still stops; once every pod runs
    /// the target again it is judged on its own (the bad image's
    /// aggregate is the baseline, not soak-eligible: no counter compared).
    #[test]
    fn after_a_rollback_the_bad_images_hard_stop_is_not_the_targets() {
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &acme(),
            V1,
            &[pressured(0, V1, 0, at(0)), pressured(1, V1, 0, at(0))],
            at(0),
        );
        let Judged { gate, .. } = engine.step(
            &acme(),
            V2,
            &[pressured(0, V2, 2, at(10)), pressured(1, V2, 0, at(10))],
            at(10),
        );
        assert_eq!(
            (gate.verdict, gate.signal),
            (AgentVerdict::HardStop, Some(Signal::MemoryPressureCritical))
        );
        // Rolled back: both pods still run v2, one at pressure 2.
        let Judged { gate, .. } = engine.step(
            &acme(),
            V1,
            &[pressured(0, V2, 2, at(20)), pressured(1, V2, 0, at(20))],
            at(20),
        );
        assert_eq!(
            (gate.verdict, gate.signal, gate.target_image.as_str()),
            (AgentVerdict::Unhealthy, Some(Signal::NotConverged), V1),
            "{gate:?}"
        );
        assert_eq!(gate.baseline_image.as_deref(), Some(V2));
        assert!(
            !gate.soak_eligible,
            "the hard-stopped image is no reference"
        );
        let detail = gate.evidence[0].detail.clone().unwrap_or_default();
        assert!(detail.contains(&format!("acme-0 runs {V2}")), "{detail}");
        assert!(
            detail.contains("memory_pressure_critical set aside"),
            "{detail}"
        );
        // One pod back on v1; the other, on v2, still at pressure 2.
        let Judged { gate, .. } = engine.step(
            &acme(),
            V1,
            &[pressured(0, V2, 2, at(30)), pressured(1, V1, 0, at(30))],
            at(30),
        );
        assert_eq!(gate.signal, Some(Signal::NotConverged), "{gate:?}");
        // A pod of the target at pressure 2 is the target's hard stop.
        let Judged { gate, .. } = engine.step(
            &acme(),
            V1,
            &[pressured(0, V2, 0, at(40)), pressured(1, V1, 2, at(40))],
            at(40),
        );
        assert_eq!(gate.verdict, AgentVerdict::HardStop, "{gate:?}");
        // Every pod on v1, no pressure: healthy on its own.
        let Judged { gate, .. } = engine.step(
            &acme(),
            V1,
            &[pressured(0, V1, 0, at(50)), pressured(1, V1, 0, at(50))],
            at(50),
        );
        assert_eq!(gate.verdict, AgentVerdict::Healthy, "{gate:?}");
    }

    #[test]
    fn fenced_serving_configured_but_not_reported_is_zero_not_null() {
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        let fenced = InstanceTraits {
            fence_configured: true,
            ..InstanceTraits::default()
        };
        let Judged { health, .. } =
            engine.step_with(&acme(), &fenced, V1, &[g1_sample(0, V1, 1, at(0))], at(0));
        assert_eq!(
            health.serving_authority,
            Some(kura_schemas::ServingAuthorityHealth::default())
        );
        let Judged { health, .. } =
            engine.step(&acme(), V1, &[g1_sample(0, V1, 1, at(10))], at(10));
        assert_eq!(health.serving_authority, None);
    }

    #[test]
    fn the_baseline_is_the_aggregate_closest_to_the_upgrade() {
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &acme(),
            V1,
            &[g1_sample(0, V1, 1, at(0)), g1_sample(1, V1, 1, at(0))],
            at(0),
        );
        // 30 s later the watch shows the upgrade and the loop sweeps at
        // once: the pods still run v1, their counters grew meanwhile. That
        // sweep is the baseline, not the one 30 s old.
        let Judged { gate, .. } = engine.step(
            &acme(),
            V2,
            &[g1_sample(0, V1, 4, at(30)), g1_sample(1, V1, 1, at(30))],
            at(30),
        );
        assert_eq!(gate.baseline_image.as_deref(), Some(V1));
        assert_eq!(gate.baseline.fd_timeout_count, Some(5));
        assert_eq!(gate.baseline_captured_at, Some(at(30)));
        assert!(gate.soak_eligible);

        // A pod already on the new image (or one that did not answer): the
        // aggregate before the change stays the baseline.
        let mut engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        engine.step(
            &acme(),
            V1,
            &[g1_sample(0, V1, 1, at(0)), g1_sample(1, V1, 1, at(0))],
            at(0),
        );
        let Judged { gate, .. } = engine.step(
            &acme(),
            V2,
            &[g1_sample(0, V2, 0, at(30)), g1_sample(1, V1, 3, at(30))],
            at(30),
        );
        assert_eq!(gate.baseline.fd_timeout_count, Some(2));
        let mut failed = g1_sample(1, V1, 3, at(30));
        failed.result = SampleResult::Error("timeout".into());
        assert!(!all_on(&[g1_sample(0, V1, 3, at(30)), failed], V1));
        assert!(!all_on(&[], V1));
    }

    fn sample(node: &SimNode, image: &str, received_at: Timestamp) -> Vec<PodSample> {
        vec![PodSample {
            replication_lag_entries: None,
            pod: std::sync::Arc::new(PodIdentity {
                name: "p-0".into(),
                uid: "u-0".into(),
                image: Some(image.into()),
                ..PodIdentity::default()
            }),
            received_at,
            result: SampleResult::Report(Box::new(node.report())),
        }]
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// Runs `engine` through a baseline on image 1, an upgrade to image 2
    /// and fd timeouts growing by 3: the verdict of the last sweep.
    fn upgrade_with_fd_growth(engine: &mut InstanceEngine, name: &str) -> RolloutGate {
        let mut node = SimNode::default();
        engine.step(&info(name), "img:1", &sample(&node, "img:1", t(0)), t(0));
        engine.step(&info(name), "img:1", &sample(&node, "img:1", t(10)), t(10));
        node.fd_timeout_count += 3;
        engine.step(&info(name), "img:2", &sample(&node, "img:2", t(20)), t(20));
        engine
            .step(&info(name), "img:2", &sample(&node, "img:2", t(30)), t(30))
            .gate
            .as_ref()
            .clone()
    }

    fn cluster(fd_timeout_band: u64) -> Arc<EngineConfig> {
        Arc::new(EngineConfig {
            gate: GateConfig {
                fd_timeout_band,
                ..GateConfig::default()
            },
            ..EngineConfig::default()
        })
    }

    #[test]
    fn the_annotation_changes_its_own_instance_only() {
        let config = cluster(0);
        let mut plain = InstanceEngine::new(Arc::clone(&config));
        let mut tuned = InstanceEngine::new(Arc::clone(&config));
        assert_eq!(
            tuned.set_gate_annotation(Some(r#"{"fdTimeoutBand": 5}"#)),
            Some(AnnotationChange::Applied)
        );
        assert_eq!(
            tuned.set_gate_annotation(Some(r#"{"fdTimeoutBand": 5}"#)),
            None
        );
        assert_eq!(plain.set_gate_annotation(None), None);
        let plain = upgrade_with_fd_growth(&mut plain, "plain");
        let tuned = upgrade_with_fd_growth(&mut tuned, "tuned");
        assert_eq!(plain.verdict, AgentVerdict::Unhealthy);
        assert_eq!(plain.signal, Some(Signal::FdTimeoutsRegressed));
        assert_eq!(tuned.verdict, AgentVerdict::Healthy, "{tuned:?}");
        assert_eq!(tuned.config_error, None);
    }

    #[test]
    fn the_annotation_merges_over_the_cluster_config() {
        // The cluster widens the fd band; the annotation only changes the
        // outbox band, so the cluster's fd band still holds.
        let mut engine = InstanceEngine::new(cluster(5));
        engine.set_gate_annotation(Some(
            r#"{"outboxBandMinimum": 7, "replicationLagBandPercent": 20, "replicationLagBandMinimum": 9}"#,
        ));
        assert_eq!(engine.gate_config().fd_timeout_band, 5);
        assert_eq!(engine.gate_config().outbox_band_minimum, 7);
        assert_eq!(engine.gate_config().replication_lag_band_percent, 20);
        assert_eq!(engine.gate_config().replication_lag_band_minimum, 9);
        let gate = upgrade_with_fd_growth(&mut engine, "merged");
        assert_eq!(gate.verdict, AgentVerdict::Healthy);
    }

    #[test]
    fn a_refused_annotation_is_reported_and_the_cluster_config_judges() {
        let mut engine = InstanceEngine::new(cluster(0));
        let change = engine.set_gate_annotation(Some(r#"{"fdTimeoutBand": "lots"}"#));
        let Some(AnnotationChange::Refused(reason)) = change else {
            panic!("{change:?}");
        };
        assert!(reason.contains("kura.tuist.dev/gate-config"), "{reason}");
        assert!(reason.contains("key fdTimeoutBand"), "{reason}");
        let gate = upgrade_with_fd_growth(&mut engine, "refused");
        assert_eq!(
            gate.signal,
            Some(Signal::FdTimeoutsRegressed),
            "cluster band 0"
        );
        assert_eq!(gate.config_error.as_deref(), Some(reason.as_str()));
        // Fixed: applied, and the next verdict no longer carries the error.
        assert_eq!(
            engine.set_gate_annotation(Some(r#"{"fdTimeoutBand": 3}"#)),
            Some(AnnotationChange::Applied)
        );
        let node = SimNode {
            fd_timeout_count: 3,
            ..SimNode::default()
        };
        let Judged { gate, .. } = engine.step(
            &info("refused"),
            "img:2",
            &sample(&node, "img:2", t(40)),
            t(40),
        );
        assert_eq!(gate.config_error, None);
        assert_eq!(gate.verdict, AgentVerdict::Healthy);
        // Removed: the cluster's configuration again.
        assert_eq!(
            engine.set_gate_annotation(None),
            Some(AnnotationChange::Removed)
        );
        assert_eq!(engine.gate_config().fd_timeout_band, 0);
    }

    #[test]
    fn every_kind_of_bad_annotation_is_refused_with_its_reason() {
        let base = GateConfig::default();
        for (text, want) in [
            ("", "not valid JSON"),
            ("{fdTimeoutBand: 3}", "not valid JSON"),
            ("[]", "expected an object"),
            ("null", "expected an object"),
            (
                r#"{"bogus": 1}"#,
                "key bogus: unknown key (the keys are soakSeconds,",
            ),
            (
                r#"{"soakSeconds": []}"#,
                "key soakSeconds: must list at least one value",
            ),
            (
                r#"{"maxSampleAgeSeconds": 0}"#,
                "key maxSampleAgeSeconds: must be at least 1",
            ),
            (
                r#"{"outboxBandPercent": 1001}"#,
                "key outboxBandPercent: 1001 is above",
            ),
            // Issue 32 item 3: the last of two keys won.
            (
                r#"{"fdTimeoutBand": 0, "fdTimeoutBand": 1000000}"#,
                "not valid JSON: key \"fdTimeoutBand\" appears more than once in one object",
            ),
        ] {
            let reason = instance_gate_config(&base, text).expect_err(text);
            assert!(reason.contains(want), "{text}: {reason}");
            assert!(!reason.contains('\n'), "{text}: one line: {reason}");
        }
        // A huge unknown key cannot bloat the status.
        let mut engine = InstanceEngine::new(cluster(0));
        let huge = format!(r#"{{"{}": 1}}"#, "k".repeat(10_000));
        let Some(AnnotationChange::Refused(reason)) = engine.set_gate_annotation(Some(&huge))
        else {
            panic!("refused");
        };
        assert!(reason.len() <= MAX_CONFIG_ERROR_BYTES, "{}", reason.len());
    }

    #[test]
    fn sample_age_and_future_skew_come_from_the_instance_config() {
        // A sample received 5 s before the sweep is judged: stale with a
        // maximum age of 4 s, fresh by default.
        let node = SimNode::default();
        let mut strict = InstanceEngine::new(Arc::new(EngineConfig::default()));
        strict.set_gate_annotation(Some(r#"{"maxSampleAgeSeconds": 4}"#));
        let mut default = InstanceEngine::new(Arc::new(EngineConfig::default()));
        let Judged { gate, .. } = strict.step(&info("a"), "img", &sample(&node, "img", t(0)), t(5));
        assert_eq!(gate.signal, Some(Signal::SampleStale));
        let Judged { gate, .. } =
            default.step(&info("a"), "img", &sample(&node, "img", t(0)), t(5));
        assert_eq!(gate.verdict, AgentVerdict::Healthy);
        // A sample 30 s ahead of the judge's clock: invalid with a skew
        // allowance of 10 s, fine by default (60 s).
        let mut skewed = InstanceEngine::new(Arc::new(EngineConfig::default()));
        skewed.set_gate_annotation(Some(r#"{"futureSkewSeconds": 10}"#));
        let Judged { gate, .. } =
            skewed.step(&info("b"), "img", &sample(&node, "img", t(30)), t(0));
        assert_eq!(gate.signal, Some(Signal::SampleInvalid));
        let mut default = InstanceEngine::new(Arc::new(EngineConfig::default()));
        let Judged { gate, .. } =
            default.step(&info("b"), "img", &sample(&node, "img", t(30)), t(0));
        assert_eq!(gate.verdict, AgentVerdict::Healthy);
    }

    fn with_shadow(live_band: u64, shadow_band: u64) -> Arc<EngineConfig> {
        Arc::new(EngineConfig {
            gate: GateConfig {
                fd_timeout_band: live_band,
                ..GateConfig::default()
            },
            shadow: Some(GateConfig {
                fd_timeout_band: shadow_band,
                ..GateConfig::default()
            }),
            ..EngineConfig::default()
        })
    }

    #[test]
    fn the_shadow_judges_the_same_aggregate_with_its_own_config() {
        let mut engine = InstanceEngine::new(with_shadow(0, 5));
        let live = upgrade_with_fd_growth(&mut engine, "shadowed");
        assert_eq!(live.signal, Some(Signal::FdTimeoutsRegressed));
        let shadow = engine.shadow().expect("a shadow verdict");
        assert_eq!(
            shadow.gate.verdict,
            AgentVerdict::Healthy,
            "{:?}",
            shadow.gate
        );
        assert_eq!(shadow.source, ShadowConfigSource::File);
        assert!(shadow.disagrees_with(engine.gate()));
        // The same sweep, the same baseline: only the judgement differs.
        assert_eq!(shadow.gate.evaluated_at, live.evaluated_at);
        assert_eq!(shadow.gate.baseline, live.baseline);
        assert_eq!(shadow.limits.fd_timeout_band_top, Some(5));
        assert_eq!(engine.limits().and_then(|l| l.fd_timeout_band_top), Some(0));

        // Same configuration: the shadow agrees.
        let mut same = InstanceEngine::new(with_shadow(0, 0));
        upgrade_with_fd_growth(&mut same, "same");
        assert!(!same.shadow().expect("judged").disagrees_with(same.gate()));

        // No shadow configured: none.
        let mut plain = InstanceEngine::new(cluster(0));
        upgrade_with_fd_growth(&mut plain, "plain");
        assert!(plain.shadow().is_none());
        assert!(plain.shadow_gate_config().is_none());
    }

    #[test]
    fn the_annotation_merges_over_the_shadow_file_too() {
        // Live band 0, shadow band 0 with a wider outbox band: the
        // annotation's fd band applies to both.
        let mut engine = InstanceEngine::new(with_shadow(0, 0));
        engine.set_gate_annotation(Some(r#"{"fdTimeoutBand": 5}"#));
        assert_eq!(
            engine.shadow_gate_config().map(|c| c.fd_timeout_band),
            Some(5)
        );
        let live = upgrade_with_fd_growth(&mut engine, "annotated");
        let shadow = engine.shadow().expect("judged");
        assert_eq!(live.verdict, AgentVerdict::Healthy);
        assert_eq!(shadow.gate.verdict, AgentVerdict::Healthy);
        assert_eq!(shadow.source, ShadowConfigSource::FileAndAnnotation);
        // Removed: the shadow file alone again.
        engine.set_gate_annotation(None);
        assert_eq!(
            engine.shadow_gate_config().map(|c| c.fd_timeout_band),
            Some(0)
        );
        let node = SimNode {
            fd_timeout_count: 3,
            ..SimNode::default()
        };
        engine.step(
            &info("annotated"),
            "img:2",
            &sample(&node, "img:2", t(40)),
            t(40),
        );
        let shadow = engine.shadow().expect("judged");
        assert_eq!(shadow.source, ShadowConfigSource::File);
        assert_eq!(shadow.gate.signal, Some(Signal::FdTimeoutsRegressed));
        // An annotation the shadow file cannot take (a band minimum above
        // ... refused by the parser) leaves the file and says why.
        engine.set_gate_annotation(Some(r#"{"fdTimeoutBand": "x"}"#));
        engine.step(
            &info("annotated"),
            "img:2",
            &sample(&node, "img:2", t(50)),
            t(50),
        );
        let shadow = engine.shadow().expect("judged");
        assert_eq!(shadow.source, ShadowConfigSource::File);
        let error = shadow.gate.config_error.as_deref().unwrap_or_default();
        assert!(error.contains("shadow"), "{error}");
    }

    #[test]
    fn a_restored_shadow_starts_from_the_live_baseline() {
        let mut first = InstanceEngine::new(with_shadow(0, 5));
        let live = upgrade_with_fd_growth(&mut first, "moved");
        let status = KuraInstanceStatus {
            rollout_health: first.health().cloned(),
            rollout_gate: Some(live.clone()),
            ..KuraInstanceStatus::default()
        };
        let mut next = InstanceEngine::restore(Some(&status), with_shadow(0, 5));
        assert!(next.shadow().is_none(), "nothing judged since the restart");
        let node = SimNode {
            fd_timeout_count: 3,
            ..SimNode::default()
        };
        let Judged { gate, .. } = next.step(
            &info("moved"),
            "img:2",
            &sample(&node, "img:2", t(40)),
            t(40),
        );
        let gate = gate.as_ref().clone();
        let shadow = next.shadow().expect("judged");
        assert_eq!(shadow.gate.baseline, live.baseline, "the live baseline");
        assert_eq!(shadow.gate.baseline_image, live.baseline_image);
        assert_eq!(gate.signal, Some(Signal::FdTimeoutsRegressed));
        assert_eq!(shadow.gate.verdict, AgentVerdict::Healthy);
    }
}
