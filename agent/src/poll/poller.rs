//! The poller: one shared keep-alive client and one global semaphore.

use crate::model::{PodIdentity, PodSample, SampleResult};
use crate::poll::client::{Client, Limits, MAX_HEAD, Target};
use crate::poll::forward::{self, PortForward, PortForwardRelay};
use crate::poll::{PollConfig, PollError};
use crate::telemetry::{self, label};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use http::Uri;
use jiff::Timestamp;
use kura_schemas::{
    CLUSTER_PATH, NodeReport, REPORT_PATH, parse_cluster_lag_limited, parse_report_limited,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, SemaphorePermit};

const USER_AGENT: &str = concat!("kura-agent/", env!("CARGO_PKG_VERSION"));

/// hyper's exact read buffer of a request, in bytes, and the largest
/// response head accepted: a report and its head fit in one read. The
/// buffer lives only while its request does; an idle kept-alive connection
/// holds no buffer.
pub const READ_BUFFER: usize = MAX_HEAD;

/// A kept-alive connection unused for this long is closed (swept lazily).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Polls pods' reports. Cheap to clone: clones share one client (and its
/// keep-alive pool) and one concurrency bound.
#[derive(Debug, Clone)]
pub struct Poller {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    permits: Semaphore,
    config: PollConfig,
    /// How node-local pods are reached; `None`: no API server client.
    forward: Option<PortForward>,
}

impl Poller {
    /// A poller with these settings (a concurrency of 0 is taken as 1).
    /// Without an API server client it cannot port-forward: every pod of a
    /// node-local instance is a failed sample
    /// ([`Poller::with_port_forward`] can).
    pub fn new(config: PollConfig) -> Poller {
        Poller::build(config, None)
    }

    /// A poller that also reaches node-local instances' pods, through
    /// `client`'s API server (`pods/portforward`), at most
    /// [`PollConfig::port_forward_streams`] streams at once.
    pub fn with_port_forward(config: PollConfig, client: kube::Client) -> Poller {
        let forward = PortForward::new(client, config.port_forward_streams);
        Poller::build(config, Some(forward))
    }

    /// A poller that reaches node-local instances' pods through `relay`
    /// where there is no API server (the `demo`'s simulated kubelet,
    /// tests): a port-forward is a connection to the address the relay
    /// names for the pod's port, never to the pod IP, with everything else
    /// as through the API server ([`Poller::poll_pods_port_forward`]: at most
    /// [`PollConfig::port_forward_streams`] at once, the same timeouts,
    /// body limit, parsers and `port-forward:` failures).
    pub fn with_port_forward_relay(config: PollConfig, relay: Arc<dyn PortForwardRelay>) -> Poller {
        let forward = PortForward::relay(relay, config.port_forward_streams);
        Poller::build(config, Some(forward))
    }

    fn build(config: PollConfig, forward: Option<PortForward>) -> Poller {
        let client = Client::new(config.keep_alive, IDLE_TIMEOUT, USER_AGENT);
        Poller {
            inner: Arc::new(Inner {
                client,
                permits: Semaphore::new(config.concurrency.max(1)),
                config,
                forward,
            }),
        }
    }

    /// Poll every target concurrently (bounded by the global concurrency);
    /// samples come back in target order. A slow or hung pod delays only
    /// its own sample, by at most the timeout per attempt.
    ///
    /// This holds every pod's poll future while most wait for a permit
    /// (every pod of the fleet when every instance is due at once), so a
    /// waiting poll is only its place in the semaphore's queue: the poll's
    /// own state (the retry loop, its timers) is allocated once the permit
    /// is granted, for those in flight only.
    pub async fn poll_pods(&self, targets: &[(Arc<PodIdentity>, SocketAddr)]) -> Vec<PodSample> {
        futures::future::join_all(
            targets
                .iter()
                .map(|(pod, addr)| self.poll_queued(pod, *addr)),
        )
        .await
    }

