//! Errors of the gate library.

use thiserror::Error;

/// Inputs the wave judge refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GateError {
    /// A tick carried a lower attempt number than an earlier tick.
    #[error("attempt {got} is lower than the attempt {previous} already judged")]
    AttemptWentBack {
        /// The attempt in the state.
        previous: u32,
        /// The attempt of the tick.
        got: u32,
    },
    /// Two servers of one tick share an id.
    #[error("server id {0:?} appears more than once")]
    DuplicateServer(String),
    /// The configuration has no soak value.
    #[error("soakSeconds must list at least one value")]
    EmptySoakList,
    /// A configuration value outside what the gate accepts
    /// ([`GateConfig::validate`](crate::GateConfig::validate)).
    #[error("{key} {reason}")]
    ConfigValue {
        /// The configuration key (camelCase, as in a document).
        key: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// A stored state the gate could not have written
    /// ([`GateState::validate`](crate::GateState::validate)): restoring it
    /// could shortcut a stop or the soak, so it is refused.
    #[error("{field}: {reason}")]
    InvalidState {
        /// The state key at fault (camelCase, as in the document).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}
