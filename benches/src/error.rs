//! Why the load harness could not run.

/// A failure of the load harness (never of a measured poll: those are
/// counted, not raised).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A simulator child process could not be started or talked to.
    #[error("simulator process: {0}")]
    Child(#[source] std::io::Error),
    /// A simulator child wrote something unexpected or stopped early.
    #[error("simulator process: {0}")]
    Protocol(String),
    /// The simulated pods could not be started.
    #[error(transparent)]
    Sim(#[from] kura_sim::SimError),
    /// A measuring side stopped early.
    #[error(transparent)]
    Side(#[from] kura_agent::tools::fleet_load_side::protocol::ProtocolError),
    /// The tokio runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}
