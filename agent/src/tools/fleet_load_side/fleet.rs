//! The agent's real per-sweep path over a fleet: one tokio task per
//! instance runs the run loop's own [`sweep`] (agent/src/runner/sweep.rs)
//! with the shared [`Poller`] (whose global semaphore bounds requests in
//! flight), its [`InstanceEngine`], the [`FleetView`] (the debug view) and
//! a [`MemorySink`] (in a cluster, the write queue). What differs from the
//! run loop: every instance sweeps at once (the run loop spreads them over
//! the interval), so a sweep here is the worst-case burst.

use super::proc_stats::thread_cpu_time;
use crate::engine::{EngineConfig, InstanceEngine};
use crate::model::{
    InstanceInfo, InstanceTarget, PodIdentity, PodTarget, SampleResult, SystemClock,
};
use crate::poll::Poller;
use crate::runner::{MemorySink, SweepEnds, SweepWatch, sweep};
use crate::view::{FleetView, HistoryFootprint, TimelineFootprint};
use kura_gate::GateConfig;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The writer name put in every aggregate.
const AGENT: &str = "kura-agent-load";
/// The image every instance runs (the gate judges it).
pub const IMAGE: &str = "ghcr.io/tuist/kura:0.6.0";

/// One instance: its target (as discovery would give it) and its engine.
#[derive(Debug)]
struct Instance {
    target: InstanceTarget,
    engine: InstanceEngine,
}

/// What one instance's step produced.
struct Step {
    ok: usize,
    errors: Vec<String>,
    fold: Duration,
    samples: usize,
}

/// What one sweep of every instance of the fleet produced.
#[derive(Debug, Clone, Default)]
pub struct FleetSweepOutcome {
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
    ends: Arc<SweepEnds>,
    /// Boxed, as the run loop's instance task holds its state: an
    /// `async fn` keeps its arguments beside the locals they are moved
    /// into, so an instance passed by value would sit twice in every
    /// task where the run loop's holds it once.
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
    /// pods (the last may be smaller), all polled through `poller`;
    /// `shadow`: a shadow gate configuration every engine judges beside
    /// the live one (the cost of `run --shadow-gate-config`).
    pub fn new(
        poller: Poller,
        targets: &[(Arc<PodIdentity>, SocketAddr)],
        pods_per_instance: usize,
        shadow: Option<GateConfig>,
    ) -> AgentFleet {
        let engine = Arc::new(EngineConfig {
            agent: AGENT.to_owned(),
            shadow,
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
                    target: InstanceTarget {
                        info,
                        spec_image: IMAGE.to_owned(),
                        pods: pods
                            .iter()
                            .map(|(identity, addr)| PodTarget {
                                identity: Arc::clone(identity),
                                addr: Ok(*addr),
                            })
                            .collect(),
                        pods_dropped: 0,
                        node_local_network: false,
                        previous_status: None,
                        status_warnings: Vec::new(),
                        gate_config: None,
                        traits: Default::default(),
                    },
                    engine: InstanceEngine::new(Arc::clone(&engine)),
                }))
            })
            .collect();
        AgentFleet {
            ends: Arc::new(SweepEnds {
                poller,
                view: FleetView::new(),
                sink: Arc::new(MemorySink::new()),
                clock: Arc::new(SystemClock),
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
        self.ends.view.history_footprint()
    }

    /// What the fleet view's per-instance timelines hold.
    pub fn timeline_footprint(&self) -> TimelineFootprint {
        self.ends.view.timeline_footprint()
    }

    /// One sweep of every instance: each instance's task polls, folds,
    /// judges and publishes, all at once.
    pub async fn sweep_all(&mut self) -> FleetSweepOutcome {
        let started = Instant::now();
        let tasks: Vec<_> = self
            .instances
            .iter_mut()
            .filter_map(Option::take)
            .map(|inst| tokio::spawn(step(Arc::clone(&self.ends), inst)))
            .collect();
        let mut out = FleetSweepOutcome::default();
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

/// Times the fold-and-judge step on the thread's CPU clock (the step is
/// synchronous, so it runs on one thread from start to end).
#[derive(Default)]
struct FoldTime(Duration);

impl SweepWatch for FoldTime {
    fn step(&mut self, step: &mut dyn FnMut()) {
        let folding = thread_cpu_time();
        step();
        self.0 = thread_cpu_time().saturating_sub(folding);
    }
}

/// One instance's sweep, the run loop's own.
async fn step(ends: Arc<SweepEnds>, mut inst: Box<Instance>) -> (Box<Instance>, Step) {
    let mut fold = FoldTime::default();
    let Instance { target, engine } = &mut *inst;
    let samples = sweep(&ends, target, engine, &mut fold)
        .await
        .map(|s| s.samples)
        .unwrap_or_default();
    let mut s = Step {
        ok: 0,
        errors: Vec::new(),
        fold: fold.0,
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
