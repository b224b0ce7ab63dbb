//! `fleet-load`: the agent's real poll-and-aggregate path over N simulated
//! pods on loopback, against the loopback ceiling (bare GETs to the same
//! pods with a plain hyper client at the same concurrency).
//!
//! `cargo run --release -p kura-benches --bin fleet-load -- --pods 10000`
//!
//! With `--loop-seconds N` it runs the agent's real run loop instead (its
//! rollout-aware cadence decides when each instance is swept) for N
//! seconds after a warm-up, with `--rollout-fraction` of the instances in a
//! rollout, and reports polls per second, the achieved intervals, CPU and
//! memory (`kura_benches::loop_side`).
//!
//! `--agent-bin NAME=PATH` adds a side: the same agent path run by another
//! `kura-agent` binary (its hidden `fleet-load-side` subcommand), e.g. the
//! one taken out of the container image, measured in the same run and
//! compared with this build's.
//!
//! Every part runs in its own process, all children of this one (the same
//! executable in hidden modes): the simulated pods (`serve-sim`, as many
//! processes as the open-file limit needs), the agent side and the bare
//! side (`run-side`). So each side's CPU time and peak RSS are its own,
//! both keep one connection per pod alive for the whole run (as the agent
//! does between sweeps in production), and their sweeps alternate so both
//! see the same machine load.

use clap::{Parser, Subcommand};
use kura_agent::cli::raise_fd_limit;
use kura_agent::poll::PollConfig;
use kura_agent::runner::Cadence;
use kura_agent::tools::fleet_load_side::protocol::FleetSweep;
use kura_benches::error::LoadError;
use kura_benches::loop_side::{LoopOutcome, LoopRunConfig, LoopRunner, serve_loop};
use kura_benches::proc_stats::{cpu_time_of, mib};
use kura_benches::runner::{Runner, RunnerConfig, Side};
use kura_benches::sim_process::{Generations, SimProcesses, processes_needed, serve};
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Goal: a sweep of 10,000 pods at most this long.
const GOAL_SWEEP: Duration = Duration::from_secs(2);
/// Goal: the agent's poll rate at least this share of the ceiling's.
const GOAL_RATIO: f64 = 0.70;
/// Goal: the agent's peak RSS under this many MiB.
const GOAL_RSS_MIB: f64 = 150.0;
/// The agent's page history at this fleet size (issue 18).
const GOAL_HISTORY_MIB: f64 = 16.0;
/// Goal: another build of the agent (`--agent-bin`) polls at least this
/// share of this build's rate.
const GOAL_SAME_AS_BUILD: f64 = 0.90;

