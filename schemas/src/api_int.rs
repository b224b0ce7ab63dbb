//! Integers as the Kubernetes API server stores them: int64.
//!
//! A custom resource's integers are stored as int64, so a status write with
//! an integer above 2^63−1 is refused (422, "must be of type integer") and
//! every later write of that status fails with it. Hence:
//!
//! - a node report carrying a count above [`API_INT_MAX`] is invalid, naming
//!   the field ([`crate::report`]);
//! - totals that add counts up saturate at [`API_INT_MAX`]
//!   ([`saturating_add`], [`saturating_sum`]), never at `u64::MAX`;
//! - the CRD says so: every unsigned integer is declared `format: int64` or
//!   `int32` ([`declare_stored_formats`]).

use schemars::Schema;
use serde_json::Value;

/// The largest integer the API server stores: 2^63−1 (`i64::MAX`).
pub const API_INT_MAX: u64 = i64::MAX as u64;

/// Whether `n` can be stored as it is.
pub const fn fits(n: u64) -> bool {
    n <= API_INT_MAX
}

/// `n`, or [`API_INT_MAX`] when larger.
pub const fn saturate(n: u64) -> u64 {
    if n > API_INT_MAX { API_INT_MAX } else { n }
}

/// `a + b`, saturating at [`API_INT_MAX`] (also when either is above it).
pub const fn saturating_add(a: u64, b: u64) -> u64 {
    saturate(a.saturating_add(b))
}

/// The sum of `values`, saturating at [`API_INT_MAX`].
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, saturating_add)
}

/// A schemars transform (`#[schemars(transform = declare_stored_formats)]`
/// on a struct) that rewrites the unsigned integer formats schemars writes
/// (`uint64`, `uint32`, ...), which the API server does not know, into what
/// it really stores: `int64` for 32- and 64-bit integers, `int32` for 8- and
/// 16-bit ones (their ranges fit). It applies to the struct's own properties,
/// including `Option`s and arrays of integers; nested structs carry the
/// attribute themselves.
pub fn declare_stored_formats(schema: &mut Schema) {
    each_property(schema, |property| {
        rewrite_format(property);
    });
}

/// [`declare_stored_formats`], plus `"maximum": 9223372036854775807` on
/// every 64-bit integer: for the node report's JSON Schema, where a count
/// above it makes the report invalid. (The CRD does not carry the maximum:
/// the API server reads it as a float, and refuses such integers anyway.)
pub fn declare_stored_range(schema: &mut Schema) {
    each_property(schema, |property| {
        if rewrite_format(property) == Some("int64") {
            property["maximum"] = Value::from(API_INT_MAX);
        }
    });
}

fn each_property(schema: &mut Schema, mut f: impl FnMut(&mut Value)) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            f(property);
            if let Some(items) = property.get_mut("items") {
                f(items);
            }
        }
    }
}

/// Rewrites an unsigned format; returns the stored format it wrote.
fn rewrite_format(schema: &mut Value) -> Option<&'static str> {
    let Some(Value::String(format)) = schema.get_mut("format") else {
        return None;
    };
    let stored = match format.as_str() {
        "uint64" | "uint32" | "uint" => "int64",
        "uint16" | "uint8" => "int32",
        _ => return None,
    };
    *format = stored.to_owned();
    Some(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_i64_max() {
        assert_eq!(API_INT_MAX, 9_223_372_036_854_775_807);
        assert!(fits(API_INT_MAX));
        assert!(!fits(API_INT_MAX + 1));
        assert!(!fits(u64::MAX));
    }

    #[test]
    fn saturation_stops_at_the_ceiling() {
        assert_eq!(saturate(u64::MAX), API_INT_MAX);
        assert_eq!(saturate(7), 7);
        assert_eq!(saturating_add(API_INT_MAX, 1), API_INT_MAX);
        assert_eq!(saturating_add(API_INT_MAX - 1, 1), API_INT_MAX);
        assert_eq!(saturating_add(u64::MAX, u64::MAX), API_INT_MAX);
        assert_eq!(saturating_add(2, 3), 5);
        assert_eq!(saturating_sum([API_INT_MAX, API_INT_MAX, 5]), API_INT_MAX);
        assert_eq!(saturating_sum([1, 2, 3]), 6);
        assert_eq!(saturating_sum([]), 0);
    }

    #[test]
    fn unsigned_formats_become_stored_ones() {
        let mut schema = schemars::json_schema!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "format": "uint64", "minimum": 0},
                "b": {"type": ["integer", "null"], "format": "uint32"},
                "c": {"type": "integer", "format": "uint8"},
                "d": {"type": "array", "items": {"type": "integer", "format": "uint64"}},
                "e": {"type": "integer", "format": "int64"},
                "f": {"type": "string", "format": "date-time"}
            }
        });
        declare_stored_formats(&mut schema);
        let p = &schema.as_value()["properties"];
        assert_eq!(p["a"]["format"], "int64");
        assert_eq!(p["b"]["format"], "int64");
        assert_eq!(p["c"]["format"], "int32");
        assert_eq!(p["d"]["items"]["format"], "int64");
        assert_eq!(p["e"]["format"], "int64");
        assert_eq!(p["f"]["format"], "date-time");
        assert_eq!(p["a"].get("maximum"), None, "formats only");
    }

    #[test]
    fn the_report_range_adds_the_ceiling_to_64_bit_integers() {
        let mut schema = schemars::json_schema!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "format": "uint64", "minimum": 0},
                "c": {"type": "integer", "format": "uint8", "maximum": 2}
            }
        });
        declare_stored_range(&mut schema);
        let p = &schema.as_value()["properties"];
        assert_eq!(p["a"]["format"], "int64");
        assert_eq!(p["a"]["maximum"], API_INT_MAX);
        assert_eq!(p["c"]["format"], "int32");
        assert_eq!(p["c"]["maximum"], 2, "a narrower maximum stays");
    }
}
