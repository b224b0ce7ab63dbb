//! `kura-agent run`: the agent in a cluster. Watches `KuraInstance`s and
//! their pods, polls every pod, aggregates, judges, writes status, serves
//! the debug endpoint and metrics, and shuts down gracefully on SIGTERM
//! (in-flight and pending status writes get a bounded time to finish).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kura_gate::GateConfig;

use crate::aggregate::AggregateConfig;
use crate::cluster::{ClusterTargets, Discovery};
use crate::config::{LogFormat, RunArgs};
use crate::debug::{DebugServer, DebugState};
use crate::engine::EngineConfig;
use crate::model::{SystemClock, TargetSource};
use crate::poll::{PollConfig, Poller};
use crate::runner::{AgentLoop, LoopConfig};
use crate::shard::{OwnedTargets, Shard};
use crate::view::FleetView;
use crate::write::{StatusWriter, WriteHandle, WriteQueue, run_writes};

/// How long pending status writes may take after SIGTERM.
pub const SHUTDOWN_WRITE_GRACE: Duration = Duration::from_secs(10);
/// Status writes in flight at once.
pub const MAX_WRITES_IN_FLIGHT: usize = 8;

/// Sets up logging: JSON lines or human-readable text, filtered by
/// `RUST_LOG` (default `info`).
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// The poller's settings from the flags.
pub fn poll_config(args: &RunArgs) -> PollConfig {
    PollConfig {
        concurrency: args.poll_concurrency as usize,
        timeout: args.poll_timeout,
        body_limit: args.body_limit as usize,
        keep_alive: args.poll_keep_alive,
        ..PollConfig::default()
    }
}

/// The loop's settings from the flags.
pub fn loop_config(args: &RunArgs, agent: String) -> LoopConfig {
    LoopConfig {
        sweep_interval: args.sweep_interval,
        engine: EngineConfig {
            agent,
            aggregate: AggregateConfig {
                retention: jiff::SignedDuration::try_from(args.retention)
                    .unwrap_or(jiff::SignedDuration::from_hours(1)),
                ..AggregateConfig::default()
            },
            gate: GateConfig::default(),
        },
        ..LoopConfig::default()
    }
}

/// Entry point of `kura-agent run`.
pub fn run(args: RunArgs) -> ExitCode {
    init_tracing(args.log_format);
    let runtime = match super::multi_thread_runtime("run") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(run_async(args, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kura-agent run failed");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Why `run` could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error("configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// No Kubernetes client could be built (kubeconfig or in-cluster).
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    /// The metrics recorder could not be installed.
    #[error("metrics: {0}")]
    Metrics(String),
    /// The debug server could not bind.
    #[error("debug server on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The agent with a client from the environment (kubeconfig or in-cluster
/// service account), until `shutdown` resolves.
pub async fn run_async(
    args: RunArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let client = kube::Client::try_default().await?;
    let metrics = crate::telemetry::prometheus_builder()
        .and_then(|b| b.install_recorder())
        .map_err(|e| RunError::Metrics(e.to_string()))?;
    crate::telemetry::describe();
    run_with_client(args, client, metrics, shutdown).await
}

/// The agent with a given client and metrics handle (the end-to-end tests
/// call this with a client for the test API server).
pub async fn run_with_client(
    args: RunArgs,
    client: kube::Client,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let agent = args.resolve_identity()?;
    let shard_config = args.shard_config(&agent)?;
    tracing::info!(%agent, namespaces = ?args.namespaces, sharding = shard_config.is_some(),
        "starting kura-agent");

    let (discovery, driver) = Discovery::start(client.clone(), &args.discovery_config());
    let driver = tokio::spawn(driver);

    // Sharding: this replica's Lease and the group's membership.
    let (shard, shard_driver) = match shard_config {
        Some(config) => {
            tracing::info!(group = %config.group, lease_namespace = %config.namespace,
                lease = %config.lease_name(), duration = ?config.lease_duration, "sharding on");
            let (shard, driver) = Shard::start(client.clone(), config);
            (Some(shard), Some(tokio::spawn(driver)))
        }
        None => (None, None),
    };

    let view = FleetView::new();
    {
        let discovery = discovery.clone();
        let shard = shard.clone();
        view.set_sync_probe(Arc::new(move || {
            let mut pending = discovery.pending_lists();
            if let Some(shard) = &shard {
                pending.extend(shard.not_ready_reasons(jiff::Timestamp::now()));
            }
            pending
        }));
    }
    if let Some(shard) = &shard {
        view.set_members(shard.clone());
    }

    let handle = WriteHandle::new(WriteQueue::new(args.write_queue_config()));
    let mut writer = StatusWriter::new(client.clone());
    if let Some(shard) = &shard {
        writer = writer.with_gate(shard.clone());
    }
    let writes = {
        let view = view.clone();
        tokio::spawn(run_writes(
            handle.clone(),
            writer,
            MAX_WRITES_IN_FLIGHT,
            move |key, write| view.record_write(key, write),
        ))
    };

    let server = DebugServer::bind(
        args.debug_listen,
        DebugState {
            view: view.clone(),
            metrics,
            clock: Arc::new(SystemClock),
        },
    )
    .await
    .map_err(|source| RunError::Bind {
        addr: args.debug_listen,
        source,
    })?;
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server.serve(async {
        let _ = server_stopped.await;
    }));

    let mut targets: Arc<dyn TargetSource> =
        Arc::new(ClusterTargets::new(discovery, args.target_config()));
    if let Some(shard) = &shard {
        targets = Arc::new(OwnedTargets::new(targets, shard.clone()));
    }
    let agent_loop = AgentLoop::new(
        loop_config(&args, agent),
        Poller::new(poll_config(&args)),
        targets,
        Arc::new(handle.clone()),
        view,
        Arc::new(SystemClock),
    );
    agent_loop.run(shutdown).await;

    tracing::info!(
        pending = handle.pending(),
        "shutting down: finishing status writes"
    );
    let deadline = tokio::time::Instant::now() + SHUTDOWN_WRITE_GRACE;
    while handle.pending() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if handle.pending() > 0 {
        tracing::warn!(
            pending = handle.pending(),
            "status writes left unwritten at shutdown"
        );
    }
    writes.abort();
    driver.abort();
    if let Some(d) = shard_driver {
        d.abort();
    }
    if let Some(shard) = &shard {
        shard.release(client).await;
    }
    let _ = stop_server.send(());
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}
