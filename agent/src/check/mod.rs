//! `kura-agent check`: the gate for a set of plain node URLs, for operators
//! of the standalone chart (no Kubernetes, no agent deployment).
//!
//! ```text
//! kura-agent check --node http://10.0.0.5:4000 --node http://10.0.0.6:4000 \
//!     [--expected-pods N] [--soak 120s] [--interval 5s] [--timeout 600s] [--json]
//! ```
//!
//! The nodes form one synthetic instance (`expectedPods` defaults to the
//! number of nodes). Every `--interval` each node's `/status/rollout` is
//! polled with the agent's poller (same limits: 2 s per attempt, 64 KiB,
//! no redirects), folded with the agent's aggregation (per-node reset
//! clamping, so a node restarted by the upgrade does not hide growth) and
//! judged by the gate's per-instance judge ([`kura_gate::judge_instance`]),
//! the same code that writes `status.rolloutGate` in a cluster:
//!
//! - The first poll is the baseline (`outboxMessages`, `fdTimeoutCount`,
//!   `peerConnectionFailures`); start the check just before upgrading.
//! - Every poll runs the fourteen server checks of contract/gate.md. A
//!   failing check resets the soak clock; critical memory pressure is a hard
//!   stop at once.
//! - **pass** (exit 0) after continuous health for `--soak`; **hard stop**
//!   (exit 1) at critical memory pressure, or at `--timeout` from the first
//!   poll (signal `wave_deadline_exceeded`, evidence: the elapsed time, then
//!   the last failing check). Usage or input errors exit 2.
//! - A set that is not healthy at start (a node down, not ready, not
//!   serving, ring skew, critical pressure) is not soak-eligible, as in the
//!   gate: its counters are no reference, so the counter checks are skipped
//!   and only the absolute checks (1 to 11) hold. The first line says so.
//!
//! Output: one line per poll naming the verdict and the signal; with
//! `--json` one JSON object per line ([`PollReport`]: verdict, signal,
//! soak and timeout left, baseline, evidence, implicated node URLs and the
//! whole aggregate).
//!
//! Durations are written like `8s`, `2m`, `1h` (also `1m30s`, `250ms`).

pub mod judge;
pub mod line;
pub mod run;
pub mod url;
pub mod words;

pub use judge::{CheckRun, CheckSettings, PollReport};
pub use run::{CheckNode, poll_nodes, run_check};
pub use url::{NodeUrlError, node_report_url, node_report_urls};
