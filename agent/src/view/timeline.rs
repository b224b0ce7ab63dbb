//! Each swept instance's timeline: the gate inputs of every sweep since its
//! current baseline (or configuration), and the verdict published for it,
//! kept compactly so that `GET /api/v1/instances/{ns}/{name}/timeline`
//! can hand `kura-gate replay` exactly what the agent judged.
//!
//! Per tick only what the agent's judge reads is kept
//! ([`TimelineHealth`]: the gate-read fields of the aggregate, not the
//! whole `RolloutHealth`), the effective baseline after the tick, the
//! published verdict and signal, and whether the instance had converged.
//! Consecutive ticks whose inputs are equal apart from time share one
//! [`Run`]: each repeat costs its two times as variable-length deltas
//! (`now` since the previous tick's, and `sampledAt` before `now`).
//!
//! A timeline restarts (its ticks are let go, not counted as dropped) when
//! what the document states once changes: the configuration in force (the
//! instance's annotation changed), the target image, the baseline (a new
//! capture, or an owner that restored a different one). So one document
//! always has one configuration and one baseline.
//!
//! Bounds: every instance holds at most [`MAX_TICKS_PER_INSTANCE`] ticks
//! (the oldest go first), and the whole fleet at most its byte budget
//! ([`DEFAULT_TIMELINE_BUDGET_BYTES`], `--timeline-budget-bytes`). Past the
//! budget the oldest ticks of the fleet are dropped first (whichever
//! instance holds them: a timeline at rest, whose ticks go back to its
//! last baseline, gives its history up before a rollout that started
//! minutes ago), in sixteenths of the span held, down to 7/8 of the
//! budget; every timeline keeps at least its newest tick.

use std::collections::{BTreeMap, VecDeque};
use std::mem::size_of;
use std::sync::Arc;

use jiff::Timestamp;
use kura_gate::GateConfig;
use kura_schemas::{
    BaselineCounters, InstanceTimeline, MAX_TIMELINE_TICKS, RolloutGate, RolloutHealth,
    TimelineBaseline, TimelineConfig, TimelineDeployment, TimelineHealth, TimelineInstance,
    TimelinePublished, TimelineServer, TimelineServerStatus, TimelineTick, TimelineWindow,
};

use crate::model::InstanceKey;

/// The fleet's default byte budget for timelines: at the fleet size the
/// agent is measured at, about an hour of every instance at rest fits
/// (a repeat costs only its two times; benches/PERFORMANCE.md has the
/// figures), and an instance whose inputs change every sweep (a
/// rollout) costs one run per sweep.
pub const DEFAULT_TIMELINE_BUDGET_BYTES: usize = 8 * 1024 * 1024;

/// At most this many ticks per instance, whatever the budget.
pub const MAX_TICKS_PER_INSTANCE: u64 = 100_000;

/// What one sweep adds to its instance's timeline.
#[derive(Debug, Clone, Copy)]
pub struct TickRecord<'a> {
    /// The configuration the verdict was judged with.
    pub config: &'a GateConfig,
    /// The aggregate judged.
    pub health: &'a RolloutHealth,
    /// The verdict published.
    pub gate: &'a RolloutGate,
    /// Every current pod runs `spec.image` and there are `spec.replicas`.
    pub converged: bool,
    /// When it was judged.
    pub now: Timestamp,
}

/// Which ticks a request wants: those with `since <= now <= until`, the
/// newest `limit` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineQuery {
    /// The earliest `now` wanted.
    pub since: Option<Timestamp>,
    /// The latest `now` wanted.
    pub until: Option<Timestamp>,
    /// At most this many ticks (1 to [`MAX_TIMELINE_TICKS`]).
    pub limit: usize,
}

impl Default for TimelineQuery {
    fn default() -> Self {
        TimelineQuery {
            since: None,
            until: None,
            limit: MAX_TIMELINE_TICKS,
        }
    }
}

/// What the timelines hold, from [`Timelines::footprint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimelineFootprint {
    /// Instances with a timeline.
    pub instances: usize,
    /// Ticks held.
    pub ticks: u64,
    /// Runs of equal inputs held.
    pub runs: usize,
    /// Bytes: the timelines, their runs and keys (map nodes not counted).
    pub bytes: usize,
    /// The budget.
    pub budget: usize,
    /// Ticks dropped so far to stay within the bounds.
    pub dropped: u64,
}

