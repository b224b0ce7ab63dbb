//! A tick of the replay document: its servers, their baselines (either
//! form) and their aggregates.

use std::collections::{BTreeMap, HashSet};

use kura_schemas::BaselineCounters;
use kura_schemas::api_int::API_INT_MAX;
use serde_json::Value;

use super::DocumentError;
use super::ctx::{Ctx, show};
use super::timeline::{Published, parse_published};
use crate::baseline::Baseline;
use crate::config::GateConfig;
use crate::health_view::HealthView;
use crate::wave::{Deployment, ServerInput, ServerStatus, TickInput};

/// A server's keys; the last (`published`) only in a replay document, where
/// a timeline's servers carry the verdict the agent published.
const SERVER_KEYS_TIMELINE: [&str; 8] = [
    "id",
    "wave",
    "converged",
    "deployment",
    "status",
    "baseline",
    "health",
    "published",
];

/// One tick. `published` collects the servers' `published` verdicts (a
/// timeline's key); when `None` the key is refused like any unknown one.
pub(super) fn parse_tick(
    at: &Ctx,
    tick: &Value,
    config: &GateConfig,
    mut published: Option<&mut BTreeMap<String, Published>>,
) -> Result<TickInput, DocumentError> {
    let obj = at.object(tick, "(tick)")?;
    at.only(
        obj,
        &["now", "wave", "waveStartedAt", "attempt", "servers"],
        "",
    )?;
    let now = at.req_time(obj, "now", "")?;
    let wave = at.req_u32(obj, "wave", "")?;
    let wave_started_at = at.req_time(obj, "waveStartedAt", "")?;
    let attempt = at.req_u32(obj, "attempt", "")?;
    let servers = match obj.get("servers") {
        Some(Value::Array(servers)) => servers,
        Some(other) => {
            return Err(at.fail("servers", format!("expected an array, got {}", show(other))));
        }
        None => return Err(at.fail("servers", "missing".into())),
    };
    let mut seen = HashSet::with_capacity(servers.len());
    let mut parsed = Vec::with_capacity(servers.len());
    for (index, server) in servers.iter().enumerate() {
        let (server, verdict) = parse_server(at, index, server, config, published.is_some())?;
        if !seen.insert(server.id.clone()) {
            return Err(Ctx {
                tick: at.tick,
                server: Some(server.id.clone()),
            }
            .fail("id", "appears more than once in this tick".into()));
        }
        if let (Some(published), Some(verdict)) = (published.as_deref_mut(), verdict) {
            published.insert(server.id.clone(), verdict);
        }
        parsed.push(server);
    }
    Ok(TickInput {
        now,
        wave,
        wave_started_at,
        attempt,
        servers: parsed,
    })
}

fn parse_server(
    at: &Ctx,
    index: usize,
    server: &Value,
    config: &GateConfig,
    timeline: bool,
) -> Result<(ServerInput, Option<Published>), DocumentError> {
    let field = format!("servers[{index}]");
    let obj = at.object(server, &field)?;
    let id = match obj.get("id") {
        Some(Value::String(id)) => id.clone(),
        Some(other) => {
            return Err(at.fail(
                &format!("{field}.id"),
                format!("expected a string, got {}", show(other)),
            ));
        }
        None => return Err(at.fail(&format!("{field}.id"), "missing".into())),
    };
    let at = Ctx {
        tick: at.tick,
        server: Some(id.clone()),
    };
    let keys: &[&str] = if timeline {
        &SERVER_KEYS_TIMELINE
    } else {
        &SERVER_KEYS_TIMELINE[..SERVER_KEYS_TIMELINE.len() - 1]
    };
    at.only(obj, keys, "")?;
    let wave = at.req_u32(obj, "wave", "")?;
    let converged = match obj.get("converged") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(at.fail(
                "converged",
                format!("expected a boolean, got {}", show(other)),
            ));
        }
        None => return Err(at.fail("converged", "missing".into())),
    };
    let deployment = match obj.get("deployment") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "pending" => Deployment::Pending,
            "running" => Deployment::Running,
            "succeeded" => Deployment::Succeeded,
            "failed" => Deployment::Failed,
            "cancelled" => Deployment::Cancelled,
            _ => {
                return Err(at.fail(
                    "deployment",
                    format!("unknown value {s:?} (pending, running, succeeded, failed, cancelled or null)"),
                ));
            }
        }),
        Some(other) => {
            return Err(at.fail(
                "deployment",
                format!("expected a string or null, got {}", show(other)),
            ));
        }
    };
    let status = match obj.get("status") {
        Some(Value::String(s)) => match s.as_str() {
            "active" => ServerStatus::Active,
            "failed" => ServerStatus::Failed,
            "destroyed" => ServerStatus::Destroyed,
            _ => {
                return Err(at.fail(
                    "status",
                    format!("unknown value {s:?} (active, failed or destroyed)"),
                ));
            }
        },
        Some(other) => {
            return Err(at.fail("status", format!("expected a string, got {}", show(other))));
        }
        None => return Err(at.fail("status", "missing".into())),
    };
    let baseline = match obj.get("baseline") {
        None | Some(Value::Null) => None,
        Some(value) => Some(parse_baseline(&at, value, "baseline", config)?),
    };
    let health = parse_health(&at, obj.get("health"), "health")?;
    let published = if timeline {
        parse_published(&at, obj.get("published"))?
    } else {
        None
    };
    Ok((
        ServerInput {
            id,
            wave,
            converged,
            deployment,
            status,
            baseline,
            health,
        },
        published,
    ))
}

