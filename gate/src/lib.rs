//! Pure rollout gate rules (contract/gate.md): may the next wave start?
//!
//! No clock, no IO, no Kubernetes: time is an argument and everything kept
//! between ticks is one serde value ([`GateState`]) the caller stores.
//!
//! - [`config`]: [`GateConfig`] with the documented defaults and the exact
//!   integer bands (a value equal to its band top passes).
//! - [`health_view`]: [`HealthView`], the lenient view of a rollout-health
//!   aggregate; a missing always-present field (`ready`, `sampledPods`,
//!   `fdTimeoutCount`, ...) fails its check, a null optional counter is
//!   never compared.
//! - [`baseline`]: [`Baseline::capture`] with soak eligibility.
//! - [`checks`]: the fourteen server checks, evidence, counter-reset
//!   handling.
//! - [`wave`]: [`Gate::tick`], the wave judge.
//! - [`instance`]: [`instance::judge_instance`], the agent's per-instance
//!   `status.rolloutGate`.
//! - [`document`]: the strict reader of the `kura-gate replay` document
//!   (and of an exported timeline) and its parts; [`parse_config_over`] is
//!   the one parser of a configuration document (replay's `config`, the
//!   agent's `--gate-config` file and annotation), its errors
//!   [`DocumentError`]s.
//! - [`replay`](mod@replay): the document run through the wave judge.
//! - [`agent_view`](mod@agent_view): the document judged as the agent
//!   judges each instance, beside the verdicts a timeline says it published.
//! - [`what_if`](mod@what_if): the document judged with its own and with a
//!   candidate configuration, and where they differ.
//!
//! Decisions where the contract is silent:
//! - A missing `memoryPressureState` is not a hard stop but `sample_invalid`
//!   (checked right after check 4): unknown pressure is never healthy.
//! - The outbox is a backlog, not a counter: a lower outbox is a drained
//!   queue and never lowers its baseline. fd timeouts and peer failures
//!   below their effective baseline are resets and lower it, but only from a
//!   fresh sample (an old sample is naturally lower and must not tighten the
//!   band). The wave judge remembers lowered baselines for soak-eligible
//!   servers, converged or not, since the upgrade itself restarts processes.
//! - A server without a baseline (null) counts as captured without an
//!   aggregate: not soak-eligible, still in scope for convergence.
//! - A change of wave or of its start time restarts the soak clock.
//! - An empty wave needs no convergence and no soak: it passes on its first
//!   tick with no hard stop and a healthy scope (so a sick canary still
//!   holds it).
//! - Hard stops latch for the attempt, including `wave_deadline_exceeded`;
//!   a tick with a lower attempt than one already judged is an error.
//! - `now` before `healthySince` (a clock going back) restarts the clock.
//! - Servers of a later wave than the tick's are out of scope and ignored.
//! - Evidence is capped at [`wave::MAX_EVIDENCE`] entries per verdict; see
//!   [`Verdict`] for what each verdict carries (nothing for `pass` and
//!   `soaking`). Boolean checks report `observed` 0/1; missing fields have
//!   `observed` null and a `detail`.

pub mod agent_view;
pub mod baseline;
pub mod checks;
pub mod config;
pub mod document;
pub mod error;
pub mod health_view;
pub mod instance;
pub mod replay;
pub mod wave;
pub mod what_if;

pub use agent_view::{AgentLine, agent_view};
pub use baseline::Baseline;
pub use config::GateConfig;
pub use document::{
    DocumentError, ReplayInput, parse_baseline_json, parse_config_json, parse_config_over,
    parse_replay, parse_replay_judged_with, parse_tick_json, parse_tick_value,
};
pub use error::GateError;
pub use health_view::HealthView;
pub use instance::{hold_until_converged, judge_instance, judge_instance_view};
pub use replay::{ReplayError, ReplayLine, replay, run_replay};
pub use wave::{
    Deployment, Gate, GateState, ServerInput, ServerStatus, TickInput, Verdict, VerdictKind,
};
pub use what_if::{View, WhatIf, what_if};
