//! The query of `GET /api/v1/instances/{namespace}/{name}/timeline`:
//! `since` and `until` (RFC 3339 times, inclusive) and `limit` (1 to
//! [`MAX_TIMELINE_TICKS`]: the newest ticks of the window). Anything else
//! (an unknown or repeated parameter, a time that does not parse, a limit
//! out of range, `since` after `until`) is refused with its reason, for a
//! 400.

use jiff::Timestamp;
use kura_schemas::MAX_TIMELINE_TICKS;

use crate::debug::html::query_pairs;
use crate::view::TimelineQuery;

/// The longest parameter value read (an RFC 3339 time is about 35 bytes).
const MAX_VALUE_BYTES: usize = 64;

/// Parses the query string (after `?`, percent-encoded) of a timeline
/// request; the error is the reason, in one line.
pub fn parse(query: &str) -> Result<TimelineQuery, String> {
    let mut out = TimelineQuery::default();
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in query_pairs(query) {
        if seen.contains(&key) {
            return Err(format!("parameter {key:?} is given more than once"));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "parameter {key:?} is longer than {MAX_VALUE_BYTES} bytes"
            ));
        }
        match key.as_str() {
            "since" => out.since = Some(time(&key, &value)?),
            "until" => out.until = Some(time(&key, &value)?),
            "limit" => {
                out.limit = match value.parse::<usize>() {
                    Ok(n) if (1..=MAX_TIMELINE_TICKS).contains(&n) => n,
                    _ => {
                        return Err(format!(
                            "limit {value:?} is not a whole number from 1 to {MAX_TIMELINE_TICKS}"
                        ));
                    }
                }
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?} (the parameters are since, until and limit)"
                ));
            }
        }
        seen.push(key);
    }
    if let (Some(since), Some(until)) = (out.since, out.until)
        && since > until
    {
        return Err(format!("since {since} is after until {until}"));
    }
    Ok(out)
}

fn time(key: &str, value: &str) -> Result<Timestamp, String> {
    value
        .parse::<Timestamp>()
        .map_err(|e| format!("{key} {value:?} is not an RFC 3339 time: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounded_parameters_parse() {
        assert_eq!(parse("").unwrap(), TimelineQuery::default());
        let q =
            parse("since=2026-12-05T00:00:00Z&until=2026-12-05T01:00:00%2B00:00&limit=20").unwrap();
        assert_eq!(q.since, Some("2026-12-05T00:00:00Z".parse().unwrap()));
        assert_eq!(q.until, Some("2026-12-05T01:00:00Z".parse().unwrap()));
        assert_eq!(q.limit, 20);
    }

    #[test]
    fn malformed_parameters_are_refused_with_a_reason() {
        for (query, want) in [
            (
                "limit=0",
                "limit \"0\" is not a whole number from 1 to 10000",
            ),
            ("limit=10001", "from 1 to 10000"),
            ("limit=-3", "not a whole number"),
            ("limit=ten", "not a whole number"),
            (
                "since=yesterday",
                "since \"yesterday\" is not an RFC 3339 time",
            ),
            ("until=", "until \"\" is not an RFC 3339 time"),
            (
                "limit=1&limit=2",
                "parameter \"limit\" is given more than once",
            ),
            ("page=2", "unknown parameter \"page\""),
            (
                "since=2026-12-05T02:00:00Z&until=2026-12-05T01:00:00Z",
                "is after until",
            ),
        ] {
            let reason = parse(query).expect_err(query);
            assert!(reason.contains(want), "{query}: {reason}");
        }
        let long = format!("since={}", "9".repeat(100));
        assert!(parse(&long).unwrap_err().contains("longer than 64 bytes"));
    }
}
