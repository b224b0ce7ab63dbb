//! Stand-ins for the Kura pods: kura-sim pods answering `GET
//! /status/rollout` on their own loopback address (the Pod's `podIP`) and
//! the agent's default port, in child processes of the harness so that
//! the open-file limit holds them and the agent keeps one connection to
//! each.
//!
//! Protocol, one line each: the parent runs its own executable with
//! `serve-pods` arguments and writes `pod NAME UID` per pod, then `start`;
//! the child binds one address per pod from `--first-ip`, answers `addr
//! NAME IP:PORT` per pod and `ready`, and serves until its stdin closes.
//! Meanwhile a line `restart NAME` restarts that pod's simulated process
//! (counters back to zero, open connections closed), as a container
//! restart in a rolling update would.

use crate::cluster_load::error::ClusterLoadError;
use crate::sim_process::Generations;
use kura_agent::cli::raise_fd_limit;
use kura_sim::{Addressing, SimPodSpec, Simulator};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Descriptors held per pod by a stand-in process: its listener, the
/// agent's connection, and room for one more (a reconnect while the old
/// connection is still closing). With two, a child serving 9,872 pods
/// sat exactly at a 20,000-descriptor limit: one reconnect more and it
/// stopped accepting, and every poll of its pods timed out.
const FDS_PER_POD: u64 = 3;
/// Descriptors kept for everything else.
const FD_SLACK: u64 = 256;

/// Running stand-in processes and where each pod listens.
#[derive(Debug)]
pub struct StandIns {
    children: Vec<(Child, Option<ChildStdin>)>,
    /// Pod name → (child index, address).
    addrs: HashMap<String, (usize, SocketAddr)>,
}

impl StandIns {
    /// Start stand-ins for `pods` (name, UID), on `port`, from the
    /// addresses `127.(first_octet + k).0.1` for child `k`.
    pub fn spawn(
        exe: &Path,
        pods: &[(String, String)],
        first_octet: u8,
        port: u16,
        generations: Generations,
    ) -> Result<StandIns, ClusterLoadError> {
        let limit = raise_fd_limit(u64::MAX / 2).unwrap_or(1024);
        let per = usize::try_from((limit.saturating_sub(FD_SLACK) / FDS_PER_POD).max(1))
            .unwrap_or(usize::MAX);
        // At most 250 addresses per /24 are used; keep a child's pods
        // within 200 such blocks so the next child's octet is free.
        let per = per.min(200 * 250);
        let mut out = StandIns {
            children: Vec::new(),
            addrs: HashMap::with_capacity(pods.len()),
        };
        for (k, chunk) in pods.chunks(per.max(1)).enumerate() {
            let octet = u8::try_from(usize::from(first_octet) + k).map_err(|_| {
                ClusterLoadError::Protocol(format!(
                    "{} pods do not fit in 127.{first_octet}.0.0 and above",
                    pods.len()
                ))
            })?;
            let mut child = Command::new(exe)
                .arg("serve-pods")
                .args(["--first-ip", &Ipv4Addr::new(127, octet, 0, 1).to_string()])
                .args(["--port", &port.to_string()])
                .args(["--generation", &generations.as_arg()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(ClusterLoadError::Child)?;
            let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ClusterLoadError::Protocol("no pipes".to_owned()));
            };
            let index = out.children.len();
            {
                let mut w = std::io::BufWriter::new(&mut stdin);
                for (name, uid) in chunk {
                    writeln!(w, "pod {name} {uid}").map_err(ClusterLoadError::Child)?;
                }
                writeln!(w, "start").map_err(ClusterLoadError::Child)?;
                w.flush().map_err(ClusterLoadError::Child)?;
            }
            out.children.push((child, Some(stdin)));
            let mut lines = BufReader::new(stdout).lines();
            loop {
                let line = lines
                    .next()
                    .ok_or_else(|| ClusterLoadError::Protocol("exited before `ready`".to_owned()))?
                    .map_err(ClusterLoadError::Child)?;
                match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["ready"] => break,
                    ["addr", name, addr] => {
                        let addr: SocketAddr = addr.parse().map_err(|_| {
                            ClusterLoadError::Protocol(format!("bad address in {line:?}"))
                        })?;
                        out.addrs.insert((*name).to_owned(), (index, addr));
                    }
                    _ => return Err(ClusterLoadError::Protocol(format!("unexpected {line:?}"))),
                }
            }
        }
        if out.addrs.len() != pods.len() {
            return Err(ClusterLoadError::Protocol(format!(
                "{} of {} pods announced",
                out.addrs.len(),
                pods.len()
            )));
        }
        Ok(out)
    }

    /// Where pod `name` listens.
    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.addrs.get(name).map(|(_, a)| *a)
    }

    /// The children's process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|(c, _)| c.id()).collect()
    }

    /// Restart pod `name`'s simulated process.
    pub fn restart(&mut self, name: &str) -> Result<(), ClusterLoadError> {
        let (index, _) = *self
            .addrs
            .get(name)
            .ok_or_else(|| ClusterLoadError::Protocol(format!("no stand-in for {name}")))?;
        let stdin = self
            .children
            .get_mut(index)
            .and_then(|(_, s)| s.as_mut())
            .ok_or_else(|| ClusterLoadError::Protocol("stand-in stdin closed".to_owned()))?;
        writeln!(stdin, "restart {name}").map_err(ClusterLoadError::Child)?;
        stdin.flush().map_err(ClusterLoadError::Child)
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        for (child, stdin) in &mut self.children {
            // Closing stdin tells the child to stop.
            drop(stdin.take());
            let _ = child.wait();
        }
    }
}

/// The child side: read the pods from stdin, serve them from `first_ip` on
/// `port`, announce them, then restart pods on request until stdin closes.
pub fn serve_pods(
    first_ip: Ipv4Addr,
    port: u16,
    generations: Generations,
) -> Result<(), ClusterLoadError> {
    let mut specs = Vec::new();
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    loop {
        line.clear();
        if stdin
            .read_line(&mut line)
            .map_err(ClusterLoadError::Child)?
            == 0
        {
            return Ok(());
        }
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["start"] => break,
            ["pod", name, uid] => {
                let mut spec = SimPodSpec::new(*name);
                spec.uid = (*uid).to_owned();
                spec.node.report_generation = generations.of(specs.len());
                specs.push(spec);
            }
            _ => return Err(ClusterLoadError::Protocol(format!("unexpected {line:?}"))),
        }
    }
    drop(stdin);
    let wanted = FDS_PER_POD * specs.len() as u64 + FD_SLACK;
    if let Ok(limit) = raise_fd_limit(wanted)
        && limit < wanted
    {
        eprintln!("serve-pods: open-file limit {limit} is below the {wanted} this process needs");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(ClusterLoadError::Runtime)?;
    runtime.block_on(async {
        let sim = Simulator::start(specs, &Addressing::Loopback { first_ip, port }).await?;
        {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for pod in sim.pods() {
                if pod.addr().port() != port {
                    return Err(ClusterLoadError::Protocol(format!(
                        "{} could not listen on port {port} of its own address",
                        pod.name()
                    )));
                }
                writeln!(out, "addr {} {}", pod.name(), pod.addr())
                    .map_err(ClusterLoadError::Child)?;
            }
            writeln!(out, "ready").map_err(ClusterLoadError::Child)?;
            out.flush().map_err(ClusterLoadError::Child)?;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        while let Some(line) = rx.recv().await {
            if let Some(name) = line.trim().strip_prefix("restart ")
                && let Some(pod) = sim.pod(name)
            {
                pod.restart();
            }
        }
        drop(sim);
        Ok(())
    })
}
