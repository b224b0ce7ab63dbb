//! The status the agent publishes per instance ([`DesiredStatus`]) and what
//! became of writing it ([`LastWrite`]).

use std::sync::Arc;

use jiff::Timestamp;
use kura_schemas::{RolloutGate, RolloutHealth};
use serde::Serialize;

/// What the agent wants `status.rolloutHealth` and `status.rolloutGate` of
/// one instance to be. Both are shared, immutable values: the engine, the
/// fleet view and the write queue hold the same `Arc`s, so cloning a
/// desired status copies two pointers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredStatus {
    /// The aggregate.
    pub health: Arc<RolloutHealth>,
    /// The gate verdict.
    pub gate: Arc<RolloutGate>,
}

impl DesiredStatus {
    /// A desired status from owned values.
    pub fn new(health: RolloutHealth, gate: RolloutGate) -> Self {
        DesiredStatus {
            health: Arc::new(health),
            gate: Arc::new(gate),
        }
    }
}

/// What became of a status write, as the write driver reports it and the
/// fleet view keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum WriteRecord {
    /// Everything written came back.
    Applied,
    /// Accepted, but these fields were pruned (CRD too old).
    Pruned {
        /// The missing paths.
        missing: Vec<String>,
    },
    /// Not accepted.
    Failed {
        /// `conflict`, `not_found`, `forbidden`, `error` or `fenced` (the
        /// `result` label of `kura_agent_status_writes_total`).
        kind: String,
        /// The error.
        message: String,
    },
}

/// The last status write of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastWrite {
    /// When the result came back.
    pub at: Timestamp,
    /// 0 for a first attempt, then the retry number.
    pub attempt: u32,
    /// Whether the write jumped the queue.
    pub priority: bool,
    /// What happened.
    #[serde(flatten)]
    pub result: WriteRecord,
}