    /// Poll every target of the node-local instance in `namespace` through
    /// a port-forward to its address's port (the pod IP is never
    /// connected to), concurrently within the port-forward bound; samples
    /// come back in target order, as from [`Poller::poll_pods`]: the same
    /// requests, timeout, body limit and parsers, `/status/cluster` of a
    /// pull-sync pod on the same stream. A failed port-forward is a failed
    /// sample whose error starts with `port-forward:`.
    pub async fn poll_pods_port_forward(
        &self,
        namespace: &str,
        targets: &[(Arc<PodIdentity>, SocketAddr)],
    ) -> Vec<PodSample> {
        futures::future::join_all(
            targets
                .iter()
                .map(|(pod, addr)| self.poll_forwarded(namespace, pod, addr.port())),
        )
        .await
    }

    /// One pod of [`Poller::poll_pods_port_forward`]: waits for a stream, then
    /// polls (boxed: only the polls holding a stream allocate their state).
    async fn poll_forwarded(
        &self,
        namespace: &str,
        pod: &Arc<PodIdentity>,
        port: u16,
    ) -> PodSample {
        let (report, cluster) = match &self.inner.forward {
            Some(forward) => {
                let _stream = forward.permit().await;
                Box::pin(self.forwarded(forward, namespace, pod, port)).await
            }
            None => (
                Err(forward::failed("no API server client to open it")),
                None,
            ),
        };
        count(&report);
        let (result, replication_lag_entries) = match (report, cluster) {
            (Ok(_), Some(Err(e))) => (SampleResult::Error(format!("{CLUSTER_PATH}: {e}")), None),
            (Ok(report), Some(Ok(lag))) => (SampleResult::Report(Box::new(report)), lag),
            (Ok(report), None) => (SampleResult::Report(Box::new(report)), None),
            (Err(e), _) => (SampleResult::Error(e.to_string()), None),
        };
        PodSample {
            pod: Arc::clone(pod),
            received_at: Timestamp::now(),
            result,
            replication_lag_entries,
        }
    }

    /// The report of `namespace/pod` through a port-forward to `port`, and
    /// for a pull-sync pod its `/status/cluster` read on the same stream.
    /// Opening the port-forward gets the poll timeout of its own; each
    /// request then gets the poll timeout.
    async fn forwarded(
        &self,
        forward: &PortForward,
        namespace: &str,
        pod: &PodIdentity,
        port: u16,
    ) -> (
        Result<NodeReport, PollError>,
        Option<Result<Option<u64>, PollError>>,
    ) {
        let cfg = &self.inner.config;
        let started = Instant::now();
        let opened = tokio::time::timeout(cfg.timeout, forward.open(namespace, &pod.name, port))
            .await
            .unwrap_or_else(|_| Err(forward::failed("timeout opening the stream")));
        let mut link = match opened {
            Ok(link) => link,
            Err(e) => {
                metrics::histogram!(telemetry::POLL_DURATION_SECONDS)
                    .record(started.elapsed().as_secs_f64());
                return (Err(e), None);
            }
        };
        // What the pod sees: a connection from its own loopback.
        let host = format!("localhost:{port}");
        let client = &self.inner.client;
        let report = link
            .get(client, &host, REPORT_PATH, cfg, parse_report)
            .await
            .and_then(|report| same_pod(pod, report));
        metrics::histogram!(telemetry::POLL_DURATION_SECONDS)
            .record(started.elapsed().as_secs_f64());
        let cluster = match &report {
            Ok(report) if report.outbox_messages.is_none() => {
                let read = match link
                    .get(client, &host, CLUSTER_PATH, cfg, parse_cluster)
                    .await
                {
                    Err(PollError::HttpStatus(404)) => Ok(None),
                    other => other,
                };
                metrics::counter!(telemetry::CLUSTER_READS_TOTAL, "result" => cluster_label(&read))
                    .increment(1);
                Some(read)
            }
            _ => None,
        };
        link.close().await;
        (report, cluster)
    }

