//! The IO half of `kura-agent check`: poll every node each interval, judge,
//! hand each poll's report to the caller, stop at the final verdict.

use std::time::Duration;

use futures::future::join_all;
use http::Uri;
use jiff::Timestamp;
use kura_schemas::CLUSTER_PATH;

use crate::model::{PodIdentity, PodSample, SampleResult};
use crate::poll::Poller;
use std::sync::Arc;

use super::judge::{CheckRun, PollReport};

/// One node to poll: its report URL and the identity its counters are kept
/// under (the URL is its name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckNode {
    /// The report URL.
    pub url: Uri,
    /// Name (the URL), a constant UID and restart count: a node's restarts
    /// show through its report's incarnation and its counters dropping.
    pub identity: Arc<PodIdentity>,
}

impl CheckNode {
    /// A node at `url`.
    pub fn new(url: Uri) -> Self {
        let name = url.to_string();
        CheckNode {
            identity: Arc::new(PodIdentity {
                uid: name.as_str().into(),
                ip: url.host().map(Into::into),
                name: name.into(),
                restart_count: 0,
                image: None,
            }),
            url,
        }
    }
}

/// The least time a poll of `check` gets, also the one made at the timeout:
/// a run lasts at most `--timeout` and this.
pub const FINAL_POLL: Duration = Duration::from_secs(1);

/// Polls every node once, concurrently; one sample per node, in order.
pub async fn poll_nodes(poller: &Poller, nodes: &[CheckNode]) -> Vec<PodSample> {
    poll_nodes_within(poller, nodes, None).await
}

/// [`poll_nodes`], each node's answer waited for at most `limit` (the time
/// left before the check's timeout): a node that has not answered by then
/// is a sample error.
pub async fn poll_nodes_within(
    poller: &Poller,
    nodes: &[CheckNode],
    limit: Option<Duration>,
) -> Vec<PodSample> {
    join_all(nodes.iter().map(|node| async move {
        let fetched = async {
            match poller.fetch(&node.url).await {
                // A pull-sync node: its backlog is on /status/cluster.
                Ok(report) if report.outbox_messages.is_none() => {
                    match poller.fetch_cluster(&node.url).await {
                        Ok(lag) => (SampleResult::Report(Box::new(report)), lag),
                        Err(e) => (SampleResult::Error(format!("{CLUSTER_PATH}: {e}")), None),
                    }
                }
                Ok(report) => (SampleResult::Report(Box::new(report)), None),
                Err(e) => (SampleResult::Error(e.to_string()), None),
            }
        };
        let (result, replication_lag_entries) = match limit {
            None => fetched.await,
            Some(limit) => tokio::time::timeout(limit, fetched)
                .await
                .unwrap_or_else(|_| {
                    (
                        SampleResult::Error(format!(
                            "no answer within the {:.1}s left before the check's timeout",
                            limit.as_secs_f64()
                        )),
                        None,
                    )
                }),
        };
        PodSample {
            pod: node.identity.clone(),
            received_at: Timestamp::now(),
            result,
            replication_lag_entries,
        }
    }))
    .await
}

/// Runs `run` to its final verdict: a poll every `interval` (from poll
/// start to poll start; never later than the timeout), each report handed
/// to `emit`. Returns the final report.
pub async fn run_check(
    poller: &Poller,
    nodes: &[CheckNode],
    mut run: CheckRun,
    interval: Duration,
    mut emit: impl FnMut(&PollReport),
) -> PollReport {
    run.start(Timestamp::now());
    loop {
        let started = tokio::time::Instant::now();
        // A poll lasts at most until the timeout, or FINAL_POLL for the poll
        // made at it (a node that never answered held `--timeout 3s` to
        // 6-7 s: the poller's own request timeouts, and a clock started
        // after the first poll).
        let left = run.deadline().map(|deadline| {
            Duration::try_from(deadline.duration_since(Timestamp::now()))
                .unwrap_or(Duration::ZERO)
                .max(FINAL_POLL)
        });
        let samples = poll_nodes_within(poller, nodes, left).await;
        let report = run.observe(&samples, Timestamp::now());
        emit(&report);
        if report.is_final {
            return report;
        }
        let mut wait = interval.saturating_sub(started.elapsed());
        if let Some(deadline) = run.deadline() {
            let left = Duration::try_from(deadline.duration_since(Timestamp::now()))
                .unwrap_or(Duration::ZERO);
            wait = wait.min(left);
        }
        tokio::time::sleep(wait).await;
    }
}
