//! What one poll of one pod produced: the unit that flows from the poller
//! (or the simulator, or an offline file) into the aggregation.

use jiff::Timestamp;
use kura_schemas::NodeReport;
use std::sync::Arc;

/// The instance a sweep ran against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    /// Namespace of the `KuraInstance`.
    pub namespace: String,
    /// Name of the `KuraInstance`.
    pub name: String,
    /// `spec.replicas`.
    pub expected_pods: u32,
    /// `metadata.generation`.
    pub generation: i64,
}

/// A pod as discovery sees it (never as a report claims it). Held as
/// `Arc<PodIdentity>` from the watch's store through the targets, the
/// samples and the fleet view: one allocation per pod, not a copy of its
/// strings in each. Its texts are shared too (`Arc<str>`): the pod's
/// entry in the published aggregate ([`kura_schemas::PodHealth`]) holds
/// the same name, UID, image and IP, not copies.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodIdentity {
    /// Pod name: the key of the per-pod counter state.
    pub name: Arc<str>,
    /// Pod UID.
    pub uid: Arc<str>,
    /// The Kura container's restart count.
    pub restart_count: u32,
    /// The Kura container's image.
    pub image: Option<Arc<str>>,
    /// The pod IP, when it has one.
    pub ip: Option<Arc<str>>,
}

/// The outcome of one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleResult {
    /// A valid report.
    Report(Box<NodeReport>),
    /// A failed sample with a short reason (timeout, refused, HTTP 500, an
    /// invalid report, `pod identity mismatch`, ...).
    Error(String),
}

/// One pod's sample in one sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSample {
    /// The pod polled.
    pub pod: Arc<PodIdentity>,
    /// When the answer (or the failure) was received.
    pub received_at: Timestamp,
    /// What came back.
    pub result: SampleResult,
    /// The pod's replication lag from `GET /status/cluster` (the sum of its
    /// `replica` links' `lag_entries`), read only from pull-sync pods (a
    /// valid report without `outbox_messages`); `None` when not asked, when
    /// the route answered 404, or when the sample failed. Absent is never 0.
    pub replication_lag_entries: Option<u64>,
}
