//! The agent's real per-sweep path over a fleet, step for step as the run
//! loop's instance task does it (agent/src/runner): one tokio task per
//! instance polls its pods with the shared [`Poller`] (whose global
//! semaphore bounds requests in flight), folds and judges the samples with
//! its [`InstanceEngine`], records the sweep in the [`FleetView`] (the debug
//! view) and publishes the desired status to a [`MemorySink`] (in a cluster,
//! the write queue). What differs from the run loop: every instance sweeps
//! at once (the run loop spreads them over the interval), so a sweep here
//! is the worst-case burst.

use super::proc_stats::thread_cpu_time;
use crate::engine::{EngineConfig, InstanceEngine};
use crate::model::{
    DesiredStatus, InstanceInfo, InstanceKey, PodIdentity, SampleResult, StatusSink,
};
use crate::poll::Poller;
use crate::runner::MemorySink;
use crate::view::{FleetView, HistoryFootprint, SweepRecord};
use jiff::Timestamp;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The writer name put in every aggregate.
const AGENT: &str = "kura-agent-load";
/// The image every instance runs (the gate judges it).
pub const IMAGE: &str = "ghcr.io/tuist/kura:0.6.0";

/// One instance: its pods and its engine.
#[derive(Debug)]
struct Instance {
    key: InstanceKey,
    info: InstanceInfo,
    targets: Vec<(PodIdentity, SocketAddr)>,
    pod_names: Vec<String>,
    engine: InstanceEngine,
}

/// What every instance task shares.
struct Shared {
    poller: Poller,
    view: FleetView,
    sink: MemorySink,
}

/// What one instance's step produced.
struct Step {
    ok: usize,
    errors: Vec<String>,
    fold: Duration,
    samples: usize,
}

/// What one sweep over the fleet produced.
#[derive(Debug, Clone, Default)]
pub struct SweepOutcome {
    /// Wall time from the first poll to the last instance's publish.
    pub wall: Duration,
    /// Pods that gave a valid report.
    pub ok: usize,
    /// Failed samples by error text.
    pub errors: BTreeMap<String, usize>,
    /// CPU time spent folding and judging ([`InstanceEngine::step`]),
    /// summed over instances.
    pub aggregate_time: Duration,
    /// Samples folded.
    pub samples: usize,
}

/// A fleet of instances polled, folded, judged and published as the
/// agent's run loop does it.
pub struct AgentFleet {
    shared: Arc<Shared>,
    /// Boxed, as the run loop's instance task holds its state: an
    /// `async fn` keeps its arguments beside the locals they are moved
    /// into, so an instance passed by value would sit twice in every
    /// task (about 0.45 KiB more each) where the run loop's holds it once.
    instances: Vec<Option<Box<Instance>>>,
}

impl std::fmt::Debug for AgentFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentFleet")
            .field("instances", &self.instances.len())
            .finish_non_exhaustive()
    }
}

impl AgentFleet {
    /// Group `targets` into instances of `pods_per_instance` consecutive
    /// pods (the last may be smaller), all polled through `poller`.
    pub fn new(
        poller: Poller,
        targets: &[(PodIdentity, SocketAddr)],
        pods_per_instance: usize,
    ) -> AgentFleet {
        let engine = Arc::new(EngineConfig {
            agent: AGENT.to_owned(),
            ..EngineConfig::default()
        });
        let instances = targets
            .chunks(pods_per_instance.max(1))
            .enumerate()
            .map(|(i, pods)| {
                let info = InstanceInfo {
                    namespace: "kura".to_owned(),
                    name: format!("instance-{i}"),
                    expected_pods: u32::try_from(pods.len()).unwrap_or(u32::MAX),
                    generation: 1,
                };
                Some(Box::new(Instance {
                    key: InstanceKey {
                        namespace: info.namespace.clone(),
                        name: info.name.clone(),
                    },
                    info,
                    targets: pods.to_vec(),
                    pod_names: pods.iter().map(|(p, _)| p.name.clone()).collect(),
                    engine: InstanceEngine::new(Arc::clone(&engine)),
                }))
            })
            .collect();
        AgentFleet {
            shared: Arc::new(Shared {
                poller,
                view: FleetView::new(),
                sink: MemorySink::new(),
            }),
            instances,
        }
    }

    /// How many instances the fleet has.
    pub fn instances(&self) -> usize {
        self.instances.len()
    }

    /// What the fleet view's per-instance histories occupy.
    pub fn history_footprint(&self) -> HistoryFootprint {
        self.shared.view.history_footprint()
    }

    /// One sweep: every instance's task polls, folds, judges and publishes.
    pub async fn sweep(&mut self) -> SweepOutcome {
        let started = Instant::now();
        let tasks: Vec<_> = self
            .instances
            .iter_mut()
            .filter_map(Option::take)
            .map(|inst| tokio::spawn(step(Arc::clone(&self.shared), inst)))
            .collect();
        let mut out = SweepOutcome::default();
        for (slot, task) in self.instances.iter_mut().zip(tasks) {
            // A task only fails if it panicked; its instance is then lost
            // and its pods count as failed below.
            if let Ok((inst, s)) = task.await {
                *slot = Some(inst);
                out.ok += s.ok;
                out.aggregate_time += s.fold;
                out.samples += s.samples;
                for e in s.errors {
                    *out.errors.entry(e).or_default() += 1;
                }
            } else {
                *out.errors.entry("task panicked".to_owned()).or_default() += 1;
            }
        }
        out.wall = started.elapsed();
        out
    }
}

/// One instance's step, as the run loop's instance task does it.
async fn step(shared: Arc<Shared>, mut inst: Box<Instance>) -> (Box<Instance>, Step) {
    let samples = shared.poller.sweep(&inst.targets).await;
    let now = Timestamp::now();
    // The step is synchronous, so it runs on one thread from start to end.
    let folding = thread_cpu_time();
    let (health, gate) = inst.engine.step(&inst.info, IMAGE, &samples, now);
    let fold = thread_cpu_time().saturating_sub(folding);
    let desired = DesiredStatus {
        health: Arc::clone(health),
        gate: Arc::clone(gate),
    };
    shared.view.record_sweep(
        &inst.key,
        SweepRecord {
            spec_image: IMAGE,
            current_pods: &inst.pod_names,
            samples: &samples,
            health: Some(Arc::clone(&desired.health)),
            gate: Some(Arc::clone(&desired.gate)),
            notes: Vec::new(),
            limits: inst.engine.limits(),
            at: now,
        },
    );
    shared.sink.publish(&inst.key, desired, now);
    let mut s = Step {
        ok: 0,
        errors: Vec::new(),
        fold,
        samples: samples.len(),
    };
    for sample in samples {
        match sample.result {
            SampleResult::Report(_) => s.ok += 1,
            SampleResult::Error(e) => s.errors.push(e),
        }
    }
    (inst, s)
}