/// Everything a tick judged apart from its times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Inputs {
    /// The gate fields, `sampled_at` cleared (it is a time: the tick holds it).
    health: TimelineHealth,
    effective: BaselineCounters,
    published: TimelinePublished,
    converged: bool,
}

impl Inputs {
    fn heap_bytes(&self) -> usize {
        self.health.backfill_initial_cycle.capacity()
            + self
                .health
                .serving_authority
                .as_ref()
                .map_or(0, |a| a.phase.capacity())
    }
}

/// Consecutive ticks with equal [`Inputs`]: the first tick's times, then
/// per later tick two variable-length numbers (zig-zag nanoseconds): `now`
/// minus the previous `now`, and 0 for no `sampledAt` or 1 + `now` minus
/// `sampledAt`.
#[derive(Debug, Clone)]
struct Run {
    inputs: Box<Inputs>,
    first_now: Timestamp,
    first_sampled: Option<Timestamp>,
    last_now: Timestamp,
    count: u32,
    /// Bytes of `deltas` already consumed by dropped ticks.
    skip: usize,
    deltas: Vec<u8>,
}

fn nanos(t: Timestamp) -> i128 {
    t.as_nanosecond()
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// `sampled` encoded against `now` (0: none).
fn sampled_code(now: Timestamp, sampled: Option<Timestamp>) -> Option<u64> {
    match sampled {
        None => Some(0),
        Some(s) => zigzag(i64::try_from(nanos(now) - nanos(s)).ok()?).checked_add(1),
    }
}

fn sampled_of(now: Timestamp, code: u64) -> Option<Option<Timestamp>> {
    if code == 0 {
        return Some(None);
    }
    let back = i128::from(unzigzag(code - 1));
    Timestamp::from_nanosecond(nanos(now) - back).ok().map(Some)
}

impl Run {
    fn new(inputs: Inputs, now: Timestamp, sampled: Option<Timestamp>) -> Run {
        Run {
            inputs: Box::new(inputs),
            first_now: now,
            first_sampled: sampled,
            last_now: now,
            count: 1,
            skip: 0,
            deltas: Vec::new(),
        }
    }

    fn heap_bytes(&self) -> usize {
        size_of::<Inputs>() + self.inputs.heap_bytes() + self.deltas.capacity()
    }

    /// Appends a tick; false when its times cannot be encoded (a clock
    /// jump of centuries): the caller starts a new run.
    fn push(&mut self, now: Timestamp, sampled: Option<Timestamp>) -> bool {
        let Ok(step) = i64::try_from(nanos(now) - nanos(self.last_now)) else {
            return false;
        };
        let Some(code) = sampled_code(now, sampled) else {
            return false;
        };
        if self.count == u32::MAX {
            return false;
        }
        // Grown by a quarter at a time, not doubled: a run at rest is the
        // bulk of the timelines, and a doubled buffer is half empty on
        // average.
        if self.deltas.capacity() - self.deltas.len() < 2 * 10 {
            self.deltas.reserve_exact((self.deltas.len() / 4).max(32));
        }
        put_varint(&mut self.deltas, zigzag(step));
        put_varint(&mut self.deltas, code);
        self.last_now = now;
        self.count += 1;
        true
    }

    /// Every tick's `now` and `sampledAt`, oldest first.
    fn ticks(&self) -> impl Iterator<Item = (Timestamp, Option<Timestamp>)> + '_ {
        let mut at = self.skip;
        let mut prev = self.first_now;
        let mut first = Some((self.first_now, self.first_sampled));
        std::iter::from_fn(move || {
            if let Some(tick) = first.take() {
                return Some(tick);
            }
            let step = unzigzag(get_varint(&self.deltas, &mut at)?);
            let code = get_varint(&self.deltas, &mut at)?;
            let now = Timestamp::from_nanosecond(nanos(prev) + i128::from(step)).ok()?;
            prev = now;
            Some((now, sampled_of(now, code)?))
        })
    }

    /// Drops the oldest tick of a run of two or more.
    fn pop_front(&mut self) {
        let mut at = self.skip;
        let decoded = get_varint(&self.deltas, &mut at).and_then(|step| {
            let code = get_varint(&self.deltas, &mut at)?;
            let now =
                Timestamp::from_nanosecond(nanos(self.first_now) + i128::from(unzigzag(step)))
                    .ok()?;
            Some((now, sampled_of(now, code)?))
        });
        // The bytes were written by `push`: they always decode.
        if let Some((now, sampled)) = decoded {
            self.first_now = now;
            self.first_sampled = sampled;
            self.skip = at;
            self.count -= 1;
        }
    }

    /// Gives back the bytes of dropped ticks.
    fn compact(&mut self) {
        if self.skip > 0 {
            self.deltas.drain(..self.skip);
            self.skip = 0;
            self.deltas.shrink_to_fit();
        }
    }
}

