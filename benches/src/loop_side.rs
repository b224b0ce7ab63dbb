//! The agent's real run loop (`kura_agent::runner::AgentLoop`: one task per
//! instance, the rollout-aware cadence, the supervisor) over simulated pods
//! for a stretch of wall time, in its own child process: what `fleet-load
//! --loop-seconds N` measures. Unlike the burst sweeps of [`crate::runner`],
//! nothing here drives the sweeps: the loop decides when each instance is
//! swept, exactly as `kura-agent run` does, and the harness only counts.
//!
//! The fleet: instances of `pods_per_instance` consecutive pods; a share
//! `rollout_fraction` of them, spread evenly, is **in a rollout**: its
//! `spec.image` is the new image, its published verdict (restored at start,
//! as after an agent restart) has a baseline on the old image and has been
//! healthy for less than the settle period, and its first pod already runs
//! the new image. The others are **at rest**: one image everywhere, a
//! published verdict healthy for an hour, no baseline image. So every
//! instance starts in its steady-state phase, and the first sweeps are
//! spread over one interval of that phase, as after a restart.
//!
//! The loop publishes to a counting sink: every publish is one sweep of one
//! instance. After a warm-up (one steady interval plus 10 %, so every
//! instance swept at least once), the sink counts, for a window, the sweeps,
//! the pods they polled and the time between consecutive sweeps of each
//! instance (in 10 ms buckets, by phase). The agent's own metrics are
//! installed too (as in `kura-agent run`, they cost CPU) and read back for
//! the overrun counter and the failed polls.
//!
//! Protocol on the child's stdin/stdout, one line each: the parent sends
//! `pod NAME UID IP:PORT` per pod and `start`; the child answers `ready`,
//! runs, and answers one `ran KEY=VALUE ...` line, then `stats
//! PEAK_RSS_BYTES` when asked `stats`.

use crate::error::LoadError;
use crate::proc_stats::{cpu_time, peak_rss};
use crate::profiler::{is_profiler_line, profiled};
use crate::sim_process::FD_SLACK;
use jiff::{SignedDuration, Timestamp};
use kura_agent::cli::raise_fd_limit;
use kura_agent::engine::EngineConfig;
use kura_agent::model::{
    DesiredStatus, InstanceInfo, InstanceKey, InstanceTarget, PodIdentity, PodTarget, StatusSink,
    SystemClock,
};
use kura_agent::poll::{PollConfig, Poller};
use kura_agent::runner::{AgentLoop, Cadence, LoopConfig, StaticTargets};
use kura_agent::tools::fleet_load_side::protocol::parse_target;
use kura_agent::view::FleetView;
use kura_schemas::{AgentVerdict, BaselineCounters, KuraInstanceStatus, RolloutGate};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The image of instances at rest, and the old image of those in a rollout.
pub const OLD_IMAGE: &str = "ghcr.io/tuist/kura:0.6.0";
/// The image instances in a rollout move to.
pub const NEW_IMAGE: &str = "ghcr.io/tuist/kura:0.7.0";
/// Resolution of the interval histograms.
const BUCKET: Duration = Duration::from_millis(10);
/// Longest interval the histograms hold (longer ones land in the last
/// bucket).
const LONGEST: Duration = Duration::from_secs(300);

/// Settings of a loop run.
#[derive(Debug, Clone, Copy)]
pub struct LoopRunConfig {
    /// Requests in flight at most (the poller's global bound).
    pub concurrency: usize,
    /// Pods per instance.
    pub pods_per_instance: usize,
    /// Tokio worker threads (`None`: one per CPU).
    pub workers: Option<usize>,
    /// Share of instances in a rollout, 0 to 1.
    pub rollout_fraction: f64,
    /// The loop's cadence.
    pub cadence: Cadence,
    /// How long to count, after the warm-up.
    pub window: Duration,
}

impl LoopRunConfig {
    /// The warm-up before counting: every instance's first sweep is spread
    /// over one interval of its phase, so one steady interval with its
    /// jitter, plus a second.
    pub fn warmup(&self) -> Duration {
        self.cadence
            .steady_interval
            .mul_f64(1.0 + self.cadence.jitter)
            + Duration::from_secs(1)
    }
}

