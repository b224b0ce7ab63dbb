//! The poller's settings and how a pod's report port is chosen.

use k8s_openapi::api::core::v1::Container;
use std::time::Duration;

/// The port the Kura chart serves HTTP on.
pub const DEFAULT_PORT: u16 = 4000;

/// Where a pod serves its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodPort {
    /// A fixed port number.
    Number(u16),
    /// A named container port, looked up in the pod's containers.
    Named(String),
}

impl Default for PodPort {
    fn default() -> Self {
        PodPort::Number(DEFAULT_PORT)
    }
}

impl PodPort {
    /// The port number for a pod with these containers: the number itself,
    /// or the first container port with this name (`None` if there is none).
    pub fn resolve(&self, containers: &[Container]) -> Option<u16> {
        match self {
            PodPort::Number(n) => Some(*n),
            PodPort::Named(name) => containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok()),
        }
    }
}

/// Poller settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollConfig {
    /// Most requests in flight at once, over every instance (default 64).
    pub concurrency: usize,
    /// Limit on one attempt, connect to last body byte (default 2 s). The
    /// TCP connect alone gets half of it, so a connect timeout (retried) is
    /// told apart from a pod that accepted and never answered (not retried).
    pub timeout: Duration,
    /// Largest report body accepted, in bytes (default 64 KiB).
    pub body_limit: usize,
    /// Extra attempts after a connection-level failure (default 1).
    pub retries: usize,
    /// Delay before the first retry; doubles with each further one (default
    /// 100 ms).
    pub retry_delay: Duration,
    /// Where pods serve their report (default port 4000).
    pub port: PodPort,
    /// Keep one idle connection per pod between sweeps (default true).
    /// Saves a TCP handshake per poll; an idle connection costs its socket
    /// and nothing more (no task, no buffer). Without it every poll opens
    /// and closes its own connection.
    pub keep_alive: bool,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            concurrency: 64,
            timeout: Duration::from_secs(2),
            body_limit: kura_schemas::report::DEFAULT_BODY_LIMIT,
            retries: 1,
            retry_delay: Duration::from_millis(100),
            port: PodPort::default(),
            keep_alive: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    #[test]
    fn named_port_is_looked_up_in_the_containers() {
        let c = Container {
            ports: Some(vec![
                ContainerPort {
                    name: Some("grpc".into()),
                    container_port: 5000,
                    ..Default::default()
                },
                ContainerPort {
                    name: Some("http".into()),
                    container_port: 4100,
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(
            PodPort::Named("http".into()).resolve(std::slice::from_ref(&c)),
            Some(4100)
        );
        assert_eq!(
            PodPort::Named("admin".into()).resolve(std::slice::from_ref(&c)),
            None
        );
        assert_eq!(PodPort::default().resolve(&[c]), Some(4000));
    }
}
