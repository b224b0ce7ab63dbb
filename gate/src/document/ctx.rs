//! Where in a document the strict reader is ([`Ctx`]), and its typed
//! field readers: every refusal names the tick, server and field at fault.

use jiff::Timestamp;
use kura_schemas::api_int::API_INT_MAX;
use serde_json::{Map, Value};

use super::DocumentError;

/// Where in the document a parser is.
#[derive(Debug, Default)]
pub(super) struct Ctx {
    pub(super) tick: Option<usize>,
    pub(super) server: Option<String>,
}

impl Ctx {
    pub(super) fn fail(&self, field: &str, reason: String) -> DocumentError {
        DocumentError::Field {
            tick: self.tick,
            server: self.server.clone(),
            field: field.to_owned(),
            reason,
        }
    }

    pub(super) fn object<'a>(
        &self,
        value: &'a Value,
        field: &str,
    ) -> Result<&'a Map<String, Value>, DocumentError> {
        value
            .as_object()
            .ok_or_else(|| self.fail(field, format!("expected an object, got {}", show(value))))
    }

    pub(super) fn only(
        &self,
        obj: &Map<String, Value>,
        keys: &[&str],
        prefix: &str,
    ) -> Result<(), DocumentError> {
        match obj.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(unknown) => Err(self.fail(&format!("{prefix}{unknown}"), "unknown field".into())),
            None => Ok(()),
        }
    }

    pub(super) fn uint(&self, value: &Value, field: &str) -> Result<u64, DocumentError> {
        self.uint_max(value, field, u64::MAX)
    }

    /// A non-negative integer up to `max`. An integer beyond it (or beyond
    /// 64 bits, which JSON readers hold as a float) is "out of range", not a
    /// wrong type.
    pub(super) fn uint_max(
        &self,
        value: &Value,
        field: &str,
        max: u64,
    ) -> Result<u64, DocumentError> {
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

    pub(super) fn opt_uint(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<u64>, DocumentError> {
        self.opt_uint_max(obj, key, prefix, u64::MAX)
    }

    pub(super) fn opt_uint_max(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
        max: u64,
    ) -> Result<Option<u64>, DocumentError> {
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

    pub(super) fn req_u32(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<u32, DocumentError> {
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

    pub(super) fn opt_bool(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<bool>, DocumentError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.fail(
                &format!("{prefix}{key}"),
                format!("expected a boolean, got {}", show(other)),
            )),
        }
    }

    pub(super) fn opt_str(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<String>, DocumentError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.fail(
                &format!("{prefix}{key}"),
                format!("expected a string, got {}", show(other)),
            )),
        }
    }

    pub(super) fn opt_time(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Option<Timestamp>, DocumentError> {
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

    pub(super) fn req_time(
        &self,
        obj: &Map<String, Value>,
        key: &str,
        prefix: &str,
    ) -> Result<Timestamp, DocumentError> {
        self.opt_time(obj, key, prefix)?
            .ok_or_else(|| self.fail(&format!("{prefix}{key}"), "missing".into()))
    }
}

/// A short rendering of an offending value.
pub(super) fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        let cut: String = text.chars().take(40).collect();
        format!("{cut}...")
    } else {
        text
    }
}