/// One instance's timeline.
#[derive(Debug, Clone)]
struct Timeline {
    config: Arc<GateConfig>,
    target_image: String,
    baseline_image: Option<String>,
    baseline_captured_at: Option<Timestamp>,
    soak_eligible: bool,
    runs: VecDeque<Run>,
    ticks: u64,
    dropped: u64,
    runs_heap: usize,
}

impl Timeline {
    fn new(config: Arc<GateConfig>, gate: &RolloutGate) -> Timeline {
        Timeline {
            config,
            target_image: gate.target_image.clone(),
            baseline_image: gate.baseline_image.clone(),
            baseline_captured_at: gate.baseline_captured_at,
            soak_eligible: gate.soak_eligible,
            runs: VecDeque::new(),
            ticks: 0,
            dropped: 0,
            runs_heap: 0,
        }
    }

    /// Whether a tick judged with `config` and published as `gate` belongs
    /// to this timeline (same configuration, image and baseline).
    fn continues(&self, config: &GateConfig, gate: &RolloutGate) -> bool {
        *self.config == *config
            && self.target_image == gate.target_image
            && self.baseline_image == gate.baseline_image
            && self.baseline_captured_at == gate.baseline_captured_at
            && self.soak_eligible == gate.soak_eligible
    }

    fn bytes(&self, key: &InstanceKey) -> usize {
        size_of::<InstanceKey>()
            + key.namespace.len()
            + key.name.len()
            + size_of::<Timeline>()
            + self.target_image.capacity()
            + self.baseline_image.as_ref().map_or(0, String::capacity)
            + self.runs.capacity() * size_of::<Run>()
            + self.runs_heap
    }

    fn push(&mut self, tick: &TickRecord<'_>) {
        let mut health = TimelineHealth::from(tick.health);
        let sampled = health.sampled_at.take();
        let inputs = Inputs {
            health,
            effective: tick.gate.effective_baseline.clone(),
            published: TimelinePublished {
                verdict: tick.gate.verdict,
                signal: tick.gate.signal,
            },
            converged: tick.converged,
        };
        if let Some(last) = self.runs.back_mut()
            && *last.inputs == inputs
        {
            let before = last.heap_bytes();
            if last.push(tick.now, sampled) {
                self.runs_heap = self.runs_heap + last.heap_bytes() - before;
                self.ticks += 1;
                return;
            }
        }
        let run = Run::new(inputs, tick.now, sampled);
        self.runs_heap += run.heap_bytes();
        if self.runs.len() == self.runs.capacity() {
            // A timeline at rest holds one run: the first push would make
            // room for four (empty slots in every instance of the fleet);
            // past one, grow by a quarter.
            self.runs.reserve_exact((self.runs.len() / 4).max(1));
        }
        self.runs.push_back(run);
        self.ticks += 1;
    }

    /// Drops the oldest tick (never the last one).
    fn pop_front(&mut self) {
        if self.ticks <= 1 {
            return;
        }
        let Some(front) = self.runs.front_mut() else {
            return;
        };
        if front.count == 1 {
            if let Some(run) = self.runs.pop_front() {
                self.runs_heap -= run.heap_bytes();
            }
        } else {
            front.pop_front();
        }
        self.ticks -= 1;
        self.dropped += 1;
    }

