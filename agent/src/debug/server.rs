//! The debug HTTP server (hyper 1, HTTP/1.1), read-only:
//!
//! | route | answer |
//! |---|---|
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200, or 503 until the initial lists are in or while the last write of any instance was pruned; JSON `{"ready", "reasons"}` either way |
//! | `GET /metrics` | Prometheus text |
//! | `GET /debug/instances` | JSON: every instance this replica sweeps or watches, with its aggregate, verdict, last write, `ownedBy` and `source` |
//! | `GET /debug/instances/{namespace}/{name}` | JSON: the instance with per-pod last samples (`source: live`), or its stored status when another replica sweeps it (`source: cluster`) |
//! | `GET /api/v1/instances/{namespace}/{name}/verdict` | JSON: the stable verdict document (schemas/json/instance-verdict.schema.json); 404 only for an instance this replica neither sweeps nor watches |
//! | `GET /api/v1/instances/{namespace}/{name}/timeline` | JSON: the gate inputs this replica judged for the instance since its current baseline and configuration, tick by tick, with the verdicts it published: a `kura-gate replay` document (schemas/json/instance-timeline.schema.json). Query: `since`, `until` (RFC 3339, inclusive), `limit` (1-10000, the newest ticks; default 10000); a malformed one is 400 with the reason. 404 when this replica does not sweep the instance, with `ownedBy` (the replica that does; ask it) in the JSON body. Bounded by `--timeline-budget-bytes` fleet-wide: the fleet's oldest ticks are dropped first (`window.droppedTicks`, `window.complete`) |
//! | `GET /debug/members` | JSON: sharding members, Leases, owned instances, ownership changes (404 when sharding is off) |
//! | `GET /` | HTML fleet page (query: `ns`, `verdict`, `q`, `sort`, `dir`, `limit`, `offset`, `refresh=off`) |
//! | `GET /instances/{namespace}/{name}` | HTML instance page (404 page when unknown) |
//! | `GET /instances/{namespace}/{name}/metrics` | the instance's `kura_instance_*` series (Prometheus text) |
//!
//! Path segments are percent-decoded on every route. `HEAD` is answered
//! like `GET` without a body; any other method gets 405, an unknown path
//! 404, a request target that is not a path (`GET *`) 400. HTML pages carry a strict Content-Security-Policy
//! (nothing loads from anywhere; inline style and script only by their
//! hashes).
//!
//! Connections (`connections`): every connection is accepted and waits,
//! without HTTP buffers or a serving slot, until it has sent a whole
//! request head (`head`; within [`HEADER_READ_TIMEOUT`], at most
//! [`MAX_HEAD_BYTES`]; at most [`MAX_WAITING`] wait; past that the longest
//! waiting one is closed). Then it is served in one of [`MAX_CONNECTIONS`]
//! slots, taking a free one or shedding a holder that is idle (no request
//! in progress, nothing written for [`IDLE_GRACE`]); otherwise it queues
//! (at most [`QUEUE_LIMIT`]) and meanwhile every answer closes its
//! connection, handing slots over. A probe (`GET`/`HEAD` of `/healthz` or
//! `/readyz`) that finds no slot is not queued: it is answered at once
//! outside the slots and its connection closed. So neither idle clients,
//! nor clients sending their heads a byte at a time, nor busy ones can keep
//! kubelet's probes waiting, and busy clients are never reset. A served
//! connection's next request head must arrive within
//! [`HEADER_READ_TIMEOUT`] too, and a client that does not read its answer
//! loses its connection (`watched`): after [`WRITE_STALL_TIMEOUT`] without
//! taking a byte, or [`RESPONSE_TIMEOUT`] after its request.

