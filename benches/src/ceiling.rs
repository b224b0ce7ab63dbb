//! The loopback ceiling: the same pods fetched with a plain hyper-util
//! client at the same concurrency — a bare `GET`, the body read and
//! dropped, no parsing, no aggregation, no timeout, no retry, no metrics.
//! Like the agent, it also fetches `/status/cluster` from a pull-sync pod
//! (a report without `"outbox_messages"`, found by a byte search), under
//! the same permit, so the ratio compares like with like.

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kura_schemas::{CLUSTER_PATH, REPORT_PATH};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The read buffer of each of the ceiling's connections, in bytes: fixed
/// and small, because hyper-util keeps it for as long as the connection is
/// kept (the poller holds its own buffer only while a request runs). The
/// same 2 KiB in every fleet-load run so far.
const READ_BUFFER: usize = 2048;

/// The key whose absence marks a pull-sync report.
const OUTBOX_KEY: &[u8] = b"\"outbox_messages\"";

/// A bare keep-alive client with a bound on requests in flight, and the
/// agent's connection settings where they apply (no delay, one idle
/// connection per pod).
#[derive(Debug)]
pub struct BareClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    permits: Semaphore,
    /// Per pod: its report URI and its cluster status URI.
    uris: Vec<(Uri, Uri)>,
}

/// What one bare sweep produced.
#[derive(Debug, Clone, Copy, Default)]
pub struct BareOutcome {
    /// Wall time of the sweep.
    pub wall: Duration,
    /// Answers with status 200 and a fully read body.
    pub ok: usize,
    /// Anything else.
    pub failed: usize,
}

impl BareClient {
    /// A client for these pod addresses, `concurrency` requests at most in
    /// flight, one kept-alive connection per pod or none (as the poller).
    pub fn new(addrs: &[SocketAddr], concurrency: usize, keep_alive: bool) -> BareClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(usize::from(keep_alive))
            .http1_read_buf_exact_size(READ_BUFFER)
            .build(connector);
        // URIs are built once, outside the measured sweeps: a stricter
        // ceiling than building them per request.
        let uris = addrs
            .iter()
            .filter_map(|a| {
                let report = format!("http://{a}{REPORT_PATH}").parse().ok()?;
                let cluster = format!("http://{a}{CLUSTER_PATH}").parse().ok()?;
                Some((report, cluster))
            })
            .collect();
        BareClient {
            client,
            permits: Semaphore::new(concurrency.max(1)),
            uris,
        }
    }

    /// GET every pod once.
    pub async fn poll_all(&self) -> BareOutcome {
        let started = Instant::now();
        let results =
            futures::future::join_all(self.uris.iter().map(|(r, c)| self.get(r, c))).await;
        let ok = results.iter().filter(|ok| **ok).count();
        BareOutcome {
            wall: started.elapsed(),
            ok,
            failed: results.len() - ok,
        }
    }

    async fn get(&self, report: &Uri, cluster: &Uri) -> bool {
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let Some(body) = self.fetch(report).await else {
            return false;
        };
        let pulls = !body.windows(OUTBOX_KEY.len()).any(|w| w == OUTBOX_KEY);
        !pulls || self.fetch(cluster).await.is_some()
    }

    async fn fetch(&self, uri: &Uri) -> Option<Bytes> {
        let req = Request::get(uri.clone()).body(Empty::new()).ok()?;
        match self.client.request(req).await {
            Ok(resp) if resp.status() == StatusCode::OK => {
                resp.into_body().collect().await.ok().map(|b| b.to_bytes())
            }
            _ => None,
        }
    }
}
