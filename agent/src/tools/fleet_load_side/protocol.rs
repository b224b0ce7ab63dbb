//! The child side of a `fleet-load` measuring process: read the pods,
//! then answer the parent's commands until stdin closes.
//!
//! One line each way: the parent sends `pod NAME UID IP:PORT` per pod and
//! `start`, the child answers `ready`; then per `sweep` the child answers
//! `swept WALL_NS CPU_NS OK FAILED AGGREGATE_NS SAMPLES`, and per `stats`
//! it answers `stats PEAK_RSS_BYTES`. The child exits when its stdin
//! closes.

use super::fleet::{AgentFleet, IMAGE};
use super::proc_stats::{cpu_time, peak_rss};
use crate::cli::raise_fd_limit;
use crate::model::PodIdentity;
use crate::poll::{PollConfig, Poller};
use crate::view::{HistoryFootprint, TimelineFootprint};
use std::future::Future;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Descriptors kept aside for everything but the pods' connections.
pub const FD_SLACK: u64 = 256;

/// Why a measuring child stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Reading stdin or writing stdout failed.
    #[error("fleet-load protocol: {0}")]
    Io(#[from] std::io::Error),
    /// The parent sent something unexpected.
    #[error("fleet-load protocol: {0}")]
    Unexpected(String),
    /// The tokio runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The shadow gate configuration file is unusable.
    #[error("{SHADOW_GATE_CONFIG_ENV}: {0}")]
    ShadowGateConfig(#[from] crate::cli::gate_file::GateFileError),
}

/// Settings of a measuring side.
#[derive(Debug, Clone, Copy)]
pub struct SideConfig {
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Pods per instance (agent side).
    pub pods_per_instance: usize,
    /// Tokio worker threads (`None`: one per CPU).
    pub workers: Option<usize>,
    /// Keep one connection per pod open between sweeps.
    pub keep_alive: bool,
}

/// One sweep of every instance (or, on the simulator side, one poll of
/// every pod) as a side measured it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FleetSweep {
    /// Wall time of the sweep.
    pub wall: Duration,
    /// The side's CPU time (user + system) during the sweep.
    pub cpu: Duration,
    /// Pods that answered as expected.
    pub ok: usize,
    /// Pods that did not.
    pub failed: usize,
    /// Time spent in aggregation (agent side), summed over instances.
    pub aggregate: Duration,
    /// Samples aggregated (agent side).
    pub samples: usize,
}

/// A pod target from its protocol words (`NAME UID IP:PORT`).
pub fn parse_target(
    name: &str,
    uid: &str,
    addr: &str,
) -> Result<(Arc<PodIdentity>, SocketAddr), ProtocolError> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| ProtocolError::Unexpected(format!("bad address {addr:?} of pod {name}")))?;
    let pod = PodIdentity {
        name: name.into(),
        uid: uid.into(),
        restart_count: 0,
        image: Some(IMAGE.into()),
        ip: Some(addr.ip().to_string().into()),
    };
    Ok((Arc::new(pod), addr))
}

/// What a side measures: one sweep of every instance.
pub trait Sweeper {
    /// One sweep of every instance (`cpu` is filled in by [`serve`]).
    fn sweep_all(&mut self) -> impl Future<Output = FleetSweep>;

    /// What the per-instance histories occupy, for a side that keeps them
    /// (answered to `history`).
    fn history(&self) -> Option<HistoryFootprint> {
        None
    }

    /// What the per-instance timelines hold, for a side that keeps them
    /// (answered to `timeline`).
    fn timeline(&self) -> Option<TimelineFootprint> {
        None
    }
}

impl Sweeper for AgentFleet {
    async fn sweep_all(&mut self) -> FleetSweep {
        let o = AgentFleet::sweep_all(self).await;
        if !o.errors.is_empty() {
            eprintln!("fleet-load agent: failed samples {:?}", o.errors);
        }
        FleetSweep {
            wall: o.wall,
            cpu: Duration::ZERO,
            ok: o.ok,
            failed: o.errors.values().sum(),
            aggregate: o.aggregate_time,
            samples: o.samples,
        }
    }

    fn history(&self) -> Option<HistoryFootprint> {
        Some(self.history_footprint())
    }