use crate::debug::connections::{Connections, InFlight, Ticket};
use crate::debug::head::{self, HeadRead, Prefixed};
use crate::debug::html;
use crate::debug::listen;
use crate::debug::routes::{self, Answer, PROMETHEUS_TEXT};
use crate::debug::scrape_body::ScrapeBody;
use crate::debug::state::DebugState;
use crate::debug::watched::{Watched, WriteLimits};
use crate::model::InstanceKey;
use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use jiff::Timestamp;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

pub use crate::debug::head::MAX_HEAD_BYTES;

/// At most this many connections are served (hold HTTP buffers) at once;
/// a connection that has sent something queues for one of them.
pub const MAX_CONNECTIONS: usize = 64;
/// At most this many accepted connections wait to be served (silent ones
/// and queued ones); past it the longest silent one is closed, or, when
/// every waiting connection has a request pending, the rest wait in the
/// kernel's backlog.
pub const MAX_WAITING: usize = 256;
/// A connection is idle, and may be shed for a waiting one, when it has no
/// request in progress and has read or written nothing for this long.
pub const IDLE_GRACE: Duration = Duration::from_millis(500);
/// A connection that has sent a request waits at most this long for a
/// serving slot; then it is closed.
pub const QUEUE_LIMIT: Duration = Duration::from_secs(10);
/// A client must send its request headers within this time (also how long
/// a kept-alive connection may sit idle). Probes and scrapers send theirs
/// with the connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A client that takes no byte of its answer for this long (its receive
/// window stays full) loses its connection.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// An answer must be handed over in full within this time of its request
/// (a scrape of a large fleet, megabytes, takes well under a second;
/// Prometheus gives up on a scrape after its `scrape_timeout`, 10 s by
/// default); then the connection is closed.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// The debug server's bounds on its clients (the defaults are the
/// constants of this module; tests shorten them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once ([`MAX_CONNECTIONS`]).
    pub slots: usize,
    /// A request head must arrive whole within this time
    /// ([`HEADER_READ_TIMEOUT`]).
    pub header_read: Duration,
    /// A write the client makes no room for within this time closes the
    /// connection ([`WRITE_STALL_TIMEOUT`]).
    pub write_stall: Duration,
    /// An answer not handed over in full this long after its request
    /// closes the connection ([`RESPONSE_TIMEOUT`]).
    pub response: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            slots: MAX_CONNECTIONS,
            header_read: HEADER_READ_TIMEOUT,
            write_stall: WRITE_STALL_TIMEOUT,
            response: RESPONSE_TIMEOUT,
        }
    }
}

/// What the server answers with: a whole body, or the streamed scrape.
pub enum DebugBody {
    /// Built whole.
    Whole(Full<Bytes>),
    /// `GET /metrics`, a chunk at a time.
    Scrape(ScrapeBody),
}

impl Body for DebugBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            DebugBody::Whole(body) => Pin::new(body).poll_frame(cx),
            DebugBody::Scrape(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            DebugBody::Whole(body) => body.is_end_stream(),
            DebugBody::Scrape(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            DebugBody::Whole(body) => body.size_hint(),
            DebugBody::Scrape(body) => body.size_hint(),
        }
    }
}

