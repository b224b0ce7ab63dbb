//! The simulated fleet as the poller sees it: kura-sim knows nothing of
//! the agent, so the tests turn its pods into poll targets here.

use std::net::SocketAddr;

use kura_agent::model::PodIdentity;
use kura_sim::{SimPodHandle, Simulator};

/// A simulated pod as discovery would see it: name, UID, restart count,
/// IP (no image).
pub trait PodIdentityOf {
    /// The pod's identity.
    fn identity(&self) -> PodIdentity;
}

impl PodIdentityOf for SimPodHandle {
    fn identity(&self) -> PodIdentity {
        PodIdentity {
            name: self.name().into(),
            uid: self.uid().into(),
            restart_count: self.restarts(),
            image: None,
            ip: Some(self.addr().ip().to_string().into()),
        }
    }
}

/// Every pod of a simulator as a poll target, in start order.
pub trait PollTargets {
    /// Identity and address of every pod.
    fn targets(&self) -> Vec<(std::sync::Arc<PodIdentity>, SocketAddr)>;
}

impl PollTargets for Simulator {
    fn targets(&self) -> Vec<(std::sync::Arc<PodIdentity>, SocketAddr)> {
        self.pods()
            .iter()
            .map(|p| (std::sync::Arc::new(p.identity()), p.addr()))
            .collect()
    }
}
