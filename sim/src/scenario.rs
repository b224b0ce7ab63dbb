//! Scenario files (testdata/sim/*.json, format in testdata/sim/README.md):
//! the pods of a simulated fleet and their scripted timelines.

use crate::{Addressing, Behaviour, SimError, SimNode, SimPodHandle, SimPodSpec};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Upper bound on timeline occurrences after expanding `every`.
const MAX_OCCURRENCES: usize = 1_000_000;

/// A simulated fleet and its timeline, as read from a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Factor applied to every timeline offset (0.1 runs ten times faster).
    #[serde(default = "one")]
    pub time_scale: f64,
    /// Where pods listen.
    #[serde(default)]
    pub addressing: Addressing,
    /// Whether pods keep connections open after answering (default true).
    #[serde(default = "yes")]
    pub keep_alive: bool,
    /// The pods.
    pub pods: Vec<PodTemplate>,
    /// One spec per pod, built and checked by [`Scenario::parse`].
    #[serde(skip)]
    specs: Vec<(usize, SimPodSpec)>,
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

/// One pod, or `count` alike pods, of a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodTemplate {
    /// Pod name; with `count` > 1 the pods are `<name>-0`, `<name>-1`, ….
    pub name: String,
    /// Pod UID; default `uid-<pod name>` (with `count` > 1, `<uid>-<i>`).
    #[serde(default)]
    pub uid: Option<String>,
    /// How many alike pods (default 1).
    #[serde(default = "one_pod")]
    pub count: usize,
    /// Initial node state: wire names of [`SimNode`] over its healthy G4
    /// default.
    #[serde(default)]
    pub node: Map<String, Value>,
    /// Initial behaviour (default `normal`).
    #[serde(default)]
    pub behaviour: Behaviour,
    /// Scripted changes.
    #[serde(default)]
    pub timeline: Vec<TimelineEvent>,
}

fn one_pod() -> usize {
    1
}

/// One scripted change, applied at `at` seconds (times the time scale) after
/// the start, and again every `every` seconds until `until` when given. Its
/// actions apply in this order: `restart`, `set`, `add`, `behaviour`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineEvent {
    /// First application, seconds from the start.
    pub at: f64,
    /// Repeat period in seconds (needs `until`).
    #[serde(default)]
    pub every: Option<f64>,
    /// Last possible application, seconds from the start.
    #[serde(default)]
    pub until: Option<f64>,
    /// A process restart: counters to 0, new incarnation.
    #[serde(default)]
    pub restart: bool,
    /// Fields to set (wire names of [`SimNode`]).
    #[serde(default)]
    pub set: Option<Map<String, Value>>,
    /// Integer fields to change by a delta (saturating at 0).
    #[serde(default)]
    pub add: Option<BTreeMap<String, i64>>,
    /// A new behaviour.
    #[serde(default)]
    pub behaviour: Option<Behaviour>,
}

impl TimelineEvent {
    /// `set` then `add` (the node part of the event, restart aside).
    fn change(&self, node: &mut SimNode) -> Result<(), SimError> {
        if let Some(set) = &self.set {
            node.apply_set(set)?;
        }
        for (field, delta) in self.add.iter().flatten() {
            node.apply_add(field, *delta)?;
        }
        Ok(())
    }

    fn has_action(&self) -> bool {
        self.restart || self.set.is_some() || self.add.is_some() || self.behaviour.is_some()
    }

    /// Offsets (unscaled seconds) at which the event applies.
    fn offsets(&self) -> Result<Vec<f64>, SimError> {
        let bad = |what: &str| {
            Err(SimError::Scenario(format!(
                "timeline event at {}: {what}",
                self.at
            )))
        };
        if !self.at.is_finite() || self.at < 0.0 {
            return bad("`at` must be a non-negative number of seconds");
        }
        match (self.every, self.until) {
            (None, None) => Ok(vec![self.at]),
            (Some(every), Some(until)) if every > 0.0 && every.is_finite() && until.is_finite() => {
                let n = ((until - self.at) / every).floor();
                if n < 0.0 {
                    return bad("`until` is before `at`");
                }
                if n >= MAX_OCCURRENCES as f64 {
                    return bad("too many repetitions");
                }
                Ok((0..=n as usize)
                    .map(|i| self.at + every * i as f64)
                    .collect())
            }
            (Some(_), Some(_)) => bad("`every` must be positive and `until` finite"),
            _ => bad("`every` and `until` go together"),
        }
    }

    async fn apply(&self, pod: &SimPodHandle) {
        if self.restart {
            pod.restart();
        }
        let mut result = Ok(());
        pod.update(|node| {
            // Change a copy so a failing event leaves the node as it was.
            let mut next = node.clone();
            result = self.change(&mut next).map(|()| *node = next);
        });
        if let Err(e) = result {
            tracing::warn!(pod = pod.name(), error = %e, "scenario event not applied");
        }
        if let Some(b) = &self.behaviour
            && let Err(e) = pod.set(b.clone()).await
        {
            tracing::warn!(pod = pod.name(), error = %e, "scenario behaviour not applied");
        }
    }
}

