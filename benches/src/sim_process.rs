//! Simulated pods in separate processes, so the measured (agent) process
//! holds only its own side of each connection and its memory and CPU time
//! are its own.
//!
//! Protocol: the parent runs its own executable with `serve-sim` arguments;
//! the child starts its pods, prints one line `pod NAME UID IP:PORT` per
//! pod, then `ready`, and serves until its stdin is closed (the parent
//! exits or drops the [`SimProcesses`]). Meanwhile, to each line `stats` on
//! its stdin it answers `stats CONNECTIONS`: the connections its pods have
//! accepted so far.

use crate::error::LoadError;
use kura_agent::cli::raise_fd_limit;
use kura_agent::model::PodIdentity;
use kura_agent::tools::fleet_load_side::protocol::parse_target;
use kura_sim::{Addressing, ReportGeneration, SimPodSpec, Simulator};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub use kura_agent::tools::fleet_load_side::protocol::FD_SLACK;

/// Which report generation the simulated pods answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generations {
    /// Pod `i` answers in generation `i % 4 + 1` (a fleet mid-migration).
    Mixed,
    /// Every pod answers in this generation.
    All(ReportGeneration),
}

impl Generations {
    /// The generation of pod `i`.
    pub fn of(self, i: usize) -> ReportGeneration {
        match self {
            Generations::All(g) => g,
            Generations::Mixed => match i % 4 {
                0 => ReportGeneration::G1,
                1 => ReportGeneration::G2,
                2 => ReportGeneration::G3,
                _ => ReportGeneration::G4,
            },
        }
    }

    /// The command-line form: `mixed`, or `1` to `4`.
    pub fn parse(text: &str) -> Result<Generations, String> {
        if text == "mixed" {
            return Ok(Generations::Mixed);
        }
        let n: u8 = text
            .parse()
            .map_err(|_| format!("{text:?} is not `mixed` or 1–4"))?;
        ReportGeneration::try_from(n).map(Generations::All)
    }

    /// The command-line form of this value.
    pub fn as_arg(self) -> String {
        match self {
            Generations::Mixed => "mixed".to_owned(),
            Generations::All(g) => u8::from(g).to_string(),
        }
    }
}

/// The first loopback address of simulator process `k`: 127.(100+k).0.1,
/// away from the 127.10.x.y and 127.20.x.y the tests and scenarios use.
pub fn first_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        100u8.saturating_add(u8::try_from(k).unwrap_or(u8::MAX)),
        0,
        1,
    )
}

/// Descriptors a simulator process needs per pod when `sides` measuring
/// sides each keep a connection to it: the listener and one per side.
pub fn fds_per_pod(sides: usize) -> u64 {
    1 + sides.max(1) as u64
}

/// How many simulator processes `pods` pods need under an open-file limit
/// of `fd_limit` per process, with `sides` measuring sides connected.
pub fn processes_needed(pods: usize, fd_limit: u64, sides: usize) -> usize {
    let per = (fd_limit.saturating_sub(FD_SLACK) / fds_per_pod(sides)).max(1) as usize;
    pods.div_ceil(per).max(1)
}