/// Whether instance `i` of a fleet is in a rollout: `fraction` of them,
/// spread evenly (instance `i` is when `floor((i + 1) f) > floor(i f)`).
pub fn in_rollout(i: usize, fraction: f64) -> bool {
    let f = fraction.clamp(0.0, 1.0);
    ((i + 1) as f64 * f).floor() > (i as f64 * f).floor()
}

/// Time between consecutive sweeps of one phase's instances, in buckets.
#[derive(Debug, Clone)]
pub struct IntervalHistogram {
    buckets: Vec<u64>,
    count: u64,
    max: Duration,
}

impl Default for IntervalHistogram {
    fn default() -> Self {
        IntervalHistogram {
            buckets: vec![0; (LONGEST.as_millis() / BUCKET.as_millis()) as usize + 1],
            count: 0,
            max: Duration::ZERO,
        }
    }
}

impl IntervalHistogram {
    /// Counts one interval.
    pub fn record(&mut self, d: Duration) {
        let i = usize::try_from(d.as_millis() / BUCKET.as_millis())
            .unwrap_or(usize::MAX)
            .min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max = self.max.max(d);
    }

    /// Intervals counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The longest interval counted.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The `q` quantile (0 to 1), to the bucket's upper edge; zero when
    /// empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((self.count as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return (BUCKET * (i as u32 + 1)).min(self.max);
            }
        }
        self.max
    }
}

/// What a loop run measured over its window.
#[derive(Debug, Clone, Default)]
pub struct LoopOutcome {
    /// The window's length.
    pub window: Duration,
    /// Instances in a rollout / at rest.
    pub instances: (usize, usize),
    /// Sweeps finished in the window, by instances in a rollout / at rest.
    pub sweeps: (u64, u64),
    /// Pods polled by those sweeps, by instances in a rollout / at rest.
    pub polls: (u64, u64),
    /// Intervals between sweeps of instances in a rollout: count, median,
    /// p99, max.
    pub rollout: Summary,
    /// The same for instances at rest.
    pub steady: Summary,
    /// Sweeps the agent counted as overrunning their interval
    /// (`kura_agent_sweep_overruns_total`), whole run.
    pub overruns: u64,
    /// Failed polls (`kura_agent_polls_total` with a result other than
    /// `ok`), whole run.
    pub failed_polls: u64,
    /// What the agent's timelines hold at the window's end: instances,
    /// ticks, runs, bytes (zero from a side that does not say).
    pub timeline: [u64; 4],
    /// CPU time of the loop's process during the window.
    pub cpu: Duration,
}

/// A histogram as reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Intervals counted.
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Longest.
    pub max: Duration,
}

impl LoopOutcome {
    /// Polls per second over the window, all instances.
    pub fn polls_per_second(&self) -> f64 {
        (self.polls.0 + self.polls.1) as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// The share of the fleet's pods that belong to instances at rest.
    pub fn polls_share_at_rest(&self) -> f64 {
        // Every instance but possibly the last has the same pod count, so
        // the instance share is the pod share to within one instance.
        let (r, s) = self.instances;
        s as f64 / (r + s).max(1) as f64
    }

    /// CPU seconds per wall second over the window.
    pub fn cpu_share(&self) -> f64 {
        self.cpu.as_secs_f64() / self.window.as_secs_f64().max(1e-9)
    }
}

/// The counting sink: per instance, its class, its pods and its last
/// publish; per class, the intervals and the sweeps in the window.
struct Counter {
    class: HashMap<InstanceKey, (bool, u64)>,
    last: HashMap<InstanceKey, Instant>,
    counting: bool,
    sweeps: [u64; 2],
    polls: [u64; 2],
    intervals: [IntervalHistogram; 2],
}

#[derive(Clone)]
struct CountingSink(Arc<Mutex<Counter>>);

impl StatusSink for CountingSink {
    fn publish(&self, key: &InstanceKey, desired: DesiredStatus, _now: Timestamp) {
        let at = Instant::now();
        let mut c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(&(rollout, pods)) = c.class.get(key) else {
            return;
        };
        let k = usize::from(!rollout);
        let previous = c.last.insert(key.clone(), at);
        if c.counting {
            c.sweeps[k] += 1;
            c.polls[k] += pods;
            if let Some(p) = previous {
                c.intervals[k].record(at.duration_since(p));
            }
        }
        drop(desired);
    }
    fn forget(&self, key: &InstanceKey) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last
            .remove(key);
    }
}

