//! Pure rollout gate rules (contract/gate.md): may the next wave start?
//!
//! No clock, no IO, no Kubernetes: time is an argument and everything kept
//! between ticks is one serde value ([`GateState`]) the caller stores.
//!
//! - [`config`]: [`GateConfig`] with the documented defaults and the exact
//!   integer bands (a value equal to its band top passes).
//! - [`config_file`]: the one reader of a gate configuration: the files
//!   (JSON or YAML) of the agent's `run`, `check` and tools and of
//!   `kura-gate replay --gate-config`, the configuration text
//!   ([`config_file::read_document`], also the agent's annotation's) and
//!   the bindings' configuration documents ([`parse_config_json`]).
//! - [`health_view`]: [`HealthView`], the lenient view of a rollout-health
//!   aggregate; a missing always-present field (`ready`, `sampledPods`,
//!   `fdTimeoutCount`, ...) fails its check, a null optional counter is
//!   never compared.
//! - [`baseline`]: [`Baseline::capture`] with soak eligibility.
//! - [`checks`]: the server checks (each signal's number, kind and order
//!   are declared once, in `kura_schemas::SIGNALS`), evidence,
//!   counter-reset handling and the drain rule of the backlog checks (13
//!   and 18).
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
//! - Backlog runs (the drain rule): a drain window of 0 keeps no run at all
//!   (the evidence has no `run`, the state no `backlogRuns`); a run that
//!   starts after `now` (a clock going back) restarts at `now`, like
//!   `healthySince`. A stale or future-dated sample still moves the run
//!   (the contract: every converged, soak-eligible tick, whatever the other
//!   checks say); checks 2 to 4 fail that tick anyway. The wave judge keeps
//!   a server's runs while it is not converged or not eligible, forgets
//!   them when the server leaves the input, is destroyed or suspended, and
//!   drops them at the next tick that follows them against a baseline of
//!   another `capturedAt`. [`checks::check_server`] (no runs) judges the
//!   backlogs by their band alone.
//! - Check 19 (`update_paused`) evidence has no `observed`: the pause is in
//!   `detail` (its words) and `updatePaused` (as the aggregate copied it).
//! - A suspended server of the current wave does not count as one of its
//!   servers: a wave whose every server is suspended (or destroyed) passes
//!   at once, as an empty wave does.
//! - Evidence is capped at [`wave::MAX_EVIDENCE`] entries per verdict; see
//!   [`Verdict`] for what each verdict carries (nothing for `pass` and
//!   `soaking`). Boolean checks report `observed` 0/1; missing fields have
//!   `observed` null and a `detail`.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent_view;
pub mod baseline;
pub mod checks;
pub mod config;
pub mod config_file;
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
pub use config_file::parse_config_json;
pub use document::{
    DocumentError, ReplayInput, parse_baseline_json, parse_config_over, parse_replay,
    parse_replay_judged_with, parse_tick_json, parse_tick_value,
};
pub use error::GateError;
pub use health_view::HealthView;
pub use instance::{hold_until_converged, judge_instance, judge_instance_view};
pub use replay::{ReplayError, ReplayLine, replay, run_replay};
pub use wave::{
    Deployment, Gate, GateState, ServerInput, ServerStatus, TickInput, Verdict, VerdictKind,
};
pub use what_if::{View, WhatIf, what_if};
