//! A stand-in for Kura's own controller (`--controller-stand-in`, companion
//! runs only): every instance's status rewritten the way Kura's controller
//! does it since mid-2026 (rollout-health.md, "Where the agent publishes"):
//! a full status update (`PUT .../kurainstances/<name>/status`) on each
//! reconcile, every `every` (30 s) per instance, the instances spread
//! evenly over that period, carrying its twelve-field
//! `status.rolloutHealth`, `lastReconciledAt` and `observedGeneration`
//! beside the status it found. So the agent's instance watch sees an
//! update of every instance every 30 s, as it would beside Kura's
//! controller.
//!
//! Like a controller it works from its own copy of each object: one list
//! at the start, then each update's answer; a conflict (the instance
//! changed since: the rollout's new `spec.image`) reads the instance again
//! and updates once more. Its requests are the admin's, not in the
//! agent's audit figures.

use crate::cluster_load::error::ClusterLoadError;
use crate::cluster_load::objects::instance_name;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinHandle;

/// Updates in flight at most (a slow API server delays the schedule
/// rather than piling requests up).
const IN_FLIGHT: usize = 64;

/// What the stand-in did.
#[derive(Debug, Default)]
struct Counts {
    updates: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
}

/// The stand-in's counters at one moment.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ControllerCounts {
    /// Full status updates that succeeded.
    pub updates: u64,
    /// Updates refused for a stale `resourceVersion` (then read again and
    /// retried once).
    pub conflicts: u64,
    /// Updates that failed otherwise (or again after a conflict).
    pub errors: u64,
}

/// The running stand-in.
pub struct ControllerStandIn {
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

impl ControllerStandIn {
    /// List the `n` instances, then update instance `i mod n` every
    /// `every / n` until stopped.
    pub async fn start(
        api: Api<DynamicObject>,
        n: usize,
        pods_per_instance: usize,
        every: Duration,
    ) -> Result<ControllerStandIn, ClusterLoadError> {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(ClusterLoadError::api(
                "list the instances (controller stand-in)",
            ))?;
        let mut by_name: HashMap<String, DynamicObject> = list
            .items
            .into_iter()
            .filter_map(|o| Some((o.metadata.name.clone()?, o)))
            .collect();
        let objects: Arc<Vec<Mutex<Option<DynamicObject>>>> = Arc::new(
            (0..n)
                .map(|i| Mutex::new(by_name.remove(&instance_name(i))))
                .collect(),
        );
        let counts = Arc::new(Counts::default());
        let period = every
            .checked_div(u32::try_from(n.max(1)).unwrap_or(u32::MAX))
            .unwrap_or(every)
            .max(Duration::from_micros(100));
        let task = {
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let permits = Arc::new(Semaphore::new(IN_FLIGHT));
                let mut tick = tokio::time::interval(period);
                let mut i = 0usize;
                loop {
                    tick.tick().await;
                    let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                        return;
                    };
                    let (api, objects, counts) =
                        (api.clone(), Arc::clone(&objects), Arc::clone(&counts));
                    let index = i % n.max(1);
                    tokio::spawn(async move {
                        reconcile(&api, &objects[index], index, pods_per_instance, &counts).await;
                        drop(permit);
                    });
                    i = i.wrapping_add(1);
                }
            })
        };
        Ok(ControllerStandIn { counts, task })
    }

    /// The counters now.
    pub fn counts(&self) -> ControllerCounts {
        ControllerCounts {
            updates: self.counts.updates.load(Ordering::Relaxed),
            conflicts: self.counts.conflicts.load(Ordering::Relaxed),
            errors: self.counts.errors.load(Ordering::Relaxed),
        }
    }

    /// Stop updating (updates in flight finish on their own).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for ControllerStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One reconcile of instance `index`: its status with the controller's
/// twelve fields, written by a full status update from the copy held; on
/// a conflict, read again and written once more.
async fn reconcile(
    api: &Api<DynamicObject>,
    slot: &Mutex<Option<DynamicObject>>,
    index: usize,
    pods_per_instance: usize,
    counts: &Counts,
) {
    let mut held = slot.lock().await;
    let name = instance_name(index);
    for attempt in 0..2 {
        let mut obj = match held.take() {
            Some(o) => o,
            None => match api.get(&name).await {
                Ok(o) => o,
                Err(_) => {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            },
        };
        with_controller_status(&mut obj, pods_per_instance, Timestamp::now());
        match api
            .replace_status(&name, &PostParams::default(), &obj)
            .await
        {
            Ok(updated) => {
                counts.updates.fetch_add(1, Ordering::Relaxed);
                *held = Some(updated);
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                counts.conflicts.fetch_add(1, Ordering::Relaxed);
                // Read again on the next attempt.
            }
            Err(_) => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// `obj`'s status as Kura's controller writes it: what it holds, plus
/// `rolloutHealth` (its twelve fields, every pod sampled and healthy),
/// `lastReconciledAt` and `observedGeneration`.
pub fn with_controller_status(obj: &mut DynamicObject, pods: usize, now: Timestamp) {
    let generation = obj.metadata.generation.unwrap_or(1);
    let at = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let mut status = obj.data.get("status").cloned().unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    status["rolloutHealth"] = json!({
        "ready": true,
        "serving": true,
        "ringConsistent": true,
        "backfillingPeers": 0,
        "backfillDegraded": false,
        "backfillBudgetExhaustedPeers": 0,
        "fdTimeoutCount": 0,
        "peerConnectionFailures": 0,
        "memoryPressureState": 0,
        "sampledPods": pods,
        "expectedPods": pods,
        "sampledAt": at.to_string(),
    });
    status["lastReconciledAt"] = json!(at.to_string());
    status["observedGeneration"] = json!(generation);
    obj.data["status"] = status;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ApiResource;

    #[test]
    fn the_controller_status_keeps_what_it_found_and_adds_its_twelve_fields() {
        let resource = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("kura.tuist.dev", "v1alpha1", "KuraInstance"),
            "kurainstances",
        );
        let mut obj = DynamicObject::new("kura-00001", &resource).data(json!({
            "spec": {"image": "x"},
            "status": {"phase": "Running", "readyReplicas": 3}
        }));
        obj.metadata.generation = Some(4);
        with_controller_status(&mut obj, 3, Timestamp::UNIX_EPOCH);
        let status = &obj.data["status"];
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["readyReplicas"], 3);
        assert_eq!(status["observedGeneration"], 4);
        let health = status["rolloutHealth"].as_object().expect("rolloutHealth");
        assert_eq!(health.len(), 12, "{health:?}");
        assert_eq!(health["expectedPods"], 3);
        assert_eq!(health["sampledAt"], "1970-01-01T00:00:00Z");
    }
}
