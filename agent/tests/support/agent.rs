//! `kura-agent run` inside a test, as a process would run it: its flags
//! parsed by clap exactly as on the command line ([`run_args`]), and an
//! [`Agent`] on its own thread and tokio runtime, so that stopping it is a
//! SIGTERM (graceful: pending writes get their grace period) and crashing
//! it drops every task it spawned at once (no Lease release, no write
//! flush), as a process kill would.

use std::time::Duration;

use clap::Parser;
use kura_agent::cli::run::{ApiClients, RunArgs, run_with_clients};
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};
use tokio::sync::oneshot;

/// `kura-agent run`'s flags on their own, as clap parses them.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    args: RunArgs,
}

/// The flags of `kura-agent run` from `argv` (the first entry is the
/// program name), exactly as the command line would give them.
pub fn run_args<I, S>(argv: I) -> RunArgs
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    Flags::try_parse_from(argv).expect("agent flags").args
}

/// Logs of the agents to the test's output, filtered by `RUST_LOG` (else
/// `default_filter`); once per process.
pub fn init_test_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A running agent.
pub struct Agent {
    stop: Option<oneshot::Sender<()>>,
    crash: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Agent {
    /// Starts `kura-agent run` with `args` against the API server of
    /// `config`; its `/metrics` renders `metrics`.
    ///
    /// With `own: None` the agent records into the process's global
    /// recorder (whose handle `metrics` is: tests read deltas) on a
    /// two-worker runtime. With `own: Some(recorder)` (whose handle
    /// `metrics` is) it records into that recorder alone, set for its
    /// thread, so its runtime is a current-thread one: every task runs on
    /// that thread and sees it.
    pub fn start(
        args: RunArgs,
        config: kube::Config,
        metrics: PrometheusHandle,
        own: Option<PrometheusRecorder>,
    ) -> Agent {
        let (stop, stopped) = oneshot::channel::<()>();
        let (crash, crashed) = oneshot::channel::<()>();
        let name = args
            .agent_identity
            .clone()
            .unwrap_or_else(|| "agent".to_owned());
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let _local = own.as_ref().map(|r| metrics::set_default_local_recorder(r));
                if own.is_some() {
                    kura_agent::telemetry::describe();
                }
                let runtime = match &own {
                    Some(_) => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build(),
                    None => tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build(),
                }
                .expect("agent runtime");
                let ran = runtime.block_on(async move {
                    // The shipped binary's clients: HTTP/2 to the test
                    // API server, HTTP/1.1 for port-forwards.
                    let clients = ApiClients::new(config).expect("agent clients");
                    let run = run_with_clients(args, clients, metrics, async {
                        let _ = stopped.await;
                    });
                    tokio::select! {
                        r = run => Some(r.map_err(|e| e.to_string())),
                        _ = crashed => None,
                    }
                });
                match ran {
                    Some(result) => result,
                    None => {
                        // A crash: every task of the agent is dropped at
                        // once, without waiting for any of them.
                        eprintln!("{name}: crashed");
                        runtime.shutdown_background();
                        Ok(())
                    }
                }
            })
            .expect("agent thread");
        Agent {
            stop: Some(stop),
            crash: Some(crash),
            thread: Some(thread),
        }
    }

    /// Graceful shutdown (SIGTERM): waits at most 20 s for the agent to
    /// finish its pending writes and stop, and for it to have run without
    /// error.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let joined = tokio::time::timeout(
                Duration::from_secs(20),
                tokio::task::spawn_blocking(move || thread.join()),
            )
            .await
            .expect("the agent stops within 20 s")
            .expect("join task");
            let result = joined.expect("the agent thread did not panic");
            result.expect("the agent ran without error");
        }
    }

    /// A crash: every task of the agent is dropped at once.
    pub fn crash(&mut self) {
        if let Some(crash) = self.crash.take() {
            let _ = crash.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Whether the agent stopped (or was never started).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.crash();
    }
}
