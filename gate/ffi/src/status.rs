//! The status codes every C entry point returns: one number per
//! [`crate::ErrorCode`], and [`KURA_GATE_OK`]. A leaf module, so that the
//! error documents (`error.rs`) and the entry points (`abi.rs`) both name
//! the numbers without depending on each other.

/// Success.
pub const KURA_GATE_OK: i32 = 0;
/// A tick, baseline or instance document is refused (not JSON, not UTF-8,
/// wrong shape, out of range).
pub const KURA_GATE_INVALID_INPUT: i32 = 1;
/// The configuration document is refused.
pub const KURA_GATE_INVALID_CONFIG: i32 = 2;
/// The stored state document is refused.
pub const KURA_GATE_INVALID_STATE: i32 = 3;
/// A tick's attempt is lower than one already judged; the state is unchanged.
pub const KURA_GATE_ATTEMPT_WENT_BACK: i32 = 4;
/// A required pointer argument was null.
pub const KURA_GATE_NULL_ARGUMENT: i32 = 5;
/// A document is larger than `kura_gate_max_input_bytes()`.
pub const KURA_GATE_INPUT_TOO_LARGE: i32 = 6;
/// The gate is in use by another thread right now.
pub const KURA_GATE_BUSY: i32 = 7;
/// A bug in the library (a caught panic); the gate handle, if any, is
/// unusable afterwards: free it and restore from the last stored state.
pub const KURA_GATE_INTERNAL: i32 = 8;
/// The gate handle names no live gate: it was freed, or it is no handle of
/// this library (see `KuraGate` for what cannot be detected).
pub const KURA_GATE_INVALID_HANDLE: i32 = 9;
