//! The measured sides of `fleet-load`, each in its own child process so its
//! CPU time and peak RSS are its own and both keep their connections alive
//! for the whole run: the agent's poll-and-aggregate path
//! ([`Side::Agent`]) and the bare-GET loopback ceiling ([`Side::Bare`]).
//! The parent alternates their sweeps, so both see the same machine load.
//!
//! Protocol on the child's stdin/stdout, one line each: the parent sends
//! `pod NAME UID IP:PORT` per pod and `start`, the child answers `ready`;
//! then per `sweep` the child answers `swept WALL_NS CPU_NS OK FAILED
//! AGGREGATE_NS SAMPLES`, and per `stats` it answers `stats PEAK_RSS_BYTES`.
//! The child exits when its stdin closes.

use crate::agent_path::AgentFleet;
use crate::ceiling::BareClient;
use crate::error::LoadError;
use crate::proc_stats::{cpu_time, peak_rss};
use crate::sim_process::{FD_SLACK, pod_target};
use kura_agent::model::PodIdentity;
use kura_agent::poll::{PollConfig, Poller};
use kura_sim::raise_fd_limit;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Which side a runner measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The agent's poller, aggregation and write decision.
    Agent,
    /// Bare GETs with a plain hyper client.
    Bare,
}

impl Side {
    /// The command-line form.
    pub fn as_arg(self) -> &'static str {
        match self {
            Side::Agent => "agent",
            Side::Bare => "bare",
        }
    }

    /// Parse the command-line form.
    pub fn parse(text: &str) -> Result<Side, String> {
        match text {
            "agent" => Ok(Side::Agent),
            "bare" => Ok(Side::Bare),
            other => Err(format!("{other:?} is not `agent` or `bare`")),
        }
    }
}

/// Settings shared by both sides.
#[derive(Debug, Clone, Copy)]
pub struct RunnerConfig {
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Pods per instance (agent side).
    pub pods_per_instance: usize,
    /// Tokio worker threads (`None`: one per CPU).
    pub workers: Option<usize>,
    /// Keep one connection per pod open between sweeps.
    pub keep_alive: bool,
}

/// One sweep as a runner measured it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Swept {
    /// Wall time of the sweep.
    pub wall: Duration,
    /// The runner's CPU time (user + system) during the sweep.
    pub cpu: Duration,
    /// Pods that answered as expected (a valid report; for the bare side,
    /// status 200 and a fully read body).
    pub ok: usize,
    /// Pods that did not.
    pub failed: usize,
    /// Time spent in aggregation (agent side), summed over instances.
    pub aggregate: Duration,
    /// Samples aggregated (agent side).
    pub samples: usize,
}

/// A running side process.
#[derive(Debug)]
pub struct Runner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

fn protocol(what: impl Into<String>) -> LoadError {
    LoadError::Protocol(what.into())
}

impl Runner {
    /// Start `side` as a child of `exe` polling `targets`.
    pub fn spawn(
        exe: &Path,
        side: Side,
        config: RunnerConfig,
        targets: &[(PodIdentity, SocketAddr)],
    ) -> Result<Runner, LoadError> {
        let mut cmd = Command::new(exe);
        cmd.arg("run-side")
            .args(["--side", side.as_arg()])
            .args(["--concurrency", &config.concurrency.to_string()])
            .args(["--pods-per-instance", &config.pods_per_instance.to_string()]);
        if let Some(w) = config.workers {
            cmd.args(["--workers", &w.to_string()]);
        }
        if !config.keep_alive {
            cmd.arg("--no-keep-alive");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(LoadError::Child)?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| protocol("no stdout pipe"))?;
        let mut runner = Runner {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        {
            let stdin = runner
                .stdin
                .as_mut()
                .ok_or_else(|| protocol("no stdin pipe"))?;
            let mut w = std::io::BufWriter::new(stdin);
            for (pod, addr) in targets {
                writeln!(w, "pod {} {} {addr}", pod.name, pod.uid).map_err(LoadError::Child)?;
            }
            writeln!(w, "start").map_err(LoadError::Child)?;
            w.flush().map_err(LoadError::Child)?;
        }
        match runner.ask(None)?.as_slice() {
            [w] if w == "ready" => Ok(runner),
            other => Err(protocol(format!("expected `ready`, got {other:?}"))),
        }
    }

    /// Send `command` (if any) and read one answer line, split in words.
    fn ask(&mut self, command: Option<&str>) -> Result<Vec<String>, LoadError> {
        if let Some(c) = command {
            let stdin = self
                .stdin
                .as_mut()
                .ok_or_else(|| protocol("stdin closed"))?;
            writeln!(stdin, "{c}").map_err(LoadError::Child)?;
            stdin.flush().map_err(LoadError::Child)?;
        }
        let mut line = String::new();
        if self.stdout.read_line(&mut line).map_err(LoadError::Child)? == 0 {
            return Err(protocol("runner exited"));
        }
        Ok(line.split_whitespace().map(str::to_owned).collect())
    }

    /// Run one sweep.
    pub fn sweep(&mut self) -> Result<Swept, LoadError> {
        let words = self.ask(Some("sweep"))?;
        let n = |i: usize| -> Result<u64, LoadError> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| protocol(format!("bad sweep answer {words:?}")))
        };
        if words.first().map(String::as_str) != Some("swept") {
            return Err(protocol(format!("bad sweep answer {words:?}")));
        }
        Ok(Swept {
            wall: Duration::from_nanos(n(1)?),
            cpu: Duration::from_nanos(n(2)?),
            ok: usize::try_from(n(3)?).unwrap_or(usize::MAX),
            failed: usize::try_from(n(4)?).unwrap_or(usize::MAX),
            aggregate: Duration::from_nanos(n(5)?),
            samples: usize::try_from(n(6)?).unwrap_or(usize::MAX),
        })
    }

    /// The runner's peak RSS so far, in bytes.
    pub fn peak_rss(&mut self) -> Result<u64, LoadError> {
        match self.ask(Some("stats"))?.as_slice() {
            [s, v] if s == "stats" => v
                .parse()
                .map_err(|_| protocol(format!("bad stats answer {v:?}"))),
            other => Err(protocol(format!("bad stats answer {other:?}"))),
        }
    }

    /// The runner's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// What a runner drives.
