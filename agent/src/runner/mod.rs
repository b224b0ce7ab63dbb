//! The agent's main loop, independent of where targets come from and where
//! statuses go: one task per instance sweeps its pods every interval
//! (jittered), folds the samples and judges them ([`InstanceEngine`]),
//! hands the result to a [`StatusSink`] and records it in the
//! [`FleetView`]. A supervisor keeps one task per current target.
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

mod memory;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::engine::{EngineConfig, InstanceEngine};
use crate::model::{
    Clock, DesiredStatus, InstanceKey, InstanceTarget, PodSample, StatusSink, TargetSource,
};
use crate::poll::Poller;
use crate::telemetry;
use crate::view::{FleetView, SweepRecord};

pub use memory::{MemorySink, StaticTargets};

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Time between two sweeps of one instance, in the clock's time.
    pub sweep_interval: Duration,
    /// Relative jitter of each sleep (0.1 = ±10 %).
    pub jitter: f64,
    /// How often the supervisor re-reads the targets (real time).
    pub reconcile_every: Duration,
    /// What every instance's engine is held to (aggregation, gate, the
    /// agent's name).
    pub engine: EngineConfig,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            sweep_interval: Duration::from_secs(10),
            jitter: 0.1,
            reconcile_every: Duration::from_secs(1),
            engine: EngineConfig::default(),
        }
    }
}

/// Everything an instance task shares with the others.
struct Shared {
    config: LoopConfig,
    engine: Arc<EngineConfig>,
    poller: Poller,
    view: FleetView,
    sink: Arc<dyn StatusSink>,
    clock: Arc<dyn Clock>,
}

struct Running {
    target: watch::Sender<InstanceTarget>,
    task: JoinHandle<()>,
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
                poller,
                view,
                sink,
                clock,
            }),
            source,
        }
    }

    /// Runs until `shutdown` resolves, then stops every instance task (a
    /// sweep in progress is abandoned; what was published stays published).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut running: BTreeMap<InstanceKey, Running> = BTreeMap::new();
        let mut tick = tokio::time::interval(self.shared.config.reconcile_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => self.reconcile(&mut running),
            }
        }
        for (_, r) in std::mem::take(&mut running) {
            r.task.abort();
        }
    }

    fn reconcile(&self, running: &mut BTreeMap<InstanceKey, Running>) {
        if !self.source.ready() {
            return;
        }
        let targets = self.source.targets();
        let mut current: BTreeMap<InstanceKey, InstanceTarget> =
            targets.into_iter().map(|t| (t.key(), t)).collect();
        // Gone instances: stop their task, forget their state.
        let gone: Vec<InstanceKey> = running
            .keys()
            .filter(|k| !current.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(r) = running.remove(&key) {
                r.task.abort();
            }
            self.shared.sink.forget(&key);
            tracing::info!(namespace = %key.namespace, instance = %key.name, "instance gone");
        }
        self.shared.view.retain(|k| current.contains_key(k));
        let mut pods = 0usize;
        for (key, target) in std::mem::take(&mut current) {
            pods += target.pods.len();
            match running.get(&key) {
                Some(r) if !r.task.is_finished() => {
                    r.target.send_if_modified(|old| {
                        if *old != target {
                            *old = target;
                            true
                        } else {
                            false
                        }
                    });
                }
                _ => {
                    self.shared.sink.seed(&target);
                    let (tx, rx) = watch::channel(target);
                    let task = tokio::spawn(instance_task(self.shared.clone(), rx));
                    running.insert(key, Running { target: tx, task });
                }
            }
        }
        metrics::gauge!(telemetry::INSTANCES_TRACKED).set(running.len() as f64);
        metrics::gauge!(telemetry::PODS_TRACKED).set(pods as f64);
        telemetry::publish_verdicts(
            self.shared
                .view
                .snapshot()
                .iter()
                .map(|v| v.verdict())
                .collect::<Vec<_>>(),
        );
    }
}

