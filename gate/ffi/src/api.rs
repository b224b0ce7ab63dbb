//! The safe core every binding calls: documents (bytes) in, typed values
//! out, every refusal an [`FfiError`]. The C ABI ([`crate::abi`]) and the
//! Elixir NIF are thin layers over it, so both refuse and answer alike.

use std::sync::{Mutex, TryLockError};

use jiff::Timestamp;
use kura_gate::{
    Baseline, Gate, GateConfig, GateState, HealthView, Verdict, VerdictKind, View, WhatIf,
    judge_instance as judge, parse_baseline_json, parse_config_json, parse_tick_json,
    parse_tick_value,
};
use kura_schemas::{RolloutGate, RolloutHealth, Signal};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Document, ErrorCode, FfiError};

/// The ABI version: bumped on any incompatible change of a signature, a
/// document's shape or an error code's meaning (docs/gate-abi.md).
pub const ABI_VERSION: u32 = 2;

/// The largest document any call accepts, in bytes (16 MiB: a 10,000-server
/// tick with baselines and aggregates of every field the checks read is
/// about 7.3 MiB, twice that leaves room for larger aggregates).
pub const MAX_INPUT_BYTES: usize = 16 * 1024 * 1024;

/// The text of a document, or why it is refused before parsing.
pub fn text(document: Document, bytes: &[u8]) -> Result<&str, FfiError> {
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(FfiError::too_large(document, bytes.len()));
    }
    std::str::from_utf8(bytes).map_err(|e| FfiError::utf8(document, bytes, e))
}

/// A wave judge behind a lock: one caller at a time, a second concurrent
/// caller gets [`ErrorCode::Busy`] instead of a data race.
#[derive(Debug)]
pub struct GateHandle {
    gate: Mutex<Gate>,
}

impl GateHandle {
    /// A gate with empty state from a configuration document.
    pub fn new(config: &[u8]) -> Result<Self, FfiError> {
        let config = parse_config(config)?;
        let gate = Gate::new(config).map_err(FfiError::gate)?;
        Ok(GateHandle {
            gate: Mutex::new(gate),
        })
    }

    /// A gate continuing from a stored state document (what
    /// [`GateHandle::state_json`] returned).
    pub fn restore(config: &[u8], state: &[u8]) -> Result<Self, FfiError> {
        let config = parse_config(config)?;
        let state: GateState = serde_json::from_str(text(Document::State, state)?)
            .map_err(|e| FfiError::serde(Document::State, &e))?;
        let gate = Gate::restore(config, state).map_err(FfiError::gate)?;
        Ok(GateHandle {
            gate: Mutex::new(gate),
        })
    }

    /// Judges one tick document. On error the state is unchanged.
    pub fn tick(&self, input: &[u8]) -> Result<Verdict, FfiError> {
        let text = text(Document::Input, input)?;
        self.with_gate(|gate| {
            let tick = parse_tick_json(text, gate.config())
                .map_err(|e| FfiError::document(Document::Input, e))?;
            gate.tick(&tick).map_err(FfiError::gate)
        })
    }

    /// Judges one tick given as a JSON value (the NIF converts Elixir maps).
    pub fn tick_value(&self, input: &Value) -> Result<Verdict, FfiError> {
        self.with_gate(|gate| {
            let tick = parse_tick_value(input, gate.config())
                .map_err(|e| FfiError::document(Document::Input, e))?;
            gate.tick(&tick).map_err(FfiError::gate)
        })
    }

    /// The state document to store; [`GateHandle::restore`] continues from it.
    pub fn state_json(&self) -> Result<Vec<u8>, FfiError> {
        self.with_gate(|gate| to_json(gate.state()))
    }

    /// Captures a baseline from `{capturedAt, health}` with this gate's
    /// configuration (a stored `{capturedAt, counters, soakEligible}` is
    /// returned as it is, checked).
    pub fn capture_baseline(&self, input: &[u8]) -> Result<Baseline, FfiError> {
        let text = text(Document::Input, input)?;
        self.with_gate(|gate| {
            parse_baseline_json(text, gate.config())
                .map_err(|e| FfiError::document(Document::Input, e))
        })
    }

    fn with_gate<T>(
        &self,
        f: impl FnOnce(&mut Gate) -> Result<T, FfiError>,
    ) -> Result<T, FfiError> {
        let mut gate = match self.gate.try_lock() {
            Ok(gate) => gate,
            Err(TryLockError::WouldBlock) => {
                return Err(FfiError::new(
                    ErrorCode::Busy,
                    "the gate is in use by another caller (one caller at a time per gate)",
                ));
            }
            Err(TryLockError::Poisoned(_)) => {
                return Err(FfiError::new(
                    ErrorCode::Internal,
                    "the gate is unusable after an internal error; restore it from the last stored state",
                ));
            }
        };
        f(&mut gate)
    }
}