    /// One poll of a sweep: waits for a permit, then runs the poll (boxed)
    /// with that permit as its first attempt's.
    async fn poll_queued(&self, pod: &Arc<PodIdentity>, addr: SocketAddr) -> PodSample {
        // The semaphore is never closed; a closed one would leave the
        // first attempt to find that out and fail the poll.
        let permit = self.inner.permits.acquire().await.ok();
        Box::pin(self.poll_with(pod, addr, permit)).await
    }

    /// Poll one pod at `addr` and return its sample.
    pub async fn poll(&self, pod: &Arc<PodIdentity>, addr: SocketAddr) -> PodSample {
        self.poll_with(pod, addr, None).await
    }

    /// [`Poller::poll`], its first attempt holding `permit` when given.
    async fn poll_with(
        &self,
        pod: &Arc<PodIdentity>,
        addr: SocketAddr,
        permit: Option<SemaphorePermit<'_>>,
    ) -> PodSample {
        let (report, permit) = self.report_keeping_permit(pod, addr, permit).await;
        let (result, replication_lag_entries) = match report {
            // A pull-sync pod (no outbox): its backlog is on /status/cluster,
            // read right after, on the same kept connection, holding the
            // same permit.
            Ok(report) if report.outbox_messages.is_none() => {
                match self.cluster_lag(addr, permit).await {
                    Ok(lag) => (SampleResult::Report(Box::new(report)), lag),
                    Err(e) => (SampleResult::Error(format!("{CLUSTER_PATH}: {e}")), None),
                }
            }
            Ok(report) => (SampleResult::Report(Box::new(report)), None),
            Err(e) => (SampleResult::Error(e.to_string()), None),
        };
        PodSample {
            pod: Arc::clone(pod),
            received_at: Timestamp::now(),
            result,
            replication_lag_entries,
        }
    }

    /// The replication lag of a pull-sync pod at `addr` from
    /// `GET /status/cluster`: `Ok(None)` when the route answers 404 (a build
    /// without it: not measured, never 0); any other failure is an error.
    /// Same timeout, body limit and retries as the report; its first
    /// attempt holds `permit` when given.
    pub async fn cluster_lag(
        &self,
        addr: SocketAddr,
        permit: Option<SemaphorePermit<'_>>,
    ) -> Result<Option<u64>, PollError> {
        let target = Target {
            addr,
            host: None,
            path: CLUSTER_PATH,
        };
        let (read, _) = self.get(target, permit, parse_cluster).await;
        let read = match read {
            Ok(lag) => Ok(lag),
            Err(PollError::HttpStatus(404)) => Ok(None),
            Err(e) => Err(e),
        };
        metrics::counter!(telemetry::CLUSTER_READS_TOTAL, "result" => cluster_label(&read))
            .increment(1);
        read
    }

    /// Poll one pod at `addr`: the report, or why there is none. A report
    /// whose `serving_authority.identity.pod_uid` is not the pod's UID is
    /// [`PollError::IdentityMismatch`].
    pub async fn poll_result(
        &self,
        pod: &PodIdentity,
        addr: SocketAddr,
    ) -> Result<NodeReport, PollError> {
        self.poll_result_with(pod, addr, None).await
    }

    async fn poll_result_with(
        &self,
        pod: &PodIdentity,
        addr: SocketAddr,
        permit: Option<SemaphorePermit<'_>>,
    ) -> Result<NodeReport, PollError> {
        self.report_keeping_permit(pod, addr, permit).await.0
    }

