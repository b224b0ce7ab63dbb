//! A simulated Kura fleet: any number of pods served over real HTTP on
//! loopback, each answering `GET /status/rollout` in a chosen report
//! generation, driven by a scripted timeline ([`Scenario`], files under
//! `testdata/sim/`) and/or from Rust at run time ([`SimPodHandle`]).
//!
//! It stands apart from the agent: it depends on `kura-schemas` only (the
//! report it serves), and the agent's product code never imports it. The
//! agent's `demo` and `simulate` subcommands, its tests and the benches
//! use it; they turn a pod's name, UID, restart count and address into
//! whatever targets they need.
//!
//! Each pod has its own listener: by default on its own `127.x.y.z` address
//! with one port shared by all pods of a simulator (a pod target is "IP +
//! port", as in a cluster; Linux routes all of `127.0.0.0/8` to `lo`), with a
//! fallback to `127.0.0.1` and one ephemeral port per pod. A pod costs one
//! listening socket and one small task, plus one task per open connection.
//! For a whole fleet's pods in one process together with a keep-alive
//! client, allow about three file descriptors per pod:
//! `kura_agent::cli::raise_fd_limit` raises the soft limit to the hard
//! one; beyond that use `ulimit -n`.
//!
//! What Kura does to an instance's pods has its simulation too: a
//! suspension scales them to zero and wipes their data
//! ([`SimPodHandle::suspend`]), and the pods of a node-local instance are
//! reached through their node's kubelet ([`Simulator::kubelet`],
//! [`SimKubelet`]) rather than by pod IP. (An operator's held update is
//! Kura's controller's status, not the pods': its pods simply keep running
//! the old image until they are deleted, [`SimPodHandle::restart`].)

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod addressing;
mod behaviour;
mod body;
mod kubelet;
mod node;
mod pod;
mod scenario;

pub use addressing::Addressing;
pub use behaviour::Behaviour;
pub use kubelet::SimKubelet;
pub use node::{REGION_LINK_LAG, ReportGeneration, SimNode};
pub use pod::{SimPodHandle, SimPodSpec, SimStats};
pub use scenario::{PodTemplate, Scenario, TimelineEvent};

use pod::Fleet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::task::JoinHandle;

/// Why the simulator could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A listener could not be bound or set up.
    #[error("cannot listen: {0}")]
    Bind(#[source] std::io::Error),
    /// Called outside a tokio runtime.
    #[error("the simulator must be started inside a tokio runtime")]
    NoRuntime,
    /// A scenario file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A scenario is invalid.
    #[error("invalid scenario: {0}")]
    Scenario(String),
}

/// A running simulated fleet. Dropping it stops every pod and the timeline.
#[derive(Debug)]
pub struct Simulator {
    pods: Vec<SimPodHandle>,
    fleet: Arc<Fleet>,
    timeline: Option<JoinHandle<()>>,
}

impl Simulator {
    /// Start the given pods, addressed as `addressing` says.
    pub async fn start(
        specs: Vec<SimPodSpec>,
        addressing: &Addressing,
    ) -> Result<Simulator, SimError> {
        let listeners = addressing.bind(specs.len())?;
        let fleet = Arc::new(Fleet::default());
        fleet.keep_alive.store(true, Ordering::Relaxed);
        let mut pods = Vec::with_capacity(specs.len());
        for (spec, listener) in specs.into_iter().zip(listeners) {
            pods.push(SimPodHandle::start(spec, listener, Arc::clone(&fleet)).await?);
        }
        Ok(Simulator {
            pods,
            fleet,
            timeline: None,
        })
    }

    /// `n` healthy G4 pods named `<prefix>-0` … on the default addressing.
    pub async fn healthy(prefix: &str, n: usize) -> Result<Simulator, SimError> {
        let specs = (0..n)
            .map(|i| SimPodSpec::new(format!("{prefix}-{i}")))
            .collect();
        Simulator::start(specs, &Addressing::default()).await
    }

    /// Start a scenario's pods and run its timeline, its offsets multiplied
    /// by `time_scale` (the scenario's own when `None`).
    pub async fn from_scenario(
        scenario: &Scenario,
        time_scale: Option<f64>,
    ) -> Result<Simulator, SimError> {
        let mut sim = Simulator::start(scenario.pod_specs(), &scenario.addressing).await?;
        sim.set_keep_alive(scenario.keep_alive);
        let scale = time_scale.unwrap_or(scenario.time_scale);
        sim.timeline = Some(scenario.spawn_timeline(&sim.pods, scale)?);
        Ok(sim)
    }

    /// Every pod, in start order.
    pub fn pods(&self) -> &[SimPodHandle] {
        &self.pods
    }

    /// The pod named `name`.
    pub fn pod(&self, name: &str) -> Option<&SimPodHandle> {
        self.pods.iter().find(|p| p.name() == name)
    }

    /// The kubelet of a node running the pods named in `names` (names of
    /// no pod of this simulator are left out): the way to a node-local
    /// instance's pods, whose targets carry an unroutable pod IP.
    pub fn kubelet<I, S>(&self, names: I) -> SimKubelet
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let pods = names
            .into_iter()
            .filter_map(|n| self.pod(n.as_ref()).cloned())
            .collect();
        SimKubelet::new(pods)
    }

    /// Counters over every pod of this simulator.
    pub fn stats(&self) -> &SimStats {
        &self.fleet.stats
    }

    /// Whether pods keep connections open after answering (default true).
    /// Without keep-alive every poll opens and closes a connection, so
    /// pods and their poller fit in about two file descriptors per pod.
    /// Applies to connections accepted from now on.
    pub fn set_keep_alive(&self, on: bool) {
        self.fleet.keep_alive.store(on, Ordering::Relaxed);
    }

    /// Whether the scenario timeline has applied all its events (true when
    /// there is none).
    pub fn timeline_done(&self) -> bool {
        self.timeline.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        if let Some(t) = &self.timeline {
            t.abort();
        }
        for p in &self.pods {
            p.abort();
        }
    }
}
