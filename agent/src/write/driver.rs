//! The write loop: [`WriteHandle`] is the run loop's
//! [`StatusSink`] (push the latest desired status, forget an instance) and
//! [`run_writes`] drains the [queue](super::queue) through the
//! [`StatusWriter`], at most so many writes in flight, reporting every
//! result through a callback with the [`Transition`]s the write made
//! (`kura-agent run` hands the result to the fleet view and the
//! transitions to the Events adapter).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use jiff::Timestamp;
use tokio::sync::Notify;

use super::apply::{StatusWriter, WriteError, WriteOutcome, write_record};
use super::queue::{JobResult, WriteJob, WriteQueue};
use super::transitions::{WriteChange, transitions};
use crate::model::{
    DesiredStatus, InstanceKey, InstanceTarget, InstanceTransitions, LastWrite, StatusSink,
    Transition, WriteRecord,
};
use crate::telemetry;

/// The run loop's handle on the write queue: push desired statuses, forget
/// instances. Cheap to clone.
#[derive(Clone)]
pub struct WriteHandle {
    queue: Arc<Mutex<WriteQueue>>,
    notify: Arc<Notify>,
}

impl WriteHandle {
    /// A handle on `queue`.
    pub fn new(queue: WriteQueue) -> Self {
        Self {
            queue: Arc::new(Mutex::new(queue)),
            notify: Arc::new(Notify::new()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut WriteQueue) -> R) -> R {
        let mut guard = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Records the latest desired status of an instance.
    pub fn push(&self, key: InstanceKey, desired: DesiredStatus, now: Timestamp) {
        self.with(|q| q.push(key, desired, now));
        self.notify.notify_one();
    }

    /// Seeds the status and the agent's conditions read back from the
    /// cluster at start-up.
    pub fn seed_written(
        &self,
        key: InstanceKey,
        written: DesiredStatus,
        conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
        written_at: Timestamp,
    ) {
        self.with(|q| q.seed_written(key, written, conditions, written_at));
    }

    /// Forgets an instance.
    pub fn remove(&self, key: &InstanceKey) {
        self.with(|q| q.remove(key));
    }

    /// Instances with writes pending.
    pub fn pending(&self) -> usize {
        self.with(|q| q.pending())
    }
}

/// Longest sleep of the write loop when nothing is scheduled.
const IDLE_WAIT: Duration = Duration::from_secs(5);
/// Shortest sleep of the write loop (no spinning on rounding).
const MIN_WAIT: Duration = Duration::from_millis(5);

/// What one finished write reports.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteReport {
    /// The result, as the fleet view keeps it.
    pub write: LastWrite,
    /// The transitions it made (often none), for Events.
    pub transitions: InstanceTransitions,
}

/// The API latency the write loop's concurrency allows for at the
/// queue's full rate: with writes taking this long on average, enough are
/// in flight to keep the rate (at 222 writes/s, 56 at once).
pub const WRITE_LATENCY_ALLOWANCE: Duration = Duration::from_millis(250);
/// Never more writes at once than this, whatever the rate.
pub const MAX_IN_FLIGHT_CEILING: usize = 64;

/// Writes in flight at once for the queue's `rate` (writes a second):
/// enough that a write taking [`WRITE_LATENCY_ALLOWANCE`] does not hold
/// the rate back, at least `floor`, at most [`MAX_IN_FLIGHT_CEILING`].
/// A fixed bound capped a large fleet's writes below what its heartbeat
/// needs whenever the API server answered slowly: each status was then
/// refreshed less often than the heartbeat promises.
pub fn in_flight_for(rate: f64, floor: usize) -> usize {
    let needed = (rate.max(0.0) * WRITE_LATENCY_ALLOWANCE.as_secs_f64()).ceil();
    let needed = if needed.is_finite() && needed < MAX_IN_FLIGHT_CEILING as f64 {
        needed as usize
    } else {
        MAX_IN_FLIGHT_CEILING
    };
    needed
        .max(floor.max(1))
        .min(MAX_IN_FLIGHT_CEILING.max(floor))
}

/// Drains the queue forever: up to [`in_flight_for`] the queue's rate
/// writes at once (`min_in_flight` at least), each result recorded in the
/// queue and the metrics, and handed to `report` with the instance it was
/// for and the transitions it made.
pub async fn run_writes(
    handle: WriteHandle,
    writer: StatusWriter,
    min_in_flight: usize,
    mut report: impl FnMut(&InstanceKey, WriteReport) + Send,
) {
    let mut in_flight = FuturesUnordered::new();
    loop {
        let now = Timestamp::now();
        let max_in_flight = in_flight_for(handle.with(|q| q.rate()), min_in_flight);
        while in_flight.len() < max_in_flight {
            let Some(job) = handle.with(|q| q.next(now)) else {
                break;
            };
            let writer = writer.clone();
            in_flight.push(async move {
                let (result, uid) = writer
                    .write_returning_uid(&job.key, &job.status, &job.conditions)
                    .await;
                (job, result, uid)
            });
        }
        let at_cap = in_flight.len() >= max_in_flight;
        let wait = handle
            .with(|q| q.next_wakeup(now))
            .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
            .unwrap_or(IDLE_WAIT)
            .clamp(MIN_WAIT, IDLE_WAIT);
        metrics::gauge!(telemetry::PENDING_WRITES).set(handle.pending() as f64);
        tokio::select! {
            Some((job, result, uid)) = in_flight.next(), if !in_flight.is_empty() => {
                let report_of_job = finish(&handle, &job, &result, uid);
                report(&job.key, report_of_job);
            }
            () = handle.notify.notified() => {}
            () = tokio::time::sleep(wait), if !at_cap => {}
        }
    }
}

/// Records a job's result in the queue; returns it as the report sees it,
/// with the transitions the write made.
fn finish(
    handle: &WriteHandle,
    job: &WriteJob,
    result: &Result<WriteOutcome, WriteError>,
    uid: Option<String>,
) -> WriteReport {
    let now = Timestamp::now();
    let job_result = match result {
        Ok(_) => JobResult::Accepted,
        Err(e) => e.job_result(),
    };
    let record = write_record(result);
    let answered = result.is_ok() || matches!(record, WriteRecord::Pruned { .. });
    let (uid, pruned_before, previous) = handle.with(|q| {
        let (uid, pruned_before) = if answered {
            q.note_answer(&job.key, uid, matches!(record, WriteRecord::Pruned { .. }))
        } else {
            q.note_answer_unchanged(&job.key)
        };
        (uid, pruned_before, q.complete(job, job_result, now))
    });
    let found: Vec<Transition> = match &previous {
        Some(previous) => transitions(&WriteChange {
            before: previous.status.as_ref(),
            conditions_before: &previous.conditions,
            pruned_before,
            sent: &job.status,
            conditions_sent: &job.conditions,
            record: &record,
        }),
        None => Vec::new(),
    };
    WriteReport {
        write: LastWrite {
            at: now,
            attempt: job.attempt,
            priority: job.priority,
            result: record,
        },
        transitions: InstanceTransitions {
            key: job.key.clone(),
            uid,
            transitions: found,
        },
    }
}

impl StatusSink for WriteHandle {
    fn seed(&self, target: &InstanceTarget) {
        match target.previous_written() {
            Some((written, at)) => {
                self.seed_written(target.key(), written, target.previous_conditions(), at);
            }
            None => self.with(|q| q.track(target.key(), Timestamp::now())),
        }
    }
    fn publish(&self, key: &InstanceKey, desired: DesiredStatus, now: Timestamp) {
        self.push(key.clone(), desired, now);
    }
    fn forget(&self, key: &InstanceKey) {
        self.remove(key);
    }
    fn fleet_size(&self, instances: usize) {
        let heartbeat = self.with(|q| {
            q.set_fleet_size(instances, Timestamp::now());
            q.heartbeat()
        });
        metrics::gauge!(telemetry::STATUS_HEARTBEAT_SECONDS).set(heartbeat.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_flight_follow_the_rate_between_the_floor_and_the_ceiling() {
        // 50/s (the floor rate): 13 at once for 250 ms writes.
        assert_eq!(in_flight_for(50.0, 8), 13);
        // 3,334 instances, 30 s heartbeat: 222/s.
        assert_eq!(in_flight_for(222.3, 8), 56);
        assert_eq!(in_flight_for(10.0, 8), 8, "never below the floor");
        assert_eq!(in_flight_for(10_000.0, 8), MAX_IN_FLIGHT_CEILING);
        assert_eq!(in_flight_for(f64::INFINITY, 8), MAX_IN_FLIGHT_CEILING);
        assert_eq!(in_flight_for(f64::NAN, 8), 8);
        assert_eq!(in_flight_for(0.0, 0), 1, "at least one");
        assert_eq!(
            in_flight_for(1.0, 100),
            100,
            "a floor above the ceiling wins"
        );
    }
}
