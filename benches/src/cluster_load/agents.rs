//! The agent processes of a run: one `kura-agent run` with its default
//! settings, or `--replicas N` of them sharding the instances (each with
//! `KURA_AGENT_SHARDING=true` and unit watches
//! (`KURA_AGENT_SHARD_POD_SELECTION=instance-label`), its own identity
//! `cluster-load-agent-<i>`,
//! its Lease in the test namespace and its own debug port), and what the
//! harness reads of each at a moment: CPU time and `/metrics`, plus the
//! `VmRSS` sampled on a thread per process.

use crate::cluster_load::error::ClusterLoadError;
use crate::cluster_load::measure::{AgentMetrics, RssSampler, median, peak_rss_of};
use crate::cluster_load::replicas::{OWNED_INSTANCES_METRIC, ReplicaFigures};
use crate::cluster_load::{ClusterLoadConfig, PhaseFigures};
use crate::proc_stats::{cpu_time_of, mib};
use jiff::Timestamp;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The agent's counter of status write bodies' bytes.
pub const STATUS_WRITE_BYTES_METRIC: &str = "kura_agent_status_write_bytes_total";
/// The agent's gauge of its publication target (`target` label, 1 for the
/// one chosen at start).
pub const PUBLICATION_TARGET_METRIC: &str = "kura_agent_publication_target";

/// How often each agent's RSS is sampled.
const RSS_EVERY: Duration = Duration::from_millis(500);
/// At most this long for a started agent's debug server to answer.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The identity of replica `index` when the replicas shard.
pub fn replica_identity(index: usize) -> String {
    format!("cluster-load-agent-{index}")
}

/// One agent process and how to reach it.
pub struct AgentProcess {
    child: Child,
    /// Its process id.
    pub pid: u32,
    /// Its debug server (`/metrics`, `/debug/members`).
    pub debug: SocketAddr,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// `--agent-identity` when the replicas shard (`None`: one agent with
    /// its default identity).
    pub identity: Option<String>,
    rss: RssSampler,
}

