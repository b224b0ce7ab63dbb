//! `kura-agent demo`: a progressive rollout on a simulated fleet, end to
//! end on one machine, in about a minute.
//!
//! ```text
//! kura-agent demo [--time-scale 45] [--listen 127.0.0.1:8080] [--keep-serving]
//! ```
//!
//! It starts a simulated fleet (9 `KuraInstance`s of 5 accounts in 2
//! regions, each with 1 to 3 pods, 16 pods serving `/status/rollout` on
//! `127.10.0.x`), runs the real agent pipeline on it (the poller, the
//! aggregation with reset clamping and the per-instance gate in
//! [`crate::runner::AgentLoop`]; static targets instead of the
//! pod watch, status kept in memory instead of the API server), and plays a
//! rollout of a new image through the real wave judge ([`kura_gate::Gate`]):
//!
//! 1. baselines of every instance are captured when its wave is scheduled;
//! 2. wave 0, the canary (one instance), upgrades (each pod restarts: its
//!    counters fall back to 0 and the aggregation absorbs the reset), soaks
//!    900 s and passes;
//! 3. wave 1 (three instances) soaks 300 s and passes, although one of
//!    them, `globex-us-east`, is suspended by its operator 30 s into its
//!    upgrade: Kura scales it to zero, the agent's verdict is `suspended`
//!    (`instance_suspended`) and the wave judge leaves a suspended server
//!    out of the wave's scope (gate.md), so the wave passes on the others;
//! 4. in wave 2 one instance's fd timeouts keep growing after the upgrade:
//!    the gate holds the wave on `fd_timeouts_regressed` and stops it with a
//!    hard stop at the wave deadline, with evidence naming the server, the
//!    signal, the baseline and the observed value.
//!
//! Two instances are apart from the usual case (rollout-health.md,
//! "Instances the agent must treat apart"):
//!
//! - `acme-us-east` (wave 1) is node-local (`spec.nodeLocalNetwork`): its
//!   targets carry a pod IP in TEST-NET-1 that no route leads to, and the
//!   agent polls its pods through a port-forward, as it does in a cluster.
//!   With no API server here, the simulated kubelet ([`kura_sim::SimKubelet`])
//!   is the poller's [`crate::poll::PortForwardRelay`]: the same bound on
//!   open streams, timeout, body limit and parsers as through the API
//!   server.
//! - `hooli-eu-west` is pinned, outside the rollout's waves: at +03:00 its
//!   operator moves it to the new image by hand with the `OnDelete` update
//!   strategy, so Kura's controller holds its pods on the old image
//!   (`status.updatePaused`). The agent's own verdict is a hard stop
//!   (`update_paused`, gate check 19) with the pause as evidence; once the
//!   operator has deleted the held pods (they come back on the new image)
//!   the hold is lifted and the verdict is healthy again. It is in no wave
//!   on purpose: check 19 is a hard stop for any wave holding it, which is
//!   right (nothing would ever replace the held pods) and would end the
//!   rollout there. The wave judge never sees it; its verdict is the
//!   agent's alone.
//!
//! Time is compressed (`--time-scale`, default 45: one real second is 45
//! simulated seconds). The gate keeps its documented soaks and sample-age
//! limit; only the wave deadline is shortened to 1200 s (default 3600 s) so
//! the story ends within a minute, and the output says so. While it runs,
//! the agent's debug endpoint serves the fleet (`/` HTML page,
//! `/debug/instances` JSON, `/metrics`) on `--listen` (default
//! `127.0.0.1:8080`, or an ephemeral port when that one is busy); its
//! address is printed first. With `--keep-serving` the fleet, the agent and
//! the page stay up after the story, the clock slowed to real time so the
//! stopped wave stays on the page's hour-long chart, until Ctrl-C. The timeline has one line per event and
//! verdict change plus periodic soak progress, and a summary of the
//! verdicts per wave. Exit 0 when the story played as designed (the canary
//! passed and the regression was stopped), 1 otherwise.
//!
//! [`Demo::start`] and [`Demo::play`] are the library entry points; the CI
//! test plays the whole story at a higher time scale and asserts the
//! [`DemoOutcome`]. [`run`] is the subcommand's entry point: exit 0 when the
//! story played as designed, 1 otherwise, 2 on a usage error.
//!
//! The simulated fleet is `kura-sim`, a dependency of this crate for the
//! `demo` and `simulate` subcommands only.

