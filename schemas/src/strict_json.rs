//! JSON read strictly: a key that appears twice in one object is an error,
//! at any depth, with its line and column.
//!
//! `serde_json::Value` keeps the last of two equal keys, and other readers
//! keep the first: a document with a repeated key means different things to
//! different programs, so every document this project reads is refused when
//! it has one. The one rule, wherever JSON comes in:
//!
//! - node reports on the wire ([`crate::report::parse_report`]): a repeated
//!   known key, or a repeated key anywhere inside a known key's value, makes
//!   the report invalid (unknown keys are skipped unread);
//! - whole documents (`kura-gate replay`, `kura-agent aggregate`, a gate
//!   configuration's JSON file or annotation): [`from_document`] refuses a
//!   repeated key anywhere; a gate configuration's YAML file goes through
//!   [`value_from`], the same reader over serde_yaml (it refuses `.inf` and
//!   `.nan` too).
//!
//! A UTF-8 byte-order mark is named when it is refused: [`from_slice`]
//! (bodies on the wire) refuses it; [`from_document`] (files a person may
//! have saved with an editor that writes one) skips one at the very start,
//! as RFC 8259 allows.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt;

/// The UTF-8 encoding of U+FEFF, the byte-order mark.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// At most this many characters of a repeated key are kept in an error.
const MAX_KEY_SHOWN: usize = 64;

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrictJsonError {
    /// A key appears twice in one object.
    #[error("key {key:?} appears more than once in one object at line {line} column {column}")]
    DuplicateKey {
        /// The key (cut to 64 characters).
        key: String,
        /// 1-based line of the second occurrence.
        line: usize,
        /// 1-based column just after the second occurrence.
        column: usize,
    },
    /// The input starts with a UTF-8 byte-order mark, where none is allowed.
    #[error("starts with a UTF-8 byte-order mark (EF BB BF); JSON here must not have one")]
    ByteOrderMark,
    /// Not JSON (serde_json's message, with its line and column).
    #[error("{message}")]
    Syntax {
        /// What serde_json says.
        message: String,
        /// 1-based line, 0 when unknown.
        line: usize,
        /// 1-based column, 0 when unknown.
        column: usize,
    },
}

impl StrictJsonError {
    /// The line and column the error points at, when known.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            StrictJsonError::DuplicateKey { line, column, .. }
            | StrictJsonError::Syntax { line, column, .. }
                if *line > 0 =>
            {
                Some((*line, *column))
            }
            _ => None,
        }
    }
}

/// Parses `bytes` (a body on the wire) into a [`Value`], refusing a repeated
/// key at any depth and a leading byte-order mark.
pub fn from_slice(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    if bytes.starts_with(UTF8_BOM) {
        return Err(StrictJsonError::ByteOrderMark);
    }
    parse(bytes)
}

/// Parses a document read from a file: one leading byte-order mark is
/// skipped, then as [`from_slice`] (line and column count from after it).
pub fn from_document(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    parse(bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes))
}

/// [`from_document`] over text (`\u{FEFF}` at the start is the mark).
pub fn document_from_str(text: &str) -> Result<Value, StrictJsonError> {
    from_document(text.as_bytes())
}

/// Reads one value from any serde data format (the YAML of a gate
/// configuration file) by the same rules: a repeated key at any depth and a
/// number that is not finite (YAML's `.inf`, `.nan`) are refused, with the
/// format's own error (and position). Keys must be strings.
pub fn value_from<'de, D: de::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    let duplicate = RefCell::new(None);
    StrictValue {
        duplicate: &duplicate,
    }
    .deserialize(d)
}

