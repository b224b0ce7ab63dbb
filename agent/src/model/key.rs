//! [`InstanceKey`]: namespace and name of a `KuraInstance`, the key of
//! every per-instance map (fleet view, write queue, loop tasks, ownership).

use serde::{Deserialize, Serialize};
use std::fmt;

use super::sample::InstanceInfo;

/// Namespace and name of a `KuraInstance`: the key of every per-instance
/// map (fleet view, write queue, loop tasks).
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
    pub fn of(info: &InstanceInfo) -> Self {
        Self::new(info.namespace.clone(), info.name.clone())
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
