//! Why a `cluster-load` run could not be completed (a missed bound is not an
//! error: it is reported and turns the exit status to 2).

use std::path::PathBuf;

/// A failure of the real-cluster harness.
#[derive(Debug, thiserror::Error)]
pub enum ClusterLoadError {
    /// The kubeconfig could not be read or turned into a client configuration.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built.
    #[error("kube client: {0}")]
    Client(#[source] kube::Error),
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A fixture file could not be read.
    #[error("fixture {path}: {source}")]
    Fixture {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A fixture is not JSON once its placeholders are filled in.
    #[error("fixture {name}: not JSON after substitution: {source}")]
    FixtureJson {
        /// The fixture.
        name: &'static str,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The CRD could not be generated.
    #[error("CRD: {0}")]
    Crd(#[source] serde_json::Error),
    /// A stand-in process could not be started or talked to.
    #[error("stand-in process: {0}")]
    Child(#[source] std::io::Error),
    /// A stand-in process wrote something unexpected or stopped early.
    #[error("stand-in process: {0}")]
    Protocol(String),
    /// The stand-in pods could not be started.
    #[error(transparent)]
    Sim(#[from] kura_sim::SimError),
    /// The agent binary could not be started.
    #[error("cannot start the agent {path}: {source}")]
    AgentStart {
        /// The binary.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The agent exited while it was being measured.
    #[error("the agent exited during the run ({0}); see its log")]
    AgentExited(String),
    /// The agent's `/metrics` could not be read.
    #[error("agent /metrics at {addr}: {source}")]
    Metrics {
        /// The debug address.
        addr: std::net::SocketAddr,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The audit log could not be read.
    #[error("audit log {path}: {source}")]
    Audit {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A file of the work directory could not be written.
    #[error("work directory {path}: {source}")]
    WorkDir {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The tokio runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Something did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl ClusterLoadError {
    /// An [`ClusterLoadError::Api`] error saying what was asked.
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterLoadError {
        let what = what.into();
        move |source| ClusterLoadError::Api { what, source }
    }
}