/// One simulator child process and its pipes.
#[derive(Debug)]
struct SimChild {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// Running simulator child processes and the pods they serve.
#[derive(Debug)]
pub struct SimProcesses {
    children: Vec<SimChild>,
    targets: Vec<(std::sync::Arc<PodIdentity>, SocketAddr)>,
}

impl SimProcesses {
    /// Start `pods` pods spread over `processes` children of `exe`, each
    /// to be polled by `sides` measuring sides.
    pub fn spawn(
        exe: &Path,
        pods: usize,
        processes: usize,
        sides: usize,
        generations: Generations,
    ) -> Result<SimProcesses, LoadError> {
        let processes = processes.clamp(1, pods.max(1));
        let mut out = SimProcesses {
            children: Vec::with_capacity(processes),
            targets: Vec::with_capacity(pods),
        };
        let mut offset = 0;
        for k in 0..processes {
            let n = pods / processes + usize::from(k < pods % processes);
            let mut child = Command::new(exe)
                .arg("serve-sim")
                .args(["--pods", &n.to_string()])
                .args(["--offset", &offset.to_string()])
                .args(["--first-ip", &first_ip(k).to_string()])
                .args(["--generation", &generations.as_arg()])
                .args(["--sides", &sides.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(LoadError::Child)?;
            let stdin = child.stdin.take();
            let stdout = child.stdout.take();
            let Some(stdout) = stdout else {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LoadError::Protocol("no stdout pipe".to_owned()));
            };
            out.children.push(SimChild {
                child,
                stdin,
                stdout: BufReader::new(stdout),
            });
            out.read_targets(n)?;
            offset += n;
        }
        Ok(out)
    }

    /// Read the `pod` lines and `ready` of the last child started.
    fn read_targets(&mut self, n: usize) -> Result<(), LoadError> {
        let Some(SimChild { stdout: r, .. }) = self.children.last_mut() else {
            return Ok(());
        };
        let targets = &mut self.targets;
        let mut line = String::new();
        let mut got = 0;
        loop {
            line.clear();
            if r.read_line(&mut line).map_err(LoadError::Child)? == 0 {
                return Err(LoadError::Protocol(format!(
                    "exited after {got} of {n} pods"
                )));
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["ready"] if got == n => return Ok(()),
                ["pod", name, uid, addr] => {
                    targets.push(parse_target(name, uid, addr)?);
                    got += 1;
                }
                _ => return Err(LoadError::Protocol(format!("unexpected line {line:?}"))),
            }
        }
    }

    /// Every pod as a poll target, in start order.
    pub fn targets(&self) -> &[(std::sync::Arc<PodIdentity>, SocketAddr)] {
        &self.targets
    }

    /// The children's process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.child.id()).collect()
    }

    /// Connections the simulated pods have accepted so far, over every
    /// child process.
    pub fn connections(&mut self) -> Result<u64, LoadError> {
        let mut total = 0;
        for c in &mut self.children {
            let stdin = c
                .stdin
                .as_mut()
                .ok_or_else(|| LoadError::Protocol("simulator stdin closed".to_owned()))?;
            writeln!(stdin, "stats").map_err(LoadError::Child)?;
            stdin.flush().map_err(LoadError::Child)?;
            let mut line = String::new();
            c.stdout.read_line(&mut line).map_err(LoadError::Child)?;
            total += match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                ["stats", n] => n
                    .parse::<u64>()
                    .map_err(|_| LoadError::Protocol(format!("bad stats answer {line:?}")))?,
                _ => return Err(LoadError::Protocol(format!("bad stats answer {line:?}"))),
            };
        }
        Ok(total)
    }
}

impl Drop for SimProcesses {
    fn drop(&mut self) {
        for c in &mut self.children {
            // Closing stdin tells the child to stop.
            drop(c.stdin.take());
            let _ = c.child.wait();
        }
    }
}

/// The child side: start `pods` healthy pods named `pod-<offset+i>` from
/// `first_ip`, announce them on stdout and serve until stdin closes.
pub fn serve(
    pods: usize,
    offset: usize,
    first_ip: Ipv4Addr,
    sides: usize,
    generations: Generations,
) -> Result<(), LoadError> {
    let wanted = fds_per_pod(sides) * pods as u64 + FD_SLACK;
    match raise_fd_limit(wanted) {
        Ok(limit) if limit < wanted => {
            eprintln!("serve-sim: open-file limit {limit} is below the {wanted} this process needs")
        }
        Ok(_) => {}
        Err(e) => eprintln!("serve-sim: cannot raise the open-file limit: {e}"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(LoadError::Runtime)?;
    runtime.block_on(async {
        let specs = (0..pods)
            .map(|i| {
                let mut spec = SimPodSpec::new(format!("pod-{}", offset + i));
                spec.node.report_generation = generations.of(offset + i);
                spec
            })
            .collect();
        let addressing = Addressing::Loopback { first_ip, port: 0 };
        let sim = Simulator::start(specs, &addressing).await?;
        {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for pod in sim.pods() {
                writeln!(out, "pod {} {} {}", pod.name(), pod.uid(), pod.addr())
                    .map_err(LoadError::Child)?;
            }
            writeln!(out, "ready").map_err(LoadError::Child)?;
            out.flush().map_err(LoadError::Child)?;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            // Read until the parent closes our stdin (or exits); dropping
            // `tx` then ends the loop below.
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        while let Some(line) = rx.recv().await {
            if line.trim() == "stats" {
                let mut out = std::io::stdout().lock();
                writeln!(out, "stats {}", sim.stats().connections()).map_err(LoadError::Child)?;
                out.flush().map_err(LoadError::Child)?;
            }
        }
        drop(sim);
        Ok(())
    })
}