mod fleet;
mod outcome;
mod story;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kura_gate::GateConfig;
use tokio::task::JoinHandle;

use crate::cli::LogFormat;
use crate::debug::{DebugServer, DebugState};
use crate::engine::EngineConfig;
use crate::model::ScaledClock;
use crate::poll::{PollConfig, Poller};
use crate::runner::{AgentLoop, Cadence, LoopConfig, MemorySink, StaticTargets};
use crate::view::FleetView;
use kura_sim::{Addressing, SimError, SimKubelet, Simulator};

pub use fleet::{DemoInstance, NEW_IMAGE, OLD_IMAGE, OperatorAction, default_fleet};
pub use outcome::{DemoOutcome, InstanceOutcome, VerdictChange, WaveOutcome};

/// Default speed-up: the story takes about a minute.
pub const DEFAULT_TIME_SCALE: f64 = 45.0;
/// The demo's wave deadline in seconds (the gate's default is 3600).
pub const DEMO_WAVE_DEADLINE_SECONDS: u64 = 1200;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The simulated fleet could not start.
    #[error("simulated fleet: {0}")]
    Sim(#[from] SimError),
    /// The debug endpoint could not listen, not even on an ephemeral port.
    #[error("debug endpoint on {addr}: {source}")]
    Bind {
        /// The address tried last.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The gate refused its configuration or a tick.
    #[error("gate: {0}")]
    Gate(#[from] kura_gate::GateError),
    /// The timeline could not be written.
    #[error("writing the timeline: {0}")]
    Output(#[from] std::io::Error),
    /// A wave ran past its deadline without the gate stopping it.
    #[error("the story stalled: {0}")]
    Stalled(String),
}

/// Settings of a demo run.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Simulated seconds per real second (≥ 1).
    pub time_scale: f64,
    /// Where the debug endpoint listens (an ephemeral port on the same IP
    /// when busy).
    pub listen: SocketAddr,
    /// The fleet.
    pub fleet: Vec<DemoInstance>,
    /// The gate: documented soaks and limits, a shorter wave deadline.
    pub gate: GateConfig,
    /// A shadow gate configuration judged beside `gate` on every sweep
    /// (`--shadow-gate-config`), shown on the pages and in the summary,
    /// never published; `None`: none.
    pub shadow_gate: Option<GateConfig>,
    /// The agent's sweep interval (simulated time), in a rollout or not:
    /// the story's timeline is paced by it.
    pub sweep_interval: Duration,
    /// The orchestrator's tick (simulated time).
    pub tick: Duration,
    /// Time between two pod restarts of one instance during its upgrade
    /// (simulated time); the first comes one interval after scheduling.
    pub pod_roll_interval: Duration,
    /// The regressing pod gains one fd timeout this often (simulated time).
    pub regression_every: Duration,
    /// A progress line at least this often while a verdict holds
    /// (simulated time).
    pub progress_every: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            time_scale: DEFAULT_TIME_SCALE,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            fleet: default_fleet(),
            gate: demo_gate_config(),
            shadow_gate: None,
            sweep_interval: Duration::from_secs(10),
            tick: Duration::from_secs(10),
            pod_roll_interval: Duration::from_secs(20),
            regression_every: Duration::from_secs(20),
            progress_every: Duration::from_secs(180),
        }
    }
}

/// The gate's documented configuration with the demo's wave deadline.
pub fn demo_gate_config() -> GateConfig {
    GateConfig {
        wave_deadline_seconds: DEMO_WAVE_DEADLINE_SECONDS,
        ..GateConfig::default()
    }
}

