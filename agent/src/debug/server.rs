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
//! | `GET /debug/members` | JSON: sharding members, Leases, owned instances, ownership changes (404 when sharding is off) |
//! | `GET /` | HTML overview |
//!
//! `HEAD` is answered like `GET` without a body; any other method gets 405,
//! an unknown path 404.

use crate::debug::answers;
use crate::debug::html;
use crate::debug::instance_metrics;
use crate::model::{Clock, InstanceKey};
use crate::view::FleetView;
use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use jiff::Timestamp;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// At most this many connections are served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// A client must send its request headers within this time.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server reads.
#[derive(Clone)]
pub struct DebugState {
    /// The fleet view.
    pub view: FleetView,
    /// The Prometheus recorder's handle.
    pub metrics: PrometheusHandle,
    /// The clock the fleet view's times are in (sample ages are computed
    /// against it; the demo's clock runs faster than real time).
    pub clock: Arc<dyn Clock>,
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    r
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => text(status, "application/json", body),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("cannot encode: {e}\n"),
        ),
    }
}

/// Answers one request. Pure apart from reading `state`; `now` is used for
/// sample ages.
pub fn respond(
    method: &Method,
    path: &str,
    state: &DebugState,
    now: Timestamp,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        );
        r.headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let response = match segments.as_slice() {
        [] | [""] => {
            let instances = state.view.snapshot();
            let members = state.view.members().map(|m| m.members_summary(now));
            let page = html::overview(&instances, &state.view.readiness(), members.as_ref(), now);
            text(StatusCode::OK, "text/html; charset=utf-8", page)
        }
        ["healthz"] => text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n"),
        ["readyz"] => {
            let r = state.view.readiness();
            let status = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            json(status, &r)
        }
        ["metrics"] => {
            let mut body = state.metrics.render();
            body.push_str(&instance_metrics::render(&state.view.snapshot(), now));
            text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                body,
            )
        }
        ["debug", "instances"] => {
            let all: Vec<answers::AnswerSummary> = state
                .view
                .answers(now)
                .iter()
                .map(answers::summary_of)
                .collect();
            json(StatusCode::OK, &all)
        }
        ["debug", "members"] => match state.view.members() {
            Some(members) => json(StatusCode::OK, &members.members_json(now)),
            None => text(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "sharding is off\n",
            ),
        },
        ["debug", "instances", namespace, name] => {
            match state.view.answer(&InstanceKey::new(*namespace, *name), now) {
                Some(answer) => match answers::detail_json(&answer) {
                    Ok(body) => text(StatusCode::OK, "application/json", body),
                    Err(e) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "text/plain; charset=utf-8",
                        format!("cannot encode: {e}\n"),
                    ),
                },
                None => text(
                    StatusCode::NOT_FOUND,
                    "text/plain; charset=utf-8",
                    "no such instance\n",
                ),
            }
        }
        ["api", "v1", "instances", namespace, name, "verdict"] => {
            match state.view.answer(&InstanceKey::new(*namespace, *name), now) {
                Some(answer) => json(StatusCode::OK, &answers::verdict_of(&answer)),
                None => json(
                    StatusCode::NOT_FOUND,
                    &serde_json::json!({"error": "no such instance", "namespace": namespace, "name": name}),
                ),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n",
        ),
    };
    if method == Method::HEAD {
        let (parts, _) = response.into_parts();
        Response::from_parts(parts, Full::new(Bytes::new()))
    } else {
        response
    }
}

/// A bound, not yet serving, debug server.
pub struct DebugServer {
    listener: TcpListener,
    state: DebugState,
}

impl DebugServer {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(addr: SocketAddr, state: DebugState) -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
            state,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes (connections already accepted
    /// finish on their own).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => return,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let (stream, _) = tokio::select! {
                () = &mut shutdown => return,
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(error) => {
                        tracing::warn!(%error, "debug server accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let state = self.state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let response =
                        respond(req.method(), req.uri().path(), &state, state.clock.now());
                    async move { Ok::<_, Infallible>(response) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(error) = conn.await {
                    tracing::debug!(%error, "debug connection ended with an error");
                }
                drop(permit);
            });
        }
    }
}