    /// [`Poller::poll_result`], also handing back the permit its
    /// successful attempt held (so a follow-up request on the same pod
    /// keeps its place).
    async fn report_keeping_permit<'p>(
        &'p self,
        pod: &PodIdentity,
        addr: SocketAddr,
        permit: Option<SemaphorePermit<'p>>,
    ) -> (Result<NodeReport, PollError>, Option<SemaphorePermit<'p>>) {
        let target = Target {
            addr,
            host: None,
            path: REPORT_PATH,
        };
        let (result, permit) = self.get(target, permit, parse_report).await;
        let result = result.and_then(|report| same_pod(pod, report));
        count(&result);
        (result, permit)
    }

    /// Fetch a report from a plain URL, the full report URL (e.g.
    /// `http://10.0.0.5:4000/status/rollout`): no pod identity to check,
    /// the same limits, retries and metrics as a pod poll.
    pub async fn fetch(&self, uri: &Uri) -> Result<NodeReport, PollError> {
        let result = async {
            let target = Target {
                addr: self.resolve(uri).await?,
                host: uri.authority().map(|a| a.as_str()),
                path: uri.path_and_query().map_or("/", |p| p.as_str()),
            };
            self.get(target, None, parse_report).await.0
        }
        .await;
        count(&result);
        result
    }

    /// The replication lag of the node behind a plain report URL (its host
    /// and port, path `/status/cluster`), as [`Poller::cluster_lag`] reads
    /// it from a pod: `Ok(None)` on HTTP 404.
    pub async fn fetch_cluster(&self, uri: &Uri) -> Result<Option<u64>, PollError> {
        let addr = self.resolve(uri).await?;
        let target = Target {
            addr,
            host: uri.authority().map(|a| a.as_str()),
            path: CLUSTER_PATH,
        };
        let (read, _) = self.get(target, None, parse_cluster).await;
        let read = match read {
            Err(PollError::HttpStatus(404)) => Ok(None),
            other => other,
        };
        metrics::counter!(telemetry::CLUSTER_READS_TOTAL, "result" => cluster_label(&read))
            .increment(1);
        read
    }

    /// The address of a plain `http://` URL's host: an IP literal as is, a
    /// name through the system resolver (bounded by the timeout). Any other
    /// scheme, or a name that does not resolve, is [`PollError::Connect`].
    async fn resolve(&self, uri: &Uri) -> Result<SocketAddr, PollError> {
        if uri.scheme_str() != Some("http") {
            return Err(PollError::Connect);
        }
        let host = uri.host().ok_or(PollError::NoAddress)?;
        let port = uri.port_u16().unwrap_or(80);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, port));
        }
        let lookup = tokio::net::lookup_host((bare, port));
        match tokio::time::timeout(self.inner.config.timeout, lookup).await {
            Ok(Ok(mut addrs)) => addrs.next().ok_or(PollError::Connect),
            _ => Err(PollError::Connect),
        }
    }

    /// The body at `target` read by `parse`, retried as configured; the
    /// first attempt holds `first` when given, every other attempt waits for
    /// its own permit (none is held while backing off). The permit of the
    /// attempt that succeeded comes back with the result.
    async fn get<'p, T>(
        &'p self,
        target: Target<'_>,
        first: Option<SemaphorePermit<'p>>,
        parse: fn(&Bytes, usize) -> Result<T, PollError>,
    ) -> (Result<T, PollError>, Option<SemaphorePermit<'p>>) {
        let cfg = &self.inner.config;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(cfg.retry_delay)
            .with_max_times(cfg.retries)
            .with_jitter();
        let kept = Mutex::new(None);
        let mut first = first;
        let result = (|| self.attempt(target, first.take(), parse, &kept))
            .retry(backoff)
            .when(PollError::is_retryable)
            .notify(|_, _| metrics::counter!(telemetry::POLL_RETRIES_TOTAL).increment(1))
            .await;
        let permit = kept.into_inner().unwrap_or_else(|p| p.into_inner());
        (result, permit)
    }

    async fn attempt<'p, T>(
        &'p self,
        target: Target<'_>,
        permit: Option<SemaphorePermit<'p>>,
        parse: fn(&Bytes, usize) -> Result<T, PollError>,
        kept: &Mutex<Option<SemaphorePermit<'p>>>,
    ) -> Result<T, PollError> {
        // The semaphore is never closed; a closed one would mean no polling.
        let permit = match permit {
            Some(permit) => permit,
            None => self
                .inner
                .permits
                .acquire()
                .await
                .map_err(|_| PollError::Connect)?,
        };
        let started = Instant::now();
        // Boxed once it runs: every pod's poll future is held while most
        // wait for a permit, so the request's state (hyper's connection)
        // is allocated only for those in flight.
        let request = Box::pin(self.request(target, parse));
        let result = tokio::time::timeout(self.inner.config.timeout, request)
            .await
            .unwrap_or(Err(PollError::Timeout));
        metrics::histogram!(telemetry::POLL_DURATION_SECONDS)
            .record(started.elapsed().as_secs_f64());
        if result.is_ok() {
            *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(permit);
        }
        result
    }

    async fn request<T>(
        &self,
        target: Target<'_>,
        parse: fn(&Bytes, usize) -> Result<T, PollError>,
    ) -> Result<T, PollError> {
        let cfg = &self.inner.config;
        let limits = Limits {
            // Half the attempt's budget, so a connect timeout (retried) is
            // told apart from a pod that accepted and never answered (not
            // retried).
            connect_timeout: cfg.timeout / 2,
            body_limit: cfg.body_limit,
        };
        let body = self.inner.client.get(target, limits).await?;
        parse(&body, cfg.body_limit)
    }

    /// Connections kept alive and idle now (one per pod polled at most).
    pub fn idle_connections(&self) -> usize {
        self.inner.client.idle_connections()
    }
}