    fn timeline(&self) -> Option<TimelineFootprint> {
        Some(self.timeline_footprint())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The child side: read the targets from `input`, build the runtime and
/// the sweeper (`make`, called inside the runtime), answer `ready`, then
/// answer commands until `input` ends.
pub fn serve<S: Sweeper>(
    mut input: impl BufRead,
    mut output: impl Write,
    workers: Option<usize>,
    make: impl FnOnce(&[(Arc<PodIdentity>, SocketAddr)]) -> S,
) -> Result<(), ProtocolError> {
    let mut targets = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Err(ProtocolError::Unexpected(
                "input ended before `start`".to_owned(),
            ));
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["start"] => break,
            ["pod", name, uid, addr] => targets.push(parse_target(name, uid, addr)?),
            _ => {
                return Err(ProtocolError::Unexpected(format!(
                    "unexpected line {line:?}"
                )));
            }
        }
    }
    let wanted = targets.len() as u64 + FD_SLACK;
    if raise_fd_limit(wanted)? < wanted {
        eprintln!("fleet-load side: open-file limit below {wanted}");
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(w) = workers {
        rt.worker_threads(w.max(1));
    }
    let rt = rt.build().map_err(ProtocolError::Runtime)?;
    let mut sweeper = {
        // Clients may need the runtime's timer when they are built.
        let _guard = rt.enter();
        make(&targets)
    };
    drop(targets);
    writeln!(output, "ready")?;
    output.flush()?;
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        match line.trim() {
            "sweep" => {
                let cpu0 = cpu_time();
                let mut swept = rt.block_on(sweeper.sweep_all());
                swept.cpu = cpu_time().saturating_sub(cpu0);
                writeln!(
                    output,
                    "swept {} {} {} {} {} {}",
                    nanos(swept.wall),
                    nanos(swept.cpu),
                    swept.ok,
                    swept.failed,
                    nanos(swept.aggregate),
                    swept.samples
                )?;
            }
            "stats" => writeln!(output, "stats {}", peak_rss().unwrap_or(0))?,
            "history" => match sweeper.history() {
                Some(h) => writeln!(output, "history {} {}", h.instances, h.bytes)?,
                None => writeln!(output, "history - -")?,
            },
            "timeline" => match sweeper.timeline() {
                Some(t) => writeln!(
                    output,
                    "timeline {} {} {} {} {}",
                    t.instances, t.ticks, t.runs, t.bytes, t.budget
                )?,
                None => writeln!(output, "timeline - - - - -")?,
            },
            other => {
                return Err(ProtocolError::Unexpected(format!(
                    "unknown command {other:?}"
                )));
            }
        }
        output.flush()?;
    }
}

/// The environment variable naming a shadow gate configuration file the
/// agent side judges beside the live one (`run --shadow-gate-config`), so
/// that `fleet-load` measures its cost: `KURA_FLEET_LOAD_SHADOW_GATE_CONFIG=FILE
/// fleet-load ...` (the child sides inherit it; the ceiling ignores it).
pub const SHADOW_GATE_CONFIG_ENV: &str = "KURA_FLEET_LOAD_SHADOW_GATE_CONFIG";

/// The agent side on stdin/stdout: the run loop's per-sweep path
/// ([`AgentFleet`]) with the poller configured by `config`, and the shadow
/// gate configuration of [`SHADOW_GATE_CONFIG_ENV`] when it is set.
pub fn serve_agent(config: SideConfig) -> Result<(), ProtocolError> {
    let shadow = match std::env::var_os(SHADOW_GATE_CONFIG_ENV) {
        Some(path) => {
            let file = crate::cli::gate_file::load(std::path::Path::new(&path))?;
            eprintln!(
                "fleet-load agent side: shadow gate config {}",
                path.to_string_lossy()
            );
            Some(file.config)
        }
        None => None,
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    serve(stdin.lock(), stdout.lock(), config.workers, |targets| {
        let poller = Poller::new(PollConfig {
            concurrency: config.concurrency,
            keep_alive: config.keep_alive,
            ..PollConfig::default()
        });
        AgentFleet::new(poller, targets, config.pods_per_instance, shadow.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting(usize);

    impl Sweeper for Counting {
        async fn sweep_all(&mut self) -> FleetSweep {
            self.0 += 1;
            FleetSweep {
                wall: Duration::from_nanos(5),
                ok: self.0,
                failed: 1,
                aggregate: Duration::from_nanos(7),
                samples: 3,
                ..FleetSweep::default()
            }
        }
    }

    #[test]
    fn a_side_reads_its_pods_then_answers_sweeps_and_stats() {
        let input =
            "pod a uid-a 127.0.0.1:4000\npod b uid-b 127.0.0.2:4000\nstart\nsweep\nsweep\nstats\n";
        let mut out = Vec::new();
        let mut seen = Vec::new();
        serve(input.as_bytes(), &mut out, Some(1), |targets| {
            seen = targets
                .iter()
                .map(|(p, a)| (p.name.to_string(), *a))
                .collect();
            Counting(0)
        })
        .expect("serve");
        assert_eq!(
            seen,
            [
                ("a".to_owned(), "127.0.0.1:4000".parse().expect("addr")),
                ("b".to_owned(), "127.0.0.2:4000".parse().expect("addr")),
            ]
        );
        let out = String::from_utf8(out).expect("utf-8");
        let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(lines[0], ["ready"]);
        for (i, l) in lines[1..3].iter().enumerate() {
            assert_eq!(l[0], "swept");
            assert_eq!(l[1], "5");
            assert!(l[2].parse::<u64>().is_ok(), "cpu nanoseconds: {l:?}");
            assert_eq!(l[3..], [&(i + 1).to_string(), "1", "7", "3"]);
        }
        assert_eq!(lines[3][0], "stats");
        assert!(lines[3][1].parse::<u64>().expect("bytes") > 0);
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn a_bad_line_or_a_missing_start_is_an_error() {
        let run = |input: &str| serve(input.as_bytes(), Vec::new(), Some(1), |_| Counting(0));
        assert!(
            matches!(run("pod a uid nowhere\nstart\n"), Err(ProtocolError::Unexpected(m)) if m.contains("bad address"))
        );
        assert!(
            matches!(run("pod a\n"), Err(ProtocolError::Unexpected(m)) if m.contains("unexpected line"))
        );
        assert!(
            matches!(run("pod a u 127.0.0.1:1\n"), Err(ProtocolError::Unexpected(m)) if m.contains("before `start`"))
        );
        assert!(
            matches!(run("start\njump\n"), Err(ProtocolError::Unexpected(m)) if m.contains("unknown command"))
        );
    }
}
