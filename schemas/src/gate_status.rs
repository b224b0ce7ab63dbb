//! `status.rolloutGate`: the agent's per-instance gate verdict
//! (contract/gate.md, "In the agent"), and the vocabulary the gate shares
//! with everything that reports it: signals and evidence.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::signal::Signal;

/// Why a check failed: enough to answer "why did it stop?" from the verdict
/// alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct Evidence {
    /// The server (instance) the check ran on.
    pub server: String,
    /// The failing check.
    pub signal: Signal,
    /// The observed value (a count, a pressure, a sample age in seconds, a
    /// pod count), when the check compares a number.
    #[serde(default)]
    pub observed: Option<u64>,
    /// The top of the allowed band (or the limit), when there is one.
    #[serde(default)]
    pub band_top: Option<u64>,
    /// The (effective) baseline the band was computed from, when there is one.
    #[serde(default)]
    pub baseline: Option<u64>,
    /// A short human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The fence state behind checks 16 and 17 (`serving_fenced`,
    /// `no_valid_writer`); absent on every other signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<FenceEvidence>,
    /// The backlog's run behind checks 13 and 18 (the drain rule): since
    /// when, and from which level, the backlog has not fallen; absent on
    /// every other signal and when the drain window is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<BacklogRunEvidence>,
    /// The operator's pause behind check 19 (`update_paused`), as the
    /// aggregate copied it; absent on every other signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_paused: Option<Box<crate::health::UpdatePaused>>,
}

/// A backlog's run (gate.md, the drain rule): the backlog has stood at or
/// above `level` without falling since `since`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct BacklogRunEvidence {
    /// When the run started (the first tick above the band, or the last
    /// tick on which the backlog fell).
    pub since: Timestamp,
    /// The backlog's level when the run started.
    pub level: u64,
}

/// A backlog's run as the gate keeps it between ticks (the same shape as
/// its evidence): since `since` the backlog has not fallen below `level`.
pub type BacklogRun = BacklogRunEvidence;

/// The runs of one server's two backlogs (gate.md, the drain rule of
/// checks 13 and 18), part of the state a caller stores: the agent keeps
/// them in `status.rolloutGate.backlogRuns` so that a restarted agent
/// continues them. A run exists only while its backlog is above its band.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct BacklogRuns {
    /// The outbox's run (check 13); null when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox: Option<BacklogRun>,
    /// The replication lag's run (check 18); null when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_lag: Option<BacklogRun>,
}

impl BacklogRuns {
    /// Whether neither backlog has a run.
    pub fn is_empty(&self) -> bool {
        self.outbox.is_none() && self.replication_lag.is_none()
    }
}

/// The fence state a fencing check saw: the aggregate's `servingAuthority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct FenceEvidence {
    /// `servingAuthority.phase` (`""` when no pod reported one).
    #[schemars(length(max = 128))]
    pub phase: String,
    /// `servingAuthority.enabledPods`.
    pub enabled_pods: u32,
    /// `servingAuthority.validWriters`.
    pub valid_writers: u32,
    /// `servingAuthority.epoch`: the highest epoch among valid writers.
    pub epoch: u64,
}

impl From<&crate::health::ServingAuthorityHealth> for FenceEvidence {
    fn from(a: &crate::health::ServingAuthorityHealth) -> Self {
        FenceEvidence {
            phase: a.phase.clone(),
            enabled_pods: a.enabled_pods,
            valid_writers: a.valid_writers,
            epoch: a.epoch,
        }
    }
}

impl FenceEvidence {
    /// The fence state in words, e.g. `grant phase Fencing, 2 pods fenced,
    /// 0 valid writers, highest epoch 0`: the one phrasing of checks 16
    /// and 17, used as their evidence `detail`.
    pub fn describe(&self) -> String {
        let phase = if self.phase.is_empty() {
            "not reported"
        } else {
            self.phase.as_str()
        };
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "grant phase {phase}, {} with fenced serving, {}, highest epoch {}",
            plural(self.enabled_pods, "pod", "pods"),
            plural(self.valid_writers, "valid writer", "valid writers"),
            self.epoch
        )
    }
}

