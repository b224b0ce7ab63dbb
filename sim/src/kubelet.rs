//! A simulated kubelet: the one way to reach the pods of a node-local
//! instance (`spec.nodeLocalNetwork`), whose pod IPs cannot be routed to.
//! In a cluster the API server's pod port-forward ends at the pod's
//! kubelet, which connects to the port inside the pod's network
//! namespace. Here the kubelet maps a pod's name and port to the loopback
//! address the simulated pod listens on, an address its caller is not
//! told otherwise (the targets carry an unroutable pod IP instead).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::SimPodHandle;

/// A kubelet of the node that runs some simulated pods. Cheap to clone:
/// clones share the pods and the count of port-forwards.
#[derive(Debug, Clone)]
pub struct SimKubelet {
    pods: Arc<Vec<SimPodHandle>>,
    forwards: Arc<AtomicU64>,
}

impl SimKubelet {
    /// The kubelet of a node running `pods`.
    pub fn new(pods: Vec<SimPodHandle>) -> SimKubelet {
        SimKubelet {
            pods: Arc::new(pods),
            forwards: Arc::default(),
        }
    }

    /// Where a port-forward to `port` of the pod named `pod` connects:
    /// `port` on the pod's own address (inside its network namespace,
    /// whether something listens there or not, as a kubelet does); `None`
    /// when this node runs no such pod. Each answer counts as one
    /// port-forward ([`SimKubelet::forwards`]).
    pub fn forward_addr(&self, pod: &str, port: u16) -> Option<SocketAddr> {
        let found = self.pods.iter().find(|p| p.name() == pod)?;
        self.forwards.fetch_add(1, Ordering::Relaxed);
        Some(SocketAddr::new(found.addr().ip(), port))
    }

    /// Port-forwards this kubelet answered so far.
    pub fn forwards(&self) -> u64 {
        self.forwards.load(Ordering::Relaxed)
    }

    /// The names of the pods on this node.
    pub fn pod_names(&self) -> impl Iterator<Item = &str> {
        self.pods.iter().map(SimPodHandle::name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Addressing, SimPodSpec, Simulator};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr) -> std::io::Result<String> {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                b"GET /status/rollout HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            )
            .await?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_kubelet_forwards_to_its_own_pods_only_and_counts_the_forwards() {
        let specs = ["local-0", "local-1", "routed-0"]
            .into_iter()
            .map(SimPodSpec::new)
            .collect();
        let sim = Simulator::start(specs, &Addressing::default())
            .await
            .expect("a fleet");
        let kubelet = sim.kubelet(["local-0", "local-1", "nowhere-0"]);
        assert_eq!(
            kubelet.pod_names().collect::<Vec<_>>(),
            ["local-0", "local-1"]
        );
        let port = sim.pods()[0].addr().port();
        let addr = kubelet.forward_addr("local-1", port).expect("its pod");
        assert_eq!(addr, sim.pods()[1].addr());
        let answer = get(addr).await.expect("the pod answers");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"ready\":true"), "{answer}");
        assert_eq!(kubelet.forwards(), 1);
        assert_eq!(kubelet.forward_addr("routed-0", port), None, "not its pod");
        assert_eq!(kubelet.forward_addr("nowhere-0", port), None);
        assert_eq!(kubelet.forwards(), 1, "only answered forwards count");
        // Another port of its pod: the address, where nothing listens.
        let other = kubelet.forward_addr("local-0", 1).expect("its pod");
        assert_eq!(other, SocketAddr::new(sim.pods()[0].addr().ip(), 1));
    }

    #[tokio::test]
    async fn a_suspended_pod_stops_and_returns_as_a_new_empty_process() {
        let mut spec = SimPodSpec::new("sleepy-0");
        spec.node.fd_timeout_count = 7;
        let sim = Simulator::start(vec![spec], &Addressing::default())
            .await
            .expect("a fleet");
        let pod = sim.pods()[0].clone();
        let before = pod.node();
        pod.suspend().await;
        assert!(get(pod.addr()).await.is_err(), "scaled to zero: refused");
        let after = pod.node();
        assert_eq!(after.fd_timeout_count, 0);
        assert_eq!(after.incarnation, before.incarnation + 1);
        assert_eq!(after.backfill_initial_cycle, "pending", "starts empty");
        assert_eq!(pod.restarts(), 0, "not a restart: a new pod");
        pod.listen().await.expect("back");
        let answer = get(pod.addr()).await.expect("it answers again");
        assert!(
            answer.contains("\"backfill_initial_cycle\":\"pending\""),
            "{answer}"
        );
    }
}