/// A started demo: fleet serving, agent sweeping, debug endpoint up. Drop
/// it to stop everything.
pub struct Demo {
    config: DemoConfig,
    clock: Arc<ScaledClock>,
    virtual_start: Timestamp,
    real_start: Instant,
    sim: Simulator,
    /// The kubelet of the node-local instances' pods.
    kubelet: SimKubelet,
    targets: StaticTargets,
    sink: MemorySink,
    view: FleetView,
    debug_addr: SocketAddr,
    listen_note: Option<String>,
    tasks: Vec<JoinHandle<()>>,
}

impl Demo {
    /// Starts the fleet, the agent loop and the debug endpoint.
    pub async fn start(config: DemoConfig) -> Result<Demo, DemoError> {
        config.gate.validate()?;
        let virtual_start = Timestamp::now();
        let clock = Arc::new(ScaledClock::new(virtual_start, config.time_scale));
        let sim = Simulator::start(fleet::pod_specs(&config.fleet), &Addressing::default()).await?;
        let targets = StaticTargets::new(fleet::targets(&config.fleet, sim.pods()));
        let kubelet = sim.kubelet(fleet::node_local_pods(&config.fleet));
        let sink = MemorySink::new();
        let view = FleetView::new();

        let metrics = metrics_handle();
        let upkeep = tokio::spawn(crate::telemetry::upkeep(metrics.clone()));
        let (server, listen_note) =
            bind_debug(config.listen, &view, metrics, clock.clone()).await?;
        let debug_addr = server.local_addr().map_err(|source| DemoError::Bind {
            addr: config.listen,
            source,
        })?;
        let mut tasks = vec![
            upkeep,
            tokio::spawn(server.serve(std::future::pending::<()>())),
        ];

        let loop_config = LoopConfig {
            cadence: Cadence::fixed(config.sweep_interval),
            reconcile_every: Duration::from_millis(50),
            engine: EngineConfig {
                agent: "kura-agent-demo".to_owned(),
                gate: config.gate.clone(),
                shadow: config.shadow_gate.clone(),
                ..EngineConfig::default()
            },
        };
        let agent = AgentLoop::new(
            loop_config,
            Poller::with_port_forward_relay(
                PollConfig::default(),
                Arc::new(fleet::DemoKubelet(kubelet.clone())),
            ),
            Arc::new(targets.clone()),
            Arc::new(sink.clone()),
            view.clone(),
            clock.clone(),
        );
        tasks.push(tokio::spawn(agent.run(std::future::pending::<()>())));
        Ok(Demo {
            config,
            clock,
            virtual_start,
            real_start: Instant::now(),
            sim,
            kubelet,
            targets,
            sink,
            view,
            debug_addr,
            listen_note,
            tasks,
        })
    }

    /// The debug page's URL.
    pub fn debug_url(&self) -> String {
        format!("http://{}/", self.debug_addr)
    }

    /// The debug endpoint's address.
    pub fn debug_addr(&self) -> SocketAddr {
        self.debug_addr
    }