impl Evidence {
    /// Evidence of `signal` on `server` with no figures yet; checks fill in
    /// what they compare with struct-update syntax.
    pub fn new(server: &str, signal: Signal) -> Evidence {
        Evidence {
            server: server.to_owned(),
            signal,
            observed: None,
            band_top: None,
            baseline: None,
            detail: None,
            fence: None,
            run: None,
            update_paused: None,
        }
    }
}

/// The one phrasing of a failing check's evidence, for people: every
/// surface (the `RolloutHealthy` condition's message and the Events, the
/// debug pages, `kura-agent check`'s readable lines, the demo) prints these
/// words and adds only its markup (escaping, length limits).
impl Evidence {
    /// The evidence on one line: `server kura/acme: fd_timeouts_regressed:
    /// fd timeouts 7, band top 5, baseline 5` (the server, the signal, then
    /// [`Evidence::figures`]). A condition's `message`, an Event's note,
    /// `check`'s and the demo's evidence.
    pub fn summary(&self) -> String {
        match self.phrase() {
            Some(phrase) => format!("server {}: {}: {phrase}", self.server, self.signal),
            None => format!("server {}: {}", self.server, self.signal),
        }
    }

    /// What the failing check saw, without the server, for a surface that
    /// shows the server beside it (the debug pages, `check`'s line after
    /// `signal=`): `fd timeouts 66, band top 8, baseline 8`, `memory
    /// pressure 2 (critical), limit 1`, `1 of 3 pods sampled`, the fence
    /// state of checks 16 and 17, else the gate's detail (`ready is
    /// false`), else the signal's name.
    pub fn figures(&self) -> String {
        self.phrase().unwrap_or_else(|| self.signal.to_string())
    }

    /// The figures in words, on one line, or the detail when the signal
    /// has no figures; `None` when there is neither.
    fn phrase(&self) -> Option<String> {
        let or_dash = |v: Option<u64>| v.map_or_else(|| "–".to_owned(), |v| v.to_string());
        let detail = || self.detail.clone().filter(|d| !d.is_empty());
        let phrase = match self.signal {
            s if s.quantity_label().is_some() => {
                let label = s.quantity_label().unwrap_or_default();
                let observed = self
                    .observed
                    .map_or_else(|| "not reported".to_owned(), |v| v.to_string());
                let mut line = format!("{label} {observed}");
                if let Some(top) = self.band_top {
                    line.push_str(&format!(", band top {top}"));
                }
                if let Some(base) = self.baseline {
                    line.push_str(&format!(", baseline {base}"));
                }
                if let Some(run) = &self.run {
                    line.push_str(&format!(", not below {} since {}", run.level, run.since));
                }
                Some(line)
            }
            Signal::MemoryPressureCritical => Some(format!(
                "memory pressure {} (critical), limit {}",
                or_dash(self.observed),
                or_dash(self.band_top)
            )),
            Signal::SampleMissing => Some("no aggregate yet: no sweep has produced one".to_owned()),
            Signal::SampleStale => match self.observed {
                Some(age) => Some(format!(
                    "sample age {age} s, limit {} s",
                    or_dash(self.band_top)
                )),
                None => Some(format!(
                    "no pod answered ({})",
                    detail().unwrap_or_else(|| self.signal.to_string())
                )),
            },
            Signal::SampleInvalid => self.observed.map(|ahead| {
                format!(
                    "sampledAt {ahead} s in the future, limit {} s",
                    or_dash(self.band_top)
                )
            }),
            Signal::PodsUnsampled => match (self.observed, self.band_top) {
                (Some(s), Some(x)) => Some(format!("{s} of {x} pods sampled")),
                _ => None,
            },
            Signal::BootstrapInFlight => Some(format!(
                "{} peers still bootstrapping, limit 0",
                or_dash(self.observed)
            )),
            Signal::BackfillBudgetExhausted => Some(format!(
                "{} peers out of backfill budget, limit 0",
                or_dash(self.observed)
            )),
            Signal::ServingFenced | Signal::NoValidWriter => {
                self.fence.as_ref().map(FenceEvidence::describe)
            }
            Signal::UpdatePaused => self.update_paused.as_ref().map(|p| p.describe()),
            Signal::InstanceSuspended => {
                Some("the instance is suspended: no pods to judge".to_owned())
            }
            _ => None,
        };
        phrase
            .or_else(detail)
            .map(|line| line.replace(['\n', '\r'], " "))
    }
}

