//! The Kubernetes edges of the agent: discovery of `KuraInstance`s and their
//! pods ([`discovery`]), the write scheduler ([`write_queue`], pure) and the
//! status writer ([`status`], server-side apply on the `status`
//! subresource).
//!
//! Paths to the `kube` crate are written `::kube::...` in this module tree,
//! to keep them apart from this module's own name.

pub mod discovery;
pub mod status;
pub mod write_queue;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Namespace and name of a `KuraInstance`: the key of every per-instance
/// map (debug view, write queue, aggregator state).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl InstanceKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a sweep's instance.
    pub fn of(info: &crate::sample::InstanceInfo) -> Self {
        Self::new(info.namespace.clone(), info.name.clone())
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
