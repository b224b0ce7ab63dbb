//! `kura-agent run`: the agent in a cluster. Watches `KuraInstance`s and
//! their pods, polls every pod, aggregates, judges, writes status, serves
//! the debug endpoint and metrics, and shuts down gracefully on SIGTERM
//! (in-flight and pending status writes get a bounded time to finish).

mod api_client;
mod args;
mod lanes;
mod publication;

pub use api_client::{ApiClients, STREAMS_PER_CONNECTION};
pub use args::{ConfigError, RunArgs};

use crate::cli::gate_file::GateConfigs;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::task::JoinHandle;

use crate::cluster::{ClusterTargets, Discovery};
use crate::debug::{DebugServer, DebugState, SyncProbe};
use crate::events::{EventSink, start_events};
use crate::model::{MembersSource, PodScope, SystemClock, TargetSource};
use crate::poll::Poller;
use crate::runner::AgentLoop;
use crate::shard::{OwnedTargets, Shard, ShardConfig};
use crate::view::FleetView;
use crate::write::{
    FIELD_MANAGER, MAX_IN_FLIGHT_CEILING, StatusWriter, WriteHandle, WriteQueue, run_writes,
};

/// How long pending status writes may take after SIGTERM.
const SHUTDOWN_WRITE_GRACE: Duration = Duration::from_secs(10);
/// Status writes in flight at once, at least (more at a higher write rate:
/// `write::in_flight_for`).
const MIN_WRITES_IN_FLIGHT: usize = 8;