/// The targets of the loop run: `pods` grouped into instances, a share of
/// them in a rollout (see the module documentation). Returns the targets
/// and, per instance key, whether it is in a rollout and its pod count.
pub fn fleet(
    pods: &[(std::sync::Arc<PodIdentity>, SocketAddr)],
    pods_per_instance: usize,
    rollout_fraction: f64,
    now: Timestamp,
) -> (Vec<InstanceTarget>, HashMap<InstanceKey, (bool, u64)>) {
    let mut class = HashMap::new();
    let targets = pods
        .chunks(pods_per_instance.max(1))
        .enumerate()
        .map(|(i, chunk)| {
            let rollout = in_rollout(i, rollout_fraction);
            let info = InstanceInfo {
                namespace: "kura".to_owned(),
                name: format!("instance-{i}"),
                expected_pods: u32::try_from(chunk.len()).unwrap_or(u32::MAX),
                generation: 1,
            };
            class.insert(InstanceKey::of(&info), (rollout, chunk.len() as u64));
            let pods = chunk
                .iter()
                .enumerate()
                .map(|(j, (identity, addr))| {
                    let mut identity = PodIdentity::clone(identity);
                    identity.image = Some(
                        if rollout && j == 0 {
                            NEW_IMAGE
                        } else {
                            OLD_IMAGE
                        }
                        .to_owned()
                        .into(),
                    );
                    PodTarget {
                        identity: std::sync::Arc::new(identity),
                        addr: Ok(*addr),
                    }
                })
                .collect();
            let (spec_image, gate) = if rollout {
                (
                    NEW_IMAGE,
                    published_gate(NEW_IMAGE, Some(OLD_IMAGE), now, now),
                )
            } else {
                (
                    OLD_IMAGE,
                    published_gate(OLD_IMAGE, None, now, now - SignedDuration::from_hours(1)),
                )
            };
            InstanceTarget {
                info,
                spec_image: spec_image.to_owned(),
                pods,
                pods_dropped: 0,
                node_local_network: false,
                previous_status: Some(Box::new(KuraInstanceStatus {
                    rollout_gate: Some(gate),
                    ..KuraInstanceStatus::default()
                })),
                status_warnings: Vec::new(),
                gate_config: None,
                traits: Default::default(),
            }
        })
        .collect();
    (targets, class)
}

/// A healthy verdict as an agent would have published it.
fn published_gate(
    target: &str,
    baseline: Option<&str>,
    now: Timestamp,
    healthy_since: Timestamp,
) -> RolloutGate {
    RolloutGate {
        target_image: target.to_owned(),
        baseline_image: baseline.map(str::to_owned),
        baseline_captured_at: baseline.map(|_| now),
        baseline: BaselineCounters::default(),
        effective_baseline: BaselineCounters::default(),
        soak_eligible: false,
        verdict: AgentVerdict::Healthy,
        signal: None,
        healthy_since: Some(healthy_since),
        evaluated_at: now,
        evidence: Vec::new(),
        config_error: None,
        backlog_runs: Default::default(),
    }
}

/// The sum of every series of `name` in a Prometheus text rendering whose
/// labels do not contain `except` (empty: all series).
fn metric_sum(text: &str, name: &str, except: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let base = series.split('{').next()?;
            (base == name && (except.is_empty() || !series.contains(except)))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum::<f64>() as u64
}