#[derive(Debug, Parser)]
#[command(
    name = "fleet-load",
    about = "Poll-and-aggregate load harness over simulated pods on loopback"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Mode>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// Simulated pods.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// Pods per KuraInstance.
    #[arg(long, default_value_t = 3)]
    pods_per_instance: usize,
    /// Requests in flight at most (the poller's global bound; the bare
    /// client uses the same).
    #[arg(long, default_value_t = PollConfig::default().concurrency)]
    concurrency: usize,
    /// Measured sweeps per side, after one cold sweep each that opens the
    /// connections.
    #[arg(long, default_value_t = 15)]
    sweeps: usize,
    /// Simulator processes (default: as few as the open-file limit allows).
    #[arg(long)]
    sim_procs: Option<usize>,
    /// Report generation of the pods: `mixed` (pod i answers G(i%4+1)) or
    /// 1–4.
    #[arg(long, default_value = "mixed", value_parser = Generations::parse)]
    generation: Generations,
    /// Tokio worker threads of each side (default: one per CPU).
    #[arg(long)]
    workers: Option<usize>,
    /// Open a new connection for every poll (both sides) instead of
    /// keeping one per pod between sweeps.
    #[arg(long)]
    no_keep_alive: bool,
    /// Exit with status 2 when a goal is missed.
    #[arg(long)]
    check: bool,
    /// Run the agent's real run loop (rollout-aware cadence) for this many
    /// seconds after a warm-up, instead of the burst sweeps against the
    /// ceiling.
    #[arg(long)]
    loop_seconds: Option<u64>,
    /// With `--loop-seconds`: the share of instances in a rollout (0 to 1).
    #[arg(long, default_value_t = 0.05)]
    rollout_fraction: f64,
    /// With `--loop-seconds`: the loop's rollout interval.
    #[arg(long, value_parser = kura_agent::model::parse::parse_positive_duration,
          default_value = "2s")]
    rollout_interval: Duration,
    /// With `--loop-seconds`: the loop's steady interval.
    #[arg(long, value_parser = kura_agent::model::parse::parse_positive_duration,
          default_value = "30s")]
    steady_interval: Duration,
    /// With `--loop-seconds`: one interval for every instance (as
    /// `kura-agent run --sweep-interval`; `10s` is the agent before the
    /// rollout-aware cadence).
    #[arg(long, value_parser = kura_agent::model::parse::parse_positive_duration)]
    interval: Option<Duration>,
    /// Also measure another `kura-agent` binary's agent path (its hidden
    /// `fleet-load-side` subcommand), e.g. `image=/tmp/kura-agent` taken out
    /// of the container image; repeatable.
    #[arg(long = "agent-bin", value_name = "NAME=PATH", value_parser = Side::parse_binary)]
    agent_bins: Vec<Side>,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Serve simulated pods for a parent `fleet-load` (internal).
    #[command(hide = true)]
    ServeSim {
        #[arg(long)]
        pods: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long)]
        first_ip: Ipv4Addr,
        #[arg(long, default_value = "mixed", value_parser = Generations::parse)]
        generation: Generations,
        /// Measuring sides that keep a connection to every pod.
        #[arg(long, default_value_t = 2)]
        sides: usize,
    },
    /// Run one measured side for a parent `fleet-load` (internal).
    #[command(hide = true)]
    RunSide {
        #[arg(long, value_parser = Side::parse)]
        side: Side,
        #[arg(long)]
        concurrency: usize,
        #[arg(long)]
        pods_per_instance: usize,
        #[arg(long)]
        workers: Option<usize>,
        #[arg(long)]
        no_keep_alive: bool,
    },
    /// Run the agent's run loop for a parent `fleet-load` (internal).
    #[command(hide = true)]
    RunLoop {
        #[arg(long)]
        concurrency: usize,
        #[arg(long)]
        pods_per_instance: usize,
        #[arg(long)]
        workers: Option<usize>,
        #[arg(long)]
        rollout_fraction: f64,
        #[arg(long)]
        rollout_ms: u64,
        #[arg(long)]
        steady_ms: u64,
        #[arg(long)]
        settle_ms: u64,
        #[arg(long)]
        window_ms: u64,
    },
}