/// A baseline in either form: `{capturedAt, health}` (an aggregate, captured
/// here with [`Baseline::capture`]) or `{capturedAt, counters, soakEligible}`
/// (a baseline captured earlier, as [`Baseline`] serializes).
pub(super) fn parse_baseline(
    at: &Ctx,
    value: &Value,
    field: &str,
    config: &GateConfig,
) -> Result<Baseline, DocumentError> {
    let p = if field.is_empty() {
        String::new()
    } else {
        format!("{field}.")
    };
    let b = at.object(
        value,
        if field.is_empty() {
            "(baseline)"
        } else {
            field
        },
    )?;
    at.only(b, &["capturedAt", "health", "counters", "soakEligible"], &p)?;
    let captured_at = at.req_time(b, "capturedAt", &p)?;
    if !b.contains_key("counters") && !b.contains_key("soakEligible") {
        let health = parse_health(at, b.get("health"), &format!("{p}health"))?;
        return Ok(Baseline::capture(health.as_ref(), captured_at, config));
    }
    if b.contains_key("health") {
        return Err(at.fail(
            &format!("{p}health"),
            "a baseline has either health (an aggregate to capture) or counters and \
             soakEligible (a captured baseline), not both"
                .into(),
        ));
    }
    let counters = match b.get("counters") {
        Some(value) => at.object(value, &format!("{p}counters"))?,
        None => return Err(at.fail(&format!("{p}counters"), "missing".into())),
    };
    let cp = format!("{p}counters.");
    at.only(
        counters,
        &[
            "outboxMessages",
            "replicationLagEntries",
            "fdTimeoutCount",
            "peerConnectionFailures",
        ],
        &cp,
    )?;
    let soak_eligible = match b.get("soakEligible") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(at.fail(
                &format!("{p}soakEligible"),
                format!("expected a boolean, got {}", show(other)),
            ));
        }
        None => return Err(at.fail(&format!("{p}soakEligible"), "missing".into())),
    };
    Ok(Baseline {
        captured_at,
        counters: BaselineCounters {
            outbox_messages: at.opt_uint(counters, "outboxMessages", &cp)?,
            replication_lag_entries: at.opt_uint(counters, "replicationLagEntries", &cp)?,
            fd_timeout_count: at.opt_uint(counters, "fdTimeoutCount", &cp)?,
            peer_connection_failures: at.opt_uint(counters, "peerConnectionFailures", &cp)?,
        },
        soak_eligible,
    })
}

