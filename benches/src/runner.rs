//! The measured sides of `fleet-load`, each in its own child process so its
//! CPU time and peak RSS are its own and all keep their connections alive
//! for the whole run: the agent's poll-and-aggregate path (this build's,
//! [`Side::Agent`], or another `kura-agent` binary's, [`Side::Binary`]) and
//! the bare-GET loopback ceiling ([`Side::Bare`]). The parent alternates
//! their sweeps, so all see the same machine load.
//!
//! The line protocol is `kura_agent::tools::fleet_load_side::protocol`: the child side
//! of the agent lives in the agent crate, so `kura-agent fleet-load-side`
//! runs the same code as this build's `fleet-load run-side --side agent`.

use crate::ceiling::BareClient;
use crate::error::LoadError;
use crate::profiler::{is_profiler_line, profiled};
use kura_agent::model::PodIdentity;
use kura_agent::tools::fleet_load_side::protocol::{self, FleetSweep, SideConfig, Sweeper};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// Which side a runner measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// The agent's poller, aggregation and write decision, as built into
    /// this `fleet-load`.
    Agent,
    /// The same path in another `kura-agent` binary (`fleet-load-side`),
    /// e.g. the one taken out of the container image.
    Binary {
        /// The column's name.
        name: String,
        /// The executable.
        path: PathBuf,
    },
    /// Bare GETs with a plain hyper client.
    Bare,
}

impl Side {
    /// The `run-side --side` form of this build's sides.
    pub fn as_arg(&self) -> &str {
        match self {
            Side::Agent => "agent",
            Side::Binary { name, .. } => name,
            Side::Bare => "bare",
        }
    }

    /// Parse the `run-side --side` form (`agent` or `bare`).
    pub fn parse(text: &str) -> Result<Side, String> {
        match text {
            "agent" => Ok(Side::Agent),
            "bare" => Ok(Side::Bare),
            other => Err(format!("{other:?} is not `agent` or `bare`")),
        }
    }

    /// Parse `--agent-bin NAME=PATH`.
    pub fn parse_binary(text: &str) -> Result<Side, String> {
        let (name, path) = text
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| format!("{text:?} is not NAME=PATH"))?;
        if matches!(name, "agent" | "bare") || name.contains(char::is_whitespace) {
            return Err(format!(
                "{name:?}: pick a name other than agent or bare, without spaces"
            ));
        }
        Ok(Side::Binary {
            name: name.to_owned(),
            path: PathBuf::from(path),
        })
    }
}

/// Settings shared by every side.
pub type RunnerConfig = SideConfig;

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
    /// Start `side` as a child (of `exe`, this `fleet-load`, unless the side
    /// is another binary) polling `targets`.
    pub fn spawn(
        exe: &Path,
        side: &Side,
        config: RunnerConfig,
        targets: &[(std::sync::Arc<PodIdentity>, SocketAddr)],
    ) -> Result<Runner, LoadError> {
        let mut cmd = match side {
            Side::Binary { path, .. } => {
                let mut c = Command::new(path);
                c.arg("fleet-load-side");
                c
            }
            Side::Agent => {
                let mut c = profiled(exe);
                c.arg("run-side").args(["--side", side.as_arg()]);
                c
            }
            Side::Bare => {
                let mut c = Command::new(exe);
                c.arg("run-side").args(["--side", side.as_arg()]);
                c
            }
        };
        cmd.args(["--concurrency", &config.concurrency.to_string()])
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
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).map_err(LoadError::Child)? == 0 {
                return Err(protocol("runner exited"));
            }
            if !is_profiler_line(&line) {
                return Ok(line.split_whitespace().map(str::to_owned).collect());
            }
            eprint!("{line}");
        }
    }

    /// Run one sweep of every instance.
    pub fn sweep_all(&mut self) -> Result<FleetSweep, LoadError> {
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
        Ok(FleetSweep {
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

    /// What the side's per-instance histories occupy: `(instances, bytes)`,
    /// `None` for a side without them.
    pub fn history(&mut self) -> Result<Option<(usize, usize)>, LoadError> {
        match self.ask(Some("history"))?.as_slice() {
            [h, i, b] if h == "history" && i == "-" && b == "-" => Ok(None),
            [h, i, b] if h == "history" => match (i.parse(), b.parse()) {
                (Ok(i), Ok(b)) => Ok(Some((i, b))),
                _ => Err(protocol(format!("bad history answer {i:?} {b:?}"))),
            },
            other => Err(protocol(format!("bad history answer {other:?}"))),
        }
    }

    /// What the side's per-instance timelines hold: `(instances, ticks,
    /// runs, bytes, budget)`, `None` for a side without them.
    pub fn timeline(&mut self) -> Result<Option<[u64; 5]>, LoadError> {
        let words = self.ask(Some("timeline"))?;
        match words.as_slice() {
            [t, rest @ ..] if t == "timeline" && rest.len() == 5 => {
                if rest.iter().all(|w| w == "-") {
                    return Ok(None);
                }
                let mut out = [0u64; 5];
                for (slot, w) in out.iter_mut().zip(rest) {
                    *slot = w
                        .parse()
                        .map_err(|_| protocol(format!("bad timeline answer {words:?}")))?;
                }
                Ok(Some(out))
            }
            other => Err(protocol(format!("bad timeline answer {other:?}"))),
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

impl Sweeper for BareClient {
    async fn sweep_all(&mut self) -> FleetSweep {
        let o = BareClient::poll_all(self).await;
        FleetSweep {
            wall: o.wall,
            ok: o.ok,
            failed: o.failed,
            ..FleetSweep::default()
        }
    }
}

/// The child side of this build's runners: read the targets, then answer
/// commands until stdin closes.
pub fn serve(side: &Side, config: RunnerConfig) -> Result<(), LoadError> {
    match side {
        Side::Agent => protocol::serve_agent(config)?,
        Side::Bare => {
            let stdin = std::io::stdin();
            let stdout = std::io::stdout();
            protocol::serve(stdin.lock(), stdout.lock(), config.workers, |targets| {
                let addrs: Vec<_> = targets.iter().map(|(_, a)| *a).collect();
                BareClient::new(&addrs, config.concurrency, config.keep_alive)
            })?;
        }
        Side::Binary { name, .. } => {
            return Err(protocol(format!(
                "side {name} runs in its own binary, not in run-side"
            )));
        }
    }
    Ok(())
}