/// Answers one request for `target` (a path, optionally with a query
/// string). Pure apart from reading `state`; `now` is used for sample
/// ages.
pub fn respond(
    method: &Method,
    target: &str,
    state: &DebugState,
    now: Timestamp,
) -> Response<DebugBody> {
    let (path, _) = target.split_once('?').unwrap_or((target, ""));
    if method == Method::GET && path.trim_end_matches('/') == "/metrics" {
        // The one answer too large to build whole: streamed.
        let body = ScrapeBody::new(state.metrics.render(), state.view.clone(), now);
        let mut r = Response::new(DebugBody::Scrape(body));
        r.headers_mut().insert(
            CONTENT_TYPE,
            http::HeaderValue::from_static(PROMETHEUS_TEXT),
        );
        r.headers_mut()
            .insert(CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
        return r;
    }
    respond_whole(method, target, state, now).map(DebugBody::Whole)
}

/// Every answer but a `GET /metrics`, built whole: the method and the
/// request target checked, the path's segments percent-decoded, then the
/// route's answer ([`routes::route`]; a `HEAD` without its body).
fn respond_whole(method: &Method, target: &str, state: &DebugState, now: Timestamp) -> Answer {
    if method != Method::GET && method != Method::HEAD {
        let mut r = routes::plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        r.headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !path.starts_with('/') {
        // `*` (OPTIONS' asterisk form) or anything else that is no path.
        return routes::plain(
            StatusCode::BAD_REQUEST,
            "bad request target: expected a path starting with /\n",
        );
    }
    let decoded = segments_of(path);
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let response = routes::route(&segments, query, state, now)
        .unwrap_or_else(|| routes::plain(StatusCode::NOT_FOUND, "not found\n"));
    if method == Method::HEAD {
        let (parts, _) = response.into_parts();
        Response::from_parts(parts, Full::new(Bytes::new()))
    } else {
        response
    }
}

/// `path`'s segments, each percent-decoded once (a `%2F` inside a
/// segment stays inside it): what every route sees.
fn segments_of(path: &str) -> Vec<String> {
    path.trim_end_matches('/')
        .split('/')
        .skip(1)
        .map(|s| html::decode_component(s, false))
        .collect()
}

/// The instance a request's route answers about, if any: the instance
/// page and series, its debug detail, its verdict and timeline.
fn instance_of_route(target: &str) -> Option<InstanceKey> {
    let (path, _) = target.split_once('?').unwrap_or((target, ""));
    let decoded = segments_of(path);
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    match segments.as_slice() {
        ["instances", ns, name] | ["instances", ns, name, "metrics"] => {
            Some(InstanceKey::new(*ns, *name))
        }
        ["debug", "instances", ns, name] => Some(InstanceKey::new(*ns, *name)),
        ["api", "v1", "instances", ns, name, "verdict" | "timeline"] => {
            Some(InstanceKey::new(*ns, *name))
        }
        _ => None,
    }
}

/// Before answering about an instance this replica neither sweeps nor
/// watches (sharding by unit: another replica's), reads its stored status
/// once ([`crate::model::StoredStatusSource::fetch`]): the answer is then
/// the owner's published status, as when every replica watched every
/// instance.
async fn fetch_unwatched(method: &Method, target: &str, state: &DebugState) {
    if method != Method::GET && method != Method::HEAD {
        return;
    }
    let (Some(key), Some(stored)) = (instance_of_route(target), state.stored.as_ref()) else {
        return;
    };
    if state.view.instance(&key).is_none() && stored.stored_instance(&key).is_none() {
        stored.fetch(&key).await;
    }
}

/// A bound, not yet serving, debug server.
pub struct DebugServer {
    listener: TcpListener,
    state: DebugState,
    limits: Limits,
}

impl DebugServer {
    /// Binds `addr` (port 0 picks a free port). `[::]` is dual-stack (IPv4
    /// and IPv6); on a host without IPv6 it falls back to `0.0.0.0` and logs
    /// a warning.
    pub async fn bind(addr: SocketAddr, state: DebugState) -> std::io::Result<Self> {
        let (listener, note) = listen::bind(addr)?;
        if let Some(note) = note {
            tracing::warn!(%note, "debug server");
        }
        Ok(Self {
            listener,
            state,
            limits: Limits::default(),
        })
    }

    /// The same server with other bounds on its clients.
    #[must_use]
    pub fn with_limits(self, limits: Limits) -> Self {
        Self { limits, ..self }
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes (connections already accepted
    /// finish on their own).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let table = Arc::new(Connections::new(self.limits.slots, MAX_WAITING, IDLE_GRACE));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => return,
                accepted = async {
                    table.room_for_one().await;
                    self.listener.accept().await
                } => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "debug server accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let ticket = table.arrive();
            tokio::spawn(connection(
                stream,
                ticket,
                table.clone(),
                self.state.clone(),
                self.limits,
            ));
        }
    }
}

/// One connection: waits in the room until its request head is in, queues
/// for a serving slot (a probe that finds none is answered outside the
/// slots), then is served until it ends or is shed.
async fn connection(
    mut stream: TcpStream,
    ticket: Ticket,
    table: Arc<Connections>,
    state: DebugState,
    limits: Limits,
) {
    let Ticket { id, mut shed } = ticket;
    let read = tokio::select! {
        read = tokio::time::timeout(limits.header_read, head::read(&mut stream)) => read.ok(),
        _ = &mut shed => None,
    };
    let head = match read {
        Some(HeadRead::Complete(head)) => head,
        Some(HeadRead::TooLarge) => {
            let _ =
                tokio::time::timeout(limits.header_read, stream.write_all(head::TOO_LARGE)).await;
            table.leave_silent(id);
            return;
        }
        Some(HeadRead::Closed) | None => {
            table.leave_silent(id);
            return;
        }
    };
    if !table.spoke(id) {
        return;
    }
    let slot = if head.probe {
        match table.serve_now(id) {
            Some(slot) => Some(slot),
            None => {
                // Every slot is busy: answered outside them, while still
                // counted in the waiting room (so bounded by it).
                answer_probe(stream, head.bytes, state, limits).await;
                table.leave_queue();
                return;
            }
        }
    } else {
        table.serve(id, QUEUE_LIMIT).await
    };
    let Some((activity, shed)) = slot else {
        tracing::debug!("debug server: no slot within {QUEUE_LIMIT:?}, connection closed");
        return;
    };
    let service = {
        let (table, activity) = (table.clone(), activity.clone());
        service_fn(move |req: Request<Incoming>| {
            let in_flight = activity.start_request();
            let target = req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().path(), |pq| pq.as_str())
                .to_owned();
            let method = req.method().clone();
            let (state, table) = (state.clone(), table.clone());
            async move {
                fetch_unwatched(&method, &target, &state).await;
                let response = respond(&method, &target, &state, state.clock.now());
                let (mut parts, body) = response.into_parts();
                if table.queue_waits() {
                    // Hand the slot over after this answer, without an error.
                    parts
                        .headers
                        .insert(CONNECTION, http::HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(Response::from_parts(parts, Tracked { body, in_flight }))
            }
        })
    };
    let io = Watched::new(
        Prefixed::new(head.bytes, stream),
        activity,
        WriteLimits {
            stall: limits.write_stall,
            response: limits.response,
        },
    );
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .serve_connection(TokioIo::new(io), service);
    tokio::select! {
        ended = conn => if let Err(error) = ended {
            tracing::debug!(%error, "debug connection ended with an error");
        },
        _ = shed => {}
    }
    table.release(id);
}

/// A probe's one request (its head in `head`), answered with no serving
/// slot, and its connection closed; all of it within the header read
/// timeout.
async fn answer_probe(stream: TcpStream, head: Vec<u8>, state: DebugState, limits: Limits) {
    let service = service_fn(move |req: Request<Incoming>| {
        let target = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path(), |pq| pq.as_str());
        let mut response = respond(req.method(), target, &state, state.clock.now());
        response
            .headers_mut()
            .insert(CONNECTION, http::HeaderValue::from_static("close"));
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(false)
        .serve_connection(TokioIo::new(Prefixed::new(head, stream)), service);
    match tokio::time::timeout(limits.header_read, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(%error, "debug probe connection ended with an error"),
        Err(_) => tracing::debug!("debug probe connection: not answered within the limit"),
    }
}

/// A response body that ends its request's [`InFlight`] when it has been
/// handed over in full (hyper drops it then).
struct Tracked {
    body: DebugBody,
    in_flight: InFlight,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let _ = &self.in_flight;
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