/// One instance's loop: sweep, fold, judge, publish, sleep.
async fn instance_task(shared: Arc<Shared>, mut target: watch::Receiver<InstanceTarget>) {
    let config = &shared.config;
    let first = target.borrow_and_update().clone();
    let key = first.key();
    let mut engine =
        InstanceEngine::restore(first.previous_status.as_ref(), Arc::clone(&shared.engine));
    let mut resets_seen = engine.health().map_or(0, |h| h.counter_resets);
    // Spread the instances' first sweeps over one interval.
    let spread = config.sweep_interval.mul_f64(rand::random::<f64>());
    tokio::time::sleep(shared.clock.to_real(spread)).await;
    loop {
        let t = target.borrow_and_update().clone();
        let started = std::time::Instant::now();
        let mut samples: Vec<PodSample> = shared.poller.sweep(&t.pollable()).await;
        for s in &mut samples {
            s.received_at = shared.clock.map_real(s.received_at);
        }
        let now = shared.clock.now();
        samples.extend(t.unreachable_samples(now));
        let (health, gate) = engine.step(&t.info, &t.spec_image, &samples, now);
        metrics::histogram!(telemetry::SWEEP_DURATION_SECONDS)
            .record(started.elapsed().as_secs_f64());
        if health.counter_resets > resets_seen {
            metrics::counter!(telemetry::COUNTER_RESETS_TOTAL)
                .increment(health.counter_resets - resets_seen);
        }
        resets_seen = health.counter_resets;
        let desired = DesiredStatus {
            health: health.clone(),
            gate: gate.clone(),
        };
        if target.has_changed().is_err() {
            // The supervisor dropped this instance while the sweep ran:
            // publish nothing for it.
            return;
        }
        let pod_names: Vec<String> = t.pods.iter().map(|p| p.identity.name.clone()).collect();
        shared.view.record_sweep(
            &key,
            SweepRecord {
                spec_image: &t.spec_image,
                current_pods: &pod_names,
                samples: &samples,
                health: Some(desired.health.clone()),
                gate: Some(desired.gate.clone()),
                notes: t.notes(),
                limits: engine.limits(),
                at: now,
            },
        );
        shared.sink.publish(&key, desired, now);
        tokio::time::sleep(real_interval(&shared, rand::random::<f64>())).await;
    }
}

/// The jittered sweep interval converted to real time.
fn real_interval(shared: &Shared, unit: f64) -> Duration {
    let virtual_interval = jittered(shared.config.sweep_interval, shared.config.jitter, unit);
    shared.clock.to_real(virtual_interval)
}

/// `base` scaled by a factor in `[1 - spread, 1 + spread]`, chosen by
/// `unit` in `[0, 1]` (a random draw the caller provides, so this stays
/// pure). Used to jitter the sweep interval so that agents started together
/// do not poll in lock-step.
fn jittered(base: Duration, spread: f64, unit: f64) -> Duration {
    let spread = spread.clamp(0.0, 1.0);
    let unit = unit.clamp(0.0, 1.0);
    base.mul_f64(1.0 - spread + 2.0 * spread * unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InstanceInfo, SystemClock};
    use crate::poll::PollConfig;

    /// What discovery noted about a target (an unreadable status field,
    /// pods beyond the limit) reaches the fleet view with its sweep.
    #[tokio::test]
    async fn discovery_notes_reach_the_fleet_view() {
        let target = InstanceTarget {
            info: InstanceInfo {
                namespace: "kura".into(),
                name: "acme".into(),
                expected_pods: 3,
                generation: 1,
            },
            spec_image: "img".into(),
            pods: Vec::new(),
            pods_dropped: 2,
            previous_status: None,
            status_warnings: vec!["status.rolloutGate unreadable: x".into()],
        };
        let expected = target.notes();
        let view = FleetView::new();
        let agent_loop = AgentLoop::new(
            LoopConfig {
                sweep_interval: Duration::from_millis(20),
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

    #[test]
    fn jitter_stays_within_spread() {
        let base = Duration::from_secs(10);
        assert_eq!(jittered(base, 0.1, 0.0), Duration::from_secs(9));
        assert_eq!(jittered(base, 0.1, 1.0), Duration::from_secs(11));
        assert_eq!(jittered(base, 0.1, 0.5), base);
        assert_eq!(jittered(base, 0.0, 0.9), base);
    }
}
