//! [`InstanceKey`]: namespace and name of a `KuraInstance`, the key of
//! every per-instance map (fleet view, write queue, loop tasks, ownership).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

use super::sample::InstanceInfo;

/// Namespace and name of a `KuraInstance`: the key of every per-instance
/// map (fleet view, write queue, loop tasks). Its parts are shared
/// (`Arc<str>`): a clone, one per map that keys an instance (the store,
/// its pods' owners, the tasks, the view, the histories, the timelines,
/// the write queue, the Events), costs no allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl InstanceKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a sweep's instance.
    pub fn of(info: &InstanceInfo) -> Self {
        Self::new(info.namespace.as_str(), info.name.as_str())
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