// The agent's allocator (`kura_agent::cli::allocator`), for every side of
// the run, the ceiling's included, so the rates compare like with like.
#[global_allocator]
static ALLOCATOR: kura_agent::cli::allocator::Allocator = kura_agent::cli::allocator::Allocator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Mode::ServeSim {
            pods,
            offset,
            first_ip,
            generation,
            sides,
        }) => serve(pods, offset, first_ip, sides, generation).map(|()| true),
        Some(Mode::RunSide {
            side,
            concurrency,
            pods_per_instance,
            workers,
            no_keep_alive,
        }) => kura_benches::runner::serve(
            &side,
            RunnerConfig {
                concurrency,
                pods_per_instance,
                workers,
                keep_alive: !no_keep_alive,
            },
        )
        .map(|()| true),
        Some(Mode::RunLoop {
            concurrency,
            pods_per_instance,
            workers,
            rollout_fraction,
            rollout_ms,
            steady_ms,
            settle_ms,
            window_ms,
        }) => serve_loop(LoopRunConfig {
            concurrency,
            pods_per_instance,
            workers,
            rollout_fraction,
            cadence: Cadence {
                rollout_interval: Duration::from_millis(rollout_ms),
                steady_interval: Duration::from_millis(steady_ms),
                settle: Duration::from_millis(settle_ms),
                ..Cadence::default()
            },
            window: Duration::from_millis(window_ms),
        })
        .map(|()| true),
        None if cli.load.loop_seconds.is_some() => run_loop(&cli.load),
        None => run(&cli.load),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("fleet-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The sweeps of one side.
#[derive(Debug, Default)]
struct Record {
    cold: FleetSweep,
    sweeps: Vec<FleetSweep>,
    /// The simulators' CPU time during this side's measured sweeps.
    sim_cpu: Duration,
    peak_rss: u64,
    /// Connections the simulated pods accepted during the cold sweep.
    cold_connections: u64,
    /// Connections the simulated pods accepted during the measured sweeps.
    connections: u64,
    /// The agent's per-instance histories: `(instances, bytes)`.
    history: Option<(usize, usize)>,
    /// The agent's per-instance timelines: `(instances, ticks, runs,
    /// bytes, budget)`.
    timeline: Option<[u64; 5]>,
}

impl Record {
    fn walls(&self) -> Vec<Duration> {
        let mut w: Vec<_> = self.sweeps.iter().map(|s| s.wall).collect();
        w.sort();
        w
    }
    fn median(&self) -> Duration {
        let w = self.walls();
        w.get(w.len() / 2).copied().unwrap_or_default()
    }
    fn rate(&self, pods: usize) -> f64 {
        pods as f64 / self.median().as_secs_f64().max(1e-9)
    }
    fn cpu_per_sweep(&self) -> Duration {
        let total: Duration = self.sweeps.iter().map(|s| s.cpu).sum();
        total / u32::try_from(self.sweeps.len().max(1)).unwrap_or(1)
    }
    fn failed(&self) -> usize {
        self.cold.failed + self.sweeps.iter().map(|s| s.failed).sum::<usize>()
    }
}

/// One measured side: what it is, its process, what it measured.
struct Measured {
    side: Side,
    runner: Option<Runner>,
    record: Record,
}

impl Measured {
    fn title(&self) -> String {
        match &self.side {
            Side::Agent => "agent (poll+aggregate)".to_owned(),
            Side::Binary { name, .. } => format!("{name} (kura-agent binary)"),
            Side::Bare => "bare GET ceiling".to_owned(),
        }
    }
}

fn sim_cpu(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|p| cpu_time_of(*p)).sum()
}