    /// From now on the simulated clock runs at real speed (after the story:
    /// the page's last hour then keeps showing it).
    pub fn slow_to_real_time(&self) {
        self.clock.set_scale(1.0);
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A Prometheus handle for `/metrics`; the recorder is installed globally
/// only when no other recorder is (a second demo in one process renders
/// what the first one's recorder collects).
fn metrics_handle() -> metrics_exporter_prometheus::PrometheusHandle {
    let recorder = match crate::telemetry::prometheus_builder() {
        Ok(builder) => builder.build_recorder(),
        Err(_) => metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    };
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_ok() {
        crate::telemetry::describe();
    }
    handle
}

/// Binds the debug endpoint on `listen`, or on an ephemeral port of the
/// same IP when that fails; the note says why it moved.
async fn bind_debug(
    listen: SocketAddr,
    view: &FleetView,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    clock: Arc<ScaledClock>,
) -> Result<(DebugServer, Option<String>), DemoError> {
    let state = DebugState::new(view.clone(), metrics, clock);
    match DebugServer::bind(listen, state.clone()).await {
        Ok(server) => Ok((server, None)),
        Err(first) if listen.port() != 0 => {
            let fallback = SocketAddr::new(listen.ip(), 0);
            let server =
                DebugServer::bind(fallback, state)
                    .await
                    .map_err(|source| DemoError::Bind {
                        addr: fallback,
                        source,
                    })?;
            Ok((server, Some(format!("{listen} is not available ({first})"))))
        }
        Err(source) => Err(DemoError::Bind {
            addr: listen,
            source,
        }),
    }
}

/// Arguments of `kura-agent demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Simulated seconds per real second (≥ 1); the default plays the story
    /// in about a minute.
    #[arg(long, default_value_t = DEFAULT_TIME_SCALE, value_parser = parse_scale)]
    pub time_scale: f64,
    /// Where the debug endpoint and page listen (an ephemeral port when this
    /// one is busy).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// After the story, keep the fleet, the agent and the page up (time
    /// back to real speed) until Ctrl-C.
    #[arg(long)]
    pub keep_serving: bool,
    /// A candidate gate configuration (the format of `run --gate-config`)
    /// judged beside the demo's on every sweep: its verdicts are shown on
    /// the fleet and instance pages, in the verdict API and in the summary,
    /// never published (e.g. `testdata/demo/shadow-loose-fd.json`,
    /// which would let the regression through).
    #[arg(long, value_name = "FILE")]
    pub shadow_gate_config: Option<std::path::PathBuf>,
}

fn parse_scale(input: &str) -> Result<f64, String> {
    let v: f64 = input
        .trim()
        .parse()
        .map_err(|e| format!("{input:?} is not a number: {e}"))?;
    if !v.is_finite() || v < 1.0 {
        return Err(format!("{input} must be a number ≥ 1"));
    }
    Ok(v)
}

/// Entry point of `kura-agent demo`.
pub fn run(args: DemoArgs) -> ExitCode {
    crate::cli::init_logging(LogFormat::Text, "warn");
    let runtime = match crate::cli::multi_thread_runtime("demo") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let shadow_gate = match args
        .shadow_gate_config
        .as_deref()
        .map(crate::cli::gate_file::load)
    {
        None => None,
        Some(Ok(file)) => Some(file.config),
        Some(Err(e)) => {
            // The error quotes a key of the file as written: escaped.
            eprintln!(
                "{}",
                crate::cli::terminal::line(&format!("kura-agent demo: {e}"))
            );
            return ExitCode::from(2);
        }
    };
    let config = DemoConfig {
        time_scale: args.time_scale,
        listen: args.listen,
        shadow_gate,
        ..DemoConfig::default()
    };
    let result = runtime.block_on(async {
        let demo = Demo::start(config).await?;
        let mut out = std::io::stdout();
        let outcome = tokio::select! {
            outcome = demo.play(&mut out) => outcome?,
            _ = tokio::signal::ctrl_c() => return Ok(None),
        };
        if args.keep_serving {
            demo.slow_to_real_time();
            println!(
                "\nThe story is over; the fleet page stays up at {} (time now runs at real speed). Ctrl-C to stop.",
                demo.debug_url()
            );
            let _ = tokio::signal::ctrl_c().await;
        }
        Ok::<_, DemoError>(Some(outcome))
    });
    match result {
        Ok(Some(outcome)) if outcome.played_as_designed() => ExitCode::SUCCESS,
        Ok(Some(_)) => ExitCode::FAILURE,
        Ok(None) => {
            eprintln!("kura-agent demo: interrupted");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "{}",
                crate::cli::terminal::line(&format!("kura-agent demo: {e}"))
            );
            ExitCode::FAILURE
        }
    }
}