fn parse_health(
    at: &Ctx,
    value: Option<&Value>,
    field: &str,
) -> Result<Option<HealthView>, DocumentError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, field)?,
    };
    let p = format!("{field}.");
    let small = |key: &str, max: u64| at.opt_uint_max(obj, key, &p, max);
    // What a stored rolloutHealth can hold: the API server's int64.
    let count = |key: &str| at.opt_uint_max(obj, key, &p, API_INT_MAX);
    Ok(Some(HealthView {
        sampled_at: at.opt_time(obj, "sampledAt", &p)?,
        expected_pods: small("expectedPods", u64::from(u32::MAX))?
            .and_then(|v| u32::try_from(v).ok()),
        sampled_pods: small("sampledPods", u64::from(u32::MAX))?
            .and_then(|v| u32::try_from(v).ok()),
        ready: at.opt_bool(obj, "ready", &p)?,
        serving: at.opt_bool(obj, "serving", &p)?,
        ring_consistent: at.opt_bool(obj, "ringConsistent", &p)?,
        bootstrap_inflight_peers: count("bootstrapInflightPeers")?,
        backfill_initial_cycle: at.opt_str(obj, "backfillInitialCycle", &p)?,
        backfill_degraded: at.opt_bool(obj, "backfillDegraded", &p)?,
        backfill_budget_exhausted_peers: count("backfillBudgetExhaustedPeers")?,
        outbox_messages: count("outboxMessages")?,
        replication_lag_entries: count("replicationLagEntries")?,
        serving_authority: parse_serving_authority(at, obj.get("servingAuthority"), &p)?,
        fd_timeout_count: count("fdTimeoutCount")?,
        peer_connection_failures: count("peerConnectionFailures")?,
        memory_pressure_state: small("memoryPressureState", u64::from(u8::MAX))?
            .and_then(|v| u8::try_from(v).ok()),
        suspended: at.opt_bool(obj, "suspended", &p)?,
        update_paused: parse_update_paused(at, obj.get("updatePaused"), &p)?.map(Box::new),
    }))
}

/// `updatePaused` of a health document: null/absent, or an object whose
/// known keys (`strategy`, `partition`, `templateImage`, `heldPods`) are
/// held to their types (other keys are not read). The pause itself is what
/// check 19 stops on: a known key left out is simply not named in the
/// evidence.
fn parse_update_paused(
    at: &Ctx,
    value: Option<&Value>,
    prefix: &str,
) -> Result<Option<kura_schemas::UpdatePaused>, DocumentError> {
    let field = format!("{prefix}updatePaused");
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, &field)?,
    };
    let p = format!("{field}.");
    let held_pods = match obj.get("heldPods") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(pods)) => pods
            .iter()
            .enumerate()
            .map(|(i, pod)| match pod {
                Value::String(name) => Ok(name.clone()),
                other => Err(at.fail(
                    &format!("{p}heldPods[{i}]"),
                    format!("expected a string, got {}", show(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(at.fail(
                &format!("{p}heldPods"),
                format!("expected an array of pod names, got {}", show(other)),
            ));
        }
    };
    Ok(Some(kura_schemas::UpdatePaused {
        strategy: at.opt_str(obj, "strategy", &p)?.unwrap_or_default(),
        partition: at.opt_uint_max(obj, "partition", &p, API_INT_MAX)?,
        template_image: at.opt_str(obj, "templateImage", &p)?,
        held_pods,
    }))
}

/// `servingAuthority` of a health document: null/absent, or an object whose
/// known keys (`enabledPods`, `validWriters`, `phase`, `epoch`) are held to
/// their types; a missing one is the value that fails its check (0 valid
/// writers, phase `""`, epoch 0), never the value that passes.
fn parse_serving_authority(
    at: &Ctx,
    value: Option<&Value>,
    prefix: &str,
) -> Result<Option<kura_schemas::ServingAuthorityHealth>, DocumentError> {
    let field = format!("{prefix}servingAuthority");
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, &field)?,
    };
    let p = format!("{field}.");
    let pods = |key: &str| -> Result<u32, DocumentError> {
        Ok(at
            .opt_uint_max(obj, key, &p, u64::from(u32::MAX))?
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0))
    };
    Ok(Some(kura_schemas::ServingAuthorityHealth {
        enabled_pods: pods("enabledPods")?,
        valid_writers: pods("validWriters")?,
        phase: at.opt_str(obj, "phase", &p)?.unwrap_or_default(),
        epoch: at.opt_uint_max(obj, "epoch", &p, API_INT_MAX)?.unwrap_or(0),
    }))
}