/// Runs the loop over `targets` as configured; returns what the window
/// measured.
async fn run_loop(
    targets: Vec<(std::sync::Arc<PodIdentity>, SocketAddr)>,
    config: LoopRunConfig,
    metrics: &metrics_exporter_prometheus::PrometheusHandle,
) -> LoopOutcome {
    let (fleet, class) = fleet(
        &targets,
        config.pods_per_instance,
        config.rollout_fraction,
        Timestamp::now(),
    );
    drop(targets);
    let instances = class.values().filter(|(r, _)| *r).count();
    let instances = (instances, class.len() - instances);
    let counter = Arc::new(Mutex::new(Counter {
        class,
        last: HashMap::new(),
        counting: false,
        sweeps: [0; 2],
        polls: [0; 2],
        intervals: Default::default(),
    }));
    let poller = Poller::new(PollConfig {
        concurrency: config.concurrency,
        ..PollConfig::default()
    });
    let view = FleetView::new();
    let agent_loop = AgentLoop::new(
        LoopConfig {
            cadence: config.cadence,
            engine: EngineConfig {
                agent: "kura-agent-load".to_owned(),
                ..EngineConfig::default()
            },
            ..LoopConfig::default()
        },
        poller,
        Arc::new(StaticTargets::new(fleet)),
        Arc::new(CountingSink(Arc::clone(&counter))),
        view.clone(),
        Arc::new(SystemClock),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(agent_loop.run(async {
        let _ = stopped.await;
    }));
    tokio::time::sleep(config.warmup()).await;
    let cpu0 = cpu_time();
    let started = Instant::now();
    counter
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .counting = true;
    tokio::time::sleep(config.window).await;
    let outcome = {
        let mut c = counter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.counting = false;
        let window = started.elapsed();
        let cpu = cpu_time().saturating_sub(cpu0);
        let summary = |h: &IntervalHistogram| Summary {
            count: h.count(),
            p50: h.quantile(0.5),
            p99: h.quantile(0.99),
            max: h.max(),
        };
        let text = metrics.render();
        let t = view.timeline_footprint();
        LoopOutcome {
            timeline: [t.instances as u64, t.ticks, t.runs as u64, t.bytes as u64],
            window,
            instances,
            sweeps: (c.sweeps[0], c.sweeps[1]),
            polls: (c.polls[0], c.polls[1]),
            rollout: summary(&c.intervals[0]),
            steady: summary(&c.intervals[1]),
            overruns: metric_sum(&text, kura_agent::telemetry::SWEEP_OVERRUNS_TOTAL, ""),
            failed_polls: metric_sum(&text, kura_agent::telemetry::POLLS_TOTAL, "result=\"ok\""),
            cpu,
        }
    };
    let _ = stop.send(());
    let _ = running.await;
    outcome
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

impl LoopOutcome {
    /// One protocol line.
    fn to_line(&self) -> String {
        let words = |name: &str, s: &Summary| {
            format!(
                "{name}_count={} {name}_p50_ms={} {name}_p99_ms={} {name}_max_ms={}",
                s.count,
                ms(s.p50),
                ms(s.p99),
                ms(s.max)
            )
        };
        format!(
            "ran window_ms={} rollout_instances={} steady_instances={} rollout_sweeps={} steady_sweeps={} rollout_polls={} steady_polls={} {} {} overruns={} failed_polls={} cpu_ms={} timeline_instances={} timeline_ticks={} timeline_runs={} timeline_bytes={}",
            ms(self.window),
            self.instances.0,
            self.instances.1,
            self.sweeps.0,
            self.sweeps.1,
            self.polls.0,
            self.polls.1,
            words("rollout", &self.rollout),
            words("steady", &self.steady),
            self.overruns,
            self.failed_polls,
            ms(self.cpu),
            self.timeline[0],
            self.timeline[1],
            self.timeline[2],
            self.timeline[3],
        )
    }

    /// Parses [`LoopOutcome::to_line`].
    fn from_line(line: &str) -> Result<LoopOutcome, LoadError> {
        let mut words = line.split_whitespace();
        if words.next() != Some("ran") {
            return Err(LoadError::Protocol(format!("bad run answer {line:?}")));
        }
        let map: HashMap<&str, u64> = words
            .filter_map(|w| {
                let (k, v) = w.split_once('=')?;
                Some((k, v.parse().ok()?))
            })
            .collect();
        let get = |k: &str| {
            map.get(k)
                .copied()
                .ok_or_else(|| LoadError::Protocol(format!("no {k} in {line:?}")))
        };
        let millis = |k: &str| get(k).map(Duration::from_millis);
        let summary = |name: &str| -> Result<Summary, LoadError> {
            Ok(Summary {
                count: get(&format!("{name}_count"))?,
                p50: millis(&format!("{name}_p50_ms"))?,
                p99: millis(&format!("{name}_p99_ms"))?,
                max: millis(&format!("{name}_max_ms"))?,
            })
        };
        Ok(LoopOutcome {
            window: millis("window_ms")?,
            instances: (
                get("rollout_instances")? as usize,
                get("steady_instances")? as usize,
            ),
            sweeps: (get("rollout_sweeps")?, get("steady_sweeps")?),
            polls: (get("rollout_polls")?, get("steady_polls")?),
            rollout: summary("rollout")?,
            steady: summary("steady")?,
            overruns: get("overruns")?,
            failed_polls: get("failed_polls")?,
            cpu: millis("cpu_ms")?,
            timeline: ["instances", "ticks", "runs", "bytes"].map(|k| {
                map.get(format!("timeline_{k}").as_str())
                    .copied()
                    .unwrap_or(0)
            }),
        })
    }
}

/// A running loop process.
#[derive(Debug)]
pub struct LoopRunner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl LoopRunner {
    /// Starts the loop's process (`exe run-loop ...`) over `targets`; it
    /// runs at once and answers when its window is over.
    pub fn spawn(
        exe: &Path,
        config: &LoopRunConfig,
        targets: &[(std::sync::Arc<PodIdentity>, SocketAddr)],
    ) -> Result<LoopRunner, LoadError> {
        let c = &config.cadence;
        let mut cmd = profiled(exe);
        cmd.arg("run-loop")
            .args(["--concurrency", &config.concurrency.to_string()])
            .args(["--pods-per-instance", &config.pods_per_instance.to_string()])
            .args(["--rollout-fraction", &config.rollout_fraction.to_string()])
            .args(["--rollout-ms", &ms(c.rollout_interval).to_string()])
            .args(["--steady-ms", &ms(c.steady_interval).to_string()])
            .args(["--settle-ms", &ms(c.settle).to_string()])
            .args(["--window-ms", &ms(config.window).to_string()]);
        if let Some(w) = config.workers {
            cmd.args(["--workers", &w.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(LoadError::Child)?;
        let mut stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| LoadError::Protocol("no stdout pipe".into()))?;
        {
            let pipe = stdin
                .as_mut()
                .ok_or_else(|| LoadError::Protocol("no stdin pipe".into()))?;
            let mut w = std::io::BufWriter::new(pipe);
            for (pod, addr) in targets {
                writeln!(w, "pod {} {} {addr}", pod.name, pod.uid).map_err(LoadError::Child)?;
            }
            writeln!(w, "start").map_err(LoadError::Child)?;
            w.flush().map_err(LoadError::Child)?;
        }
        Ok(LoopRunner {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    fn line(&mut self) -> Result<String, LoadError> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).map_err(LoadError::Child)? == 0 {
                return Err(LoadError::Protocol("loop process exited".into()));
            }
            if !is_profiler_line(&line) {
                return Ok(line);
            }
            eprint!("{line}");
        }
    }

    /// Waits for the run's outcome.
    pub fn outcome(&mut self) -> Result<LoopOutcome, LoadError> {
        LoopOutcome::from_line(&self.line()?)
    }

    /// The process's peak RSS, in bytes.
    pub fn peak_rss(&mut self) -> Result<u64, LoadError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| LoadError::Protocol("stdin closed".into()))?;
        writeln!(stdin, "stats").map_err(LoadError::Child)?;
        stdin.flush().map_err(LoadError::Child)?;
        let line = self.line()?;
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["stats", v] => v
                .parse()
                .map_err(|_| LoadError::Protocol(format!("bad stats answer {line:?}"))),
            _ => Err(LoadError::Protocol(format!("bad stats answer {line:?}"))),
        }
    }
}

impl Drop for LoopRunner {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The child side: read the targets, run the loop, answer.
pub fn serve_loop(config: LoopRunConfig) -> Result<(), LoadError> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut targets = Vec::new();
    for line in lines.by_ref() {
        let line = line.map_err(LoadError::Child)?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["start"] => break,
            ["pod", name, uid, addr] => targets.push(parse_target(name, uid, addr)?),
            _ => return Err(LoadError::Protocol(format!("unexpected line {line:?}"))),
        }
    }
    let wanted = targets.len() as u64 + FD_SLACK;
    if raise_fd_limit(wanted).map_err(LoadError::Child)? < wanted {
        eprintln!("fleet-load loop: open-file limit below {wanted}");
    }
    let metrics = kura_agent::telemetry::prometheus_builder()
        .and_then(|b| b.install_recorder())
        .map_err(|e| LoadError::Protocol(format!("metrics recorder: {e}")))?;
    kura_agent::telemetry::describe();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(w) = config.workers {
        rt.worker_threads(w.max(1));
    }
    let rt = rt.build().map_err(LoadError::Runtime)?;
    // As `kura-agent run` does: the histograms' samples folded in.
    let upkeep = rt.spawn(kura_agent::telemetry::upkeep(metrics.clone()));
    let outcome = rt.block_on(run_loop(targets, config, &metrics));
    upkeep.abort();
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "{}", outcome.to_line()).map_err(LoadError::Child)?;
    out.flush().map_err(LoadError::Child)?;
    for line in lines {
        let line = line.map_err(LoadError::Child)?;
        match line.trim() {
            "stats" => {
                writeln!(out, "stats {}", peak_rss().unwrap_or(0)).map_err(LoadError::Child)?
            }
            other => return Err(LoadError::Protocol(format!("unknown command {other:?}"))),
        }
        out.flush().map_err(LoadError::Child)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollout_share_is_spread_evenly() {
        let n = (0..1000).filter(|i| in_rollout(*i, 0.05)).count();
        assert_eq!(n, 50);
        assert!((0..100).all(|i| in_rollout(i, 1.0)));
        assert!(!(0..100).any(|i| in_rollout(i, 0.0)));
        // No two neighbours at 5 %.
        assert!(!(0..999).any(|i| in_rollout(i, 0.05) && in_rollout(i + 1, 0.05)));
    }

    #[test]
    fn histogram_quantiles_and_line_round_trip() {
        let mut h = IntervalHistogram::default();
        for ms in [1990, 2000, 2010, 2200, 5000] {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.quantile(0.5), Duration::from_millis(2020));
        assert_eq!(h.quantile(1.0), Duration::from_millis(5000));
        assert_eq!(h.max(), Duration::from_millis(5000));
        let o = LoopOutcome {
            window: Duration::from_secs(60),
            instances: (3, 97),
            sweeps: (90, 200),
            polls: (270, 600),
            rollout: Summary {
                count: 87,
                p50: Duration::from_millis(2000),
                p99: Duration::from_millis(2200),
                max: Duration::from_millis(2210),
            },
            steady: Summary::default(),
            overruns: 1,
            failed_polls: 0,
            cpu: Duration::from_millis(1234),
            timeline: [100, 5000, 120, 250_000],
        };
        let back = LoopOutcome::from_line(&o.to_line()).expect("parses");
        assert_eq!(back.to_line(), o.to_line());
        assert!((back.polls_per_second() - 14.5).abs() < 1e-9);
    }

    #[test]
    fn the_fleet_has_its_share_in_a_rollout_with_mixed_images() {
        let pods: Vec<(std::sync::Arc<PodIdentity>, SocketAddr)> = (0..60)
            .map(|i| {
                (
                    std::sync::Arc::new(PodIdentity {
                        name: format!("pod-{i}").into(),
                        uid: format!("u-{i}").into(),
                        ..PodIdentity::default()
                    }),
                    SocketAddr::from(([127, 0, 0, 1], 4000)),
                )
            })
            .collect();
        let now = Timestamp::now();
        let (targets, class) = fleet(&pods, 3, 0.1, now);
        assert_eq!(targets.len(), 20);
        assert_eq!(class.values().filter(|(r, _)| *r).count(), 2);
        let cadence = Cadence::default();
        for t in &targets {
            let gate = t
                .previous_status
                .as_ref()
                .and_then(|s| s.rollout_gate.as_ref());
            let phase = kura_agent::runner::cadence::phase(
                &t.spec_image,
                t.pods.iter().map(|p| p.identity.image.as_deref()),
                gate,
                now,
                cadence.settle,
            );
            assert_eq!(phase.in_rollout(), class[&t.key()].0, "{}", t.info.name);
        }
    }
}