fn parse_config(config: &[u8]) -> Result<GateConfig, FfiError> {
    let config = parse_config_json(text(Document::Config, config)?)
        .map_err(|e| FfiError::document(Document::Config, e))?;
    config.validate().map_err(FfiError::gate)?;
    Ok(config)
}

/// The per-instance judgement's input document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InstanceInput {
    /// The configuration (defaults when absent or null).
    #[serde(default)]
    config: Option<GateConfig>,
    instance: String,
    #[serde(default)]
    previous: Option<RolloutGate>,
    spec_image: String,
    #[serde(default)]
    baseline_source: Option<RolloutHealth>,
    #[serde(default)]
    current: Option<RolloutHealth>,
    now: Timestamp,
}

/// The agent's per-instance judgement ([`kura_gate::judge_instance`]) from
/// one document: `{config?, instance, previous, specImage, baselineSource,
/// current, now}`; the answer is the next `status.rolloutGate`.
pub fn judge_instance(input: &[u8]) -> Result<RolloutGate, FfiError> {
    let input: InstanceInput = serde_json::from_str(text(Document::Input, input)?)
        .map_err(|e| FfiError::serde(Document::Input, &e))?;
    let config = input.config.unwrap_or_default();
    config.validate().map_err(|e| FfiError {
        code: ErrorCode::InvalidInput,
        ..FfiError::gate(e)
    })?;
    Ok(judge(
        &input.instance,
        input.previous.as_ref(),
        &input.spec_image,
        input.baseline_source.as_ref(),
        input.current.as_ref(),
        input.now,
        &config,
    ))
}

/// What-if (`kura-gate replay --gate-config FILE --diff`): the replay
/// document (or exported timeline) `document` judged with its own
/// configuration and with `candidate` (a configuration document, as
/// [`GateHandle::new`] reads; null or `{}` is the defaults), in the wave
/// judge's view (`agent_view` false) or the agent's. The answer is
/// `{differences, summary}`: the lines and the summary `kura-gate replay
/// --diff` prints, in one document.
pub fn what_if(document: &[u8], candidate: &[u8], agent_view: bool) -> Result<WhatIf, FfiError> {
    let candidate = parse_config(candidate)?;
    let document = text(Document::Input, document)?;
    let view = if agent_view { View::Agent } else { View::Wave };
    kura_gate::what_if(document, &candidate, view).map_err(|e| FfiError::replay(Document::Input, e))
}

/// What a binding needs to know about this library, from the Rust side so
/// no binding keeps its own copy: ABI version, limits, every signal, the
/// aggregate fields the checks read and the default configuration.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// [`MAX_INPUT_BYTES`].
    pub max_input_bytes: usize,
    /// Every signal, in the gate's fixed order.
    pub signals: Vec<&'static str>,
    /// Every verdict kind.
    pub verdicts: Vec<&'static str>,
    /// Every error code, by number.
    pub error_codes: Vec<(i32, &'static str)>,
    /// The aggregate (`health`) fields the server checks read.
    pub health_fields: Vec<String>,
    /// The default configuration.
    pub default_config: GateConfig,
}

/// The [`Description`] of this build.
pub fn describe() -> Description {
    let health_fields = match serde_json::to_value(HealthView::default()) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let codes = [
        ErrorCode::InvalidInput,
        ErrorCode::InvalidConfig,
        ErrorCode::InvalidState,
        ErrorCode::AttemptWentBack,
        ErrorCode::NullArgument,
        ErrorCode::InputTooLarge,
        ErrorCode::Busy,
        ErrorCode::Internal,
        ErrorCode::InvalidHandle,
    ];
    Description {
        abi_version: ABI_VERSION,
        max_input_bytes: MAX_INPUT_BYTES,
        signals: Signal::ALL.iter().map(|s| s.as_str()).collect(),
        verdicts: VerdictKind::ALL.iter().map(|v| v.as_str()).collect(),
        error_codes: codes.iter().map(|c| (c.as_i32(), c.as_str())).collect(),
        health_fields,
        default_config: GateConfig::default(),
    }
}

/// JSON of a value this library produced; failing would be a bug.
pub fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, FfiError> {
    serde_json::to_vec(value)
        .map_err(|e| FfiError::new(ErrorCode::Internal, format!("cannot serialize: {e}")))
}