/// The agent's verdict on one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentVerdict {
    /// Every server check passes.
    Healthy,
    /// A server check fails.
    Unhealthy,
    /// A hard-stop check fails.
    HardStop,
    /// The instance is suspended: no pods, nothing to judge (signal
    /// `instance_suspended`). Neither healthy nor a regression.
    Suspended,
}

impl AgentVerdict {
    /// Every verdict, in a fixed order (metric label order).
    pub const ALL: [AgentVerdict; 4] = [
        AgentVerdict::Healthy,
        AgentVerdict::Unhealthy,
        AgentVerdict::HardStop,
        AgentVerdict::Suspended,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentVerdict::Healthy => "healthy",
            AgentVerdict::Unhealthy => "unhealthy",
            AgentVerdict::HardStop => "hard_stop",
            AgentVerdict::Suspended => "suspended",
        }
    }
}

/// Baseline counters (each may be null: a null baseline is never compared).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::api_int::declare_stored_formats)]
pub struct BaselineCounters {
    /// `outboxMessages` at capture.
    #[serde(default)]
    pub outbox_messages: Option<u64>,
    /// `replicationLagEntries` at capture.
    #[serde(default)]
    pub replication_lag_entries: Option<u64>,
    /// `fdTimeoutCount` at capture.
    #[serde(default)]
    pub fd_timeout_count: Option<u64>,
    /// `peerConnectionFailures` at capture.
    #[serde(default)]
    pub peer_connection_failures: Option<u64>,
}

/// `status.rolloutGate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutGate {
    /// The `spec.image` being judged.
    pub target_image: String,
    /// The image the baseline was taken on; null until `spec.image` changed
    /// while the agent watched.
    #[serde(default)]
    pub baseline_image: Option<String>,
    /// When the baseline was captured.
    #[serde(default)]
    pub baseline_captured_at: Option<Timestamp>,
    /// Baseline counters as captured.
    #[serde(default)]
    pub baseline: BaselineCounters,
    /// Baseline counters after reset handling (a counter seen below its
    /// baseline lowers it here, so growth after a reset is still caught).
    #[serde(default)]
    pub effective_baseline: BaselineCounters,
    /// Whether the instance was healthy at capture (a server sick before its
    /// upgrade is not held to its baseline).
    #[serde(default)]
    pub soak_eligible: bool,
    /// `healthy`, `unhealthy`, `hard_stop` or `suspended`.
    pub verdict: AgentVerdict,
    /// The first failing check; null when healthy.
    #[serde(default)]
    pub signal: Option<Signal>,
    /// Since when every check has passed continuously; null when not healthy.
    #[serde(default)]
    pub healthy_since: Option<Timestamp>,
    /// When this verdict was computed.
    pub evaluated_at: Timestamp,
    /// Evidence of the failing checks (empty when healthy).
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Why the instance's own gate configuration (the
    /// `kura.tuist.dev/gate-config` annotation) was refused, so that the
    /// cluster's configuration judged this verdict instead; absent when the
    /// annotation is absent or valid. At most 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub config_error: Option<String>,
    /// The runs of the outbox and the replication lag above their bands
    /// (the drain rule of checks 13 and 18), kept so that a restarted agent
    /// continues them; absent when neither backlog has one. A new baseline
    /// clears them.
    #[serde(default, skip_serializing_if = "BacklogRuns::is_empty")]
    pub backlog_runs: BacklogRuns,
}

/// The longest [`RolloutGate::config_error`] written, in bytes.
pub const MAX_CONFIG_ERROR_BYTES: usize = 512;

