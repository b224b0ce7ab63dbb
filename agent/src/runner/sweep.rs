//! One sweep of one instance, the agent's per-sweep path in one place:
//! poll its pods, fold and judge the samples ([`InstanceEngine::step`]),
//! record the result in the [`FleetView`] and publish the desired status
//! to the [`StatusSink`]. The run loop's instance task calls [`sweep`] at
//! its cadence; `fleet-load` (`tools::fleet_load_side`) calls it for every
//! instance at once, so the benchmark measures this code, not a copy.

use std::sync::Arc;

use tokio::time::Instant;

use crate::engine::{AnnotationChange, InstanceEngine, Judged};
use crate::model::{Clock, DesiredStatus, InstanceKey, InstanceTarget, PodSample, StatusSink};
use crate::poll::Poller;
use crate::telemetry;
use crate::view::{FleetView, SweepRecord, TickRecord};

/// Where a sweep's samples come from and where its result goes.
#[derive(Clone)]
pub struct SweepEnds {
    /// Polls the pods (its semaphore bounds the requests in flight).
    pub poller: Poller,
    /// Where every sweep is recorded (the debug view).
    pub view: FleetView,
    /// Where the desired status goes (the write queue in a cluster).
    pub sink: Arc<dyn StatusSink>,
    /// The time of the samples and the verdicts.
    pub clock: Arc<dyn Clock>,
}

/// What a caller adds around a sweep.
pub trait SweepWatch {
    /// Runs the fold-and-judge step; runs it as is unless overridden
    /// (`fleet-load` times it on the thread's CPU clock).
    fn step(&mut self, step: &mut dyn FnMut()) {
        step();
    }

    /// Runs `end` (record the sweep in the view, publish it) when the
    /// sweep's result is still wanted, and says whether it ran. The
    /// instance task runs it under the lock its supervisor takes to stop
    /// it, so a stopped task records and publishes nothing after its stop
    /// (its write slot forgotten, its view entry dropped).
    fn finish(&mut self, end: &mut dyn FnMut()) -> bool {
        end();
        true
    }
}

/// What one sweep produced (`None` from [`sweep`] when its result was no
/// longer wanted ([`SweepWatch::finish`]), and nothing was recorded or
/// published).
#[derive(Debug)]
pub struct Swept {
    /// Every sample folded: the polled pods' and one failed sample per
    /// pod without an address.
    pub samples: Vec<PodSample>,
}

/// One sweep of `target` with its `engine`: applies the instance's
/// gate-config annotation, polls the pods with an address, folds and
/// judges every sample at the clock's now, counts the sweep's duration and
/// new counter resets, then (through [`SweepWatch::finish`], when still
/// wanted) records the sweep in the view and publishes the desired status.
pub async fn sweep(
    ends: &SweepEnds,
    target: &InstanceTarget,
    engine: &mut InstanceEngine,
    watch: &mut impl SweepWatch,
) -> Option<Swept> {
    let key = target.key();
    if let Some(change) = engine.set_gate_annotation(target.gate_config.as_deref()) {
        report_annotation(&key, &change);
    }
    let started = Instant::now();
    let resets_seen = engine.health().map_or(0, |h| h.counter_resets);
    // A suspended instance has no pods to poll (Kura scaled it to zero;
    // any pod still listed is on its way out). A node-local instance's pod
    // IPs cannot be routed to: its pods are reached through the API
    // server's port-forward instead.
    let mut samples: Vec<PodSample> = if target.traits.suspended {
        Vec::new()
    } else if target.node_local_network {
        let pollable = target.pollable();
        (ends.poller)
            .poll_pods_port_forward(&target.info.namespace, &pollable)
            .await
    } else {
        ends.poller.poll_pods(&target.pollable()).await
    };
    for s in &mut samples {
        s.received_at = ends.clock.map_real(s.received_at);
    }
    let now = ends.clock.now();
    if !target.traits.suspended {
        samples.extend(target.unreachable_samples(now));
    }
    let mut judged = None;
    watch.step(&mut || {
        judged = Some(engine.step_with(
            &target.info,
            &target.traits,
            &target.spec_image,
            &samples,
            now,
        ));
    });
    // The step above always runs (a `SweepWatch` only times it).
    let Judged {
        health,
        gate,
        converged,
        limits,
        shadow,
    } = judged?;
    metrics::histogram!(telemetry::SWEEP_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
    if health.counter_resets > resets_seen {
        metrics::counter!(telemetry::COUNTER_RESETS_TOTAL)
            .increment(health.counter_resets - resets_seen);
    }
    let desired = DesiredStatus { health, gate };
    let pod_names: Vec<String> = target
        .pods
        .iter()
        .map(|p| p.identity.name.to_string())
        .collect();
    let mut desired = Some(desired);
    let mut shadow = shadow;
    let finished = watch.finish(&mut || {
        let Some(desired) = desired.take() else {
            return;
        };
        ends.view.record_sweep_with_shadow(
            &key,
            SweepRecord {
                spec_image: &target.spec_image,
                current_pods: &pod_names,
                samples: &samples,
                health: Some(Arc::clone(&desired.health)),
                gate: Some(Arc::clone(&desired.gate)),
                notes: target.notes(),
                limits: Some(limits),
                at: now,
            },
            // Shown beside the live verdict, never published: the sink
            // gets `desired` alone.
            shadow.take(),
        );
        ends.view.record_tick(
            &key,
            &TickRecord {
                config: engine.gate_config(),
                health: &desired.health,
                gate: &desired.gate,
                converged,
                now,
            },
        );
        ends.sink.publish(&key, desired, now);
    });
    if !finished {
        return None;
    }
    Some(Swept { samples })
}

/// Says what became of an instance's gate-config annotation: a refused
/// one is logged as a warning and counted (once per distinct text), so it
/// is never silently ignored; `rolloutGate.configError` says it too.
fn report_annotation(key: &InstanceKey, change: &AnnotationChange) {
    match change {
        AnnotationChange::Applied => tracing::info!(namespace = %key.namespace,
            instance = %key.name, "the instance's gate-config annotation applies"),
        AnnotationChange::Removed => tracing::info!(namespace = %key.namespace,
            instance = %key.name, "gate-config annotation removed: the cluster's gate config applies"),
        AnnotationChange::Refused(reason) => {
            metrics::counter!(telemetry::GATE_CONFIG_REFUSED_TOTAL).increment(1);
            tracing::warn!(namespace = %key.namespace, instance = %key.name, %reason,
                "invalid gate-config annotation");
        }
    }
}
