//! Errors as values: a stable code and a message that locates the problem.

use kura_gate::{DocumentError, GateError, ReplayError};
use serde::Serialize;

/// Which document an input was (decides the code of its parse errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// A gate configuration.
    Config,
    /// A stored gate state.
    State,
    /// A tick, baseline or instance document.
    Input,
}

impl Document {
    fn code(self) -> ErrorCode {
        match self {
            Document::Config => ErrorCode::InvalidConfig,
            Document::State => ErrorCode::InvalidState,
            Document::Input => ErrorCode::InvalidInput,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Document::Config => "config",
            Document::State => "state",
            Document::Input => "input",
        }
    }
}

/// The error codes of the ABI. The numbers are part of the ABI: a code is
/// never renumbered or reused (see docs/gate-abi.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A tick, baseline or instance document is not JSON, not UTF-8, of the
    /// wrong shape or out of range.
    InvalidInput,
    /// The configuration document is refused.
    InvalidConfig,
    /// The stored state document is refused.
    InvalidState,
    /// A tick's attempt is lower than one already judged.
    AttemptWentBack,
    /// A required pointer argument was null.
    NullArgument,
    /// A document is larger than [`crate::MAX_INPUT_BYTES`].
    InputTooLarge,
    /// The gate handle is in use by another caller right now.
    Busy,
    /// A bug: a caught panic, or a handle left unusable by one.
    Internal,
    /// The gate handle names no live gate (freed, or not a handle).
    InvalidHandle,
}

impl ErrorCode {
    /// The number returned through the C ABI.
    pub fn as_i32(self) -> i32 {
        match self {
            ErrorCode::InvalidInput => crate::status::KURA_GATE_INVALID_INPUT,
            ErrorCode::InvalidConfig => crate::status::KURA_GATE_INVALID_CONFIG,
            ErrorCode::InvalidState => crate::status::KURA_GATE_INVALID_STATE,
            ErrorCode::AttemptWentBack => crate::status::KURA_GATE_ATTEMPT_WENT_BACK,
            ErrorCode::NullArgument => crate::status::KURA_GATE_NULL_ARGUMENT,
            ErrorCode::InputTooLarge => crate::status::KURA_GATE_INPUT_TOO_LARGE,
            ErrorCode::Busy => crate::status::KURA_GATE_BUSY,
            ErrorCode::Internal => crate::status::KURA_GATE_INTERNAL,
            ErrorCode::InvalidHandle => crate::status::KURA_GATE_INVALID_HANDLE,
        }
    }

    /// The wire spelling (snake_case), as in the error document.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::InvalidConfig => "invalid_config",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::AttemptWentBack => "attempt_went_back",
            ErrorCode::NullArgument => "null_argument",
            ErrorCode::InputTooLarge => "input_too_large",
            ErrorCode::Busy => "busy",
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidHandle => "invalid_handle",
        }
    }
}

/// An error of one call: what the error document holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct FfiError {
    /// The code.
    pub code: ErrorCode,
    /// What is wrong and where.
    pub message: String,
    /// The field path at fault (`servers[2].health.ready`), when known.
    pub field: Option<String>,
    /// The server id at fault, when known.
    pub server: Option<String>,
    /// Line of the fault in the document (from 1), for JSON and UTF-8 errors.
    pub line: Option<usize>,
    /// Column of the fault (from 1, in bytes), for JSON and UTF-8 errors.
    pub column: Option<usize>,
}