fn run(args: &LoadArgs) -> Result<bool, LoadError> {
    let mut sides = vec![Side::Agent];
    sides.extend(args.agent_bins.iter().cloned());
    sides.push(Side::Bare);
    let limit = raise_fd_limit(1 << 20).map_err(LoadError::Child)?;
    let procs = args
        .sim_procs
        .unwrap_or_else(|| processes_needed(args.pods, limit, sides.len()));
    let exe = std::env::current_exe().map_err(LoadError::Child)?;
    let started = Instant::now();
    let mut sims = SimProcesses::spawn(&exe, args.pods, procs, sides.len(), args.generation)?;
    let startup = started.elapsed();
    let sim_pids = sims.pids();
    let config = RunnerConfig {
        concurrency: args.concurrency,
        pods_per_instance: args.pods_per_instance,
        workers: args.workers,
        keep_alive: !args.no_keep_alive,
    };
    let mut measured = Vec::with_capacity(sides.len());
    for side in sides {
        let runner = Runner::spawn(&exe, &side, config, sims.targets())?;
        measured.push(Measured {
            side,
            runner: Some(runner),
            record: Record::default(),
        });
    }
    // The pods count the connections they accept: the sides sweep in
    // turn, so the count between two readings is one side's.
    let mut accepted = sims.connections()?;
    let mut opened = |sims: &mut SimProcesses| -> Result<u64, LoadError> {
        let now = sims.connections()?;
        Ok(now.saturating_sub(std::mem::replace(&mut accepted, now)))
    };
    for m in &mut measured {
        if let Some(r) = m.runner.as_mut() {
            m.record.cold = r.sweep_all()?;
            m.record.cold_connections = opened(&mut sims)?;
        }
    }
    // Simulator CPU is read from /proc at clock-tick resolution, so it is
    // given per side as a total over its measured sweeps.
    let mut sim_cpu_known = true;
    let n_sides = measured.len();
    for i in 0..args.sweeps {
        // Rotate which side goes first.
        for k in 0..n_sides {
            let m = &mut measured[(i + k) % n_sides];
            let Some(runner) = m.runner.as_mut() else {
                continue;
            };
            let before = sim_cpu(&sim_pids);
            let s = runner.sweep_all()?;
            match (before, sim_cpu(&sim_pids)) {
                (Some(b), Some(a)) => m.record.sim_cpu += a.saturating_sub(b),
                _ => sim_cpu_known = false,
            }
            m.record.sweeps.push(s);
            m.record.connections += opened(&mut sims)?;
        }
    }
    for m in &mut measured {
        if let Some(mut r) = m.runner.take() {
            if matches!(m.side, Side::Agent) {
                m.record.history = r.history()?;
                m.record.timeline = r.timeline()?;
            }
            m.record.peak_rss = r.peak_rss()?;
        }
    }
    drop(sims);

    let n = args.pods;
    let (agent, rest) = measured
        .split_first()
        .ok_or(LoadError::Protocol("no side".into()))?;
    let (bare, binaries) = rest
        .split_last()
        .ok_or(LoadError::Protocol("no ceiling".into()))?;
    let agent_like: Vec<&Measured> = std::iter::once(agent).chain(binaries.iter()).collect();
    let ratio = |m: &Measured| m.record.rate(n) / bare.record.rate(n).max(1e-9);
    let vs_build = |m: &Measured| m.record.rate(n) / agent.record.rate(n).max(1e-9);
    let agg_time: Duration = agent.record.sweeps.iter().map(|s| s.aggregate).sum();
    let agg_samples: usize = agent.record.sweeps.iter().map(|s| s.samples).sum();
    let agg_rate = agg_samples as f64 / agg_time.as_secs_f64().max(1e-9);
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let instances = n.div_ceil(args.pods_per_instance.max(1));
    println!(
        "fleet-load: {n} pods ({} report generations) served by {procs} simulator process(es), started in {:.2} s",
        args.generation.as_arg(),
        startup.as_secs_f64(),
    );
    println!(
        "{instances} instances of up to {} pods; concurrency {}; keep-alive {}; per side 1 cold sweep, then {} measured sweeps in turn with the other sides; {cpus} CPUs",
        args.pods_per_instance,
        args.concurrency,
        if args.no_keep_alive { "off" } else { "on" },
        args.sweeps,
    );
    for m in binaries {
        if let Side::Binary { name, path } = &m.side {
            println!("side {name}: {}", path.display());
        }
    }
    let secs = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    let range = |r: &Record| {
        let w = r.walls();
        format!(
            "{:.3} / {:.3} s",
            w.first().copied().unwrap_or_default().as_secs_f64(),
            w.last().copied().unwrap_or_default().as_secs_f64()
        )
    };
    let sweeps = u32::try_from(args.sweeps.max(1)).unwrap_or(1);
    let sim_per_sweep = |total: Duration| {
        if sim_cpu_known {
            secs(total / sweeps)
        } else {
            "n/a".to_owned()
        }
    };
    let per = |count: u64, of: usize, what: &str| {
        format!("{count} ({:.2}/{what})", count as f64 / of.max(1) as f64)
    };
    type Cell<'a> = Box<dyn Fn(&Measured) -> String + 'a>;
    let rows: Vec<(&str, Cell)> = vec![
        (
            "cold sweep (opens connections)",
            Box::new(|m| secs(m.record.cold.wall)),
        ),
        (
            "sweep wall time, median",
            Box::new(|m| secs(m.record.median())),
        ),
        ("sweep wall time, min / max", Box::new(|m| range(&m.record))),
        (
            "polls per second (median sweep)",
            Box::new(|m| format!("{:.0}", m.record.rate(n))),
        ),
        (
            "CPU time per sweep, side process",
            Box::new(|m| secs(m.record.cpu_per_sweep())),
        ),
        (
            "CPU time per sweep, simulators",
            Box::new(|m| sim_per_sweep(m.record.sim_cpu)),
        ),
        (
            "peak RSS of the side process",
            Box::new(|m| format!("{:.1} MiB", mib(m.record.peak_rss))),
        ),
        (
            "connections opened, cold sweep",
            Box::new(|m| per(m.record.cold_connections, n, "pod")),
        ),
        (
            "connections opened, measured sweeps",
            Box::new(|m| per(m.record.connections, n * args.sweeps, "poll")),
        ),
        (
            "failed samples, all sweeps",
            Box::new(|m| m.record.failed().to_string()),
        ),
        (
            "rate / ceiling rate",
            Box::new(|m| {
                if m.side == Side::Bare {
                    "-".to_owned()
                } else {
                    format!("{:.1} %", ratio(m) * 100.0)
                }
            }),
        ),
    ];
    println!();
    let width = |m: &Measured| m.title().len().max(20);
    print!("{:<38}", "");
    for m in &measured {
        print!(" {:>w$}", m.title(), w = width(m));
    }
    println!();
    for (label, cell) in &rows {
        print!("{label:<38}");
        for m in &measured {
            print!(" {:>w$}", cell(m), w = width(m));
        }
        println!();
    }
    println!(
        "{:<38} {:>w$}",
        "fold+judge, pod samples/s on 1 core",
        format!("{agg_rate:.0}"),
        w = width(agent)
    );
    for m in binaries {
        println!(
            "{:<38} {:>w$}",
            format!("{} rate / this build's rate", m.side.as_arg()),
            format!("{:.1} %", vs_build(m) * 100.0),
            w = width(agent)
        );
    }

    if let Some((instances, bytes)) = agent.record.history {
        println!(
            "{:<38} {:>w$}",
            "agent: page history (last hour)",
            format!(
                "{:.2} MiB, {instances} instances, {} B each",
                mib(bytes as u64),
                bytes / instances.max(1)
            ),
            w = width(agent)
        );
    }

    if let Some([instances, ticks, runs, bytes, budget]) = agent.record.timeline {
        println!(
            "{:<38} {:>w$}",
            "agent: timelines (since the baseline)",
            format!(
                "{:.2} MiB, {instances} instances, {} B each, {ticks} ticks in {runs} runs, budget {:.0} MiB",
                mib(bytes),
                bytes / instances.max(1),
                mib(budget)
            ),
            w = width(agent)
        );
    }

    let mut goals = Vec::new();
    for m in &agent_like {
        let who = m.side.as_arg();
        goals.push((
            format!("{who}: median sweep of {n} pods <= 2 s"),
            m.record.median() <= GOAL_SWEEP,
        ));
        goals.push((
            format!("{who}: rate >= 70 % of the ceiling"),
            ratio(m) >= GOAL_RATIO,
        ));
        goals.push((
            format!("{who}: peak RSS < 150 MiB"),
            mib(m.record.peak_rss) < GOAL_RSS_MIB,
        ));
    }
    for m in binaries {
        goals.push((
            format!("{}: rate within 10 % of this build's", m.side.as_arg()),
            vs_build(m) >= GOAL_SAME_AS_BUILD,
        ));
    }
    goals.push((
        format!("agent: page history < {GOAL_HISTORY_MIB} MiB"),
        agent
            .record
            .history
            .is_some_and(|(_, bytes)| mib(bytes as u64) < GOAL_HISTORY_MIB),
    ));
    goals.push((
        "every sample a report".to_owned(),
        measured.iter().all(|m| m.record.failed() == 0),
    ));
    println!();
    for (goal, met) in &goals {
        println!("{:<50} {}", goal, if *met { "met" } else { "MISSED" });
    }
    Ok(!args.check || goals.iter().all(|(_, met)| *met))
}