    fn compact(&mut self) {
        if let Some(front) = self.runs.front_mut() {
            let before = front.heap_bytes();
            front.compact();
            self.runs_heap = self.runs_heap + front.heap_bytes() - before;
        }
        if self.runs.capacity() > 2 * self.runs.len().max(4) {
            self.runs.shrink_to_fit();
        }
    }

    fn oldest(&self) -> Option<Timestamp> {
        self.runs.front().map(|r| r.first_now)
    }

    /// The document for `key`, ticks chosen by `query`; `answered_at`
    /// stands for the window's ends when no tick is chosen.
    fn document(
        &self,
        key: &InstanceKey,
        query: &TimelineQuery,
        answered_at: Timestamp,
    ) -> InstanceTimeline {
        let limit = query.limit.clamp(1, MAX_TIMELINE_TICKS);
        let mut chosen: VecDeque<(Timestamp, Option<Timestamp>, &Inputs)> = VecDeque::new();
        let mut left_out = 0u64;
        for run in &self.runs {
            for (now, sampled) in run.ticks() {
                if query.since.is_some_and(|s| now < s) || query.until.is_some_and(|u| now > u) {
                    left_out += 1;
                    continue;
                }
                chosen.push_back((now, sampled, &*run.inputs));
                if chosen.len() > limit {
                    chosen.pop_front();
                    left_out += 1;
                }
            }
        }
        let first = chosen.front().map(|c| c.0);
        let wave_started_at = self.baseline_captured_at.or(first).unwrap_or(answered_at);
        let has_baseline = self.baseline_captured_at.is_some() || self.soak_eligible;
        let id = key.to_string();
        let ticks: Vec<TimelineTick> = chosen
            .iter()
            .map(|(now, sampled, inputs)| {
                let mut health = inputs.health.clone();
                health.sampled_at = *sampled;
                TimelineTick {
                    now: *now,
                    wave: 0,
                    wave_started_at,
                    attempt: 0,
                    servers: vec![TimelineServer {
                        id: id.clone(),
                        wave: 0,
                        converged: inputs.converged,
                        deployment: TimelineDeployment::Succeeded,
                        status: TimelineServerStatus::Active,
                        baseline: has_baseline.then(|| TimelineBaseline {
                            captured_at: self.baseline_captured_at.unwrap_or(wave_started_at),
                            counters: inputs.effective.clone(),
                            soak_eligible: self.soak_eligible,
                        }),
                        health: Some(health),
                        published: inputs.published,
                    }],
                }
            })
            .collect();
        let c = &*self.config;
        InstanceTimeline {
            config: TimelineConfig {
                soak_seconds: c.soak_seconds.clone(),
                wave_deadline_seconds: c.wave_deadline_seconds,
                max_sample_age_seconds: c.max_sample_age_seconds,
                future_skew_seconds: c.future_skew_seconds,
                outbox_band_percent: c.outbox_band_percent,
                outbox_band_minimum: c.outbox_band_minimum,
                replication_lag_band_percent: c.replication_lag_band_percent,
                replication_lag_band_minimum: c.replication_lag_band_minimum,
                fd_timeout_band: c.fd_timeout_band,
                peer_failure_band_percent: c.peer_failure_band_percent,
                peer_failure_band_minimum: c.peer_failure_band_minimum,
                backlog_drain_window_seconds: c.backlog_drain_window_seconds,
            },
            instance: TimelineInstance {
                namespace: key.namespace.to_string(),
                name: key.name.to_string(),
                target_image: self.target_image.clone(),
                baseline_image: self.baseline_image.clone(),
            },
            window: TimelineWindow {
                from: first.or(query.since).unwrap_or(answered_at),
                to: chosen
                    .back()
                    .map(|c| c.0)
                    .or(query.until)
                    .unwrap_or(answered_at),
                dropped_ticks: self.dropped,
                complete: self.dropped == 0 && left_out == 0,
            },
            ticks,
        }
    }
}

/// Every swept instance's timeline, within a fleet-wide byte budget.
#[derive(Debug)]
pub struct Timelines {
    budget: usize,
    by_key: BTreeMap<InstanceKey, Timeline>,
    bytes: usize,
    dropped: u64,
    /// The configuration last recorded, shared by every timeline judged
    /// with an equal one (most instances run the cluster's).
    shared_config: Option<Arc<GateConfig>>,
}

