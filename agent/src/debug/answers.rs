//! The JSON answers about instances that every replica gives for every
//! instance it sweeps or watches (from the [`InstanceAnswer`]s of the server's state):
//!
//! - `/debug/instances`: one summary per instance (aggregate, verdict,
//!   last write, `ownedBy`, `source`);
//! - `/debug/instances/{namespace}/{name}`: the replica's live view with
//!   per-pod samples when it sweeps the instance, else the status stored in
//!   the cluster;
//! - `/api/v1/instances/{namespace}/{name}/verdict`: the stable
//!   [`InstanceVerdict`] document (JSON Schema in
//!   `schemas/json/instance-verdict.schema.json`).
//!
//! `source` says where an answer comes from: `live` (this replica's own
//! sweep) or `cluster` (the status the owner wrote, as this replica's
//! watch last saw it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kura_schemas::{
    ConditionStatus, INSTANCE_VERDICT_SCHEMA_VERSION, InstanceVerdict, KuraInstanceStatus,
    ROLLOUT_HARD_STOPPED, ROLLOUT_HEALTHY, RolloutGate, RolloutHealth, ShadowVerdict,
    VerdictCondition, VerdictSource,
};
use serde::Serialize;
use std::sync::Arc;

use crate::debug::state::InstanceAnswer;
use crate::model::LastWrite;
use crate::model::conditions::{ConditionState, rollout_hard_stopped, rollout_healthy};
use crate::view::{InstanceSummary, InstanceView};

/// Where the verdict of an answer comes from, with what it rests on.
struct Basis<'a> {
    source: VerdictSource,
    health: Option<&'a RolloutHealth>,
    gate: Option<&'a RolloutGate>,
    /// The conditions the owner wrote (stored answers only).
    written: &'a [Condition],
}

/// This replica's own sweep when it has judged one, else the stored
/// status (a new owner's first sweep is not done yet, or another replica
/// owns the instance).
fn basis(answer: &InstanceAnswer) -> Basis<'_> {
    let live = answer
        .live
        .as_ref()
        .filter(|v| v.gate.is_some() || answer.stored.is_none());
    if let Some(live) = live {
        return Basis {
            source: VerdictSource::Live,
            health: live.health.as_deref(),
            gate: live.gate.as_deref(),
            written: &[],
        };
    }
    let status = answer.stored.as_ref().and_then(|s| s.status.as_ref());
    Basis {
        source: VerdictSource::Cluster,
        health: status.and_then(|s| s.rollout_health.as_ref()),
        gate: status.and_then(|s| s.rollout_gate.as_ref()),
        written: status.map_or(&[], |s| s.conditions.as_slice()),
    }
}

/// The generation this replica knows: the watch's, else the last sweep's.
fn generation(answer: &InstanceAnswer) -> Option<i64> {
    answer.stored.as_ref().map(|s| s.generation).or_else(|| {
        answer
            .live
            .as_ref()
            .and_then(|v| v.health.as_ref())
            .map(|h| h.observed_generation)
    })
}

fn stated(state: ConditionState) -> VerdictCondition {
    VerdictCondition {
        status: state.status,
        reason: state.reason,
        message: state.message,
    }
}

/// The owner's written condition of `type_`, when it wrote one that reads.
fn written(conditions: &[Condition], type_: &str) -> Option<VerdictCondition> {
    let c = conditions.iter().find(|c| c.type_ == type_)?;
    Some(VerdictCondition {
        status: ConditionStatus::parse(&c.status)?,
        reason: c.reason.clone(),
        message: c.message.clone(),
    })
}

/// A condition about an older generation than the one known is `Unknown`
/// here, as `kubectl wait` treats it.
fn current(
    condition: VerdictCondition,
    observed: Option<i64>,
    generation: Option<i64>,
) -> VerdictCondition {
    match (observed, generation) {
        (Some(o), Some(g)) if o < g => VerdictCondition {
            status: ConditionStatus::Unknown,
            reason: "GenerationNotObserved".to_owned(),
            message: format!(
                "generation {g} is not judged yet; the last verdict is about generation {o}: {}",
                condition.message
            ),
        },
        _ => condition,
    }
}

/// The verdict document of an answer.
pub fn verdict_of(answer: &InstanceAnswer) -> InstanceVerdict {
    let b = basis(answer);
    let observed = b.health.map(|h| h.observed_generation);
    let generation = generation(answer);
    let healthy = written(b.written, ROLLOUT_HEALTHY)
        .unwrap_or_else(|| stated(rollout_healthy(b.health, b.gate)));
    let stopped = written(b.written, ROLLOUT_HARD_STOPPED)
        .unwrap_or_else(|| stated(rollout_hard_stopped(b.gate)));
    InstanceVerdict {
        schema_version: INSTANCE_VERDICT_SCHEMA_VERSION,
        namespace: answer.key.namespace.to_string(),
        name: answer.key.name.to_string(),
        verdict: b.gate.map(|g| g.verdict),
        signal: b.gate.and_then(|g| g.signal),
        healthy_since: b.gate.and_then(|g| g.healthy_since),
        evaluated_at: b.gate.map(|g| g.evaluated_at),
        observed_generation: observed,
        generation,
        target_image: b.gate.map(|g| g.target_image.clone()),
        baseline_image: b.gate.and_then(|g| g.baseline_image.clone()),
        evidence: b.gate.map(|g| g.evidence.clone()).unwrap_or_default(),
        owned_by: answer.owned_by.clone(),
        source: b.source,
        rollout_healthy: current(healthy, observed, generation),
        rollout_hard_stopped: current(stopped, observed, generation),
        shadow: match b.source {
            VerdictSource::Live => answer.live.as_ref().and_then(shadow_of),
            VerdictSource::Cluster => None,
        },
    }
}

