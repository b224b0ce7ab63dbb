//! How a simulated pod answers (or fails to answer) `GET /status/rollout`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a simulated pod answers. The report itself comes from the pod's
/// [`SimNode`](crate::SimNode); a behaviour decides whether and how it
/// is delivered. In scenario files it is written with a `kind` tag, e.g.
/// `{"kind": "slow", "delay_ms": 3000}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Behaviour {
    /// Answer 200 with the report.
    #[default]
    Normal,
    /// Answer 200 with the report after a delay (real time, never scaled).
    Slow {
        /// The delay in milliseconds.
        delay_ms: u64,
    },
    /// Accept the request and never answer.
    Hang,
    /// Answer with this HTTP status and a short text body.
    Status {
        /// The status code (e.g. 500).
        code: u16,
    },
    /// Stop listening: new connections are refused and open ones closed.
    Refused,
    /// Answer 200 with a truncated, non-JSON body.
    Malformed,
    /// Answer 200 with a chunked body of this many bytes (no
    /// `content-length`), streamed from one static buffer.
    Oversized {
        /// Body size in bytes.
        bytes: u64,
    },
    /// Answer 200 with the report where `field` holds a value of the wrong
    /// JSON type (a number becomes a string, anything else a number).
    WrongType {
        /// The wire name of the field to spoil.
        field: String,
    },
    /// Answer `302 Found` with this `location`.
    Redirect {
        /// Where the redirect points.
        location: String,
    },
}

impl Behaviour {
    /// [`Behaviour::Slow`] from a duration.
    pub fn slow(delay: Duration) -> Self {
        Behaviour::Slow {
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// [`Behaviour::Status`] 500.
    pub fn error_500() -> Self {
        Behaviour::Status { code: 500 }
    }
}
