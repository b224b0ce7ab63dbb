//! Polling a node-local instance's pods (`spec.nodeLocalNetwork`) through
//! the API server's pod port-forward (`pods/portforward`, kube's websocket
//! client): their pod IPs cannot be routed to, so each poll opens a stream
//! API server → the pod's kubelet → the pod's status port, as Kura's own
//! controller reads them. The requests on it are the IP path's
//! ([`Client::get_on`]: same framing rules, body limit and parsers, each
//! request within the poll timeout); `/status/cluster` of a pull-sync pod
//! goes on the same stream. Nothing is kept between sweeps: the stream is
//! closed after the poll.
//!
//! At most [`PollConfig::port_forward_streams`] port-forwards are open at
//! once (a semaphore of their own: each is a websocket to the API server
//! and a stream through a kubelet). A port-forward that fails (an API
//! error such as 403, the kubelet's error message, a timeout, a stream
//! that closes before an answer) is [`PollError::PortForward`]; it is not
//! retried within the sweep.
//!
//! Without an API server (the `demo`, the tests) a [`PortForwardRelay`]
//! stands in for it and the pods' kubelets: it names the local address
//! that reaches a pod's port, the poller connects there and bridges the
//! connection into the same kind of stream a port-forward gives
//! ([`tokio::io::duplex`]), so everything above the stream is the same:
//! the bound on open streams, the timeouts, the body limit, the parsers
//! and the failures named `port-forward:`. The pod IP is not used on
//! either way.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::Portforwarder;
use tokio::io::DuplexStream;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, SemaphorePermit, oneshot};
use tokio::task::JoinHandle;

use crate::poll::client::{Client, MAX_HEAD};
use crate::poll::{PollConfig, PollError};

/// How long a finished port-forward is given to close cleanly (websocket
/// Close frames exchanged) before its task is stopped.
const CLOSE_GRACE: Duration = Duration::from_millis(500);
/// How long a stream that ended without an answer waits for the kubelet's
/// error message (sent just before the stream closes).
const ERROR_WAIT: Duration = Duration::from_millis(250);
/// Longest error detail kept (an API server's message can be long).
const MAX_DETAIL: usize = 256;

/// Buffer of a relayed stream's bridge, each way.
const BRIDGE_BUFFER: usize = MAX_HEAD;

type ErrorMessage = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// A stand-in for the API server's port-forward and the pods' kubelets,
/// where there is no cluster (the `demo`'s simulated kubelet, tests): it
/// names the local address a connection to a pod's port goes to. The
/// poller connects there and polls exactly as through a port-forward
/// ([`crate::poll::Poller::with_port_forward_relay`]).
pub trait PortForwardRelay: Send + Sync + std::fmt::Debug {
    /// The address that reaches `port` of pod `namespace/pod`; `None`:
    /// there is no such pod (a failed port-forward, as the API server's
    /// 404).
    fn resolve(&self, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr>;
}

/// How port-forwards are opened.
enum Opener {
    /// Through the API server (`pods/portforward`).
    Api(kube::Client),
    /// Through a [`PortForwardRelay`]: a local connection, bridged.
    Relay(Arc<dyn PortForwardRelay>),
}

/// Opens port-forward streams through the API server (or a
/// [`PortForwardRelay`] standing in for it), at most a bounded number at
/// once.
pub(crate) struct PortForward {
    opener: Opener,
    streams: Semaphore,
}

impl std::fmt::Debug for PortForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let via = match &self.opener {
            Opener::Api(_) => "api_server",
            Opener::Relay(_) => "relay",
        };
        f.debug_struct("PortForward")
            .field("via", &via)
            .field("streams_free", &self.streams.available_permits())
            .finish_non_exhaustive()
    }
}

impl PortForward {
    /// Port-forwards through `client`'s API server, at most `streams` open
    /// at once (0 is taken as 1).
    pub(crate) fn new(client: kube::Client, streams: usize) -> PortForward {
        PortForward {
            opener: Opener::Api(client),
            streams: Semaphore::new(streams.max(1)),
        }
    }

    /// Port-forwards through `relay`, at most `streams` open at once (0 is
    /// taken as 1).
    pub(crate) fn relay(relay: Arc<dyn PortForwardRelay>, streams: usize) -> PortForward {
        PortForward {
            opener: Opener::Relay(relay),
            streams: Semaphore::new(streams.max(1)),
        }
    }

    /// A place among the open streams, held for one poll (`None` only if
    /// the semaphore were closed, which it never is).
    pub(crate) async fn permit(&self) -> Option<SemaphorePermit<'_>> {
        self.streams.acquire().await.ok()
    }

    /// Opens a port-forward to `port` of pod `namespace/pod`.
    pub(crate) async fn open(
        &self,
        namespace: &str,
        pod: &str,
        port: u16,
    ) -> Result<Link, PollError> {
        match &self.opener {
            Opener::Api(client) => open_api(client, namespace, pod, port).await,
            Opener::Relay(relay) => open_relay(relay.as_ref(), namespace, pod, port).await,
        }
    }
}