/// Goal: at rest, at most this share of the polls per second of the
/// agent before the rollout-aware cadence (every pod every 10 s).
const GOAL_POLL_SHARE: f64 = 1.0 / 3.0;
/// The agent's interval before the rollout-aware cadence.
const BEFORE_INTERVAL: Duration = Duration::from_secs(10);

/// `--loop-seconds`: the run loop over the simulated pods.
fn run_loop(args: &LoadArgs) -> Result<bool, LoadError> {
    let limit = raise_fd_limit(1 << 20).map_err(LoadError::Child)?;
    // Only the loop's connections: listener + one kept connection per pod.
    let procs = args
        .sim_procs
        .unwrap_or_else(|| processes_needed(args.pods, limit, 1));
    let exe = std::env::current_exe().map_err(LoadError::Child)?;
    let sims = SimProcesses::spawn(&exe, args.pods, procs, 1, args.generation)?;
    let sim_pids = sims.pids();
    let cadence = match args.interval {
        Some(i) => Cadence::fixed(i),
        None => Cadence {
            rollout_interval: args.rollout_interval,
            steady_interval: args.steady_interval,
            ..Cadence::default()
        },
    };
    let config = LoopRunConfig {
        concurrency: args.concurrency,
        pods_per_instance: args.pods_per_instance,
        workers: args.workers,
        rollout_fraction: args.rollout_fraction,
        cadence,
        window: Duration::from_secs(args.loop_seconds.unwrap_or(60).max(1)),
    };
    let sim_before = sim_cpu(&sim_pids);
    let mut runner = LoopRunner::spawn(&exe, &config, sims.targets())?;
    let o: LoopOutcome = runner.outcome()?;
    let sim_after = sim_cpu(&sim_pids);
    let peak = runner.peak_rss()?;
    drop(runner);
    drop(sims);

    let n = args.pods;
    let before = n as f64 / BEFORE_INTERVAL.as_secs_f64();
    let pps = o.polls_per_second();
    let window = o.window.as_secs_f64().max(1e-9);
    let secs = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    println!(
        "fleet-load, run loop: {n} pods in {} instances of up to {} pods, {} in a rollout ({:.1} %), {} at rest; concurrency {}",
        o.instances.0 + o.instances.1,
        args.pods_per_instance,
        o.instances.0,
        args.rollout_fraction * 100.0,
        o.instances.1,
        args.concurrency,
    );
    println!(
        "cadence: rollout {:?}, steady {:?} (±{:.0} % jitter); counted {:.1} s after a {:.1} s warm-up",
        cadence.rollout_interval,
        cadence.steady_interval,
        cadence.jitter * 100.0,
        window,
        config.warmup().as_secs_f64(),
    );
    println!();
    let rows: Vec<(String, String)> = vec![
        ("pod polls per second, all".into(), format!("{pps:.0}")),
        (
            "  by instances in a rollout".into(),
            format!("{:.0}", o.polls.0 as f64 / window),
        ),
        (
            "  by instances at rest".into(),
            format!("{:.0}", o.polls.1 as f64 / window),
        ),
        (
            format!("before (every pod every {BEFORE_INTERVAL:?})"),
            format!("{before:.0}"),
        ),
        (
            "  fewer polls than before, all".into(),
            format!("{:.2}x", before / pps.max(1e-9)),
        ),
        (
            "  fewer polls than before, pods at rest".into(),
            format!(
                "{:.2}x",
                (before * o.polls_share_at_rest()) / (o.polls.1 as f64 / window).max(1e-9)
            ),
        ),
        (
            "interval in a rollout: median / p99 / max".into(),
            format!(
                "{} / {} / {} ({} intervals)",
                secs(o.rollout.p50),
                secs(o.rollout.p99),
                secs(o.rollout.max),
                o.rollout.count
            ),
        ),
        (
            "interval at rest: median / p99 / max".into(),
            format!(
                "{} / {} / {} ({} intervals)",
                secs(o.steady.p50),
                secs(o.steady.p99),
                secs(o.steady.max),
                o.steady.count
            ),
        ),
        (
            "sweeps that overran their interval".into(),
            o.overruns.to_string(),
        ),
        ("failed polls".into(), o.failed_polls.to_string()),
        (
            "agent CPU, share of one core".into(),
            format!("{:.1} %", o.cpu_share() * 100.0),
        ),
        (
            "simulators' CPU (whole run), share of one core".into(),
            match (sim_before, sim_after) {
                (Some(b), Some(a)) => format!(
                    "{:.1} %",
                    a.saturating_sub(b).as_secs_f64() / (window + config.warmup().as_secs_f64())
                        * 100.0
                ),
                _ => "n/a".into(),
            },
        ),
        ("agent peak RSS".into(), format!("{:.1} MiB", mib(peak))),
        (
            "agent timelines at the end".into(),
            format!(
                "{:.2} MiB, {} B per instance, {} ticks in {} runs",
                mib(o.timeline[3]),
                o.timeline[3] / o.timeline[0].max(1),
                o.timeline[1],
                o.timeline[2]
            ),
        ),
    ];
    for (label, value) in &rows {
        println!("{label:<48} {value:>32}");
    }
    let goals = [
        (
            format!(
                "polls per second <= 1/3 of before ({:.0})",
                before * GOAL_POLL_SHARE
            ),
            pps <= before * GOAL_POLL_SHARE,
        ),
        ("every poll a report".to_owned(), o.failed_polls == 0),
    ];
    println!();
    for (goal, met) in &goals {
        println!("{:<50} {}", goal, if *met { "met" } else { "MISSED" });
    }
    Ok(!args.check || goals.iter().all(|(_, met)| *met))
}