impl FfiError {
    /// An error with a code and a message only.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        FfiError {
            code,
            message: message.into(),
            field: None,
            server: None,
            line: None,
            column: None,
        }
    }

    /// A document that is not UTF-8, located at its first bad byte.
    pub fn utf8(document: Document, bytes: &[u8], error: std::str::Utf8Error) -> Self {
        let offset = error.valid_up_to();
        let (line, column) = line_column(&bytes[..offset]);
        FfiError {
            line: Some(line),
            column: Some(column),
            ..FfiError::new(
                document.code(),
                format!(
                    "{} is not UTF-8: invalid byte at line {line} column {column} (byte offset {offset})",
                    document.name()
                ),
            )
        }
    }

    /// A document larger than the limit.
    pub fn too_large(document: Document, len: usize) -> Self {
        FfiError::new(
            ErrorCode::InputTooLarge,
            format!(
                "{} is {len} bytes, above the limit of {} bytes",
                document.name(),
                crate::MAX_INPUT_BYTES
            ),
        )
    }

    /// A refused document, located as the gate's strict reader located it.
    pub fn document(document: Document, error: DocumentError) -> Self {
        match error {
            DocumentError::Json {
                message,
                line,
                column,
            } => FfiError {
                line: Some(line),
                column: Some(column),
                ..FfiError::new(
                    document.code(),
                    format!("{} is not valid JSON: {message}", document.name()),
                )
            },
            DocumentError::DuplicateKey { line, column, .. } => FfiError {
                line: Some(line),
                column: Some(column),
                ..FfiError::new(document.code(), format!("{}: {error}", document.name()))
            },
            DocumentError::Field { .. } => {
                let message = error.to_string();
                let DocumentError::Field { field, server, .. } = error else {
                    return FfiError::new(document.code(), message);
                };
                FfiError {
                    field: Some(field),
                    server,
                    ..FfiError::new(document.code(), message)
                }
            }
        }
    }

    /// A refused replay: the document's fault ([`FfiError::document`]) or
    /// the gate's refusal of a tick.
    pub fn replay(document: Document, error: ReplayError) -> Self {
        match error {
            ReplayError::Document(error) => FfiError::document(document, error),
            ReplayError::Gate { field, source, .. } => FfiError {
                field: Some(field.to_owned()),
                ..FfiError::gate(source)
            },
        }
    }

    /// A document refused by serde (the state, an instance document).
    pub fn serde(document: Document, error: &serde_json::Error) -> Self {
        FfiError {
            line: Some(error.line()),
            column: Some(error.column()),
            ..FfiError::new(
                document.code(),
                format!("{} refused: {error}", document.name()),
            )
        }
    }

    /// A tick, configuration or state the gate refused.
    pub fn gate(error: GateError) -> Self {
        let (code, field) = match &error {
            GateError::AttemptWentBack { .. } => (ErrorCode::AttemptWentBack, "attempt"),
            GateError::DuplicateServer(_) => (ErrorCode::InvalidInput, "servers"),
            GateError::EmptySoakList => (ErrorCode::InvalidConfig, "soakSeconds"),
            GateError::ConfigValue { key, .. } => (ErrorCode::InvalidConfig, *key),
            GateError::InvalidState { field, .. } => {
                return FfiError {
                    field: Some(format!("state.{field}")),
                    ..FfiError::new(ErrorCode::InvalidState, format!("state refused: {error}"))
                };
            }
        };
        FfiError {
            field: Some(field.to_owned()),
            ..FfiError::new(code, format!("field {field}: {error}"))
        }
    }

    /// The error document (JSON). Serializing this plain struct cannot
    /// fail; should it, a fixed internal error document stands in.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| {
            br#"{"code":"internal","message":"error document not serializable","field":null,"server":null,"line":null,"column":null}"#.to_vec()
        })
    }
}

/// 1-based line and column (in bytes) just after `prefix`.
fn line_column(prefix: &[u8]) -> (usize, usize) {
    let line = 1 + prefix.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + prefix.iter().rev().take_while(|&&b| b != b'\n').count();
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_byte_is_located_by_line_and_column() {
        let bytes: &[u8] = std::hint::black_box(b"{\n  \"id\": \"a\xffb\"}");
        let err = std::str::from_utf8(bytes).unwrap_err();
        let e = FfiError::utf8(Document::Input, bytes, err);
        assert_eq!((e.line, e.column), (Some(2), Some(11)));
        assert_eq!(e.code, ErrorCode::InvalidInput);
        assert_eq!(
            e.message,
            "input is not UTF-8: invalid byte at line 2 column 11 (byte offset 12)"
        );
    }

    #[test]
    fn a_repeated_key_is_refused_with_its_position() {
        let e = kura_gate::parse_tick_json(
            "{\"now\": \"2026-07-21T10:00:00Z\",\n \"wave\": 0, \"wave\": 5}",
            &kura_gate::GateConfig::default(),
        )
        .unwrap_err();
        let e = FfiError::document(Document::Input, e);
        assert_eq!(e.code, ErrorCode::InvalidInput);
        assert_eq!((e.line, e.column), (Some(2), Some(18)));
        assert!(
            e.message.contains("key \"wave\" appears more than once"),
            "{}",
            e.message
        );
    }

    #[test]
    fn the_gates_value_rules_are_invalid_config_naming_the_key() {
        for (config, field) in [
            (
                r#"{"maxSampleAgeSeconds": 0}"#,
                "config.maxSampleAgeSeconds",
            ),
            (r#"{"outboxBandPercent": 1001}"#, "config.outboxBandPercent"),
        ] {
            let Err(e) = crate::api::GateHandle::new(config.as_bytes()) else {
                panic!("{config} accepted");
            };
            assert_eq!(e.code, ErrorCode::InvalidConfig, "{config}");
            assert_eq!(e.field.as_deref(), Some(field), "{config}");
        }
        let e = FfiError::gate(GateError::ConfigValue {
            key: "peerFailureBandPercent",
            reason: "5000 is above the limit of 1000".into(),
        });
        assert_eq!(e.code, ErrorCode::InvalidConfig);
        assert_eq!(e.field.as_deref(), Some("peerFailureBandPercent"));
    }

    #[test]
    fn the_error_document_names_the_code() {
        let e = FfiError::new(ErrorCode::Busy, "in use");
        let json: serde_json::Value = serde_json::from_slice(&e.to_json()).unwrap();
        assert_eq!(json["code"], "busy");
        assert_eq!(json["message"], "in use");
        assert!(json["line"].is_null());
    }
}
