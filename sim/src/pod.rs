//! One simulated pod: a loopback listener answering `/status/rollout` from
//! the pod's state, and the handle that controls it at run time.

use crate::body::SimBody;
use crate::{Behaviour, SimError, SimNode};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kura_schemas::{CLUSTER_PATH, REPORT_PATH};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Request counters shared by every pod of one simulator, or kept per pod.
#[derive(Debug, Default)]
pub struct SimStats {
    requests: AtomicU64,
    connections: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl SimStats {
    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Connections accepted so far (with keep-alive, a client that reuses
    /// its connections opens about one per pod).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Requests being handled now (from request head received until the
    /// response head is ready; a hung request stays in flight).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The highest [`in_flight`](Self::in_flight) seen since the last
    /// [`reset`](Self::reset).
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::Relaxed)
    }

    /// Zero the request and connection counts and the in-flight
    /// high-water mark.
    pub fn reset(&self) {
        self.requests.store(0, Ordering::Relaxed);
        self.connections.store(0, Ordering::Relaxed);
        self.max_in_flight
            .store(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn accepted(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

struct InFlight(Arc<SimStats>);

/// What all pods of one simulator share.
#[derive(Debug, Default)]
pub(crate) struct Fleet {
    /// Counters over every pod.
    pub(crate) stats: Arc<SimStats>,
    /// Whether connections stay open after an answer (HTTP keep-alive);
    /// applies to connections accepted after a change.
    pub(crate) keep_alive: std::sync::atomic::AtomicBool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The mutable part of a pod.
#[derive(Debug, Clone)]
struct PodState {
    node: SimNode,
    behaviour: Behaviour,
    restarts: u32,
}

#[derive(Debug)]
struct PodShared {
    name: String,
    uid: String,
    addr: SocketAddr,
    state: Mutex<PodState>,
    stats: Arc<SimStats>,
    fleet: Arc<Fleet>,
    body_bytes_sent: Arc<AtomicU64>,
    /// Bumped to close every open connection.
    epoch: watch::Sender<u64>,
    /// The accept loop, while the pod listens.
    listening: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    runtime: tokio::runtime::Handle,
}

/// A cheap, cloneable handle on one simulated pod. Dropping handles does not
/// stop the pod; [`stop`](Self::stop) or dropping the
/// [`Simulator`](crate::Simulator) does.
#[derive(Debug, Clone)]
pub struct SimPodHandle {
    shared: Arc<PodShared>,
}

/// What a simulated pod is when it starts.
#[derive(Debug, Clone)]
pub struct SimPodSpec {
    /// Pod name.
    pub name: String,
    /// Pod UID (what discovery would see).
    pub uid: String,
    /// Initial node state; `pod_uid` and `host` default to the pod's UID and
    /// name.
    pub node: SimNode,
    /// Initial behaviour.
    pub behaviour: Behaviour,
}

impl SimPodSpec {
    /// A healthy G4 pod with UID `uid-<name>`.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        SimPodSpec {
            uid: format!("uid-{name}"),
            name,
            node: SimNode::default(),
            behaviour: Behaviour::Normal,
        }
    }
}

impl SimPodHandle {
    /// Start serving `spec` on an already bound listener.
    pub(crate) async fn start(
        spec: SimPodSpec,
        listener: std::net::TcpListener,
        fleet: Arc<Fleet>,
    ) -> Result<Self, SimError> {
        let addr = listener.local_addr().map_err(SimError::Bind)?;
        let mut node = spec.node;
        node.pod_uid.get_or_insert_with(|| spec.uid.clone());
        node.host.get_or_insert_with(|| spec.name.clone());
        let refused = spec.behaviour == Behaviour::Refused;
        let handle = SimPodHandle {
            shared: Arc::new(PodShared {
                name: spec.name,
                uid: spec.uid,
                addr,
                state: Mutex::new(PodState {
                    node,
                    behaviour: spec.behaviour,
                    restarts: 0,
                }),
                stats: Arc::default(),
                fleet,
                body_bytes_sent: Arc::default(),
                epoch: watch::Sender::new(0),
                listening: tokio::sync::Mutex::new(None),
                runtime: tokio::runtime::Handle::try_current().map_err(|_| SimError::NoRuntime)?,
            }),
        };
        if !refused {
            let task = handle.serve(listener)?;
            *handle.shared.listening.lock().await = Some(task);
        }
        Ok(handle)
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The pod's UID (what discovery sees).
    pub fn uid(&self) -> &str {
        &self.shared.uid
    }

    /// The address the pod listens on (also while it refuses connections).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The pod's report URL.
    pub fn url(&self) -> String {
        format!("http://{}{REPORT_PATH}", self.shared.addr)
    }

    /// How many simulated process restarts happened (what discovery would
    /// see as the container's restart count).
    pub fn restarts(&self) -> u32 {
        self.lock().restarts
    }

    /// This pod's request counters.
    pub fn stats(&self) -> &SimStats {
        &self.shared.stats
    }

    /// Response body bytes this pod handed to its HTTP connection so far.
    pub fn body_bytes_sent(&self) -> u64 {
        self.shared.body_bytes_sent.load(Ordering::Relaxed)
    }

    /// A copy of the node state.
    pub fn node(&self) -> SimNode {
        self.lock().node.clone()
    }

    /// The current behaviour.
    pub fn behaviour(&self) -> Behaviour {
        self.lock().behaviour.clone()
    }

    /// Change how the pod answers. [`Behaviour::Refused`] closes the
    /// listener and every open connection; any other behaviour listens
    /// again on the same address if it was closed.
    pub async fn set(&self, behaviour: Behaviour) -> Result<(), SimError> {
        let refuse = behaviour == Behaviour::Refused;
        self.lock().behaviour = behaviour;
        if refuse {
            self.stop().await;
            Ok(())
        } else {
            self.listen().await
        }
    }

    /// Change the node state in place.
    pub fn update(&self, f: impl FnOnce(&mut SimNode)) {
        f(&mut self.lock().node);
    }

    /// A simulated process restart: open connections are closed, counters
    /// go back to 0 and the incarnation changes (see [`SimNode::restart`]),
    /// the restart count goes up. Whether the pod listens is unchanged.
    pub fn restart(&self) {
        {
            let mut s = self.lock();
            s.node.restart();
            s.restarts += 1;
        }
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Kura's suspension of the pod's instance (`spec.suspended`): scaled
    /// to zero, the pod stops listening (open connections close), and its
    /// data volume is wiped, so when it listens again
    /// ([`listen`](Self::listen)) it is a new pod that starts empty: per
    /// process counters at 0, a new incarnation (see
    /// [`SimNode::restart`]) and its initial backfill cycle `pending`
    /// until the caller settles it. Its restart count is unchanged (a new
    /// pod, not a restarted container).
    pub async fn suspend(&self) {
        self.stop().await;
        let mut s = self.lock();
        s.node.restart();
        s.node.backfill_initial_cycle = "pending".to_owned();
    }

    /// Stop listening: once this returns, new connections are refused; open
    /// ones are being closed. The behaviour is left as it was, so
    /// [`listen`](Self::listen) resumes it.
    pub async fn stop(&self) {
        let task = self.shared.listening.lock().await.take();
        if let Some(task) = task {
            task.abort();
            // Awaiting the aborted task guarantees its listener is closed.
            let _ = task.await;
        }
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Listen again on the pod's address (no-op while listening).
    pub async fn listen(&self) -> Result<(), SimError> {
        let mut listening = self.shared.listening.lock().await;
        if listening.is_none() {
            let listener = std::net::TcpListener::bind(self.shared.addr).map_err(SimError::Bind)?;
            *listening = Some(self.serve(listener)?);
        }
        Ok(())
    }

    /// Stop at once without waiting (for `Drop`): the listener closes as
    /// soon as the runtime drops the aborted accept loop.
    pub(crate) fn abort(&self) {
        if let Ok(mut l) = self.shared.listening.try_lock()
            && let Some(task) = l.take()
        {
            task.abort();
        }
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    fn lock(&self) -> MutexGuard<'_, PodState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn serve(&self, listener: std::net::TcpListener) -> Result<JoinHandle<()>, SimError> {
        listener.set_nonblocking(true).map_err(SimError::Bind)?;
        let _guard = self.shared.runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).map_err(SimError::Bind)?;
        let shared = Arc::clone(&self.shared);
        Ok(self.shared.runtime.spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, most likely: back off.
                        tracing::debug!(error = %e, "simulated pod accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                shared.stats.accepted();
                shared.fleet.stats.accepted();
                let _ = stream.set_nodelay(true);
                let conn_shared = Arc::clone(&shared);
                let mut closed = shared.epoch.subscribe();
                closed.mark_unchanged();
                tokio::spawn(async move {
                    let keep_alive = conn_shared.fleet.keep_alive.load(Ordering::Relaxed);
                    let service = service_fn(move |req| answer(Arc::clone(&conn_shared), req));
                    let conn = http1::Builder::new()
                        .keep_alive(keep_alive)
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = closed.changed() => {}
                    }
                });
            }
        }))
    }
}

async fn answer(
    shared: Arc<PodShared>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Infallible> {
    let _pod = shared.stats.enter();
    let _fleet = shared.fleet.stats.enter();
    let sent = Arc::clone(&shared.body_bytes_sent);
    let text = |code: StatusCode, msg: &'static str| {
        let mut r = Response::new(SimBody::full(
            Bytes::from_static(msg.as_bytes()),
            Arc::clone(&sent),
        ));
        *r.status_mut() = code;
        r
    };
    let path = req.uri().path();
    if path != REPORT_PATH && path != CLUSTER_PATH {
        return Ok(text(StatusCode::NOT_FOUND, "not found\n"));
    }
    let (behaviour, node) = {
        let s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.behaviour.clone(), s.node.clone())
    };
    let json = |body: Vec<u8>| {
        let mut r = Response::new(SimBody::full(body, Arc::clone(&sent)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        r
    };
    if path == CLUSTER_PATH {
        // Only pull-sync builds serve it; its own status is the node's.
        return Ok(
            match (node.pulls(), node.cluster_status, node.cluster_json()) {
                (true, 200, Some(body)) => json(body),
                (true, 200, None) | (false, ..) => text(StatusCode::NOT_FOUND, "not found\n"),
                (true, code, _) => text(
                    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    "simulated failure\n",
                ),
            },
        );
    }
    Ok(match behaviour {
        // A request that raced a switch to `Refused` still gets its answer.
        Behaviour::Normal | Behaviour::Refused => json(node.report_json()),
        Behaviour::Slow { delay_ms } => {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            // The state may have changed while the answer was delayed.
            let node = shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .node
                .clone();
            json(node.report_json())
        }
        Behaviour::Hang => std::future::pending().await,
        Behaviour::Status { code } => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            text(code, "simulated failure\n")
        }
        Behaviour::Malformed => {
            let mut body = node.report_json();
            body.truncate(body.len() / 2);
            json(body)
        }
        Behaviour::Oversized { bytes } => {
            let mut r = json(Vec::new());
            *r.body_mut() = SimBody::padding(bytes, Arc::clone(&sent));
            r
        }
        Behaviour::WrongType { field } => json(spoil(&node, &field)),
        Behaviour::Redirect { location } => {
            let mut r = text(StatusCode::FOUND, "moved\n");
            if let Ok(v) = header::HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
    })
}

/// The node's report with `field` replaced by a value of the wrong JSON
/// type (a number becomes its text; anything else, or an absent key, the
/// number 1).
fn spoil(node: &SimNode, field: &str) -> Vec<u8> {
    let mut value = node.wire_value();
    if let serde_json::Value::Object(obj) = &mut value {
        let wrong = match obj.get(field) {
            Some(serde_json::Value::Number(n)) => serde_json::Value::String(n.to_string()),
            _ => serde_json::Value::from(1),
        };
        obj.insert(field.to_owned(), wrong);
    }
    serde_json::to_vec(&value).unwrap_or_default()
}