enum Driver {
    Agent(AgentFleet),
    Bare(Box<BareClient>),
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The child side of a runner: read the targets, then answer commands
/// until stdin closes.
pub fn serve(side: Side, config: RunnerConfig) -> Result<(), LoadError> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut targets = Vec::new();
    for line in lines.by_ref() {
        let line = line.map_err(LoadError::Child)?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["start"] => break,
            ["pod", name, uid, addr] => targets.push(pod_target(name, uid, addr)?),
            _ => return Err(protocol(format!("unexpected line {line:?}"))),
        }
    }
    let wanted = targets.len() as u64 + FD_SLACK;
    if raise_fd_limit(wanted).map_err(LoadError::Child)? < wanted {
        eprintln!(
            "fleet-load {}: open-file limit below {wanted}",
            side.as_arg()
        );
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(w) = config.workers {
        rt.worker_threads(w.max(1));
    }
    let rt = rt.build().map_err(LoadError::Runtime)?;
    let mut driver = match side {
        Side::Agent => {
            let poller = Poller::new(PollConfig {
                concurrency: config.concurrency,
                keep_alive: config.keep_alive,
                ..PollConfig::default()
            });
            Driver::Agent(AgentFleet::new(poller, &targets, config.pods_per_instance))
        }
        Side::Bare => {
            let addrs: Vec<_> = targets.iter().map(|(_, a)| *a).collect();
            // The client's pool needs the runtime's timer.
            let _guard = rt.enter();
            Driver::Bare(Box::new(BareClient::new(
                &addrs,
                config.concurrency,
                config.keep_alive,
            )))
        }
    };
    drop(targets);
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "ready").map_err(LoadError::Child)?;
    out.flush().map_err(LoadError::Child)?;
    for line in lines {
        let line = line.map_err(LoadError::Child)?;
        match line.trim() {
            "sweep" => {
                let cpu0 = cpu_time();
                let swept = match &mut driver {
                    Driver::Agent(fleet) => {
                        let o = rt.block_on(fleet.sweep());
                        if !o.errors.is_empty() {
                            eprintln!("fleet-load agent: failed samples {:?}", o.errors);
                        }
                        Swept {
                            wall: o.wall,
                            cpu: Duration::ZERO,
                            ok: o.ok,
                            failed: o.errors.values().sum(),
                            aggregate: o.aggregate_time,
                            samples: o.samples,
                        }
                    }
                    Driver::Bare(client) => {
                        let o = rt.block_on(client.sweep());
                        Swept {
                            wall: o.wall,
                            ok: o.ok,
                            failed: o.failed,
                            ..Swept::default()
                        }
                    }
                };
                let cpu = cpu_time().saturating_sub(cpu0);
                writeln!(
                    out,
                    "swept {} {} {} {} {} {}",
                    nanos(swept.wall),
                    nanos(cpu),
                    swept.ok,
                    swept.failed,
                    nanos(swept.aggregate),
                    swept.samples
                )
                .map_err(LoadError::Child)?;
            }
            "stats" => {
                writeln!(out, "stats {}", peak_rss().unwrap_or(0)).map_err(LoadError::Child)?
            }
            other => return Err(protocol(format!("unknown command {other:?}"))),
        }
        out.flush().map_err(LoadError::Child)?;
    }
    Ok(())
}
