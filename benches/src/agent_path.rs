//! The agent's real per-sweep path over a fleet: for every instance, poll
//! its pods with the shared [`Poller`], fold the samples with its
//! [`InstanceAggregator`], and decide whether the new aggregate is a
//! material change (a status write). Instances run concurrently; the
//! poller's global semaphore bounds requests in flight.

use jiff::Timestamp;
use kura_agent::aggregate::{AggregateConfig, InstanceAggregator, material_change};
use kura_agent::poll::Poller;
use kura_agent::sample::{InstanceInfo, PodIdentity, SampleResult};
use kura_schemas::RolloutHealth;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The writer name put in every aggregate.
const AGENT: &str = "kura-agent-load";

/// One instance: its pods and its aggregation state.
#[derive(Debug)]
struct Instance {
    info: InstanceInfo,
    targets: Vec<(PodIdentity, SocketAddr)>,
    aggregator: InstanceAggregator,
    last: Option<RolloutHealth>,
}

/// What one sweep over the fleet produced.
#[derive(Debug, Clone, Default)]
pub struct SweepOutcome {
    /// Wall time from the first poll to the last instance's aggregate.
    pub wall: Duration,
    /// Pods that gave a valid report.
    pub ok: usize,
    /// Failed samples by error text.
    pub errors: BTreeMap<String, usize>,
    /// Instances whose aggregate changed materially (would be written).
    pub writes: usize,
    /// Time spent folding samples (`InstanceAggregator::sweep` and the
    /// write decision), summed over instances.
    pub aggregate_time: Duration,
    /// Samples folded.
    pub samples: usize,
}

/// A fleet of instances polled and aggregated as the agent does it.
#[derive(Debug)]
pub struct AgentFleet {
    poller: Poller,
    instances: Vec<Instance>,
}

impl AgentFleet {
    /// Group `targets` into instances of `pods_per_instance` consecutive
    /// pods (the last may be smaller), all polled through `poller`.
    pub fn new(
        poller: Poller,
        targets: &[(PodIdentity, SocketAddr)],
        pods_per_instance: usize,
    ) -> AgentFleet {
        let instances = targets
            .chunks(pods_per_instance.max(1))
            .enumerate()
            .map(|(i, pods)| Instance {
                info: InstanceInfo {
                    namespace: "kura".to_owned(),
                    name: format!("instance-{i}"),
                    expected_pods: u32::try_from(pods.len()).unwrap_or(u32::MAX),
                    generation: 1,
                },
                targets: pods.to_vec(),
                aggregator: InstanceAggregator::new(AggregateConfig::default()),
                last: None,
            })
            .collect();
        AgentFleet { poller, instances }
    }

    /// How many instances the fleet has.
    pub fn instances(&self) -> usize {
        self.instances.len()
    }

    /// One sweep: every instance polled and aggregated.
    pub async fn sweep(&mut self) -> SweepOutcome {
        let poller = &self.poller;
        let started = Instant::now();
        let per_instance =
            futures::future::join_all(self.instances.iter_mut().map(|inst| async move {
                let samples = poller.sweep(&inst.targets).await;
                let folding = Instant::now();
                let health = inst
                    .aggregator
                    .sweep(&inst.info, &samples, Timestamp::now(), AGENT);
                let write = inst
                    .last
                    .as_ref()
                    .is_none_or(|prev| material_change(prev, &health));
                inst.last = Some(health);
                let folded = folding.elapsed();
                let n = samples.len();
                let mut ok = 0;
                let mut errors: Vec<String> = Vec::new();
                for s in samples {
                    match s.result {
                        SampleResult::Report(_) => ok += 1,
                        SampleResult::Error(e) => errors.push(e),
                    }
                }
                (ok, errors, write, folded, n)
            }))
            .await;
        let mut out = SweepOutcome {
            wall: started.elapsed(),
            ..SweepOutcome::default()
        };
        for (ok, errors, write, folded, n) in per_instance {
            out.ok += ok;
            out.aggregate_time += folded;
            out.samples += n;
            out.writes += usize::from(write);
            for e in errors {
                *out.errors.entry(e).or_default() += 1;
            }
        }
        out
    }
}