impl AgentProcess {
    fn alive(&mut self) -> Result<(), ClusterLoadError> {
        let who = self.identity.as_deref().unwrap_or("agent");
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(ClusterLoadError::AgentExited(format!(
                "{who}: {status}; log {}",
                self.log.display()
            ))),
            Err(e) => Err(ClusterLoadError::AgentExited(format!("{who}: {e}"))),
        }
    }

    fn stop(&mut self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            // SAFETY: kill has no memory-safety preconditions; the pid is
            // our own child's, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// One replica's counters at a moment.
struct ReplicaMark {
    cpu: Duration,
    metrics: AgentMetrics,
}

/// A moment of the run: wall time and every replica's counters.
pub struct Mark {
    /// When (monotonic).
    pub at: Instant,
    /// When (wall clock, for the audit log's windows).
    pub ts: Timestamp,
    replicas: Vec<ReplicaMark>,
}

impl Mark {
    /// The moment before the agents start: every counter at zero.
    pub fn before_start(replicas: usize) -> Mark {
        Mark {
            at: Instant::now(),
            ts: Timestamp::now(),
            replicas: (0..replicas)
                .map(|_| ReplicaMark {
                    cpu: Duration::ZERO,
                    metrics: AgentMetrics::default(),
                })
                .collect(),
        }
    }
}

/// Every agent process of the run (one, or the sharding replicas).
pub struct Agents {
    processes: Vec<AgentProcess>,
    sharding: bool,
}

impl Agents {
    /// Start `config.replicas` agents (at least one) and wait until each
    /// one's debug server answers. With one replica: `kura-agent run` with
    /// its default settings, no `KURA_AGENT_*` variable from this
    /// environment, only the debug address moved to a free loopback port
    /// (the default `[::]:8080` may be taken on a shared machine) and, with
    /// `agent_context`, a kubeconfig whose current context is that one.
    /// With more: the same, plus sharding on, identity
    /// [`replica_identity`], Leases in `config.namespace`.
    pub fn start(config: &ClusterLoadConfig) -> Result<Agents, ClusterLoadError> {
        let kubeconfig = agent_kubeconfig(config)?;
        let n = config.replicas.max(1);
        let sharding = n > 1;
        let mut processes = Vec::with_capacity(n);
        for i in 0..n {
            let identity = sharding.then(|| replica_identity(i));
            let log = if sharding {
                config.work_dir.join(format!("agent-{i}.log"))
            } else {
                config.work_dir.join("agent.log")
            };
            processes.push(spawn(config, &kubeconfig, identity, log)?);
        }
        let deadline = Instant::now() + READY_WITHIN;
        for p in &mut processes {
            while AgentMetrics::scrape(p.debug).is_err() {
                p.alive()?;
                if Instant::now() > deadline {
                    return Err(ClusterLoadError::Timeout(format!(
                        "the debug server of {} to answer",
                        p.identity.as_deref().unwrap_or("the agent")
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(Agents {
            processes,
            sharding,
        })
    }

    /// Start one more sharding replica (identity [`replica_identity`] of
    /// the next index) and wait until its debug server answers; answers
    /// its identity.
    pub fn add(&mut self, config: &ClusterLoadConfig) -> Result<String, ClusterLoadError> {
        let kubeconfig = agent_kubeconfig(config)?;
        let i = self.processes.len();
        let identity = replica_identity(i);
        let log = config.work_dir.join(format!("agent-{i}.log"));
        let mut p = spawn(config, &kubeconfig, Some(identity.clone()), log)?;
        let deadline = Instant::now() + READY_WITHIN;
        while AgentMetrics::scrape(p.debug).is_err() {
            p.alive()?;
            if Instant::now() > deadline {
                return Err(ClusterLoadError::Timeout(format!(
                    "the debug server of {identity} to answer"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.processes.push(p);
        Ok(identity)
    }

    /// Stop replica `index` (SIGTERM, then SIGKILL after 10 s); the others
    /// go on.
    pub fn stop_one(&mut self, index: usize) {
        if let Some(p) = self.processes.get_mut(index) {
            p.stop();
        }
    }

    /// Replica `index`'s identity (`agent` without one).
    pub fn identity(&self, index: usize) -> String {
        self.processes
            .get(index)
            .and_then(|p| p.identity.clone())
            .unwrap_or_else(|| "agent".into())
    }

    /// Every running replica's identity and `/metrics` now (a replica
    /// whose metrics cannot be read is left out).
    pub fn living(&mut self) -> Vec<(String, AgentMetrics)> {
        self.processes
            .iter_mut()
            .filter_map(|p| {
                if !matches!(p.child.try_wait(), Ok(None)) {
                    return None;
                }
                let m = AgentMetrics::scrape(p.debug).ok()?;
                Some((p.identity.clone().unwrap_or_else(|| "agent".into()), m))
            })
            .collect()
    }

    /// The processes, in replica order.
    pub fn processes(&self) -> &[AgentProcess] {
        &self.processes
    }

    /// An error when any agent has exited.
    pub fn alive(&mut self) -> Result<(), ClusterLoadError> {
        self.processes.iter_mut().try_for_each(AgentProcess::alive)
    }

    /// Every replica's CPU time and `/metrics` now.
    pub fn mark(&mut self) -> Result<Mark, ClusterLoadError> {
        self.alive()?;
        let replicas = self
            .processes
            .iter()
            .map(|p| {
                Ok(ReplicaMark {
                    metrics: AgentMetrics::scrape(p.debug)?,
                    cpu: cpu_time_of(p.pid).unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, ClusterLoadError>>()?;
        Ok(Mark {
            at: Instant::now(),
            ts: Timestamp::now(),
            replicas,
        })
    }

    /// Each replica's figures between two marks, in replica order.
    pub fn figures(&self, from: &Mark, to: &Mark) -> Vec<PhaseFigures> {
        self.processes
            .iter()
            .zip(from.replicas.iter().zip(&to.replicas))
            .map(|(p, (f, t))| replica_figures(from.at, to.at, f, t, &p.rss, p.pid, self.sharding))
            .collect()
    }

    /// Each replica's publication target at `mark`, as its
    /// `kura_agent_publication_target` gauge says (`None`: no target at 1,
    /// e.g. an agent that predates the gauge).
    pub fn publication_targets(mark: &Mark) -> Vec<Option<&'static str>> {
        mark.replicas
            .iter()
            .map(|r| {
                ["instance", "companion"].into_iter().find(|t| {
                    r.metrics
                        .sum(PUBLICATION_TARGET_METRIC, &format!("target=\"{t}\""))
                        >= 1.0
                })
            })
            .collect()
    }

    /// Each replica's `VmHWM` now, MiB.
    pub fn peaks_mib(&self) -> Vec<f64> {
        self.processes
            .iter()
            .map(|p| mib(peak_rss_of(p.pid).unwrap_or(0)))
            .collect()
    }

    /// Stop every agent (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) {
        for p in &mut self.processes {
            p.stop();
        }
    }

    /// The per-replica part of the report from each phase's figures (in
    /// replica order) and each replica's peak.
    pub fn replica_reports(
        &self,
        startup: Vec<PhaseFigures>,
        rest: Vec<PhaseFigures>,
        rollout: Vec<PhaseFigures>,
        peaks_mib: &[f64],
    ) -> Vec<ReplicaFigures> {
        self.processes
            .iter()
            .zip(startup.into_iter().zip(rest).zip(rollout))
            .zip(peaks_mib)
            .map(|((p, ((startup, rest), rollout)), peak)| {
                let (log_warnings, log_errors) = log_levels(&p.log);
                ReplicaFigures {
                    identity: p.identity.clone(),
                    pid: p.pid,
                    log: p.log.display().to_string(),
                    peak_rss_mib: *peak,
                    startup,
                    rest,
                    rollout,
                    log_warnings,
                    log_errors,
                }
            })
            .collect()
    }
}

/// One replica's figures between two marks.
fn replica_figures(
    from_at: Instant,
    to_at: Instant,
    from: &ReplicaMark,
    to: &ReplicaMark,
    rss: &RssSampler,
    pid: u32,
    sharding: bool,
) -> PhaseFigures {
    let secs = to_at.duration_since(from_at).as_secs_f64().max(1e-9);
    let delta =
        |name: &str, label: &str| to.metrics.sum(name, label) - from.metrics.sum(name, label);
    let samples = rss.between(from_at, to_at);
    let polls = delta("kura_agent_polls_total", "");
    let writes = delta("kura_agent_status_writes_total", "result=\"applied\"");
    let bytes = delta(STATUS_WRITE_BYTES_METRIC, "");
    PhaseFigures {
        seconds: secs,
        cpu_percent: 100.0 * to.cpu.saturating_sub(from.cpu).as_secs_f64() / secs,
        rss_median_mib: mib(median(&samples)),
        rss_max_mib: mib(samples.iter().copied().max().unwrap_or(0)),
        peak_rss_mib: mib(peak_rss_of(pid).unwrap_or(0)),
        polls_per_s: polls / secs,
        failed_polls: polls - delta("kura_agent_polls_total", "result=\"ok\""),
        status_writes_per_s: writes / secs,
        status_write_bytes_per_s: bytes / secs,
        status_write_bytes_per_write: per_write(bytes, writes),
        status_writes_per_instance_per_min: None,
        status_write_bytes_per_instance_per_min: None,
        events_per_s: delta("kura_agent_events_total", "") / secs,
        owned_instances: if sharding {
            to.metrics.get(OWNED_INSTANCES_METRIC)
        } else {
            None
        },
        api_requests_per_s: None,
        api_by_kind: BTreeMap::new(),
        apiserver: BTreeMap::new(),
    }
}

/// Bytes per write, `None` without writes.
pub fn per_write(bytes: f64, writes: f64) -> Option<f64> {
    (writes > 0.0).then(|| bytes / writes)
}

/// The kubeconfig the agents use: the admin one, or with `agent_context` a
/// copy whose current context is that one.
fn agent_kubeconfig(config: &ClusterLoadConfig) -> Result<PathBuf, ClusterLoadError> {
    let Some(context) = &config.agent_context else {
        return Ok(config.kubeconfig.clone());
    };
    let text = std::fs::read_to_string(&config.kubeconfig).map_err(|source| {
        ClusterLoadError::Fixture {
            path: config.kubeconfig.clone(),
            source,
        }
    })?;
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text)
        .map_err(|e| ClusterLoadError::Protocol(format!("kubeconfig is not YAML: {e}")))?;
    doc["current-context"] = serde_yaml::Value::String(context.clone());
    let path = config.work_dir.join("agent.kubeconfig");
    let out = serde_yaml::to_string(&doc)
        .map_err(|e| ClusterLoadError::Protocol(format!("kubeconfig: {e}")))?;
    std::fs::write(&path, out).map_err(work(&path))?;
    Ok(path)
}

fn work(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterLoadError {
    let path = path.to_path_buf();
    move |source| ClusterLoadError::WorkDir { path, source }
}

/// Start one `kura-agent run` (not waiting for it to answer).
fn spawn(
    config: &ClusterLoadConfig,
    kubeconfig: &Path,
    identity: Option<String>,
    log: PathBuf,
) -> Result<AgentProcess, ClusterLoadError> {
    let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(work(&config.work_dir))?
        .port();
    let debug = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let out = std::fs::File::create(&log).map_err(work(&log))?;
    let err = out.try_clone().map_err(work(&log))?;
    let mut cmd = Command::new(&config.agent_bin);
    cmd.arg("run");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("KURA_AGENT_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("KUBECONFIG", kubeconfig)
        .env("KURA_AGENT_DEBUG_LISTEN", debug.to_string());
    if let Some(id) = &identity {
        cmd.env("KURA_AGENT_SHARDING", "true")
            // Each replica watches only its own units (issue 42).
            .env("KURA_AGENT_SHARD_POD_SELECTION", "instance-label")
            .env("KURA_AGENT_IDENTITY", id)
            .env("KURA_AGENT_LEASE_NAMESPACE", &config.namespace);
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let child = cmd.spawn().map_err(|source| ClusterLoadError::AgentStart {
        path: config.agent_bin.clone(),
        source,
    })?;
    let pid = child.id();
    Ok(AgentProcess {
        child,
        pid,
        debug,
        log,
        identity,
        rss: RssSampler::start(pid, RSS_EVERY),
    })
}

/// Lines at WARN and ERROR in an agent's JSON log.
fn log_levels(path: &Path) -> (usize, usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (0, 0);
    };
    let count = |level: &str| text.lines().filter(|l| l.contains(level)).count();
    (count("\"level\":\"WARN\""), count("\"level\":\"ERROR\""))
}
