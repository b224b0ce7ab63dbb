//! The agent's main loop, independent of where targets come from and where
//! statuses go: one task per instance sweeps its pods at the cadence its
//! phase calls for ([`cadence`]: every 2 s in a rollout, every 30 s at
//! rest, by default; jittered), folds the samples and judges them
//! ([`InstanceEngine`]), hands the result to a [`StatusSink`] and records
//! it in the [`FleetView`]. A supervisor keeps one task per current
//! target, and re-reads the targets at once when the source signals a
//! `spec.image` change ([`TargetSource::image_changes`]); the instance
//! whose image changed is then swept at once. Its periodic reconcile
//! re-reads them only when the source's [`TargetSource::revision`] moved
//! (or a task ended), so a fleet at rest is not rebuilt every second.
//!
//! - In a cluster, targets come from the watches
//!   (`cluster::ClusterTargets`, narrowed by the shard when sharding is on)
//!   and statuses go to the write queue (`write::WriteHandle`); `cli::run`
//!   wires them in.
//! - `kura-agent demo` and the loopback tests use static targets
//!   ([`StaticTargets`]) and an in-memory status store ([`MemorySink`]),
//!   with a [`Clock`] that may run faster than real time.
//!
//! A slow or hung pod only delays its own instance's task: sweeps of
//! different instances never wait for each other, and every poll is bounded
//! by the poller's timeout.
//!
//! When the agent cannot keep up (more polls due per second than the
//! poller's global concurrency bound lets through), polls wait for a permit
//! in arrival order, so every instance slows down alike. Each instance has
//! at most one sweep in progress and sweeps of one instance never overlap:
//! a sweep that overran its interval is followed by the next at once, and
//! missed sweeps are not made up ([`cadence::next_start`]), so what waits
//! is bounded by the pods tracked, never by time. The achieved interval is
//! `kura_agent_sweep_interval_seconds` by `cadence`, and every sweep that
//! overran counts in `kura_agent_sweep_overruns_total`. Samples then age:
//! past the gate's maximum sample age a verdict turns `sample_stale`
//! (unhealthy), never healthy.

mod args;
pub mod cadence;
mod memory;
pub mod sweep;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use kura_schemas::RolloutGate;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::engine::{EngineConfig, InstanceEngine};
use crate::model::{Clock, DesiredStatus, InstanceKey, InstanceTarget, StatusSink, TargetSource};
use crate::poll::Poller;
use crate::telemetry;
use crate::view::FleetView;

pub use args::CadenceArgs;
pub use cadence::{Cadence, CadenceError, Phase, Why};
pub use memory::{MemorySink, StaticTargets};
pub use sweep::{SweepEnds, SweepWatch, Swept, sweep};

/// Shortest time between two reconciles woken by `spec.image` changes, so
/// a burst of changes (an expedited rollout) costs a few re-reads of the
/// targets, not one per change.
const IMAGE_CHANGE_GAP: Duration = Duration::from_millis(50);

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// How often instances are swept, in the clock's time.
    pub cadence: Cadence,
    /// How often the supervisor re-reads the targets (real time).
    pub reconcile_every: Duration,
    /// What every instance's engine is held to (aggregation, gate, the
    /// agent's name).
    pub engine: EngineConfig,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            cadence: Cadence::default(),
            reconcile_every: Duration::from_secs(1),
            engine: EngineConfig::default(),
        }
    }
}

impl LoopConfig {
    /// Checks the cadence against the gate's maximum sample age
    /// ([`Cadence::validate`]): call at start-up.
    pub fn validate(&self) -> Result<(), CadenceError> {
        self.cadence
            .validate(Duration::from_secs(self.engine.gate.max_sample_age_seconds))
    }
}

/// Everything an instance task shares with the others.
struct Shared {
    config: LoopConfig,
    engine: Arc<EngineConfig>,
    ends: SweepEnds,
}

/// What an instance task tells its supervisor, read at every reconcile.
#[derive(Default)]
struct TaskFlags {
    /// Whether the task's instance is in a rollout now (for the gauge).
    in_rollout: AtomicBool,
    /// Whether the task has published its first sweep: its engine then
    /// holds all the stored status said, and the supervisor lets the
    /// source drop it ([`crate::model::StatusLifecycle::release_status`]).
    swept: AtomicBool,
}

struct Running {
    /// The instance's current target, shared with its task: the task
    /// holds an `Arc` across its awaits, not a copy. It carries no stored
    /// status: the task's engine was restored from that before it started.
    target: watch::Sender<Arc<InstanceTarget>>,
    /// What the task tells the supervisor.
    flags: Arc<TaskFlags>,
    /// Whether the source was told to drop the instance's stored status.
    /// Told here, on the supervisor's side, so that it is ordered with
    /// [`crate::model::StatusLifecycle::keep_status`] when the task stops.
    released: bool,
    /// Whether the task may still end a sweep (record and publish it):
    /// the task ends a sweep holding this lock, the supervisor clears it
    /// under the lock before it forgets the instance.
    alive: Arc<Mutex<bool>>,
    task: JoinHandle<()>,
    /// The pods of its current target.
    pods: usize,
}

