//! Reading a node report's `serving_authority` leniently, at the cost of
//! skipping it (contract/node-report.md: "a bad inner value drops that
//! value, never the report"). Only the keys the parser uses are read
//! (`capability`, `enabled`, `epoch`, `valid`, `identity.{instance_uid,
//! pod_uid, incarnation, host}`, `observed.phase`); everything else is
//! skipped unread, so deep nesting or a number like `1e400` anywhere in it
//! is no error, as under an unknown key. A value of an unexpected type is
//! dropped. A key the parser uses given twice in one object is still
//! refused (readers disagree on which counts): the caller reports it as a
//! repeated key of `serving_authority`.

use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize as _, Deserializer as _};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cell::RefCell;

/// The keys read at one level of the object: scalars, and the objects read
/// one level further down.
struct Level {
    scalars: &'static [&'static str],
    objects: &'static [(&'static str, &'static Level)],
}

const IDENTITY: Level = Level {
    scalars: &["instance_uid", "pod_uid", "incarnation", "host"],
    objects: &[],
};

const OBSERVED: Level = Level {
    scalars: &["phase"],
    objects: &[],
};

const AUTHORITY: Level = Level {
    scalars: &["capability", "enabled", "epoch", "valid"],
    objects: &[("identity", &IDENTITY), ("observed", &OBSERVED)],
};

/// `serving_authority`'s raw JSON text (already checked to be JSON while
/// it was skipped) as a value holding only the keys the parser uses: an
/// object, or null when it is no object. `Err` names a used key given twice.
pub(crate) fn read(raw: &RawValue) -> Result<Value, String> {
    object(raw, &AUTHORITY)
}

fn object(raw: &RawValue, level: &'static Level) -> Result<Value, String> {
    if !raw.get().starts_with('{') {
        return Ok(Value::Null);
    }
    let repeated = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(raw.get());
    match de.deserialize_map(LevelVisitor {
        level,
        repeated: &repeated,
    }) {
        Ok(v) => Ok(v),
        // The text is JSON: the only error is ours (a used key twice),
        // else drop the object.
        Err(_) => repeated.into_inner().map_or(Ok(Value::Null), Err),
    }
}

struct LevelVisitor<'a> {
    level: &'static Level,
    repeated: &'a RefCell<Option<String>>,
}

impl<'de> Visitor<'de> for LevelVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let key = key.as_ref();
            let nested = self.level.objects.iter().find(|(k, _)| *k == key);
            let scalar = self.level.scalars.iter().find(|k| **k == key);
            let Some(name) = scalar.copied().or(nested.map(|(k, _)| *k)) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if out.contains_key(name) {
                *self.repeated.borrow_mut() = Some(name.to_owned());
                return Err(de::Error::custom(format!(
                    "key {name:?} appears more than once"
                )));
            }
            let raw = map.next_value::<&RawValue>()?;
            let value = match nested {
                Some((_, level)) => object(raw, level).map_err(|inner| {
                    *self.repeated.borrow_mut() = Some(inner.clone());
                    de::Error::custom(format!("key {inner:?} appears more than once"))
                })?,
                None => scalar_of(raw),
            };
            // A dropped value still counts as given, for repeats.
            out.insert(name.to_owned(), value);
        }
        Ok(Value::Object(out))
    }
}

/// A string, a bool or an integer; anything else (a float, `1e400`, an
/// array, an object, null) is dropped (null).
fn scalar_of(raw: &RawValue) -> Value {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => String::deserialize(&mut serde_json::Deserializer::from_str(text))
            .map_or(Value::Null, Value::String),
        Some(b't') => Value::Bool(true),
        Some(b'f') => Value::Bool(false),
        Some(b'-' | b'0'..=b'9') => text
            .parse::<u64>()
            .map(Number::from)
            .or_else(|_| text.parse::<i64>().map(Number::from))
            .map_or(Value::Null, Value::Number),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("JSON")
    }

    #[test]
    fn only_used_keys_are_kept_and_bad_types_dropped() {
        let v = read(&raw(
            r#"{"capability": "positive-fence-v1", "enabled": true, "epoch": 1e400,
                "valid": [1], "remaining_ms": 5, "barrier": {"a": [[[[1]]]]},
                "identity": {"pod_uid": "u", "incarnation": 42, "host": 1.5, "x": 1},
                "observed": {"phase": "Serving", "handover": {"n": 1e999}}}"#,
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "capability": "positive-fence-v1", "enabled": true, "epoch": null,
                "valid": null,
                "identity": {"pod_uid": "u", "incarnation": 42, "host": null},
                "observed": {"phase": "Serving"}
            })
        );
        assert_eq!(read(&raw("[1, 2]")).unwrap(), Value::Null);
        assert_eq!(read(&raw("1e400")).unwrap(), Value::Null);
    }

    #[test]
    fn a_used_key_twice_is_named_and_an_unused_one_is_skipped() {
        assert_eq!(
            read(&raw(r#"{"identity": {"pod_uid": "a", "pod_uid": "b"}}"#)),
            Err("pod_uid".to_owned())
        );
        assert_eq!(
            read(&raw(r#"{"epoch": 1, "epoch": 2}"#)),
            Err("epoch".to_owned())
        );
        assert!(read(&raw(r#"{"barrier": {"a": 1, "a": 2}, "x": 1, "x": 2}"#)).is_ok());
    }
}