#[cfg(test)]
mod evidence_words {
    use super::{Evidence, FenceEvidence, Signal};

    #[test]
    fn the_summary_is_the_server_the_signal_and_the_figures() {
        let e = Evidence {
            observed: Some(7),
            band_top: Some(5),
            baseline: Some(5),
            ..Evidence::new("kura/acme", Signal::FdTimeoutsRegressed)
        };
        assert_eq!(e.figures(), "fd timeouts 7, band top 5, baseline 5");
        assert_eq!(
            e.summary(),
            "server kura/acme: fd_timeouts_regressed: fd timeouts 7, band top 5, baseline 5"
        );
        let e = Evidence {
            observed: Some(1),
            band_top: Some(2),
            detail: Some("sampledPods below expectedPods".to_owned()),
            ..Evidence::new("kura/acme", Signal::PodsUnsampled)
        };
        assert_eq!(
            e.summary(),
            "server kura/acme: pods_unsampled: 1 of 2 pods sampled"
        );
    }

    #[test]
    fn without_figures_the_detail_then_the_signal_stands_in() {
        let e = Evidence {
            observed: Some(0),
            detail: Some("ready is\nfalse".to_owned()),
            ..Evidence::new("kura/acme", Signal::NotReady)
        };
        assert_eq!(e.figures(), "ready is false");
        assert_eq!(e.summary(), "server kura/acme: not_ready: ready is false");
        let bare = Evidence::new("kura/acme", Signal::NotServing);
        assert_eq!(bare.figures(), "not_serving");
        assert_eq!(bare.summary(), "server kura/acme: not_serving");
        let fenced = Evidence {
            fence: Some(FenceEvidence {
                phase: "Fencing".to_owned(),
                enabled_pods: 2,
                valid_writers: 0,
                epoch: 3,
            }),
            ..Evidence::new("kura/acme", Signal::NoValidWriter)
        };
        assert_eq!(
            fenced.figures(),
            "grant phase Fencing, 2 pods with fenced serving, 0 valid writers, highest epoch 3"
        );
    }

    // Moved from kura-agent's tools/words.rs: `check` and the demo print
    // these summaries.
    #[test]
    fn a_counter_regression_names_field_band_and_baseline() {
        let e = Evidence {
            fence: None,
            server: "kura/acme-eu".into(),
            signal: Signal::FdTimeoutsRegressed,
            observed: Some(9),
            band_top: Some(4),
            baseline: Some(4),
            detail: None,
            run: None,
            update_paused: None,
        };
        assert_eq!(
            e.summary(),
            "server kura/acme-eu: fd_timeouts_regressed: fd timeouts 9, band top 4, baseline 4"
        );
        let e = Evidence {
            fence: None,
            server: "nodes".into(),
            signal: Signal::NotReady,
            observed: Some(0),
            band_top: None,
            baseline: None,
            detail: Some("ready is false".into()),
            run: None,
            update_paused: None,
        };
        assert_eq!(e.summary(), "server nodes: not_ready: ready is false");
    }

    #[test]
    fn the_new_signals_read_as_the_gate_words_them() {
        let lag = Evidence {
            observed: Some(71),
            band_top: Some(70),
            baseline: Some(20),
            ..Evidence::new("kura/acme-eu", Signal::ReplicationLagRegressed)
        };
        assert_eq!(
            lag.summary(),
            "server kura/acme-eu: replication_lag_regressed: replication lag entries 71, band top 70, baseline 20"
        );
        let fence = FenceEvidence {
            phase: "Fencing".into(),
            enabled_pods: 2,
            valid_writers: 0,
            epoch: 0,
        };
        let fenced = Evidence {
            observed: Some(0),
            detail: Some(fence.describe()),
            fence: Some(fence),
            ..Evidence::new("kura/acme-eu", Signal::ServingFenced)
        };
        assert_eq!(
            fenced.summary(),
            "server kura/acme-eu: serving_fenced: grant phase Fencing, 2 pods with fenced serving, 0 valid writers, highest epoch 0"
        );
    }
}