/// The agent loop. Build it, then [`AgentLoop::run`] it until shutdown.
pub struct AgentLoop {
    shared: Arc<Shared>,
    source: Arc<dyn TargetSource>,
}

impl AgentLoop {
    /// A loop over `source`, polling with `poller`, publishing to `sink`.
    pub fn new(
        config: LoopConfig,
        poller: Poller,
        source: Arc<dyn TargetSource>,
        sink: Arc<dyn StatusSink>,
        view: FleetView,
        clock: Arc<dyn Clock>,
    ) -> Self {
        AgentLoop {
            shared: Arc::new(Shared {
                engine: Arc::new(config.engine.clone()),
                config,
                ends: SweepEnds {
                    poller,
                    view,
                    sink,
                    clock,
                },
            }),
            source,
        }
    }

    /// Runs until `shutdown` resolves, then stops every instance task (a
    /// sweep in progress is abandoned; what was published stays published).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut running = Supervised::default();
        let mut tick = tokio::time::interval(self.shared.config.reconcile_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut images = self.source.image_changes();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => self.reconcile(&mut running),
                changed = image_change(&mut images) => {
                    if changed {
                        self.reconcile(&mut running);
                        tokio::time::sleep(IMAGE_CHANGE_GAP).await;
                    } else {
                        // The source dropped its signal: periodic reconciles only.
                        images = None;
                    }
                }
            }
        }
        for (_, r) in std::mem::take(&mut running.tasks) {
            r.task.abort();
        }
    }

    /// Brings the tasks in line with the source's targets, then sets the
    /// gauges. The targets are re-read only when the source's revision
    /// moved (or a task ended), and then only the instances the source
    /// names as changed ([`TargetSource::changed_since`]), when it can.
    fn reconcile(&self, supervised: &mut Supervised) {
        if !self.source.ready() {
            return;
        }
        let revision = self.source.revision();
        let tasks_alive = supervised.tasks.values().all(|r| !r.task.is_finished());
        let unchanged = revision.is_some() && revision == supervised.revision && tasks_alive;
        if !unchanged {
            let changed = match supervised.revision {
                Some(previous) if tasks_alive && revision.is_some() => {
                    self.source.changed_since(previous)
                }
                _ => None,
            };
            supervised.revision = revision;
            match changed {
                Some(keys) => self.apply_changed(&mut supervised.tasks, &keys),
                None => self.apply_targets(&mut supervised.tasks),
            }
            supervised.pods = supervised.tasks.values().map(|r| r.pods).sum();
        }
        let mut in_rollout = 0;
        for (key, r) in &mut supervised.tasks {
            if r.flags.in_rollout.load(Ordering::Relaxed) {
                in_rollout += 1;
            }
            if !r.released && r.flags.swept.load(Ordering::Acquire) {
                if let Some(lifecycle) = self.source.lifecycle() {
                    lifecycle.release_status(key);
                }
                r.released = true;
            }
        }
        let running = &supervised.tasks;
        // The queue counts its own slots too; the source knows the rest.
        self.shared
            .ends
            .sink
            .fleet_size(self.source.fleet_instances().unwrap_or(running.len()));
        metrics::gauge!(telemetry::INSTANCES_TRACKED).set(running.len() as f64);
        metrics::gauge!(telemetry::INSTANCES_BY_CADENCE, "cadence" => cadence::ROLLOUT)
            .set(in_rollout as f64);
        metrics::gauge!(telemetry::INSTANCES_BY_CADENCE, "cadence" => cadence::STEADY)
            .set((running.len() - in_rollout) as f64);
        metrics::gauge!(telemetry::PODS_TRACKED).set(supervised.pods as f64);
        let (verdicts, refused) = self.shared.ends.view.verdicts();
        metrics::gauge!(telemetry::GATE_CONFIG_REFUSED_INSTANCES).set(refused as f64);
        telemetry::publish_verdicts(verdicts);
    }

    /// Reads every target: stops the tasks of gone instances, hands the
    /// others their current target, starts the missing (or ended) ones.
    ///
    /// The targets are sorted in the source's own vector and looked up by
    /// binary search: a map of them would hold two more copies of every
    /// target at once (the pairs collected, then the tree built from
    /// them), and this runs with every target at a replica's first read
    /// and at each membership change, when every task is placed (the
    /// largest of 3 replicas at 30,000 pods: 1.9 MiB of its heap's peak,
    /// benches/PERFORMANCE.md).
    fn apply_targets(&self, running: &mut BTreeMap<InstanceKey, Running>) {
        let mut current = self.source.targets();
        current.sort_unstable_by(|a, b| a.name_order().cmp(&b.name_order()));
        // A source names an instance once; were it to repeat one, one
        // target of it is kept, as a map would.
        current.dedup_by(|a, b| a.name_order() == b.name_order());
        let has = |key: &InstanceKey| {
            current
                .binary_search_by(|t| t.name_order().cmp(&(&*key.namespace, &*key.name)))
                .is_ok()
        };
        let gone: Vec<InstanceKey> = running.keys().filter(|k| !has(k)).cloned().collect();
        for key in &gone {
            self.stop(running, key);
        }
        self.shared.ends.view.retain(|k| has(k));
        for target in current {
            self.place(running, target.key(), target);
        }
    }

    /// Re-reads the targets of `keys` only: a key the source no longer
    /// has is stopped, the others handed their target or started.
    fn apply_changed(&self, running: &mut BTreeMap<InstanceKey, Running>, keys: &[InstanceKey]) {
        if keys.is_empty() {
            return;
        }
        let mut current: BTreeMap<InstanceKey, InstanceTarget> = self
            .source
            .targets_of(keys)
            .into_iter()
            .map(|t| (t.key(), t))
            .collect();
        for key in keys {
            match current.remove(key) {
                Some(target) => self.place(running, key.clone(), target),
                None => {
                    self.stop(running, key);
                    self.shared.ends.view.retain(|k| k != key);
                }
            }
        }
    }

    /// Stops `key`'s task, if it has one, and forgets its state: once
    /// its sweep in progress can no longer end (record or publish), its
    /// stored status is kept again (read again, answered meanwhile from
    /// what the task last published) and its pending writes are dropped.
    fn stop(&self, running: &mut BTreeMap<InstanceKey, Running>, key: &InstanceKey) {
        if let Some(r) = running.remove(key) {
            *r.alive
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
            r.task.abort();
            self.keep_status(key);
            self.shared.ends.sink.forget(key);
            tracing::info!(namespace = %key.namespace, instance = %key.name, "instance gone");
        }
    }

    /// Hands `key`'s stored status back to the source's lifecycle, with
    /// the verdict last published for it. Returns whether the status is
    /// being read again.
    fn keep_status(&self, key: &InstanceKey) -> bool {
        let Some(lifecycle) = self.source.lifecycle() else {
            return false;
        };
        let last = self.shared.ends.view.instance(key).and_then(|v| {
            Some(DesiredStatus {
                health: v.health?,
                gate: v.gate?,
            })
        });
        lifecycle.keep_status(key, last.as_ref())
    }

    /// Hands a running task its current target, or starts the task.
    fn place(
        &self,
        running: &mut BTreeMap<InstanceKey, Running>,
        key: InstanceKey,
        mut target: InstanceTarget,
    ) {
        let pods = target.pods.len();
        match running.get_mut(&key) {
            Some(r) if !r.task.is_finished() => {
                r.pods = pods;
                // The task restored from the status when it started;
                // its own writes change it, and each copy would be
                // kept for nothing (and wake the task).
                target.previous_status = None;
                r.target.send_if_modified(|old| {
                    if **old != target {
                        *old = Arc::new(target);
                        true
                    } else {
                        false
                    }
                });
            }
            ended => {
                if ended.is_some() && self.keep_status(&key) {
                    // The task ended on its own (it never does unless it
                    // panicked): the status it let go is read again first;
                    // the source names the instance as changed once it is
                    // in (a source withholds the target until then).
                    running.remove(&key);
                    return;
                }
                self.shared.ends.sink.seed(&target);
                // The engine continues from the status as found; the
                // task's target keeps no copy of it (a second copy per
                // instance for as long as the task runs).
                let engine = InstanceEngine::restore(
                    target.previous_status.take().as_deref(),
                    Arc::clone(&self.shared.engine),
                );
                let (tx, rx) = watch::channel(Arc::new(target));
                let flags = Arc::new(TaskFlags {
                    in_rollout: AtomicBool::new(true),
                    swept: AtomicBool::new(false),
                });
                let alive = Arc::new(Mutex::new(true));
                let task = tokio::spawn(instance_task(
                    self.shared.clone(),
                    rx,
                    engine,
                    Arc::clone(&flags),
                    Arc::clone(&alive),
                ));
                running.insert(
                    key,
                    Running {
                        target: tx,
                        flags,
                        released: false,
                        alive,
                        task,
                        pods,
                    },
                );
            }
        }
    }
}

