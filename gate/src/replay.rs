//! Offline replay (contract/gate.md, "Offline replay"): a JSON document of
//! ticks in, one verdict line per tick out. Parsing is strict and every
//! error names the tick, server and field at fault, or the line and column
//! of a key given twice (`kura_schemas::strict_json`: a repeated key is
//! refused anywhere in the document; one leading UTF-8 byte-order mark is
//! skipped, as files saved by some editors start with one).

use std::collections::HashSet;

use jiff::Timestamp;
use kura_schemas::BaselineCounters;
use kura_schemas::api_int::API_INT_MAX;
use kura_schemas::strict_json::{self, StrictJsonError};
use serde::Serialize;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::baseline::Baseline;
use crate::config::GateConfig;
use crate::error::GateError;
use crate::health_view::HealthView;
use crate::wave::{Deployment, Gate, ServerInput, ServerStatus, TickInput, Verdict};

/// A parsed replay document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayInput {
    /// The configuration (defaults for what the document leaves out).
    pub config: GateConfig,
    /// The ticks, in order.
    pub ticks: Vec<TickInput>,
}

/// One output line: the tick's index and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayLine {
    /// Index of the tick in the input, from 0.
    pub tick: usize,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Why a replay document was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplayError {
    /// Not JSON at all.
    #[error("input is not valid JSON: {message}")]
    Json {
        /// The parser's message (it ends with the line and column).
        message: String,
        /// Line of the fault, from 1 (0 when the input ended early).
        line: usize,
        /// Column of the fault, from 1.
        column: usize,
    },
    /// A key appears twice in one object: readers disagree on which one
    /// counts, so the document is refused.
    #[error("line {line} column {column}: key {key:?} appears more than once in one object")]
    DuplicateKey {
        /// The key.
        key: String,
        /// 1-based line of the second occurrence.
        line: usize,
        /// 1-based column just after it.
        column: usize,
    },
    /// A field is missing, of the wrong type or out of range.
    #[error("{}field {field}: {reason}", location(*tick, server.as_deref()))]
    Field {
        /// The tick (index), when the fault is inside one.
        tick: Option<usize>,
        /// The server id, when the fault is inside one.
        server: Option<String>,
        /// The field path, e.g. `health.ready`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The gate refused a tick.
    #[error("tick {tick}, field {field}: {source}")]
    Gate {
        /// The tick.
        tick: usize,
        /// The field at fault.
        field: &'static str,
        /// The gate's reason.
        source: GateError,
    },
}

fn location(tick: Option<usize>, server: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(tick) = tick {
        out.push_str(&format!("tick {tick}, "));
    }
    if let Some(server) = server {
        out.push_str(&format!("server {server:?}, "));
    }
    out
}

/// Parses and runs a replay document, returning one line per tick.
pub fn replay(text: &str) -> Result<Vec<ReplayLine>, ReplayError> {
    let input = parse_replay(text)?;
    run_replay(&input)
}

/// Runs parsed ticks through a fresh gate.
pub fn run_replay(input: &ReplayInput) -> Result<Vec<ReplayLine>, ReplayError> {
    let mut gate =
        Gate::new(input.config.clone()).map_err(|source| config_error("config.", source))?;
    input
        .ticks
        .iter()
        .enumerate()
        .map(|(tick, ticked)| {
            gate.tick(ticked)
                .map(|verdict| ReplayLine { tick, verdict })
                .map_err(|source| ReplayError::Gate {
                    tick,
                    field: match source {
                        GateError::AttemptWentBack { .. } => "attempt",
                        GateError::DuplicateServer(_) => "servers",
                        GateError::EmptySoakList | GateError::ConfigValue { .. } => "config",
                        GateError::InvalidState { .. } => "state",
                    },
                    source,
                })
        })
        .collect()
}

/// Parses a replay document strictly (unknown keys outside `health` are
/// refused; inside `health` only the fields the checks read are looked at).
pub fn parse_replay(text: &str) -> Result<ReplayInput, ReplayError> {
    let root = json_value(text)?;
    let at = Ctx::default();
    let root = at.object(&root, "(document)")?;
    at.only(root, &["config", "ticks"], "")?;
    let config = match root.get("config") {
        None | Some(Value::Null) => GateConfig::default(),
        Some(value) => parse_config(at.object(value, "config")?)?,
    };
    let ticks = match root.get("ticks") {
        Some(Value::Array(ticks)) => ticks,
        Some(other) => {
            return Err(at.fail("ticks", format!("expected an array, got {}", show(other))));
        }
        None => return Err(at.fail("ticks", "missing".into())),
    };
    let mut parsed = Vec::with_capacity(ticks.len());
    let mut last_attempt = None;
    for (index, tick) in ticks.iter().enumerate() {
        let at = Ctx {
            tick: Some(index),
            server: None,
        };
        let tick = parse_tick(&at, tick, &config)?;
        if let Some(last) = last_attempt
            && tick.attempt < last
        {
            return Err(at.fail(
                "attempt",
                format!("{} is lower than the earlier attempt {last}", tick.attempt),
            ));
        }
        last_attempt = Some(tick.attempt);
        parsed.push(tick);
    }
    Ok(ReplayInput {
        config,
        ticks: parsed,
    })
}

/// Parses a configuration document on its own: the replay document's
/// `config` object (every key optional, unknown keys refused). `null` is the
/// default configuration.
pub fn parse_config_json(text: &str) -> Result<GateConfig, ReplayError> {
    match json_value(text)? {
        Value::Null => Ok(GateConfig::default()),
        value => parse_config(Ctx::default().object(&value, "(config)")?),
    }
}

/// Parses one tick document on its own (an element of the replay
/// document's `ticks`), with the same strict rules and error locations
/// (server and field; there is no tick index). `config` decides the soak
/// eligibility of baselines given as aggregates.
pub fn parse_tick_json(text: &str, config: &GateConfig) -> Result<TickInput, ReplayError> {
    parse_tick_value(&json_value(text)?, config)
}

/// [`parse_tick_json`] for a document already read into a JSON value.
pub fn parse_tick_value(value: &Value, config: &GateConfig) -> Result<TickInput, ReplayError> {
    parse_tick(&Ctx::default(), value, config)
}

/// Parses a baseline document on its own, in either form a tick's server
/// accepts: `{capturedAt, health}` captures a baseline from the aggregate
/// (`health` null or absent: no aggregate), `{capturedAt, counters,
/// soakEligible}` is a baseline captured earlier.
pub fn parse_baseline_json(text: &str, config: &GateConfig) -> Result<Baseline, ReplayError> {
    parse_baseline(&Ctx::default(), &json_value(text)?, "", config)
}

/// The JSON value of `text`, or where it stops being JSON, or where a key
/// repeats (`strict_json`: refused at any depth; one leading byte-order
/// mark is skipped).
fn json_value(text: &str) -> Result<Value, ReplayError> {
    strict_json::document_from_str(text).map_err(|e| match e {
        StrictJsonError::DuplicateKey { key, line, column } => {
            ReplayError::DuplicateKey { key, line, column }
        }
        other => {
            let (line, column) = other.position().unwrap_or((0, 0));
            ReplayError::Json {
                message: other.to_string(),
                line,
                column,
            }
        }
    })
}

/// Parses a gate configuration object given as a JSON value over `base`:
/// every key is optional and a key left out (or null) keeps `base`'s value,
/// unknown keys are refused, and the result must pass
/// [`GateConfig::validate`]. The one parser and validator of the
/// configuration document, shared by the replay document's `config`, the
/// agent's `--gate-config` file (read from JSON or YAML into a value) and
/// the per-instance `kura.tuist.dev/gate-config` annotation (merged over
/// the cluster's configuration). Errors are [`ReplayError::Field`] whose
/// `field` is the key as written (`soakSeconds[1]` inside the list).
pub fn parse_config_over(base: &GateConfig, value: &Value) -> Result<GateConfig, ReplayError> {
    let at = Ctx::default();
    let obj = at.object(value, "(config)")?;
    parse_config_fields(base.clone(), obj, "")
}

fn parse_config(obj: &Map<String, Value>) -> Result<GateConfig, ReplayError> {
    parse_config_fields(GateConfig::default(), obj, "config.")
}

/// A [`GateError`] of [`GateConfig::validate`] as a located field error.
fn config_error(prefix: &str, error: GateError) -> ReplayError {
    let (key, reason) = match error {
        GateError::EmptySoakList => ("soakSeconds", "must list at least one value".to_owned()),
        GateError::ConfigValue { key, reason } => (key, reason),
        other => ("", other.to_string()),
    };
    Ctx::default().fail(&format!("{prefix}{key}"), reason)
}

/// The keys of `obj` over `config`; `prefix` is put before every field
/// name in errors (`config.` inside a replay document).
fn parse_config_fields(
    mut config: GateConfig,
    obj: &Map<String, Value>,
    prefix: &str,
) -> Result<GateConfig, ReplayError> {
    let at = Ctx::default();
    at.only(obj, &crate::config::CONFIG_KEYS, prefix)?;
    match obj.get("soakSeconds") {
        None | Some(Value::Null) => {}
        Some(Value::Array(values)) => {
            if values.is_empty() {
                return Err(at.fail(
                    &format!("{prefix}soakSeconds"),
                    "must list at least one value".into(),
                ));
            }
            config.soak_seconds = values
                .iter()
                .enumerate()
                .map(|(i, v)| at.uint(v, &format!("{prefix}soakSeconds[{i}]")))
                .collect::<Result<_, _>>()?;
        }
        Some(other) => {
            return Err(at.fail(
                &format!("{prefix}soakSeconds"),
                format!("expected an array of seconds, got {}", show(other)),
            ));
        }
    }
    let fields: [(&str, &mut u64); 10] = [
        ("waveDeadlineSeconds", &mut config.wave_deadline_seconds),
        ("maxSampleAgeSeconds", &mut config.max_sample_age_seconds),
        ("futureSkewSeconds", &mut config.future_skew_seconds),
        ("outboxBandPercent", &mut config.outbox_band_percent),
        ("outboxBandMinimum", &mut config.outbox_band_minimum),
        (
            "replicationLagBandPercent",
            &mut config.replication_lag_band_percent,
        ),
        (
            "replicationLagBandMinimum",
            &mut config.replication_lag_band_minimum,
        ),
        ("fdTimeoutBand", &mut config.fd_timeout_band),
        (
            "peerFailureBandPercent",
            &mut config.peer_failure_band_percent,
        ),
        (
            "peerFailureBandMinimum",
            &mut config.peer_failure_band_minimum,
        ),
    ];
    for (key, slot) in fields {
        if let Some(value) = at.opt_uint(obj, key, prefix)? {
            *slot = value;
        }
    }
    config
        .validate()
        .map_err(|error| config_error(prefix, error))?;
    Ok(config)
}

fn parse_tick(at: &Ctx, tick: &Value, config: &GateConfig) -> Result<TickInput, ReplayError> {
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
        let server = parse_server(at, index, server, config)?;
        if !seen.insert(server.id.clone()) {
            return Err(Ctx {
                tick: at.tick,
                server: Some(server.id.clone()),
            }
            .fail("id", "appears more than once in this tick".into()));
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
) -> Result<ServerInput, ReplayError> {
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
    at.only(
        obj,
        &[
            "id",
            "wave",
            "converged",
            "deployment",
            "status",
            "baseline",
            "health",
        ],
        "",
    )?;
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
    Ok(ServerInput {
        id,
        wave,
        converged,
        deployment,
        status,
        baseline,
        health,
    })
}

/// A baseline in either form: `{capturedAt, health}` (an aggregate, captured
/// here with [`Baseline::capture`]) or `{capturedAt, counters, soakEligible}`
/// (a baseline captured earlier, as [`Baseline`] serializes).
fn parse_baseline(
    at: &Ctx,
    value: &Value,
    field: &str,
    config: &GateConfig,
) -> Result<Baseline, ReplayError> {
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
) -> Result<Option<HealthView>, ReplayError> {
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
) -> Result<Option<kura_schemas::ServingAuthorityHealth>, ReplayError> {
    let field = format!("{prefix}servingAuthority");
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => at.object(value, &field)?,
    };
    let p = format!("{field}.");
    let pods = |key: &str| -> Result<u32, ReplayError> {
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

/// Where in the document a parser is.
#[derive(Debug, Default)]
struct Ctx {
    tick: Option<usize>,
    server: Option<String>,
}

impl Ctx {
    fn fail(&self, field: &str, reason: String) -> ReplayError {
        ReplayError::Field {
            tick: self.tick,
            server: self.server.clone(),
            field: field.to_owned(),
            reason,
        }
    }

    fn object<'a>(
        &self,
        value: &'a Value,
        field: &str,
    ) -> Result<&'a Map<String, Value>, ReplayError> {
        value
            .as_object()
            .ok_or_else(|| self.fail(field, format!("expected an object, got {}", show(value))))
    }

    fn only(
        &self,
        obj: &Map<String, Value>,
        keys: &[&str],
        prefix: &str,
    ) -> Result<(), ReplayError> {
        match obj.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(unknown) => Err(self.fail(&format!("{prefix}{unknown}"), "unknown field".into())),
            None => Ok(()),
        }
    }

    fn uint(&self, value: &Value, field: &str) -> Result<u64, ReplayError> {
        self.uint_max(value, field, u64::MAX)
    }

    /// A non-negative integer up to `max`. An integer beyond it (or beyond
    /// 64 bits, which JSON readers hold as a float) is "out of range", not a
    /// wrong type.
    fn uint_max(&self, value: &Value, field: &str, max: u64) -> Result<u64, ReplayError> {
        let out_of_range = || {
            let why = if max == API_INT_MAX {
                " (2^63-1, the largest integer the API server stores)"
            } else {
                ""
            };
            self.fail(
                field,
                format!(
                    "{} is out of range: the largest accepted is {max}{why}",
                    show(value)
                ),
            )
        };
        match value {
            Value::Number(n) => match n.as_u64() {
                Some(v) if v <= max => Ok(v),
                Some(_) => Err(out_of_range()),
                None if n
                    .as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f >= u64::MAX as f64) =>
                {
                    Err(out_of_range())
                }
                None => Err(self.fail(
                    field,
                    format!("expected a non-negative integer, got {}", show(value)),
                )),
            },
            _ => Err(self.fail(
                field,
                format!("expected a non-negative integer, got {}", show(value)),
            )),
        }
    }

    fn opt_uint(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<u64>, ReplayError> {
        self.opt_uint_max(obj, key, prefix, u64::MAX)
    }

    fn opt_uint_max(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
        max: u64,
    ) -> Result<Option<u64>, ReplayError> {
        // The field's name is formatted only on the error path: a
        // 1,000-server tick reads some 30,000 fields.
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_u64() {
                Some(n) if n <= max => Ok(Some(n)),
                _ => self
                    .uint_max(value, &format!("{prefix}{key}"), max)
                    .map(Some),
            },
        }
    }

    fn req_u32(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<u32, ReplayError> {
        if let Some(n) = obj
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
        {
            return Ok(n);
        }
        let field = format!("{prefix}{key}");
        let value = obj
            .get(key)
            .ok_or_else(|| self.fail(&field, "missing".into()))?;
        let n = self.uint_max(value, &field, u64::from(u32::MAX))?;
        u32::try_from(n).map_err(|_| self.fail(&field, format!("{n} is out of range")))
    }

    fn opt_bool(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<bool>, ReplayError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.fail(
                &format!("{prefix}{key}"),
                format!("expected a boolean, got {}", show(other)),
            )),
        }
    }

    fn opt_str(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<String>, ReplayError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.fail(
                &format!("{prefix}{key}"),
                format!("expected a string, got {}", show(other)),
            )),
        }
    }

    fn opt_time(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<Timestamp>, ReplayError> {
        let field = || format!("{prefix}{key}");
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => s
                .parse::<Timestamp>()
                .map(Some)
                .map_err(|e| self.fail(&field(), format!("not an RFC 3339 time ({s:?}): {e}"))),
            Some(other) => Err(self.fail(
                &field(),
                format!("expected an RFC 3339 time, got {}", show(other)),
            )),
        }
    }

    fn req_time(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Timestamp, ReplayError> {
        self.opt_time(obj, key, prefix)?
            .ok_or_else(|| self.fail(&format!("{prefix}{key}"), "missing".into()))
    }
}

