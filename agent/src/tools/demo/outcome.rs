//! What a demo run ended with: the gate's final verdict per wave and the
//! agent's per-instance verdicts (with their changes along the way), and
//! whether that is the designed story.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kura_gate::{Verdict, VerdictKind};
use kura_schemas::{AgentVerdict, Evidence, Signal};

use super::fleet::OperatorAction;

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

/// A change of the agent's own verdict on one instance
/// (`status.rolloutGate`), as the timeline told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerdictChange {
    /// When the orchestrator saw it (virtual time).
    pub at: Timestamp,
    /// The verdict.
    pub verdict: AgentVerdict,
    /// Its signal.
    pub signal: Option<Signal>,
    /// Its evidence.
    pub evidence: Vec<Evidence>,
}

/// One instance at the end of the run, as the in-memory status store holds
/// it (`status.rolloutHealth` and `status.rolloutGate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceOutcome {
    /// The instance key.
    pub id: String,
    /// Its wave (`None`: outside the rollout).
    pub wave: Option<u32>,
    /// `spec.replicas`.
    pub replicas: u32,
    /// Whether it is node-local (polled through a port-forward).
    pub node_local: bool,
    /// What its operator did during the story.
    pub operator: Option<OperatorAction>,
    /// The agent's verdict changes, the first one when the fleet was first
    /// sampled.
    pub verdicts: Vec<VerdictChange>,
    /// Published `sampledPods`.
    pub sampled_pods: Option<u32>,
    /// The pod IPs of the published aggregate's pods (`pods[].ip`).
    pub pod_ips: Vec<String>,
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
    /// Port-forwards the simulated kubelet opened (node-local pods).
    pub port_forwards: u64,
}

impl InstanceOutcome {
    /// Whether the agent held it on a hard stop with `update_paused` at
    /// some point.
    pub fn was_held_on_update_paused(&self) -> bool {
        self.verdicts
            .iter()
            .any(|c| c.verdict == AgentVerdict::HardStop && c.signal == Some(Signal::UpdatePaused))
    }

    /// Whether its own part of the story played: a suspended instance
    /// ends `suspended`; a held update was a hard stop on `update_paused`
    /// and ends healthy once the hold is lifted; a node-local instance
    /// (unless suspended) ends with every pod sampled.
    pub fn played_its_part(&self) -> bool {
        let part = match self.operator {
            Some(OperatorAction::Suspend { .. }) => {
                return self.verdict == Some(AgentVerdict::Suspended)
                    && self.signal == Some(Signal::InstanceSuspended);
            }
            Some(OperatorAction::UpdateByHand { .. }) => {
                self.was_held_on_update_paused() && self.verdict == Some(AgentVerdict::Healthy)
            }
            None => true,
        };
        part && (!self.node_local || self.sampled_pods >= Some(self.replicas))
    }
}

impl DemoOutcome {
    /// Whether the story played as designed: every wave before the last
    /// passed, and the last wave ended in a hard stop held by the
    /// regressing server with `fd_timeouts_regressed` in the evidence;
    /// every instance played its part ([`InstanceOutcome::played_its_part`])
    /// and node-local pods were reached through port-forwards.
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
            && self.instances.iter().all(InstanceOutcome::played_its_part)
            && (self.port_forwards > 0 || !self.instances.iter().any(|i| i.node_local))
    }
}