/// `report`, unless its `serving_authority.identity.pod_uid` names another
/// pod than `pod` ([`PollError::IdentityMismatch`]).
fn same_pod(pod: &PodIdentity, report: NodeReport) -> Result<NodeReport, PollError> {
    match report.pod_uid() {
        Some(uid) if uid != &*pod.uid => Err(PollError::IdentityMismatch),
        _ => Ok(report),
    }
}

fn parse_report(body: &Bytes, limit: usize) -> Result<NodeReport, PollError> {
    parse_report_limited(body, limit).map_err(PollError::InvalidReport)
}

fn parse_cluster(body: &Bytes, limit: usize) -> Result<Option<u64>, PollError> {
    // The lag only: the body's informational keys are skipped unread.
    parse_cluster_lag_limited(body, limit).map_err(PollError::InvalidCluster)
}

/// The `result` label of [`telemetry::CLUSTER_READS_TOTAL`] for a
/// `/status/cluster` read: `ok`, `not_measured` (HTTP 404, or a body without
/// `sync_links`: the lag is absent) or why it failed.
pub(crate) fn cluster_label(read: &Result<Option<u64>, PollError>) -> &'static str {
    match read {
        Ok(Some(_)) => label::OK,
        Ok(None) => label::NOT_MEASURED,
        Err(e) => e.reason(),
    }
}

/// The `result` label of [`telemetry::POLLS_TOTAL`] for a poll's result.
pub(crate) fn result_label(result: &Result<NodeReport, PollError>) -> &'static str {
    match result {
        Ok(_) => label::OK,
        Err(e) => e.reason(),
    }
}

fn count(result: &Result<NodeReport, PollError>) {
    metrics::counter!(telemetry::POLLS_TOTAL, "result" => result_label(result)).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll's `result` label is `ok` or the error's reason; a cluster
    /// read's is `ok`, `not_measured` or the error's reason.
    #[test]
    fn result_labels_are_ok_or_the_error_reason() {
        let body = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../testdata/reports/g1-bootstrap.json"),
        )
        .expect("a report fixture");
        let report = kura_schemas::parse_report(&body).expect("a valid report");
        assert_eq!(result_label(&Ok(report)), label::OK);
        assert_eq!(result_label(&Err(PollError::Refused)), label::REFUSED);
        assert_eq!(cluster_label(&Ok(Some(0))), label::OK);
        assert_eq!(cluster_label(&Ok(None)), label::NOT_MEASURED);
        assert_eq!(cluster_label(&Err(PollError::Timeout)), label::TIMEOUT);
    }
}