impl Default for Timelines {
    fn default() -> Self {
        Timelines::new(DEFAULT_TIMELINE_BUDGET_BYTES)
    }
}

impl Timelines {
    /// No timeline yet, held to `budget` bytes fleet-wide.
    pub fn new(budget: usize) -> Self {
        Timelines {
            budget,
            by_key: BTreeMap::new(),
            bytes: 0,
            dropped: 0,
            shared_config: None,
        }
    }

    /// Changes the budget (trimmed at the next tick).
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
    }

    fn config(&mut self, config: &GateConfig) -> Arc<GateConfig> {
        match &self.shared_config {
            Some(shared) if **shared == *config => Arc::clone(shared),
            _ => {
                let shared = Arc::new(config.clone());
                self.shared_config = Some(Arc::clone(&shared));
                shared
            }
        }
    }

    /// Adds one sweep of `key`, restarting its timeline when the
    /// configuration, the image or the baseline changed, then holds the
    /// instance and the fleet to their bounds.
    pub fn record(&mut self, key: &InstanceKey, tick: &TickRecord<'_>) {
        let restart = self
            .by_key
            .get(key)
            .is_none_or(|t| !t.continues(tick.config, tick.gate));
        if restart {
            let config = self.config(tick.config);
            if let Some(old) = self
                .by_key
                .insert(key.clone(), Timeline::new(config, tick.gate))
            {
                self.bytes -= old.bytes(key);
            }
            if let Some(new) = self.by_key.get(key) {
                self.bytes += new.bytes(key);
            }
        }
        let Some(timeline) = self.by_key.get_mut(key) else {
            return;
        };
        let before = timeline.bytes(key);
        timeline.push(tick);
        let mut capped = 0;
        while timeline.ticks > MAX_TICKS_PER_INSTANCE {
            timeline.pop_front();
            capped += 1;
        }
        if capped > 0 {
            timeline.compact();
        }
        self.dropped += capped;
        self.bytes = self.bytes + timeline.bytes(key) - before;
        if self.bytes > self.budget {
            self.trim(tick.now);
        }
    }

    /// Drops the fleet's oldest ticks until the timelines hold at most 7/8
    /// of the budget (or every timeline is down to its newest tick).
    fn trim(&mut self, now: Timestamp) {
        let target = self.budget - self.budget / 8;
        let Some(oldest) = self.by_key.values().filter_map(Timeline::oldest).min() else {
            return;
        };
        let span = (nanos(now) - nanos(oldest)).max(0);
        for step in 1..=16i128 {
            let cutoff =
                Timestamp::from_nanosecond(nanos(oldest) + span * step / 16).unwrap_or(now);
            let cutoff = if step == 16 { Timestamp::MAX } else { cutoff };
            for (key, timeline) in &mut self.by_key {
                if timeline.oldest().is_none_or(|o| o >= cutoff) || timeline.ticks <= 1 {
                    continue;
                }
                let before = timeline.bytes(key);
                let dropped_before = timeline.dropped;
                while timeline.ticks > 1 && timeline.oldest().is_some_and(|o| o < cutoff) {
                    timeline.pop_front();
                }
                timeline.compact();
                self.dropped += timeline.dropped - dropped_before;
                self.bytes = self.bytes + timeline.bytes(key) - before;
                if self.bytes <= target {
                    return;
                }
            }
        }
    }

    /// `key`'s timeline as a document, `None` when this replica holds none.
    pub fn document(
        &self,
        key: &InstanceKey,
        query: &TimelineQuery,
        answered_at: Timestamp,
    ) -> Option<InstanceTimeline> {
        self.by_key
            .get(key)
            .map(|t| t.document(key, query, answered_at))
    }

    /// Keeps only the timelines of the instances for which `keep` is true.
    pub fn retain(&mut self, keep: impl Fn(&InstanceKey) -> bool) {
        let mut freed = 0;
        self.by_key.retain(|k, t| {
            let kept = keep(k);
            if !kept {
                freed += t.bytes(k);
            }
            kept
        });
        self.bytes -= freed;
    }

    /// What the timelines hold.
    pub fn footprint(&self) -> TimelineFootprint {
        TimelineFootprint {
            instances: self.by_key.len(),
            ticks: self.by_key.values().map(|t| t.ticks).sum(),
            runs: self.by_key.values().map(|t| t.runs.len()).sum(),
            bytes: self.bytes,
            budget: self.budget,
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use kura_schemas::{AgentVerdict, RetiredCounters, Signal};

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap() + SignedDuration::from_millis(ms)
    }

    fn health(fd: u64, sampled: Timestamp) -> RolloutHealth {
        RolloutHealth {
            schema_version: 1,
            observed_at: sampled,
            sampled_at: Some(sampled),
            observed_generation: 1,
            expected_pods: 3,
            sampled_pods: 3,
            ready: true,
            serving: true,
            writer_lock_owned: true,
            initial_discovery_completed: true,
            generation_consistent: true,
            ring_consistent: true,
            ring_members: 3,
            bootstrap_inflight_peers: Some(0),
            backfill_initial_cycle: "complete".into(),
            backfilling_peers: Some(0),
            backfill_degraded: false,
            backfill_budget_exhausted_peers: Some(0),
            outbox_messages: Some(0),
            replication_lag_entries: None,
            serving_authority: None,
            fd_timeout_count: fd,
            peer_connection_failures: Some(0),
            memory_pressure_state: 0,
            inflight_requests: 4,
            counter_resets: 0,
            pods: Vec::new(),
            retired_counters: RetiredCounters::default(),
            agent: "a".into(),
            suspended: false,
            update_paused: None,
        }
    }

    fn gate(target: &str, captured: Option<Timestamp>, fd_base: Option<u64>) -> RolloutGate {
        RolloutGate {
            target_image: target.into(),
            baseline_image: captured.map(|_| "img:1".to_owned()),
            baseline_captured_at: captured,
            baseline: BaselineCounters {
                fd_timeout_count: fd_base,
                ..BaselineCounters::default()
            },
            effective_baseline: BaselineCounters {
                fd_timeout_count: fd_base,
                ..BaselineCounters::default()
            },
            soak_eligible: captured.is_some(),
            verdict: AgentVerdict::Healthy,
            signal: None,
            healthy_since: None,
            evaluated_at: t(0),
            evidence: Vec::new(),
            config_error: None,
            backlog_runs: Default::default(),
        }
    }

    fn key(name: &str) -> InstanceKey {
        InstanceKey::new("kura", name)
    }

    fn record(
        store: &mut Timelines,
        name: &str,
        h: &RolloutHealth,
        g: &RolloutGate,
        now: Timestamp,
    ) {
        store.record(
            &key(name),
            &TickRecord {
                config: &GateConfig::default(),
                health: h,
                gate: g,
                converged: true,
                now,
            },
        );
    }

    #[test]
    fn repeated_ticks_cost_a_few_bytes_and_keep_their_exact_times() {
        let mut store = Timelines::new(usize::MAX);
        let g = gate("img:2", Some(t(0)), Some(1));
        record(&mut store, "a", &health(1, t(0)), &g, t(1));
        let one = store.footprint().bytes;
        let slots = store.by_key[&key("a")].runs.capacity();
        assert_eq!(slots, 1, "a timeline of one run holds no empty slots");
        // 1,000 sweeps 30.000123456 s apart, sampled 3-5 ms before each.
        let mut now = t(1);
        let mut times = vec![(now, Some(t(0)))];
        for i in 0..1000i64 {
            now += SignedDuration::new(30, 123_456);
            let sampled = now - SignedDuration::from_millis(3 + i % 3);
            record(&mut store, "a", &health(1, sampled), &g, now);
            times.push((now, Some(sampled)));
        }
        let f = store.footprint();
        assert_eq!((f.ticks, f.runs), (1001, 1));
        let per_tick = (f.bytes - one) as f64 / 1000.0;
        assert!(per_tick <= 13.0, "{per_tick} bytes per repeated tick");
        let doc = store
            .document(&key("a"), &TimelineQuery::default(), t(0))
            .unwrap();
        let got: Vec<_> = doc
            .ticks
            .iter()
            .map(|tick| {
                (
                    tick.now,
                    tick.servers[0].health.as_ref().unwrap().sampled_at,
                )
            })
            .collect();
        assert_eq!(got, times);
        assert!(doc.window.complete);
        assert_eq!(doc.window.from, t(1));
        assert_eq!(doc.window.to, now);
        assert_eq!(doc.ticks[0].wave_started_at, t(0));
        let server = &doc.ticks[5].servers[0];
        assert_eq!(server.id, "kura/a");
        assert_eq!(
            server.baseline.as_ref().unwrap().counters.fd_timeout_count,
            Some(1)
        );
        assert_eq!(server.health.as_ref().unwrap().fd_timeout_count, 1);
    }

    #[test]
    fn a_tick_whose_inputs_changed_costs_one_run() {
        // In a real rollout the outbox and the replication lag move every
        // sweep: each tick is then a run of its own.
        let mut store = Timelines::new(usize::MAX);
        let g = gate("img:2", Some(t(0)), Some(1));
        record(&mut store, "a", &health(1, t(0)), &g, t(0));
        let one = store.footprint().bytes;
        for i in 1..=100i64 {
            let mut h = health(1, t(i * 2000));
            h.outbox_messages = Some(i as u64);
            record(&mut store, "a", &h, &g, t(i * 2000));
        }
        let f = store.footprint();
        assert_eq!(f.runs, 101);
        let per_tick = (f.bytes - one) / 100;
        println!("a changed tick: {per_tick} bytes");
        assert!(per_tick <= 512, "{per_tick} bytes per changed tick");
    }

    #[test]
    fn a_change_of_inputs_starts_a_run_and_the_effective_baseline_is_per_tick() {
        let mut store = Timelines::new(usize::MAX);
        let g = gate("img:2", Some(t(0)), Some(5));
        record(&mut store, "a", &health(5, t(10)), &g, t(10));
        let mut lowered = g.clone();
        lowered.effective_baseline.fd_timeout_count = Some(2);
        lowered.verdict = AgentVerdict::Unhealthy;
        lowered.signal = Some(Signal::NotReady);
        record(&mut store, "a", &health(2, t(20)), &lowered, t(20));
        assert_eq!(store.footprint().runs, 2);
        let doc = store
            .document(
                &key("a"),
                &TimelineQuery {
                    since: Some(t(15)),
                    ..TimelineQuery::default()
                },
                t(0),
            )
            .unwrap();
        assert_eq!(doc.ticks.len(), 1);
        let server = &doc.ticks[0].servers[0];
        assert_eq!(
            server.baseline.as_ref().unwrap().counters.fd_timeout_count,
            Some(2)
        );
        assert_eq!(server.published.signal, Some(Signal::NotReady));
        assert!(!doc.window.complete, "a tick was left out by since");
    }

    #[test]
    fn a_new_baseline_or_configuration_restarts_the_timeline() {
        let mut store = Timelines::new(usize::MAX);
        record(
            &mut store,
            "a",
            &health(1, t(0)),
            &gate("img:1", None, None),
            t(0),
        );
        record(
            &mut store,
            "a",
            &health(1, t(1)),
            &gate("img:1", None, None),
            t(1),
        );
        let doc = store
            .document(&key("a"), &TimelineQuery::default(), t(0))
            .unwrap();
        assert_eq!(doc.ticks.len(), 2);
        assert_eq!(doc.ticks[0].servers[0].baseline, None, "no baseline yet");
        assert_eq!(doc.ticks[0].wave_started_at, t(0), "the first tick's now");
        record(
            &mut store,
            "a",
            &health(1, t(2)),
            &gate("img:2", Some(t(2)), Some(1)),
            t(2),
        );
        let doc = store
            .document(&key("a"), &TimelineQuery::default(), t(0))
            .unwrap();
        assert_eq!(doc.ticks.len(), 1);
        assert_eq!(doc.instance.baseline_image.as_deref(), Some("img:1"));
        assert_eq!(doc.window.dropped_ticks, 0);
        let tuned = GateConfig {
            fd_timeout_band: 3,
            ..GateConfig::default()
        };
        store.record(
            &key("a"),
            &TickRecord {
                config: &tuned,
                health: &health(1, t(3)),
                gate: &gate("img:2", Some(t(2)), Some(1)),
                converged: true,
                now: t(3),
            },
        );
        let doc = store
            .document(&key("a"), &TimelineQuery::default(), t(0))
            .unwrap();
        assert_eq!(doc.ticks.len(), 1);
        assert_eq!(doc.config.fd_timeout_band, 3);
    }

    #[test]
    fn past_the_budget_the_fleets_oldest_ticks_go_first() {
        let mut store = Timelines::new(usize::MAX);
        // "rest" has held ticks for longer; "rollout" started later. Both
        // change every tick (a run each), so either could pay.
        let g = gate("img:2", Some(t(0)), Some(1));
        for i in 0..200 {
            record(
                &mut store,
                "rest",
                &health(1 + i as u64, t(i * 1000)),
                &g,
                t(i * 1000),
            );
        }
        for i in 0..100 {
            record(
                &mut store,
                "rollout",
                &health(1 + i as u64, t(300_000 + i * 1000)),
                &g,
                t(300_000 + i * 1000),
            );
        }
        let full = store.footprint();
        assert_eq!(full.dropped, 0);
        store.set_budget(full.bytes - 2_000);
        record(
            &mut store,
            "rollout",
            &health(500, t(400_000)),
            &g,
            t(400_000),
        );
        let f = store.footprint();
        assert!(f.bytes <= f.budget - f.budget / 8, "{f:?}");
        let rest = store
            .document(&key("rest"), &TimelineQuery::default(), t(0))
            .unwrap();
        let rollout = store
            .document(&key("rollout"), &TimelineQuery::default(), t(0))
            .unwrap();
        assert!(rest.window.dropped_ticks > 0, "{f:?}");
        assert_eq!(
            rollout.window.dropped_ticks, 0,
            "the newer timeline is whole: {f:?}"
        );
        assert!(rollout.window.complete);
        assert!(!rest.window.complete);
        assert_eq!(f.dropped, rest.window.dropped_ticks);
        // A tiny budget leaves every timeline its newest tick.
        store.set_budget(1);
        record(&mut store, "rest", &health(1, t(401_000)), &g, t(401_000));
        for name in ["rest", "rollout"] {
            let doc = store
                .document(&key(name), &TimelineQuery::default(), t(0))
                .unwrap();
            assert_eq!(doc.ticks.len(), 1, "{name}");
        }
        assert_eq!(
            store
                .document(&key("rest"), &TimelineQuery::default(), t(0))
                .unwrap()
                .window
                .to,
            t(401_000)
        );
        store.retain(|k| &*k.name == "rest");
        assert_eq!(store.footprint().instances, 1);
        assert!(
            store
                .document(&key("rollout"), &TimelineQuery::default(), t(0))
                .is_none()
        );
    }

    #[test]
    fn limit_keeps_the_newest_ticks_and_until_the_older_ones() {
        let mut store = Timelines::new(usize::MAX);
        let g = gate("img:2", Some(t(0)), Some(1));
        for i in 0..10 {
            record(&mut store, "a", &health(1, t(i)), &g, t(i));
        }
        let newest = store
            .document(
                &key("a"),
                &TimelineQuery {
                    limit: 3,
                    ..TimelineQuery::default()
                },
                t(0),
            )
            .unwrap();
        let nows: Vec<_> = newest.ticks.iter().map(|t| t.now).collect();
        assert_eq!(nows, [t(7), t(8), t(9)]);
        assert!(!newest.window.complete);
        let early = store
            .document(
                &key("a"),
                &TimelineQuery {
                    until: Some(t(1)),
                    ..TimelineQuery::default()
                },
                t(0),
            )
            .unwrap();
        assert_eq!(early.ticks.len(), 2);
        let none = store
            .document(
                &key("a"),
                &TimelineQuery {
                    since: Some(t(50)),
                    ..TimelineQuery::default()
                },
                t(99),
            )
            .unwrap();
        assert!(none.ticks.is_empty());
        assert_eq!((none.window.from, none.window.to), (t(50), t(99)));
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 1 << 40, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, zigzag(v));
            let mut at = 0;
            assert_eq!(get_varint(&out, &mut at).map(unzigzag), Some(v));
            assert_eq!(at, out.len());
        }
    }
}