/// A short rendering of an offending value.
fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        let cut: String = text.chars().take(40).collect();
        format!("{cut}...")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_error(result: Result<GateConfig, ReplayError>) -> (String, String) {
        match result {
            Err(ReplayError::Field { field, reason, .. }) => (field, reason),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_configuration_merges_over_its_base_key_by_key() {
        let cluster = parse_config_over(
            &GateConfig::default(),
            &json!({"fdTimeoutBand": 5, "soakSeconds": [60, 30]}),
        )
        .unwrap();
        assert_eq!(cluster.fd_timeout_band, 5);
        assert_eq!(cluster.soak_seconds, [60, 30]);
        assert_eq!(
            cluster.outbox_band_minimum, 50,
            "a key left out keeps the base"
        );
        let instance = parse_config_over(
            &cluster,
            &json!({"outboxBandMinimum": 80, "fdTimeoutBand": null}),
        )
        .unwrap();
        assert_eq!(instance.outbox_band_minimum, 80);
        assert_eq!(instance.fd_timeout_band, 5, "null keeps the base");
        assert_eq!(instance.soak_seconds, [60, 30]);
        assert_eq!(
            parse_config_over(&cluster, &json!({})).unwrap(),
            cluster,
            "an empty object is the base"
        );
    }

    #[test]
    fn every_key_is_read() {
        let value = json!({
            "soakSeconds": [1, 2, 3], "waveDeadlineSeconds": 4, "maxSampleAgeSeconds": 5,
            "futureSkewSeconds": 6, "outboxBandPercent": 7, "outboxBandMinimum": 8,
            "fdTimeoutBand": 9, "peerFailureBandPercent": 10, "peerFailureBandMinimum": 11,
            "replicationLagBandPercent": 12, "replicationLagBandMinimum": 13
        });
        let config = parse_config_over(&GateConfig::default(), &value).unwrap();
        assert_eq!(
            config,
            GateConfig {
                soak_seconds: vec![1, 2, 3],
                wave_deadline_seconds: 4,
                max_sample_age_seconds: 5,
                future_skew_seconds: 6,
                outbox_band_percent: 7,
                outbox_band_minimum: 8,
                replication_lag_band_percent: 12,
                replication_lag_band_minimum: 13,
                fd_timeout_band: 9,
                peer_failure_band_percent: 10,
                peer_failure_band_minimum: 11,
            }
        );
        // The same document through serde reads the same configuration.
        assert_eq!(serde_json::from_value::<GateConfig>(value).unwrap(), config);
    }

    #[test]
    fn invalid_documents_name_the_key_and_the_reason() {
        let base = GateConfig::default();
        for (value, key, reason) in [
            (json!({"bogus": 1}), "bogus", "unknown field"),
            (
                json!({"fdTimeoutBand": "3"}),
                "fdTimeoutBand",
                "expected a non-negative integer, got \"3\"",
            ),
            (
                json!({"fdTimeoutBand": -1}),
                "fdTimeoutBand",
                "expected a non-negative integer, got -1",
            ),
            (
                json!({"fdTimeoutBand": 1.5}),
                "fdTimeoutBand",
                "expected a non-negative integer, got 1.5",
            ),
            (
                json!({"soakSeconds": []}),
                "soakSeconds",
                "must list at least one value",
            ),
            (
                json!({"soakSeconds": 900}),
                "soakSeconds",
                "expected an array of seconds, got 900",
            ),
            (
                json!({"soakSeconds": [900, "x"]}),
                "soakSeconds[1]",
                "expected a non-negative integer, got \"x\"",
            ),
            (
                json!({"outboxBandPercent": 1001}),
                "outboxBandPercent",
                "1001 is above the limit of 1000 (percent of the baseline)",
            ),
            (
                json!({"peerFailureBandPercent": 5000}),
                "peerFailureBandPercent",
                "5000 is above the limit of 1000 (percent of the baseline)",
            ),
            (
                json!({"maxSampleAgeSeconds": 0}),
                "maxSampleAgeSeconds",
                "must be at least 1 (0 would make every sample stale)",
            ),
        ] {
            let (field, why) = field_error(parse_config_over(&base, &value));
            assert_eq!((field.as_str(), why.as_str()), (key, reason), "{value}");
        }
        let (field, why) = field_error(parse_config_over(&base, &json!([1])));
        assert_eq!(field, "(config)");
        assert!(why.starts_with("expected an object"), "{why}");
    }

    #[test]
    fn a_merge_is_validated_as_a_whole() {
        // The cluster allows a wide band; an instance cannot push it over
        // the limit, nor empty the soak list.
        let cluster =
            parse_config_over(&GateConfig::default(), &json!({"outboxBandPercent": 900})).unwrap();
        assert!(parse_config_over(&cluster, &json!({"outboxBandPercent": 1000})).is_ok());
        let (field, _) = field_error(parse_config_over(
            &cluster,
            &json!({"outboxBandPercent": 1200}),
        ));
        assert_eq!(field, "outboxBandPercent");
    }
}
