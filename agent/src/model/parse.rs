//! The small parsers of the flags, shared by every module's own `Args`
//! and the tools: durations written like `2s`, `500ms`, `10m`, `1h`
//! (never a bare number), positive rates.

use jiff::SignedDuration;
use std::time::Duration;

/// A flag value that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// A duration that is not written like `2s`, `500ms`, `10m`, `1h30m`.
    #[error("invalid duration {input:?}: {reason}")]
    InvalidDuration {
        /// What was given.
        input: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A write rate that is not a positive finite number.
    #[error("invalid rate {0:?}: expected a positive number of writes per second")]
    InvalidRate(String),
}

/// Parses a non-negative duration written like `2s`, `500ms`, `10m`, `1h`,
/// `1h 30m` (jiff's friendly format) or ISO 8601 (`PT2S`). A bare number is
/// rejected: the unit is never guessed.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    let invalid = |reason: String| ParseError::InvalidDuration {
        input: input.to_owned(),
        reason,
    };
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty".to_owned()));
    }
    let signed: jiff::SignedDuration = trimmed
        .parse()
        .map_err(|e: jiff::Error| invalid(e.to_string()))?;
    if signed.is_negative() {
        return Err(invalid("negative".to_owned()));
    }
    Duration::try_from(signed).map_err(|e| invalid(e.to_string()))
}

/// Parses a positive duration (`0s` rejected).
pub fn parse_positive_duration(input: &str) -> Result<Duration, ParseError> {
    let d = parse_duration(input)?;
    if d.is_zero() {
        return Err(ParseError::InvalidDuration {
            input: input.to_owned(),
            reason: "must be greater than zero".to_owned(),
        });
    }
    Ok(d)
}

/// Parses a positive, finite rate (writes per second).
pub fn parse_rate(input: &str) -> Result<f64, ParseError> {
    match input.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(ParseError::InvalidRate(input.to_owned())),
    }
}

/// Parses a positive duration (`0s` rejected) as a signed duration, for
/// settings judged against timestamps (the aggregation's retention).
pub fn parse_positive_signed(input: &str) -> Result<SignedDuration, ParseError> {
    let d = parse_positive_duration(input)?;
    SignedDuration::try_from(d).map_err(|e| ParseError::InvalidDuration {
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn durations_without_unit_or_negative_are_rejected() {
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-2s").is_err());
        assert!(parse_duration("two seconds").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn rates_must_be_positive_and_finite() {
        assert_eq!(parse_rate("20"), Ok(20.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-1").is_err());
        assert!(parse_rate("inf").is_err());
        assert!(parse_rate("NaN").is_err());
    }

    #[test]
    fn signed_durations_are_positive() {
        assert_eq!(
            parse_positive_signed("90m"),
            Ok(SignedDuration::from_mins(90))
        );
        assert!(parse_positive_signed("0s").is_err());
        assert!(parse_positive_signed("-1h").is_err());
        assert!(parse_positive_signed("1").is_err());
    }
}
