//! The strict document reader (contract/gate.md, "Offline replay"): the
//! replay document and its parts read on their own (configuration, tick,
//! baseline, aggregate), plus the keys an exported timeline adds. Every
//! refusal is a [`DocumentError`] naming the tick, server and field at fault,
//! or the line and column of a key given twice (`kura_schemas::strict_json`:
//! a repeated key is refused anywhere in the document; one leading UTF-8
//! byte-order mark is skipped, as files saved by some editors start with
//! one).
//!
//! - `config`: [`parse_config_over`], the one parser and validator of a
//!   configuration document.
//! - `tick`: ticks, servers, baselines and aggregates.
//! - `ctx`: where in the document the reader is, and its typed field
//!   readers.
//! - [`timeline`]: the keys of the agent's exported timeline (`instance`,
//!   `window`, each server's `published` verdict).

mod config;
mod ctx;
mod tick;
pub mod timeline;

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use crate::baseline::Baseline;
use crate::config::GateConfig;
use crate::wave::TickInput;

pub(crate) use config::config_error;
use config::parse_config;
pub use config::{config_error_line, parse_config_over};
use ctx::{Ctx, show};
use kura_schemas::strict_json::{self, StrictJsonError};
use tick::{parse_baseline, parse_tick};
pub use timeline::{Published, TimelineInstance, TimelineWindow};

/// A parsed replay document (or exported timeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayInput {
    /// The configuration (defaults for what the document leaves out).
    pub config: GateConfig,
    /// The ticks, in order.
    pub ticks: Vec<TickInput>,
    /// A timeline's `instance`: the instance it was exported for.
    pub instance: Option<TimelineInstance>,
    /// A timeline's `window`: what the export covers.
    pub window: Option<TimelineWindow>,
    /// Per tick (same length as `ticks`), the verdicts the agent published,
    /// by server id: empty for a plain replay document.
    pub published: Vec<BTreeMap<String, Published>>,
}

/// Why a document (replay, timeline, configuration, tick or baseline) was
/// refused by the strict reader.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DocumentError {
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

/// Parses a replay document strictly (unknown keys outside `health` are
/// refused; inside `health` only the fields the checks read are looked at).
pub fn parse_replay(text: &str) -> Result<ReplayInput, DocumentError> {
    parse_replay_judged_with(text, None)
}

/// [`parse_replay`], with `candidate` (when given) in place of the
/// document's own configuration: it becomes [`ReplayInput::config`] and it
/// decides the soak eligibility of baselines given as aggregates, as the
/// gate would have with it (the what-if of `kura-gate replay
/// --gate-config`). The document's `config` is still read and checked.
pub fn parse_replay_judged_with(
    text: &str,
    candidate: Option<&GateConfig>,
) -> Result<ReplayInput, DocumentError> {
    let root = json_value(text)?;
    let at = Ctx::default();
    let root = at.object(&root, "(document)")?;
    at.only(root, &["config", "ticks", "instance", "window"], "")?;
    let own = match root.get("config") {
        None | Some(Value::Null) => GateConfig::default(),
        Some(value) => parse_config(at.object(value, "config")?)?,
    };
    let config = candidate.cloned().unwrap_or(own);
    let instance = timeline::parse_instance(&at, root.get("instance"))?;
    let window = timeline::parse_window(&at, root.get("window"))?;
    let ticks = match root.get("ticks") {
        Some(Value::Array(ticks)) => ticks,
        Some(other) => {
            return Err(at.fail("ticks", format!("expected an array, got {}", show(other))));
        }
        None => return Err(at.fail("ticks", "missing".into())),
    };
    let mut parsed = Vec::with_capacity(ticks.len());
    let mut published = Vec::with_capacity(ticks.len());
    let mut last_attempt = None;
    for (index, tick) in ticks.iter().enumerate() {
        let at = Ctx {
            tick: Some(index),
            server: None,
        };
        let mut tick_published = BTreeMap::new();
        let tick = parse_tick(&at, tick, &config, Some(&mut tick_published))?;
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
        published.push(tick_published);
    }
    Ok(ReplayInput {
        config,
        ticks: parsed,
        instance,
        window,
        published,
    })
}

/// Parses one tick document on its own (an element of the replay
/// document's `ticks`), with the same strict rules and error locations
/// (server and field; there is no tick index). `config` decides the soak
/// eligibility of baselines given as aggregates.
pub fn parse_tick_json(text: &str, config: &GateConfig) -> Result<TickInput, DocumentError> {
    parse_tick_value(&json_value(text)?, config)
}

/// [`parse_tick_json`] for a document already read into a JSON value.
pub fn parse_tick_value(value: &Value, config: &GateConfig) -> Result<TickInput, DocumentError> {
    parse_tick(&Ctx::default(), value, config, None)
}

/// Parses a baseline document on its own, in either form a tick's server
/// accepts: `{capturedAt, health}` captures a baseline from the aggregate
/// (`health` null or absent: no aggregate), `{capturedAt, counters,
/// soakEligible}` is a baseline captured earlier.
pub fn parse_baseline_json(text: &str, config: &GateConfig) -> Result<Baseline, DocumentError> {
    parse_baseline(&Ctx::default(), &json_value(text)?, "", config)
}

/// A configuration document's value (an object) over the defaults, its
/// errors located as the replay document's `config` ones are.
pub(crate) fn parse_config_value(value: &Value) -> Result<GateConfig, DocumentError> {
    parse_config(Ctx::default().object(value, "(config)")?)
}

/// The JSON value of `text`, or where it stops being JSON, or where a key
/// repeats (`strict_json`: refused at any depth; one leading byte-order
/// mark is skipped).
pub(crate) fn json_value(text: &str) -> Result<Value, DocumentError> {
    strict_json::document_from_str(text).map_err(|e| match e {
        StrictJsonError::DuplicateKey { key, line, column } => {
            DocumentError::DuplicateKey { key, line, column }
        }
        other => {
            let (line, column) = other.position().unwrap_or((0, 0));
            DocumentError::Json {
                message: other.to_string(),
                line,
                column,
            }
        }
    })
}