/// A port-forward through the API server.
async fn open_api(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Result<Link, PollError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut forwarder = api
        .portforward(pod, &[port])
        .await
        .map_err(|e| failed(&api_error(&e)))?;
    let Some(stream) = forwarder.take_stream(port) else {
        forwarder.abort();
        return Err(failed("no stream for the port"));
    };
    let error = forwarder
        .take_error(port)
        .map(|e| Box::pin(e) as ErrorMessage);
    Ok(Link {
        stream: Some(stream),
        error,
        end: End::Forwarder(forwarder),
    })
}

/// A port-forward through `relay`: a connection to the address it names,
/// bridged into a stream by a task of its own (stopped on close). A
/// connection that breaks off is told as the kubelet tells it.
async fn open_relay(
    relay: &dyn PortForwardRelay,
    namespace: &str,
    pod: &str,
    port: u16,
) -> Result<Link, PollError> {
    let Some(addr) = relay.resolve(namespace, pod, port) else {
        return Err(failed(&format!("404 NotFound: pods \"{pod}\" not found")));
    };
    let forwarding = format!("error forwarding port {port} to pod {namespace}/{pod}");
    let mut tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| failed(&format!("{forwarding}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let (stream, mut bridged) = tokio::io::duplex(BRIDGE_BUFFER);
    let (tell, told) = oneshot::channel();
    let bridge = tokio::spawn(async move {
        if let Err(e) = tokio::io::copy_bidirectional(&mut bridged, &mut tcp).await {
            let _ = tell.send(format!("{forwarding}: {e}"));
        }
    });
    Ok(Link {
        stream: Some(stream),
        error: Some(Box::pin(async move { told.await.ok() })),
        end: End::Bridge(bridge),
    })
}

/// One open port-forward to one port of one pod.
pub(crate) struct Link {
    /// The stream, while it may carry a request.
    stream: Option<DuplexStream>,
    /// The kubelet's error message for the port, until it is read.
    error: Option<ErrorMessage>,
    /// What carries the stream.
    end: End,
}

/// What carries a [`Link`]'s stream.
enum End {
    /// kube's port-forward (a websocket to the API server).
    Forwarder(Portforwarder),
    /// A relay's connection, bridged by this task.
    Bridge(JoinHandle<()>),
}

impl Link {
    /// `GET path` on the stream (`Host: host`) within the poll timeout,
    /// the body read by `parse`. A stream that breaks off (before or during
    /// the answer) or an answer that does not come in time is
    /// [`PollError::PortForward`], with the kubelet's message when it sent
    /// one; an answer that came back wrong is the IP path's error.
    pub(crate) async fn get<T>(
        &mut self,
        client: &Client,
        host: &str,
        path: &str,
        config: &PollConfig,
        parse: fn(&Bytes, usize) -> Result<T, PollError>,
    ) -> Result<T, PollError> {
        let Some(stream) = self.stream.take() else {
            return Err(self.failure("stream closed", ERROR_WAIT).await);
        };
        let got = tokio::time::timeout(
            config.timeout,
            client.get_on(stream, host, path, config.body_limit),
        )
        .await;
        match got {
            Ok(Ok((body, stream))) => {
                self.stream = stream;
                parse(&body, config.body_limit)
            }
            // Out of time already: the message only if it is there.
            Err(_) => Err(self.failure("timeout", Duration::ZERO).await),
            Ok(Err(PollError::Closed)) => Err(self
                .failure("stream closed before a response", ERROR_WAIT)
                .await),
            Ok(Err(PollError::Body)) => Err(self
                .failure("stream broke off during the body", ERROR_WAIT)
                .await),
            Ok(Err(e)) => Err(e),
        }
    }

    /// The failure of the port-forward: the kubelet's message if it comes
    /// within `wait`, else `what`.
    async fn failure(&mut self, what: &str, wait: Duration) -> PollError {
        let message = match self.error.take() {
            Some(error) => tokio::time::timeout(wait, error).await.ok().flatten(),
            None => None,
        };
        failed(message.as_deref().unwrap_or(what))
    }

    /// Closes the stream and the port-forward: a clean close (the error
    /// channel ends with it) for at most [`CLOSE_GRACE`], then its task is
    /// stopped. A relay's connection is closed at once (its bridge
    /// stopped: there is nothing to exchange on close).
    pub(crate) async fn close(mut self) {
        drop(self.stream.take());
        match self.end {
            End::Forwarder(forwarder) => {
                if let Some(error) = self.error.take() {
                    let _ = tokio::time::timeout(CLOSE_GRACE, error).await;
                }
                forwarder.abort();
            }
            End::Bridge(bridge) => bridge.abort(),
        }
    }
}

/// A kube error, worded: an API error as `code reason: message`.
fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

/// [`PollError::PortForward`] with `detail`, on one line and bounded.
pub(crate) fn failed(detail: &str) -> PollError {
    let mut text: String = detail
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_DETAIL)
        .collect();
    if detail.trim().chars().count() > MAX_DETAIL {
        text.push('…');
    }
    PollError::PortForward(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_port_forward_on_one_bounded_line() {
        let e = failed("error forwarding port 4000 to pod a-0:\nconnection refused");
        assert_eq!(
            e.to_string(),
            "port-forward: error forwarding port 4000 to pod a-0: connection refused"
        );
        let PollError::PortForward(long) = failed(&"x".repeat(1000)) else {
            panic!("a port-forward error");
        };
        assert_eq!(long.chars().count(), MAX_DETAIL + 1);
    }
}