/// Entry point of `kura-agent run`.
pub fn run(args: RunArgs) -> ExitCode {
    super::init_logging(args.log_format, "info");
    // The gate configuration files, read once: an unusable one stops the
    // agent before it touches the cluster, with one line naming the file,
    // the key and the reason.
    let gates = match args.gate.load() {
        Ok(gates) => gates,
        Err(e) => {
            eprintln!(
                "{}",
                crate::cli::terminal::line(&format!("kura-agent run: {e}"))
            );
            return ExitCode::from(2);
        }
    };
    let runtime = match super::multi_thread_runtime("run") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(run_async(args, gates, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kura-agent run failed");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
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
    Config(#[from] ConfigError),
    /// No Kubernetes client could be built (kubeconfig or in-cluster).
    #[error("kubernetes client: {0}")]
    Kube(#[from] kube::Error),
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("kubernetes client configuration: {0}")]
    KubeConfig(#[from] kube::config::InferConfigError),
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
async fn run_async(
    args: RunArgs,
    gates: GateConfigs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let mut config = kube::Config::infer().await?;
    config.headers.push((
        http::header::USER_AGENT,
        user_agent(&args.resolve_identity()?),
    ));
    let clients = ApiClients::new(config)?;
    let metrics = crate::telemetry::prometheus_builder()
        .and_then(|b| b.install_recorder())
        .map_err(|e| RunError::Metrics(e.to_string()))?;
    crate::telemetry::describe();
    run_with_gates(args, gates, clients, metrics, shutdown).await
}

/// The `User-Agent` of the agent's requests to the API server, naming its
/// identity: the API server's audit log and its request metrics tell the
/// replicas of a sharded set apart by it (`kura-agent/<version>
/// (<identity>)`; without the identity when it is not a valid header
/// value).
pub fn user_agent(identity: &str) -> http::HeaderValue {
    let product = concat!("kura-agent/", env!("CARGO_PKG_VERSION"));
    http::HeaderValue::from_str(&format!("{product} ({identity})"))
        .unwrap_or_else(|_| http::HeaderValue::from_static(product))
}

/// The agent with given clients and metrics handle (the end-to-end tests
/// call this with [`ApiClients::new`] of the test API server's
/// configuration); reads the gate configuration files first.
pub async fn run_with_clients(
    args: RunArgs,
    clients: ApiClients,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let gates = args.gate.load().map_err(ConfigError::from)?;
    run_with_gates(args, gates, clients, metrics, shutdown).await
}

/// The agent with its gate configurations already read (`gates`), its
/// clients and a metrics handle.
async fn run_with_gates(
    args: RunArgs,
    gates: GateConfigs,
    clients: ApiClients,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let ApiClients {
        api: client,
        isolated,
    } = clients;
    let agent = args.resolve_identity()?;
    let upkeep = tokio::spawn(crate::telemetry::upkeep(metrics.clone()));
    let loop_config = args.loop_config(agent.clone(), gates.live, gates.shadow);
    loop_config.validate().map_err(ConfigError::from)?;
    let shard_config = args.shard.config(&agent).map_err(ConfigError::from)?;
    let units = shard_config.as_ref().map(|c| c.units);
    let sharding = Sharding::start(isolated.clone(), shard_config);
    tracing::info!(%agent, namespaces = ?args.discovery.namespaces, sharding = sharding.is_on(),
        rollout_interval = ?loop_config.cadence.rollout_interval,
        steady_interval = ?loop_config.cadence.steady_interval,
        settle = ?loop_config.cadence.settle,
        gate_config = ?args.gate.gate_config,
        gate = %serde_json::to_string(&loop_config.engine.gate).unwrap_or_default(),
        shadow_gate_config = ?args.gate.shadow_gate_config,
        "starting kura-agent");

    let mut discovery_config = args.discovery.config();
    if let Some(count) = units {
        discovery_config.units = args.discovery.unit_watches(count);
    }
    // A replica watching only its units reads one page for another
    // manager: joining, it lists only the units it gains.
    let scan = match discovery_config.units {
        Some(_) => crate::cluster::Scan::FirstPage,
        None => crate::cluster::Scan::Everything,
    };
    let choice = crate::cluster::choose_publication_target(
        &client,
        &discovery_config.namespaces,
        discovery_config.instance_selector.as_deref(),
        args.publication.publication_target,
        scan,
    )
    .await;
    let target = choice.target;
    discovery_config.publication = target;
    let (discovery, driver) =
        Discovery::start(client.clone(), &discovery_config, sharding.pod_scope());
    let driver = tokio::spawn(driver);

    let view = FleetView::new();
    publication::announce(&choice, &view);
    view.set_timeline_budget(args.view.timeline_budget_bytes);
    let sync_probe: SyncProbe = {
        let discovery = discovery.clone();
        let sharding = sharding.clone();
        Arc::new(move || {
            let mut pending = discovery.pending_lists();
            pending.extend(sharding.not_ready_reasons(Timestamp::now()));
            pending
        })
    };
    let mut debug_state = DebugState::new(view.clone(), metrics, Arc::new(SystemClock))
        .with_sync_probe(sync_probe)
        .with_identity(agent.clone())
        .with_stored(Arc::new(discovery.clone()));
    if let Some(members) = sharding.members() {
        debug_state = debug_state.with_members(members);
    }

    let handle = WriteHandle::new(WriteQueue::new(args.write_queue_config()));
    let (events, publisher): (Option<EventSink>, Option<JoinHandle<()>>) = if args.events.events {
        let reporter = crate::events::Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: agent.clone(),
        };
        // Events wait while the status writes are behind by more than a
        // full load of writes in flight.
        let backlog = handle.clone();
        let (sink, task) = start_events(client.clone(), reporter, args.events.limit(), move || {
            backlog.pending() > MAX_IN_FLIGHT_CEILING
        });
        (Some(sink), Some(tokio::spawn(task)))
    } else {
        (None, None)
    };
    let watch_publication = tokio::spawn(publication::watch(
        target,
        discovery.clone(),
        view.clone(),
        events.clone(),
    ));

    let writes = {
        let view = view.clone();
        tokio::spawn(run_writes(
            handle.clone(),
            sharding.gate(
                StatusWriter::new(client.clone())
                    .with_target(target)
                    .with_contest(Arc::new(discovery.clone()))
                    .with_uids(Arc::new(discovery.clone())),
            ),
            MIN_WRITES_IN_FLIGHT,
            move |key, report| {
                view.record_write(key, report.write);
                if let Some(events) = &events {
                    events.send(report.transitions);
                }
            },
        ))
    };

    let server = DebugServer::bind(args.debug.debug_listen, debug_state)
        .await
        .map_err(|source| RunError::Bind {
            addr: args.debug.debug_listen,
            source,
        })?;
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server.serve(async {
        let _ = server_stopped.await;
    }));

    let targets = sharding.narrow(Arc::new(ClusterTargets::new(discovery)));
    let agent_loop = AgentLoop::new(
        loop_config,
        Poller::with_port_forward(args.poll.config(), isolated.clone()),
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
    watch_publication.abort();
    let _ = watch_publication.await;
    if let Some(publisher) = publisher {
        // The sink went with the write task: the publisher drains what was
        // queued, for at most the write grace.
        let _ = tokio::time::timeout(SHUTDOWN_WRITE_GRACE, publisher).await;
    }
    driver.abort();
    upkeep.abort();
    sharding.stop(isolated).await;
    let _ = stop_server.send(());
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

/// The sharding parts of `run`, composed once: this replica's [`Shard`]
/// (its Lease, the group's membership) and the task renewing it, or
/// nothing when sharding is off. Every use below is one method: with
/// sharding off each is the one-replica identity (all targets, every
/// write, no readiness reason, nothing to release).
#[derive(Clone)]
struct Sharding {
    shard: Option<Arc<Shard>>,
    driver: Option<Arc<JoinHandle<()>>>,
}

impl Sharding {
    /// Starts this replica's Lease when `config` is set.
    fn start(client: kube::Client, config: Option<ShardConfig>) -> Sharding {
        let Some(config) = config else {
            return Sharding {
                shard: None,
                driver: None,
            };
        };
        tracing::info!(group = %config.group, lease_namespace = %config.namespace,
            lease = %config.lease_name(), duration = ?config.lease_duration, "sharding on");
        let (shard, driver) = Shard::start(client, config);
        Sharding {
            shard: Some(shard),
            driver: Some(Arc::new(tokio::spawn(driver))),
        }
    }

    fn is_on(&self) -> bool {
        self.shard.is_some()
    }

    /// The pods this replica keeps: those of the instances it owns or is
    /// about to own (all of them without sharding).
    fn pod_scope(&self) -> Option<Arc<dyn PodScope>> {
        self.shard
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn PodScope>)
    }

    /// Why this replica may not act yet (readiness detail).
    fn not_ready_reasons(&self, now: Timestamp) -> Vec<String> {
        self.shard
            .as_ref()
            .map(|s| s.not_ready_reasons(now))
            .unwrap_or_default()
    }

    /// The members the debug endpoint shows (`None`: sharding is off).
    fn members(&self) -> Option<Arc<dyn MembersSource>> {
        self.shard
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn MembersSource>)
    }

    /// `targets` narrowed to the instances this replica owns.
    fn narrow(&self, targets: Arc<dyn TargetSource>) -> Arc<dyn TargetSource> {
        match &self.shard {
            Some(shard) => Arc::new(OwnedTargets::new(targets, shard.clone())),
            None => targets,
        }
    }

    /// `writer`, asking the shard right before every PATCH.
    fn gate(&self, writer: StatusWriter) -> StatusWriter {
        match &self.shard {
            Some(shard) => writer.with_gate(shard.clone()),
            None => writer,
        }
    }

    /// Stops renewing and releases the Lease (graceful leave).
    async fn stop(self, client: kube::Client) {
        if let Some(driver) = &self.driver {
            driver.abort();
        }
        if let Some(shard) = &self.shard {
            shard.release(client).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::user_agent;

    #[test]
    fn the_user_agent_names_the_identity_when_it_can() {
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            user_agent("kura-agent-7f9c-x2"),
            format!("kura-agent/{version} (kura-agent-7f9c-x2)").as_str()
        );
        assert_eq!(
            user_agent("bad\nname"),
            format!("kura-agent/{version}").as_str()
        );
    }
}
