//! The poller: one shared keep-alive client and one global semaphore.

use crate::poll::{PollConfig, PollError};
use crate::sample::{PodIdentity, PodSample, SampleResult};
use crate::sim::REPORT_PATH;
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use jiff::Timestamp;
use kura_schemas::{NodeReport, parse_report_limited};
use std::error::Error as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

const USER_AGENT: &str = concat!("kura-agent/", env!("CARGO_PKG_VERSION"));

/// Size of each connection's read buffer, in bytes. A report and its
/// headers fit in one read; a larger body takes several reads of this size
/// (up to the body limit). Every kept-alive connection holds one, so the
/// size matters at 10,000 pods: hyper's adaptive default starts at 8 KiB and
/// costs about 4 KiB more resident memory per connection.
pub const READ_BUFFER: usize = 2048;

/// Polls pods' reports. Cheap to clone: clones share one client (and its
/// keep-alive pool) and one concurrency bound.
#[derive(Debug, Clone)]
pub struct Poller {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client<HttpConnector, Empty<Bytes>>,
    permits: Semaphore,
    config: PollConfig,
}

impl Poller {
    /// A poller with these settings (a concurrency of 0 is taken as 1).
    pub fn new(config: PollConfig) -> Poller {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        // Half the attempt's budget, so a connect timeout (retried) is told
        // apart from a pod that accepted and never answered (not retried).
        connector.set_connect_timeout(Some(config.timeout / 2));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            // One pod is one host, polled once per sweep.
            .pool_max_idle_per_host(usize::from(config.keep_alive))
            .http1_read_buf_exact_size(READ_BUFFER)
            .build(connector);
        Poller {
            inner: Arc::new(Inner {
                client,
                permits: Semaphore::new(config.concurrency.max(1)),
                config,
            }),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &PollConfig {
        &self.inner.config
    }

    /// A pod's report address from its IP and a port.
    pub fn pod_addr(pod: &PodIdentity, port: u16) -> Result<SocketAddr, PollError> {
        let ip: IpAddr = pod
            .ip
            .as_deref()
            .and_then(|ip| ip.parse().ok())
            .ok_or(PollError::NoAddress)?;
        Ok(SocketAddr::new(ip, port))
    }

    /// Poll every target concurrently (bounded by the global concurrency);
    /// samples come back in target order. A slow or hung pod delays only
    /// its own sample, by at most the timeout per attempt.
    pub async fn sweep(&self, targets: &[(PodIdentity, SocketAddr)]) -> Vec<PodSample> {
        futures::future::join_all(targets.iter().map(|(pod, addr)| self.poll(pod, *addr))).await
    }

    /// Poll one pod at `addr` and return its sample.
    pub async fn poll(&self, pod: &PodIdentity, addr: SocketAddr) -> PodSample {
        let result = match self.poll_result(pod, addr).await {
            Ok(report) => SampleResult::Report(Box::new(report)),
            Err(e) => SampleResult::Error(e.to_string()),
        };
        PodSample {
            pod: pod.clone(),
            received_at: Timestamp::now(),
            result,
        }
    }

    /// Poll one pod at `addr`: the report, or why there is none. A report
    /// whose `serving_authority.identity.pod_uid` is not the pod's UID is
    /// [`PollError::IdentityMismatch`].
    pub async fn poll_result(
        &self,
        pod: &PodIdentity,
        addr: SocketAddr,
    ) -> Result<NodeReport, PollError> {
        let uri = report_uri(addr)?;
        let result = self
            .get(&uri)
            .await
            .and_then(|report| match report.pod_uid() {
                Some(uid) if uid != pod.uid => Err(PollError::IdentityMismatch),
                _ => Ok(report),
            });
        count(&result);
        result
    }

    /// Fetch a report from a plain URL, the full report URL (e.g.
    /// `http://10.0.0.5:4000/status/rollout`): no pod identity to check,
    /// the same limits, retries and metrics as a pod poll.
    pub async fn fetch(&self, uri: &Uri) -> Result<NodeReport, PollError> {
        let result = self.get(uri).await;
        count(&result);
        result
    }

    async fn get(&self, uri: &Uri) -> Result<NodeReport, PollError> {
        let cfg = &self.inner.config;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(cfg.retry_delay)
            .with_max_times(cfg.retries)
            .with_jitter();
        (|| self.attempt(uri))
            .retry(backoff)
            .when(PollError::is_retryable)
            .notify(|_, _| metrics::counter!("kura_agent_poll_retries_total").increment(1))
            .await
    }

    async fn attempt(&self, uri: &Uri) -> Result<NodeReport, PollError> {
        // The semaphore is never closed; a closed one would mean no polling.
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| PollError::Connect)?;
        let started = Instant::now();
        let result = tokio::time::timeout(self.inner.config.timeout, self.request(uri))
            .await
            .unwrap_or(Err(PollError::Timeout));
        metrics::histogram!("kura_agent_poll_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }

    async fn request(&self, uri: &Uri) -> Result<NodeReport, PollError> {
        let limit = self.inner.config.body_limit;
        let req = Request::get(uri.clone())
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, USER_AGENT)
            .body(Empty::new())
            .map_err(|_| PollError::NoAddress)?;
        let resp = self
            .inner
            .client
            .request(req)
            .await
            .map_err(|e| classify(&e))?;
        // Anything but 200, redirects included, is a failed sample: the
        // client follows nothing by itself.
        if resp.status() != StatusCode::OK {
            return Err(PollError::HttpStatus(resp.status().as_u16()));
        }
        let declared = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(PollError::TooLarge { limit });
        }
        // Limited stops reading at the first frame past the limit; dropping
        // the body then closes the connection.
        let body = Limited::new(resp.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    PollError::TooLarge { limit }
                } else {
                    PollError::Body
                }
            })?
            .to_bytes();
        parse_report_limited(&body, limit).map_err(PollError::InvalidReport)
    }
}

fn report_uri(addr: SocketAddr) -> Result<Uri, PollError> {
    format!("http://{addr}{REPORT_PATH}")
        .parse()
        .map_err(|_| PollError::NoAddress)
}

fn count(result: &Result<NodeReport, PollError>) {
    let label = match result {
        Ok(_) => "ok",
        Err(e) => e.reason(),
    };
    metrics::counter!("kura_agent_polls_total", "result" => label).increment(1);
}

/// Map a client error to a poll error by what the error chain holds.
fn classify(e: &hyper_util::client::legacy::Error) -> PollError {
    let mut io_kind = None;
    let mut parse = false;
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            parse |= h.is_parse() || h.is_parse_status() || h.is_parse_too_large();
        }
        source = s.source();
    }
    if e.is_connect() {
        match io_kind {
            Some(std::io::ErrorKind::ConnectionRefused) => PollError::Refused,
            Some(std::io::ErrorKind::TimedOut) => PollError::ConnectTimeout,
            _ => PollError::Connect,
        }
    } else if parse {
        PollError::Protocol
    } else {
        PollError::Closed
    }
}