impl Scenario {
    /// Read and check a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::parse(&text)
    }

    /// Parse and check a scenario: unknown keys, bad node fields, events
    /// without an action or with bad times are errors.
    pub fn parse(text: &str) -> Result<Scenario, SimError> {
        let mut sc: Scenario =
            serde_json::from_str(text).map_err(|e| SimError::Scenario(e.to_string()))?;
        if !(sc.time_scale.is_finite() && sc.time_scale >= 0.0) {
            return Err(SimError::Scenario(
                "`time_scale` must be a non-negative number".into(),
            ));
        }
        let mut occurrences = 0usize;
        for (t, tpl) in sc.pods.iter().enumerate() {
            let ctx = |e: SimError| SimError::Scenario(format!("pod `{}`: {e}", tpl.name));
            if tpl.count == 0 {
                return Err(ctx(SimError::Scenario("`count` must be at least 1".into())));
            }
            let mut node = SimNode::default();
            node.apply_set(&tpl.node).map_err(ctx)?;
            for ev in &tpl.timeline {
                if !ev.has_action() {
                    return Err(ctx(SimError::Scenario(format!(
                        "timeline event at {} has no action",
                        ev.at
                    ))));
                }
                occurrences += ev.offsets().map_err(ctx)?.len() * tpl.count;
                ev.change(&mut node.clone()).map_err(ctx)?;
            }
            for i in 0..tpl.count {
                let (name, uid) = match (tpl.count, &tpl.uid) {
                    (1, uid) => (tpl.name.clone(), uid.clone()),
                    (_, uid) => (
                        format!("{}-{i}", tpl.name),
                        uid.as_ref().map(|u| format!("{u}-{i}")),
                    ),
                };
                let mut spec = SimPodSpec::new(name);
                if let Some(uid) = uid {
                    spec.uid = uid;
                }
                spec.node = node.clone();
                spec.behaviour = tpl.behaviour.clone();
                sc.specs.push((t, spec));
            }
        }
        if occurrences > MAX_OCCURRENCES {
            return Err(SimError::Scenario(format!(
                "the timeline expands to {occurrences} changes (limit {MAX_OCCURRENCES})"
            )));
        }
        Ok(sc)
    }

    /// One spec per pod, in order.
    pub fn pod_specs(&self) -> Vec<SimPodSpec> {
        self.specs.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Spawn the task that applies the timeline to `pods` (as started from
    /// [`pod_specs`](Self::pod_specs)), offsets multiplied by `scale`.
    pub(crate) fn spawn_timeline(
        &self,
        pods: &[SimPodHandle],
        scale: f64,
    ) -> Result<JoinHandle<()>, SimError> {
        if pods.len() != self.specs.len() || !(scale.is_finite() && scale >= 0.0) {
            return Err(SimError::Scenario(
                "timeline does not match the pods or scale".into(),
            ));
        }
        let mut steps: Vec<(f64, usize, usize)> = Vec::new();
        for (t, tpl) in self.pods.iter().enumerate() {
            for (e, ev) in tpl.timeline.iter().enumerate() {
                steps.extend(ev.offsets()?.into_iter().map(|at| (at * scale, t, e)));
            }
        }
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        let templates = self.pods.clone();
        let mut by_template: Vec<Vec<SimPodHandle>> = vec![Vec::new(); templates.len()];
        for ((t, _), pod) in self.specs.iter().zip(pods) {
            by_template[*t].push(pod.clone());
        }
        Ok(tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            for (at, t, e) in steps {
                tokio::time::sleep_until(start + Duration::from_secs_f64(at)).await;
                let ev = &templates[t].timeline[e];
                for pod in &by_template[t] {
                    ev.apply(pod).await;
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_checks_fields_actions_and_times() {
        let ok = r#"{"pods":[{"name":"p","count":2,"node":{"report_generation":3},
            "timeline":[{"at":1,"every":1,"until":3,"add":{"fd_timeout_count":2}}]}]}"#;
        let sc = Scenario::parse(ok).unwrap();
        let names: Vec<_> = sc.pod_specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["p-0", "p-1"]);
        assert_eq!(sc.pods[0].timeline[0].offsets().unwrap(), [1.0, 2.0, 3.0]);
        for bad in [
            r#"{"pods":[{"name":"p","node":{"nope":1}}]}"#,
            r#"{"pods":[{"name":"p","node":{"ready":"yes"}}]}"#,
            r#"{"pods":[{"name":"p","timeline":[{"at":1}]}]}"#,
            r#"{"pods":[{"name":"p","timeline":[{"at":1,"every":1,"restart":true}]}]}"#,
            r#"{"pods":[{"name":"p","timeline":[{"at":-1,"restart":true}]}]}"#,
            r#"{"pods":[{"name":"p","timeline":[{"at":1,"add":{"state":1}}]}]}"#,
            r#"{"pods":[{"name":"p","behaviour":{"kind":"sideways"}}]}"#,
            r#"{"pods":[{"name":"p","count":0}]}"#,
            r#"{"pods":[], "extra": 1}"#,
        ] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }
}