/// What the supervisor keeps between reconciles.
#[derive(Default)]
struct Supervised {
    /// One task per current target.
    tasks: BTreeMap<InstanceKey, Running>,
    /// The source's revision at the last read of the targets.
    revision: Option<u64>,
    /// The pods of the running tasks' targets.
    pods: usize,
}

/// Resolves with `true` when `images` signals a change, with `false` when
/// its sender is gone; never when there is no signal.
async fn image_change(images: &mut Option<watch::Receiver<u64>>) -> bool {
    match images {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The phase of `target` given its last verdict, at `now`.
fn phase_of(
    target: &InstanceTarget,
    gate: Option<&RolloutGate>,
    now: Timestamp,
    cadence: &Cadence,
) -> Phase {
    cadence::phase(
        &target.spec_image,
        target.pods.iter().map(|p| p.identity.image.as_deref()),
        gate,
        now,
        cadence.settle,
    )
}

/// Why an instance task's wait ended.
enum Wake {
    /// The next sweep is due; the phase that set its time.
    Due(Phase),
    /// `spec.image` changed: sweep at once.
    ImageChanged,
    /// The supervisor dropped the instance.
    Gone,
}

/// Waits until the time `due` gives for the current target, recomputed
/// whenever the target changes (a pod rolling to a new image shortens a
/// steady wait); ends at once when `spec.image` is no longer `swept_image`.
async fn wait_next(
    target: &mut watch::Receiver<Arc<InstanceTarget>>,
    swept_image: &str,
    mut due: impl FnMut(&InstanceTarget) -> (Instant, Phase),
) -> Wake {
    loop {
        let (at, phase) = {
            let t = target.borrow_and_update();
            if t.spec_image != swept_image {
                return Wake::ImageChanged;
            }
            due(&t)
        };
        tokio::select! {
            () = tokio::time::sleep_until(at) => return Wake::Due(phase),
            changed = target.changed() => {
                if changed.is_err() {
                    return Wake::Gone;
                }
            }
        }
    }
}

/// One instance's loop: wait for the cadence, [`sweep`] (poll, fold,
/// judge, record, publish), record the achieved interval. `engine` is
/// restored from the status the instance was found with.
async fn instance_task(
    shared: Arc<Shared>,
    mut target: watch::Receiver<Arc<InstanceTarget>>,
    mut engine: InstanceEngine,
    flags: Arc<TaskFlags>,
    alive: Arc<Mutex<bool>>,
) {
    let cadence = shared.config.cadence;
    let first = Arc::clone(&target.borrow_and_update());
    // Spread the instances' first sweeps over one interval of the phase
    // each is found in (restored from its published verdict).
    let spawned = Instant::now();
    let spread = rand::random::<f64>();
    let wake = Box::pin(wait_next(&mut target, &first.spec_image, |t| {
        let phase = phase_of(t, engine.gate(), shared.ends.clock.now(), &cadence);
        flags
            .in_rollout
            .store(phase.in_rollout(), Ordering::Relaxed);
        let wait = shared
            .ends
            .clock
            .to_real(cadence.interval(phase).mul_f64(spread));
        (spawned + wait, phase)
    }))
    .await;
    let mut previous: Option<Instant> = None;
    let mut label = match wake {
        Wake::Due(phase) => phase.label(),
        Wake::ImageChanged => cadence::IMAGE_CHANGE,
        Wake::Gone => return,
    };
    drop(first);
    loop {
        let t = Arc::clone(&target.borrow_and_update());
        let started = Instant::now();
        if let Some(previous) = previous {
            metrics::histogram!(telemetry::SWEEP_INTERVAL_SECONDS, "cadence" => label)
                .record(started.duration_since(previous).as_secs_f64());
        }
        previous = Some(started);
        // Boxed: a sweep's state (its polls, the fold) lives only while it
        // runs, not in every instance task between sweeps.
        if Box::pin(sweep(
            &shared.ends,
            &t,
            &mut engine,
            &mut Supervisee {
                target: &target,
                alive: &alive,
            },
        ))
        .await
        .is_none()
        {
            // The supervisor dropped this instance while the sweep ran:
            // nothing was published for it.
            return;
        }
        // Published (the view answers from it): the engine holds the
        // status it was restored from.
        flags.swept.store(true, Ordering::Release);
        let ended = Instant::now();
        let unit = rand::random::<f64>();
        let mut overran_counted = false;
        let wake = Box::pin(wait_next(&mut target, &t.spec_image, |t| {
            let phase = phase_of(t, engine.gate(), shared.ends.clock.now(), &cadence);
            flags
                .in_rollout
                .store(phase.in_rollout(), Ordering::Relaxed);
            let interval = shared
                .ends
                .clock
                .to_real(cadence.jittered_interval(phase, unit));
            if !overran_counted && cadence::overran(started, ended, interval) {
                overran_counted = true;
                metrics::counter!(telemetry::SWEEP_OVERRUNS_TOTAL, "cadence" => phase.label())
                    .increment(1);
            }
            (cadence::next_start(started, ended, interval), phase)
        }))
        .await;
        label = match wake {
            Wake::Due(phase) => phase.label(),
            Wake::ImageChanged => cadence::IMAGE_CHANGE,
            Wake::Gone => return,
        };
    }
}

/// The instance task's side of a sweep: its result is wanted while the
/// supervisor keeps the instance (the target's sender is alive, and the
/// supervisor has not stopped the task), checked and used under the lock
/// the supervisor takes to stop it.
struct Supervisee<'a> {
    target: &'a watch::Receiver<Arc<InstanceTarget>>,
    alive: &'a Mutex<bool>,
}

impl SweepWatch for Supervisee<'_> {
    fn finish(&mut self, end: &mut dyn FnMut()) -> bool {
        let alive = self
            .alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let wanted = *alive && self.target.has_changed().is_ok();
        if wanted {
            end();
        }
        wanted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SystemClock;
    use crate::poll::PollConfig;
    use kura_schemas::KuraInstanceStatus;
    use std::sync::atomic::AtomicUsize;

    /// One instance, its revision set by the test; counts the reads.
    struct Counted {
        targets: Vec<InstanceTarget>,
        revision: Option<u64>,
        reads: AtomicUsize,
    }

    impl TargetSource for Arc<Counted> {
        fn targets(&self) -> Vec<InstanceTarget> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.targets.clone()
        }
        fn ready(&self) -> bool {
            true
        }
        fn revision(&self) -> Option<u64> {
            self.revision
        }
    }

    /// An instance task is spawned per instance and lives as long as it:
    /// its future between sweeps is held once per instance of the fleet.
    /// The sweep and the waits are boxed (allocated while they run), so
    /// the task holds its state only; the test holds it to
    /// `MAX_TASK_FUTURE_BYTES`.
    #[tokio::test]
    async fn an_instance_task_holds_its_state_not_its_sweep() {
        /// The most an instance task's future may hold between sweeps.
        const MAX_TASK_FUTURE_BYTES: usize = 1024;
        let agent_loop = AgentLoop::new(
            LoopConfig::default(),
            Poller::new(PollConfig::default()),
            Arc::new(StaticTargets::new(vec![])),
            Arc::new(MemorySink::new()),
            FleetView::new(),
            Arc::new(SystemClock),
        );
        let (_tx, rx) = watch::channel(Arc::new(InstanceTarget::bare("acme", "img", 0)));
        let engine = InstanceEngine::new(Arc::new(EngineConfig::default()));
        let task = instance_task(
            Arc::clone(&agent_loop.shared),
            rx,
            engine,
            Arc::new(TaskFlags::default()),
            Arc::new(Mutex::new(true)),
        );
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= MAX_TASK_FUTURE_BYTES,
            "an instance task's future is {size} B"
        );
    }

    /// Reads of the targets over 30 reconciles (10 ms apart), with the
    /// source's revision fixed at `revision`.
    async fn reads_over_30_reconciles(revision: Option<u64>) -> usize {
        let source = Arc::new(Counted {
            targets: vec![InstanceTarget::bare("acme", "img", 0)],
            revision,
            reads: AtomicUsize::new(0),
        });
        let agent_loop = AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_secs(60)),
                reconcile_every: Duration::from_millis(10),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(Arc::clone(&source)),
            Arc::new(MemorySink::new()),
            FleetView::new(),
            Arc::new(SystemClock),
        );
        let reconciles = tokio::time::sleep(Duration::from_millis(295));
        agent_loop.run(reconciles).await;
        source.reads.load(Ordering::SeqCst)
    }

    /// A source that tells its revision is read once while it stays the
    /// same; one that cannot tell is read at every reconcile.
    #[tokio::test(start_paused = true)]
    async fn targets_are_re_read_only_when_the_revision_moves() {
        assert_eq!(reads_over_30_reconciles(Some(7)).await, 1);
        assert_eq!(reads_over_30_reconciles(None).await, 30);
    }

    /// A loop over `source` sweeping each instance every minute, with an
    /// in-memory sink (tests that place tasks and look at them).
    fn minute_loop(source: &StaticTargets) -> AgentLoop {
        AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_secs(60)),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(source.clone()),
            Arc::new(MemorySink::new()),
            FleetView::new(),
            Arc::new(SystemClock),
        )
    }

    /// Targets in any order, across namespaces, each get one task; a
    /// repeated one is placed once; one the source no longer names is
    /// stopped, and only that one.
    #[tokio::test]
    async fn targets_in_any_order_are_placed_once_and_the_gone_stopped() {
        let in_ns = |ns: &str, name: &str| {
            let mut t = InstanceTarget::bare(name, "img", 0);
            t.info.namespace = ns.into();
            t
        };
        let source = StaticTargets::new(vec![
            in_ns("zeta", "a"),
            in_ns("alpha", "z"),
            in_ns("alpha", "b"),
            in_ns("zeta", "a"),
            in_ns("mid", "m"),
        ]);
        let agent_loop = minute_loop(&source);
        let mut running = BTreeMap::new();
        agent_loop.apply_targets(&mut running);
        let names = |running: &BTreeMap<InstanceKey, Running>| {
            running.keys().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(names(&running), ["alpha/b", "alpha/z", "mid/m", "zeta/a"]);
        let mut kept = running[&InstanceKey::new("zeta", "a")].target.subscribe();
        kept.borrow_and_update();

        source.update(|ts| ts.retain(|t| t.info.name != "z"));
        agent_loop.apply_targets(&mut running);
        assert_eq!(names(&running), ["alpha/b", "mid/m", "zeta/a"]);
        assert!(
            !kept.has_changed().expect("the kept task's sender is alive"),
            "a kept task is handed nothing new"
        );
        for r in running.values() {
            r.task.abort();
        }
    }

    /// A running task's target keeps no stored status, and a change of
    /// that status alone (the agent's own writes) is not sent to the task;
    /// any other change is.
    #[tokio::test]
    async fn a_running_task_is_not_sent_its_stored_status() {
        let target = |image: &str, phase: &str| InstanceTarget {
            previous_status: Some(Box::new(KuraInstanceStatus {
                phase: Some(phase.into()),
                ..KuraInstanceStatus::default()
            })),
            ..InstanceTarget::bare("acme", image, 0)
        };
        let source = StaticTargets::new(vec![target("img", "Running")]);
        let agent_loop = minute_loop(&source);
        let mut running = BTreeMap::new();
        agent_loop.apply_targets(&mut running);
        let key = InstanceKey::new("kura", "acme");
        let mut rx = running[&key].target.subscribe();
        assert!(rx.borrow_and_update().previous_status.is_none());

        source.update(|ts| ts[0] = target("img", "Upgrading"));
        agent_loop.apply_targets(&mut running);
        assert!(!rx.has_changed().expect("sender alive"));

        source.update(|ts| ts[0] = target("img2", "Upgrading"));
        agent_loop.apply_targets(&mut running);
        assert!(rx.has_changed().expect("sender alive"));
        let sent = rx.borrow_and_update();
        assert_eq!(sent.spec_image, "img2");
        assert!(sent.previous_status.is_none());
        drop(sent);
        for r in running.values() {
            r.task.abort();
        }
    }

    /// The revision, the targets and the change log of [`Named`].
    type NamedState = (u64, Vec<InstanceTarget>, Vec<(u64, InstanceKey)>);

    /// A source that names what changed, by key: counts full reads and
    /// records which keys were re-read.
    #[derive(Default)]
    struct Named {
        state: std::sync::Mutex<NamedState>,
        full_reads: AtomicUsize,
        asked: std::sync::Mutex<Vec<Vec<InstanceKey>>>,
        /// The keys whose status was let go, then kept again, in order.
        released: std::sync::Mutex<Vec<InstanceKey>>,
        kept: std::sync::Mutex<Vec<InstanceKey>>,
        /// Whether the status is being read again (targets withheld).
        pending: AtomicBool,
    }

    impl Named {
        /// The targets, withheld while the status is pending.
        fn visible(&self, mut targets: Vec<InstanceTarget>) -> Vec<InstanceTarget> {
            if self.pending.load(Ordering::SeqCst) {
                targets.clear();
            }
            targets
        }
    }

    impl TargetSource for Arc<Named> {
        fn targets(&self) -> Vec<InstanceTarget> {
            self.full_reads.fetch_add(1, Ordering::SeqCst);
            self.visible(self.state.lock().expect("lock").1.clone())
        }
        fn ready(&self) -> bool {
            true
        }
        fn revision(&self) -> Option<u64> {
            Some(self.state.lock().expect("lock").0)
        }
        fn changed_since(&self, revision: u64) -> Option<Vec<InstanceKey>> {
            let state = self.state.lock().expect("lock");
            Some(
                state
                    .2
                    .iter()
                    .filter(|(r, _)| *r > revision)
                    .map(|(_, k)| k.clone())
                    .collect(),
            )
        }
        fn targets_of(&self, keys: &[InstanceKey]) -> Vec<InstanceTarget> {
            self.asked.lock().expect("lock").push(keys.to_vec());
            let state = self.state.lock().expect("lock");
            self.visible(
                state
                    .1
                    .iter()
                    .filter(|t| keys.contains(&t.key()))
                    .cloned()
                    .collect(),
            )
        }
        fn lifecycle(&self) -> Option<&dyn crate::model::StatusLifecycle> {
            Some(self)
        }
    }

    impl crate::model::StatusLifecycle for Arc<Named> {
        fn release_status(&self, key: &InstanceKey) {
            self.released.lock().expect("lock").push(key.clone());
        }
        fn keep_status(&self, key: &InstanceKey, _last: Option<&DesiredStatus>) -> bool {
            self.kept.lock().expect("lock").push(key.clone());
            self.pending.load(Ordering::SeqCst)
        }
    }

    /// A task lets its stored status go once its first sweep is published,
    /// a stopped one asks for it again, and no task starts while the
    /// status is being read again (it would start without its history).
    #[tokio::test]
    async fn a_task_lets_its_status_go_after_its_first_sweep_and_waits_for_it_back() {
        let target = InstanceTarget::bare("a", "v1", 0);
        let key = target.key();
        let source = Arc::new(Named::default());
        *source.state.lock().expect("lock") = (1, vec![target.clone()], vec![]);
        let view = FleetView::new();
        let agent_loop = AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_millis(1)),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(Arc::clone(&source)),
            Arc::new(MemorySink::new()),
            view.clone(),
            Arc::new(SystemClock),
        );
        let mut supervised = Supervised::default();
        agent_loop.reconcile(&mut supervised);
        assert!(
            source.released.lock().expect("lock").is_empty(),
            "kept until the task has swept"
        );
        let swept = tokio::time::timeout(Duration::from_secs(5), async {
            while !supervised.tasks[&key].flags.swept.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        assert!(swept.is_ok(), "the task's first sweep");
        assert!(
            view.instance(&key).and_then(|v| v.gate).is_some(),
            "the view answers from the task's own verdict by then"
        );
        agent_loop.reconcile(&mut supervised);
        tokio::time::sleep(Duration::from_millis(20)).await;
        agent_loop.reconcile(&mut supervised);
        assert_eq!(
            *source.released.lock().expect("lock"),
            vec![key.clone()],
            "let go by the supervisor once the task has swept, once per task"
        );
        assert!(source.kept.lock().expect("lock").is_empty());

        // The instance leaves (say, to another replica): its status is kept again.
        {
            let mut state = source.state.lock().expect("lock");
            state.1.clear();
            state.0 = 2;
            state.2 = vec![(2, key.clone())];
        }
        agent_loop.reconcile(&mut supervised);
        assert!(supervised.tasks.is_empty());
        assert_eq!(*source.kept.lock().expect("lock"), vec![key.clone()]);

        // It comes back while its status is still being read: no task yet.
        source.pending.store(true, Ordering::SeqCst);
        {
            let mut state = source.state.lock().expect("lock");
            state.1 = vec![target];
            state.0 = 3;
            state.2 = vec![(3, key.clone())];
        }
        agent_loop.reconcile(&mut supervised);
        assert!(supervised.tasks.is_empty(), "waits for its status");
        // The status is in (the source names the instance again).
        source.pending.store(false, Ordering::SeqCst);
        {
            let mut state = source.state.lock().expect("lock");
            state.0 = 4;
            state.2 = vec![(4, key.clone())];
        }
        agent_loop.reconcile(&mut supervised);
        assert!(supervised.tasks.contains_key(&key));
        for r in supervised.tasks.values() {
            r.task.abort();
        }
    }

    /// Once the targets are read, a change the source names re-reads that
    /// instance only: a new image reaches its task, a gone instance's
    /// task stops, the others are neither read nor touched.
    #[tokio::test]
    async fn only_the_instances_named_as_changed_are_re_read() {
        let target = |name: &str, image: &str| InstanceTarget::bare(name, image, 1);
        let source = Arc::new(Named::default());
        *source.state.lock().expect("lock") = (
            1,
            vec![target("a", "v1"), target("b", "v1"), target("c", "v1")],
            vec![],
        );
        let agent_loop = AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_secs(60)),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(Arc::clone(&source)),
            Arc::new(MemorySink::new()),
            FleetView::new(),
            Arc::new(SystemClock),
        );
        let mut supervised = Supervised::default();
        agent_loop.reconcile(&mut supervised);
        assert_eq!(source.full_reads.load(Ordering::SeqCst), 1);
        assert_eq!(supervised.tasks.len(), 3);
        let key = |n: &str| InstanceKey::new("kura", n);
        let mut a = supervised.tasks[&key("a")].target.subscribe();
        let mut b = supervised.tasks[&key("b")].target.subscribe();
        a.borrow_and_update();
        b.borrow_and_update();

        // Nothing moved: nothing is read.
        agent_loop.reconcile(&mut supervised);
        assert_eq!(source.full_reads.load(Ordering::SeqCst), 1);
        assert!(source.asked.lock().expect("lock").is_empty());

        // b's image moved, c is gone.
        {
            let mut state = source.state.lock().expect("lock");
            state.1 = vec![target("a", "v1"), target("b", "v2")];
            state.0 = 3;
            state.2 = vec![(2, key("b")), (3, key("c"))];
        }
        agent_loop.reconcile(&mut supervised);
        assert_eq!(source.full_reads.load(Ordering::SeqCst), 1, "no full read");
        assert_eq!(
            *source.asked.lock().expect("lock"),
            vec![vec![key("b"), key("c")]]
        );
        assert!(!a.has_changed().expect("a runs"));
        assert!(b.has_changed().expect("b runs"));
        assert_eq!(b.borrow_and_update().spec_image, "v2");
        assert!(!supervised.tasks.contains_key(&key("c")));
        assert_eq!(supervised.tasks.len(), 2);
        for r in supervised.tasks.values() {
            r.task.abort();
        }
    }

    /// A sink whose first publish waits for the test to open it.
    #[derive(Default)]
    struct GatedSink {
        inner: MemorySink,
        entered: (std::sync::Mutex<bool>, std::sync::Condvar),
        open: (std::sync::Mutex<bool>, std::sync::Condvar),
    }

    impl GatedSink {
        fn wait(pair: &(std::sync::Mutex<bool>, std::sync::Condvar)) {
            let mut set = pair.0.lock().expect("lock");
            while !*set {
                set = pair.1.wait(set).expect("lock");
            }
        }
        fn set(pair: &(std::sync::Mutex<bool>, std::sync::Condvar)) {
            *pair.0.lock().expect("lock") = true;
            pair.1.notify_all();
        }
    }

    impl StatusSink for GatedSink {
        fn publish(&self, key: &InstanceKey, desired: DesiredStatus, now: Timestamp) {
            Self::set(&self.entered);
            Self::wait(&self.open);
            self.inner.publish(key, desired, now);
        }
        fn forget(&self, key: &InstanceKey) {
            self.inner.forget(key);
        }
    }

    /// Item 5 of issue 41: the end of a sweep (record in the view, publish
    /// to the sink) never runs after its task was stopped: the instance's
    /// write slot, once forgotten, does not come back, and the view keeps
    /// no frozen live verdict of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sweep_ending_after_its_task_stopped_publishes_nothing() {
        let key = InstanceKey::new("kura", "acme");
        let source = StaticTargets::new(vec![InstanceTarget::bare("acme", "img", 0)]);
        let sink = Arc::new(GatedSink::default());
        let view = FleetView::new();
        let agent_loop = AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_millis(1)),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(source.clone()),
            Arc::clone(&sink) as Arc<dyn StatusSink>,
            view.clone(),
            Arc::new(SystemClock),
        );
        let mut running = BTreeMap::new();
        agent_loop.apply_targets(&mut running);
        // The task's first sweep is publishing (its result was wanted).
        GatedSink::wait(&sink.entered);
        let opener = {
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                GatedSink::set(&sink.open);
            })
        };
        // The instance moves away meanwhile: its task stops.
        source.update(Vec::clear);
        agent_loop.apply_targets(&mut running);
        opener.join().expect("opener");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            sink.inner.get(&key).is_none(),
            "a write slot came back after the instance was forgotten"
        );
        assert!(
            view.instance(&key).is_none(),
            "the view kept a live verdict of a stopped task"
        );
    }

    /// [`StaticTargets::update`] moves the revision, so the loop sees the
    /// change.
    #[test]
    fn static_targets_updates_move_the_revision() {
        let source = StaticTargets::new(Vec::new());
        let before = source.revision();
        source.update(|_| {});
        assert_ne!(source.revision(), before);
        assert!(before.is_some());
    }

    /// What discovery noted about a target (an unreadable status field,
    /// pods beyond the limit) reaches the fleet view with its sweep.
    #[tokio::test]
    async fn discovery_notes_reach_the_fleet_view() {
        let target = InstanceTarget {
            pods_dropped: 2,
            status_warnings: vec!["status.rolloutGate unreadable: x".into()],
            ..InstanceTarget::bare("acme", "img", 3)
        };
        let expected = target.notes();
        let view = FleetView::new();
        let agent_loop = AgentLoop::new(
            LoopConfig {
                cadence: Cadence::fixed(Duration::from_millis(20)),
                reconcile_every: Duration::from_millis(10),
                ..LoopConfig::default()
            },
            Poller::new(PollConfig::default()),
            Arc::new(StaticTargets::new(vec![target])),
            Arc::new(MemorySink::new()),
            view.clone(),
            Arc::new(SystemClock),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(agent_loop.run(async {
            let _ = stopped.await;
        }));
        let key = InstanceKey::new("kura", "acme");
        let notes = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Some(v) = view.instance(&key).filter(|v| v.swept_at.is_some()) {
                    return v.notes;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("a sweep within 5 s");
        let _ = stop.send(());
        let _ = running.await;
        assert_eq!(notes, expected);
        assert_eq!(notes.len(), 2, "{notes:?}");
    }
}
