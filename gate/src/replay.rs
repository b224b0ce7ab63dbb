//! Offline replay (contract/gate.md, "Offline replay"): a JSON document of
//! ticks in, one verdict line per tick out. The document is read by the
//! strict reader ([`crate::document`]); this module runs it through the
//! wave judge.

use serde::Serialize;
use thiserror::Error;

use crate::document::{DocumentError, ReplayInput, config_error, parse_replay};
use crate::error::GateError;
use crate::wave::{Gate, Verdict};

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
    /// The strict reader refused the document.
    #[error(transparent)]
    Document(#[from] DocumentError),
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

/// Parses and runs a replay document, returning one line per tick.
pub fn replay(text: &str) -> Result<Vec<ReplayLine>, ReplayError> {
    let input = parse_replay(text)?;
    run_replay(&input)
}

/// Runs parsed ticks through a fresh gate.
pub fn run_replay(input: &ReplayInput) -> Result<Vec<ReplayLine>, ReplayError> {
    let mut gate = Gate::new(input.config.clone())
        .map_err(|source| ReplayError::from(config_error("config.", source)))?;
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
