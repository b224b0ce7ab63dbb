//! Why a poll failed: short, stable messages (they become `pods[].error`)
//! and a fixed set of metric reasons.

use kura_schemas::{ClusterError, ReportError};

use crate::telemetry::label;

/// A failed poll.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// No answer within the timeout.
    #[error("timeout")]
    Timeout,
    /// The TCP connect did not complete in time.
    #[error("connect timeout")]
    ConnectTimeout,
    /// Nothing listens on the port.
    #[error("connection refused")]
    Refused,
    /// Another failure to connect (unreachable, reset during connect, ...).
    #[error("connect error")]
    Connect,
    /// The connection closed or reset before a response arrived.
    #[error("connection closed before a response")]
    Closed,
    /// The answer's status was not 200 (a redirect is never followed).
    #[error("http {0}")]
    HttpStatus(u16),
    /// The body was larger than the limit; reading stopped there.
    #[error("body exceeds {limit} bytes")]
    TooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// Reading the body failed.
    #[error("body read error")]
    Body,
    /// The answer was not valid HTTP.
    #[error("invalid http response")]
    Protocol,
    /// The body came in a transfer coding other than `chunked` alone (such
    /// as `gzip, chunked`): it is not read.
    #[error("unsupported transfer coding")]
    TransferCoding,
    /// The body is not a valid report (the parser's message names the field).
    #[error("{0}")]
    InvalidReport(ReportError),
    /// The `/status/cluster` body is not valid (the parser's message names
    /// the field).
    #[error("invalid body: {0}")]
    InvalidCluster(ClusterError),
    /// The report names another pod in `serving_authority.identity.pod_uid`.
    #[error("pod identity mismatch")]
    IdentityMismatch,
    /// The pod has no usable address.
    #[error("no pod address")]
    NoAddress,
    /// The API server's port-forward to the pod (a node-local instance's)
    /// failed: refused (an API error such as 403, the kubelet's error
    /// message), timed out, or closed before an answer came through it.
    #[error("port-forward: {0}")]
    PortForward(String),
}

impl PollError {
    /// The metric label for this failure, from a fixed small set: `timeout`,
    /// `refused`, `http_status`, `too_large`, `invalid_report`,
    /// `identity_mismatch`, `connect_error`, `body_error`, `invalid_cluster`,
    /// `port_forward`.
    pub fn reason(&self) -> &'static str {
        match self {
            PollError::Timeout | PollError::ConnectTimeout => label::TIMEOUT,
            PollError::Refused => label::REFUSED,
            PollError::Connect | PollError::Closed | PollError::NoAddress => label::CONNECT_ERROR,
            PollError::HttpStatus(_) => label::HTTP_STATUS,
            PollError::TooLarge { .. } => label::TOO_LARGE,
            PollError::Body | PollError::Protocol | PollError::TransferCoding => label::BODY_ERROR,
            PollError::InvalidReport(_) => label::INVALID_REPORT,
            PollError::InvalidCluster(_) => label::INVALID_CLUSTER,
            PollError::IdentityMismatch => label::IDENTITY_MISMATCH,
            PollError::PortForward(_) => label::PORT_FORWARD,
        }
    }

    /// Whether a retry inside the sweep may help: connection-level failures
    /// only, never an answer that came back wrong.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            PollError::Refused | PollError::ConnectTimeout | PollError::Connect | PollError::Closed
        )
    }
}
