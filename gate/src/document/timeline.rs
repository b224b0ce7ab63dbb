//! The keys an exported timeline adds to a replay document (the agent's
//! `GET /api/v1/instances/{namespace}/{name}/timeline`): `instance` and
//! `window` at the top level, and `published` on each server of a tick, the
//! verdict the agent published for it. Read as strictly as the rest: every
//! key is required, of its type, and nothing else is accepted.

use jiff::Timestamp;
use kura_schemas::{AgentVerdict, Signal};
use serde::Serialize;
use serde_json::Value;

use super::DocumentError;
use super::ctx::{Ctx, show};

/// A timeline's `instance`: what the export is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineInstance {
    /// The instance's namespace.
    pub namespace: String,
    /// The instance's name.
    pub name: String,
    /// The image judged (`status.rolloutGate.targetImage`).
    pub target_image: String,
    /// The image the baseline was taken on; null until one was.
    pub baseline_image: Option<String>,
}

/// A timeline's `window`: the time it covers and what was left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineWindow {
    /// Start of the window.
    pub from: Timestamp,
    /// End of the window (not before `from`).
    pub to: Timestamp,
    /// Ticks of the window the agent no longer held (dropped first, oldest
    /// first, to stay bounded).
    pub dropped_ticks: u64,
    /// Whether the ticks are every tick of the window.
    pub complete: bool,
}

/// The verdict the agent published for one server (instance) at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Published {
    /// `healthy`, `unhealthy` or `hard_stop`.
    pub verdict: AgentVerdict,
    /// The first failing check; null when healthy.
    pub signal: Option<Signal>,
}

pub(super) fn parse_instance(
    at: &Ctx,
    value: Option<&Value>,
) -> Result<Option<TimelineInstance>, DocumentError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, "instance")?,
    };
    let p = "instance.";
    at.only(
        obj,
        &["namespace", "name", "targetImage", "baselineImage"],
        p,
    )?;
    let required = |key: &str| {
        at.opt_str(obj, key, p)?
            .ok_or_else(|| at.fail(&format!("{p}{key}"), "missing".into()))
    };
    if !obj.contains_key("baselineImage") {
        return Err(at.fail("instance.baselineImage", "missing".into()));
    }
    Ok(Some(TimelineInstance {
        namespace: required("namespace")?,
        name: required("name")?,
        target_image: required("targetImage")?,
        baseline_image: at.opt_str(obj, "baselineImage", p)?,
    }))
}

pub(super) fn parse_window(
    at: &Ctx,
    value: Option<&Value>,
) -> Result<Option<TimelineWindow>, DocumentError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, "window")?,
    };
    let p = "window.";
    at.only(obj, &["from", "to", "droppedTicks", "complete"], p)?;
    let from = at.req_time(obj, "from", p)?;
    let to = at.req_time(obj, "to", p)?;
    if to < from {
        return Err(at.fail("window.to", format!("{to} is before window.from {from}")));
    }
    let dropped_ticks = at
        .opt_uint(obj, "droppedTicks", p)?
        .ok_or_else(|| at.fail("window.droppedTicks", "missing".into()))?;
    let complete = at
        .opt_bool(obj, "complete", p)?
        .ok_or_else(|| at.fail("window.complete", "missing".into()))?;
    Ok(Some(TimelineWindow {
        from,
        to,
        dropped_ticks,
        complete,
    }))
}

/// A server's `published`: absent or null when the agent published nothing
/// for that tick, else `{verdict, signal}` (both required, `signal` null
/// exactly when healthy).
pub(super) fn parse_published(
    at: &Ctx,
    value: Option<&Value>,
) -> Result<Option<Published>, DocumentError> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, "published")?,
    };
    at.only(obj, &["verdict", "signal"], "published.")?;
    let verdict = match obj.get("verdict") {
        Some(Value::String(s)) => match AgentVerdict::ALL.iter().find(|v| v.as_str() == s) {
            Some(verdict) => *verdict,
            None => {
                let mut known: Vec<&str> = AgentVerdict::ALL.iter().map(|v| v.as_str()).collect();
                let last = known.pop().unwrap_or_default();
                return Err(at.fail(
                    "published.verdict",
                    format!("unknown value {s:?} ({} or {last})", known.join(", ")),
                ));
            }
        },
        Some(other) => {
            return Err(at.fail(
                "published.verdict",
                format!("expected a string, got {}", show(other)),
            ));
        }
        None => return Err(at.fail("published.verdict", "missing".into())),
    };
    let signal = match obj.get("signal") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => match Signal::from_name(s) {
            Some(signal) => Some(signal),
            None => {
                return Err(at.fail("published.signal", format!("unknown signal {s:?}")));
            }
        },
        Some(other) => {
            return Err(at.fail(
                "published.signal",
                format!("expected a signal name or null, got {}", show(other)),
            ));
        }
        None => return Err(at.fail("published.signal", "missing".into())),
    };
    match (verdict, signal) {
        (AgentVerdict::Healthy, Some(_)) => Err(at.fail(
            "published.signal",
            "must be null when the verdict is healthy".into(),
        )),
        (AgentVerdict::Unhealthy | AgentVerdict::HardStop | AgentVerdict::Suspended, None) => {
            Err(at.fail(
                "published.signal",
                "must name the failing check when the verdict is not healthy".into(),
            ))
        }
        _ => Ok(Some(Published { verdict, signal })),
    }
}
