//! Shared types of the Kura rollout-health agent and gate, and their
//! machine-readable forms:
//!
//! - [`report`]: the node report of `GET /status/rollout` in every generation,
//!   and its one strict parser;
//! - [`cluster`]: the body of `GET /status/cluster` on pull-sync nodes (the
//!   replication lag), and its parser;
//! - [`health`]: `status.rolloutHealth`, the per-instance aggregate;
//! - [`gate_status`]: `status.rolloutGate`, signals and evidence;
//! - [`instance`]: the `KuraInstance` custom resource and the agent's
//!   condition types;
//! - [`verdict`]: the verdict document of the agent's
//!   `/api/v1/instances/{namespace}/{name}/verdict`;
//! - [`generated`]: the CRD YAML and JSON Schemas written by `crdgen`;
//! - [`api_int`]: the int64 ceiling of what the API server stores;
//! - [`strict_json`]: JSON read with repeated keys refused, for every
//!   document read from a file;
//! - [`text`]: text cut to a byte bound at a character boundary.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod api_int;
pub mod cluster;
pub mod companion;
pub mod gate_status;
pub mod generated;
pub mod health;
pub mod instance;
mod lenient_authority;
pub mod report;
pub mod signal;
pub mod strict_json;
pub mod text;
pub mod timeline;
pub mod verdict;

pub use cluster::{
    CLUSTER_PATH, ClusterError, ClusterStatus, parse_cluster_lag_limited, parse_cluster_status,
    parse_cluster_status_limited,
};
pub use companion::{
    COMPANION_API_VERSION, COMPANION_CRD_NAME, COMPANION_GROUP, COMPANION_KIND, KuraInstanceHealth,
    KuraInstanceHealthSpec, KuraInstanceHealthStatus,
};
pub use gate_status::{
    AgentVerdict, BacklogRun, BacklogRunEvidence, BacklogRuns, BaselineCounters, Evidence,
    FenceEvidence, RolloutGate, Signal,
};
pub use health::{
    PodFence, PodHealth, RetiredCounters, RolloutHealth, ServingAuthorityHealth, UpdatePaused,
    fence_phase_rank,
};
pub use instance::{
    AGENT_CONDITION_TYPES, KSTATUS_CONDITION_TYPES, KuraInstance, KuraInstanceSpec,
    KuraInstanceStatus, RECONCILING, ROLLOUT_HARD_STOPPED, ROLLOUT_HEALTHY, STALLED,
};
pub use report::{
    NodeReport, NodeState, REPORT_PATH, ReportError, parse_report, parse_report_limited,
};
pub use signal::{EvidenceField, SIGNALS, SignalFacts};
pub use timeline::{
    InstanceTimeline, MAX_TIMELINE_TICKS, TimelineBaseline, TimelineConfig, TimelineDeployment,
    TimelineHealth, TimelineInstance, TimelinePublished, TimelineServer, TimelineServerStatus,
    TimelineTick, TimelineWindow,
};
pub use verdict::{
    ConditionStatus, INSTANCE_VERDICT_SCHEMA_VERSION, InstanceVerdict, ShadowConfigSource,
    ShadowVerdict, VerdictCondition, VerdictSource,
};