/// The shadow verdict of this replica's own sweep, when a shadow
/// configuration runs.
fn shadow_of(live: &InstanceView) -> Option<ShadowVerdict> {
    let shadow = live.shadow.as_ref()?;
    let g = &shadow.gate;
    Some(ShadowVerdict {
        verdict: g.verdict,
        signal: g.signal,
        healthy_since: g.healthy_since,
        evaluated_at: g.evaluated_at,
        evidence: g.evidence.clone(),
        agrees: !live.shadow_disagrees(),
        config_source: shadow.config_source,
        config_error: g.config_error.clone(),
    })
}

/// One entry of `/debug/instances`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerSummary {
    /// Aggregate, verdict and last write.
    #[serde(flatten)]
    pub summary: InstanceSummary,
    /// `metadata.generation` as this replica knows it.
    pub generation: Option<i64>,
    /// Who writes the status.
    pub owned_by: Option<String>,
    /// `live` or `cluster`.
    pub source: VerdictSource,
}

/// The `/debug/instances` entry of an answer.
pub fn summary_of(answer: &InstanceAnswer) -> AnswerSummary {
    let b = basis(answer);
    let summary = match (&answer.live, b.source) {
        (Some(live), VerdictSource::Live) => InstanceSummary::from(live),
        _ => InstanceSummary {
            namespace: answer.key.namespace.to_string(),
            name: answer.key.name.to_string(),
            spec_image: answer.stored.as_ref().map(|s| s.spec_image.clone()),
            swept_at: None,
            health: b.health.cloned().map(Arc::new),
            gate: b.gate.cloned().map(Arc::new),
            last_write: answer.live.as_ref().and_then(|v| v.last_write.clone()),
        },
    };
    AnswerSummary {
        summary,
        generation: generation(answer),
        owned_by: answer.owned_by.clone(),
        source: b.source,
    }
}

/// `/debug/instances/{namespace}/{name}` for an instance this replica
/// sweeps.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveDetail<'a> {
    /// The live view, per-pod samples included.
    #[serde(flatten)]
    pub view: &'a InstanceView,
    /// `metadata.generation` as this replica knows it.
    pub generation: Option<i64>,
    /// Who writes the status.
    pub owned_by: Option<String>,
    /// Always `live`.
    pub source: VerdictSource,
}

/// `/debug/instances/{namespace}/{name}` for an instance another replica
/// sweeps: the stored status.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredDetail<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// `spec.image`.
    pub spec_image: &'a str,
    /// `metadata.generation`.
    pub generation: i64,
    /// The status as stored (the owner's fields and the controller's).
    pub status: Option<&'a KuraInstanceStatus>,
    /// Status fields that could not be read.
    pub notes: &'a [String],
    /// This replica's last write of it, if it wrote it before (it owned
    /// it then).
    pub last_write: Option<&'a LastWrite>,
    /// Who writes the status.
    pub owned_by: Option<String>,
    /// Always `cluster`.
    pub source: VerdictSource,
}

/// The JSON of `/debug/instances/{namespace}/{name}` for an answer.
pub fn detail_json(answer: &InstanceAnswer) -> Result<Vec<u8>, serde_json::Error> {
    let b = basis(answer);
    match (&answer.live, &answer.stored, b.source) {
        (Some(view), _, VerdictSource::Live) | (Some(view), None, _) => {
            serde_json::to_vec_pretty(&LiveDetail {
                view,
                generation: generation(answer),
                owned_by: answer.owned_by.clone(),
                source: VerdictSource::Live,
            })
        }
        (live, Some(stored), _) => serde_json::to_vec_pretty(&StoredDetail {
            namespace: &stored.key.namespace,
            name: &stored.key.name,
            spec_image: &stored.spec_image,
            generation: stored.generation,
            status: stored.status.as_ref(),
            notes: &stored.notes,
            last_write: live.as_ref().and_then(|v| v.last_write.as_ref()),
            owned_by: answer.owned_by.clone(),
            source: VerdictSource::Cluster,
        }),
        (None, None, _) => serde_json::to_vec_pretty(&serde_json::json!({
            "namespace": answer.key.namespace,
            "name": answer.key.name,
        })),
    }
}