fn parse(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue {
        duplicate: &duplicate,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    value.map_err(|e| classify(e, duplicate.into_inner()))
}

/// Turns serde_json's error into ours: a repeated key when the reader
/// recorded one (serde_json adds the position to every error a visitor
/// returns), else a syntax error.
pub(crate) fn classify(e: serde_json::Error, duplicate: Option<String>) -> StrictJsonError {
    match duplicate {
        Some(key) => StrictJsonError::DuplicateKey {
            key,
            line: e.line(),
            column: e.column(),
        },
        None => StrictJsonError::Syntax {
            message: e.to_string(),
            line: e.line(),
            column: e.column(),
        },
    }
}

/// A [`DeserializeSeed`] producing a [`Value`] that refuses a repeated key
/// at any depth. The first repeated key is recorded in `duplicate` (the
/// error itself carries serde_json's position); read it back with
/// [`classify`].
pub(crate) struct StrictValue<'a> {
    /// Where the repeated key is recorded.
    pub duplicate: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON has no infinities or NaN; YAML has (`.inf`, `.nan`), and
        // reading one as null would turn it into "the default".
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(StrictValue {
            duplicate: self.duplicate,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match out.entry(key) {
                serde_json::map::Entry::Occupied(e) => {
                    return Err(self.repeated(e.key()));
                }
                serde_json::map::Entry::Vacant(e) => {
                    e.insert(map.next_value_seed(StrictValue {
                        duplicate: self.duplicate,
                    })?);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

impl StrictValue<'_> {
    /// Records `key` as repeated and returns the error that stops the read.
    pub(crate) fn repeated<E: de::Error>(&self, key: &str) -> E {
        let shown: String = key.chars().take(MAX_KEY_SHOWN).collect();
        let message = format!("key {shown:?} appears more than once in one object");
        self.duplicate.borrow_mut().get_or_insert(shown);
        E::custom(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_documents_read_like_serde_json() {
        let text =
            r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": {"d": 18446744073709551615}}"#;
        assert_eq!(
            from_slice(text.as_bytes()).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn a_repeated_key_is_refused_with_its_position_at_any_depth() {
        let top = from_slice(b"{\"wave\": 0, \"wave\": 5}").unwrap_err();
        assert_eq!(
            top,
            StrictJsonError::DuplicateKey {
                key: "wave".into(),
                line: 1,
                column: 18
            }
        );
        let deep =
            from_slice(b"{\"t\": [{\"s\": {\"id\": 1}}, {\"s\": {\"id\": 1,\n  \"id\": 2}}]}")
                .unwrap_err();
        assert!(
            matches!(&deep, StrictJsonError::DuplicateKey { key, line: 2, .. } if key == "id"),
            "{deep:?}"
        );
        assert!(deep.to_string().contains("line 2"), "{deep}");
        // Equal keys in different objects are fine.
        assert_eq!(
            from_slice(br#"{"a": {"x": 1}, "b": {"x": 2}}"#).unwrap(),
            json!({"a": {"x": 1}, "b": {"x": 2}})
        );
    }

    #[test]
    fn an_escaped_spelling_of_the_same_key_is_the_same_key() {
        let e = from_slice(br#"{"ready": true, "re\u0061dy": false}"#).unwrap_err();
        assert!(
            matches!(&e, StrictJsonError::DuplicateKey { key, .. } if key == "ready"),
            "{e:?}"
        );
    }

    #[test]
    fn a_long_repeated_key_is_cut_in_the_message() {
        let key = "k".repeat(1000);
        let doc = format!("{{\"{key}\": 1, \"{key}\": 2}}");
        match from_slice(doc.as_bytes()) {
            Err(StrictJsonError::DuplicateKey { key, .. }) => assert_eq!(key.len(), 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_byte_order_mark_is_named_on_the_wire_and_skipped_in_files() {
        let body = b"\xEF\xBB\xBF{\"a\": 1}";
        assert_eq!(from_slice(body), Err(StrictJsonError::ByteOrderMark));
        assert!(
            StrictJsonError::ByteOrderMark
                .to_string()
                .contains("byte-order mark")
        );
        assert_eq!(from_document(body).unwrap(), json!({"a": 1}));
        assert_eq!(
            document_from_str("\u{FEFF}{\"a\": 1}").unwrap(),
            json!({"a": 1})
        );
        // Only one, and only at the start.
        assert!(matches!(
            from_document(b"\xEF\xBB\xBF\xEF\xBB\xBF{}"),
            Err(StrictJsonError::Syntax { .. })
        ));
    }

    #[test]
    fn syntax_errors_keep_serde_jsons_position() {
        let e = from_slice(b"{\"a\":\n  }").unwrap_err();
        assert!(
            matches!(e, StrictJsonError::Syntax { line: 2, .. }),
            "{e:?}"
        );
        assert_eq!(e.position().map(|p| p.0), Some(2));
        assert!(matches!(
            from_slice(b"{} x"),
            Err(StrictJsonError::Syntax { .. })
        ));
        let deep = "[".repeat(1000) + &"]".repeat(1000);
        assert!(matches!(
            from_slice(deep.as_bytes()),
            Err(StrictJsonError::Syntax { .. })
        ));
    }
}
