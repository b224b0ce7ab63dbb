//! What a demo run ended with: the gate's final verdict per wave and the
//! agent's per-instance verdicts, and whether that is the designed story.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::{Verdict, VerdictKind};
use kura_schemas::{AgentVerdict, Signal};

/// One wave as it was played.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaveOutcome {
    /// The wave number (0 is the canary).
    pub wave: u32,
    /// Its servers (instance keys).
    pub servers: Vec<String>,
    /// When it was scheduled (virtual time).
    pub started_at: Timestamp,
    /// When its final verdict came (virtual time).
    pub ended_at: Timestamp,
    /// The gate's final verdict (pass or hard stop).
    pub verdict: Verdict,
}

/// One instance at the end of the run, as the in-memory status store holds
/// it (`status.rolloutHealth` and `status.rolloutGate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceOutcome {
    /// The instance key.
    pub id: String,
    /// Its wave.
    pub wave: u32,
    /// Its `spec.image` at the end.
    pub spec_image: String,
    /// The agent's verdict (`None`: never published).
    pub verdict: Option<AgentVerdict>,
    /// The agent's signal.
    pub signal: Option<Signal>,
    /// Published `fdTimeoutCount` (reset-clamped).
    pub fd_timeout_count: Option<u64>,
    /// The agent's baseline `fdTimeoutCount` (captured at the image change).
    pub baseline_fd_timeout_count: Option<u64>,
    /// Counter resets the aggregation absorbed.
    pub counter_resets: Option<u64>,
    /// The shadow configuration's verdict and signal on the last sweep,
    /// as the fleet view shows them (`None` without a shadow
    /// configuration); never in the status store.
    pub shadow: Option<(AgentVerdict, Option<Signal>)>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoOutcome {
    /// The waves played, in order (a hard stop ends the rollout).
    pub waves: Vec<WaveOutcome>,
    /// How many waves the fleet has.
    pub planned_waves: u32,
    /// The server designed to regress.
    pub regressing_server: String,
    /// Every instance at the end.
    pub instances: Vec<InstanceOutcome>,
    /// Real time the story took.
    pub real_duration: Duration,
    /// Simulated time the story took.
    pub virtual_duration: SignedDuration,
    /// The debug page's URL.
    pub debug_url: String,
}

impl DemoOutcome {
    /// Whether the story played as designed: every wave before the last
    /// passed, and the last wave ended in a hard stop held by the
    /// regressing server with `fd_timeouts_regressed` in the evidence.
    pub fn played_as_designed(&self) -> bool {
        let Some((last, earlier)) = self.waves.split_last() else {
            return false;
        };
        let planned = usize::try_from(self.planned_waves).unwrap_or(usize::MAX);
        self.waves.len() == planned
            && earlier
                .iter()
                .all(|w| w.verdict.verdict == VerdictKind::Pass)
            && last.verdict.verdict == VerdictKind::HardStop
            && last.verdict.server_id.as_deref() == Some(self.regressing_server.as_str())
            && last.verdict.evidence.iter().any(|e| {
                e.signal == Signal::FdTimeoutsRegressed && e.server == self.regressing_server
            })
    }
}
