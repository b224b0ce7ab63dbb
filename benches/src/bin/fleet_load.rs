//! `fleet-load`: the agent's real poll-and-aggregate path over N simulated
//! pods on loopback, against the loopback ceiling (bare GETs to the same
//! pods with a plain hyper client at the same concurrency).
//!
//! `cargo run --release -p kura-benches --bin fleet-load -- --pods 10000`
//!
//! Every part runs in its own process, all children of this one (the same
//! executable in hidden modes): the simulated pods (`serve-sim`, as many
//! processes as the open-file limit needs), the agent side and the bare
//! side (`run-side`). So each side's CPU time and peak RSS are its own,
//! both keep one connection per pod alive for the whole run (as the agent
//! does between sweeps in production), and their sweeps alternate so both
//! see the same machine load.

use clap::{Parser, Subcommand};
use kura_agent::poll::PollConfig;
use kura_benches::error::LoadError;
use kura_benches::proc_stats::{cpu_time_of, mib};
use kura_benches::runner::{Runner, RunnerConfig, Side, Swept};
use kura_benches::sim_process::{Generations, SimProcesses, processes_needed, serve};
use kura_sim::raise_fd_limit;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Goal: a sweep of 10,000 pods at most this long.
const GOAL_SWEEP: Duration = Duration::from_secs(2);
/// Goal: the agent's poll rate at least this share of the ceiling's.
const GOAL_RATIO: f64 = 0.70;
/// Goal: the agent's peak RSS under this many MiB.
const GOAL_RSS_MIB: f64 = 150.0;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Mode::ServeSim {
            pods,
            offset,
            first_ip,
            generation,
        }) => serve(pods, offset, first_ip, generation).map(|()| true),
        Some(Mode::RunSide {
            side,
            concurrency,
            pods_per_instance,
            workers,
            no_keep_alive,
        }) => kura_benches::runner::serve(
            side,
            RunnerConfig {
                concurrency,
                pods_per_instance,
                workers,
                keep_alive: !no_keep_alive,
            },
        )
        .map(|()| true),
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
    cold: Swept,
    sweeps: Vec<Swept>,
    /// Connections the simulated pods accepted during the cold sweep.
    cold_connections: u64,
    /// Connections the simulated pods accepted during the measured sweeps.
    connections: u64,
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

fn sim_cpu(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|p| cpu_time_of(*p)).sum()
}

fn run(args: &LoadArgs) -> Result<bool, LoadError> {
    let limit = raise_fd_limit(1 << 20).map_err(LoadError::Child)?;
    let procs = args
        .sim_procs
        .unwrap_or_else(|| processes_needed(args.pods, limit));
    let exe = std::env::current_exe().map_err(LoadError::Child)?;
    let started = Instant::now();
    let mut sims = SimProcesses::spawn(&exe, args.pods, procs, args.generation)?;
    let startup = started.elapsed();
    let sim_pids = sims.pids();
    let config = RunnerConfig {
        concurrency: args.concurrency,
        pods_per_instance: args.pods_per_instance,
        workers: args.workers,
        keep_alive: !args.no_keep_alive,
    };
    let mut agent_runner = Runner::spawn(&exe, Side::Agent, config, sims.targets())?;
    let mut bare_runner = Runner::spawn(&exe, Side::Bare, config, sims.targets())?;

    // The pods count the connections they accept: the sides sweep in
    // turn, so the count between two readings is one side's.
    let mut accepted = sims.connections()?;
    let mut opened = |sims: &mut SimProcesses| -> Result<u64, LoadError> {
        let now = sims.connections()?;
        Ok(now.saturating_sub(std::mem::replace(&mut accepted, now)))
    };
    let mut agent = Record {
        cold: agent_runner.sweep()?,
        cold_connections: opened(&mut sims)?,
        ..Record::default()
    };
    let mut bare = Record {
        cold: bare_runner.sweep()?,
        cold_connections: opened(&mut sims)?,
        ..Record::default()
    };
    // Simulator CPU is read from /proc at clock-tick resolution, so it is
    // given per side as a total over its measured sweeps.
    let (mut sim_agent, mut sim_bare) = (Duration::ZERO, Duration::ZERO);
    let mut sim_cpu_known = true;
    let mut timed = |runner: &mut Runner,
                     record: &mut Record,
                     total: &mut Duration|
     -> Result<(), LoadError> {
        let before = sim_cpu(&sim_pids);
        let s = runner.sweep()?;
        match (before, sim_cpu(&sim_pids)) {
            (Some(b), Some(a)) => *total += a.saturating_sub(b),
            _ => sim_cpu_known = false,
        }
        record.sweeps.push(s);
        record.connections += opened(&mut sims)?;
        Ok(())
    };
    for i in 0..args.sweeps {
        // Alternate which side goes first.
        if i % 2 == 0 {
            timed(&mut agent_runner, &mut agent, &mut sim_agent)?;
            timed(&mut bare_runner, &mut bare, &mut sim_bare)?;
        } else {
            timed(&mut bare_runner, &mut bare, &mut sim_bare)?;
            timed(&mut agent_runner, &mut agent, &mut sim_agent)?;
        }
    }
    let agent_peak = agent_runner.peak_rss()?;
    let bare_peak = bare_runner.peak_rss()?;
    drop(agent_runner);
    drop(bare_runner);
    drop(sims);

    let n = args.pods;
    let ratio = agent.rate(n) / bare.rate(n).max(1e-9);
    let agg_time: Duration = agent.sweeps.iter().map(|s| s.aggregate).sum();
    let agg_samples: usize = agent.sweeps.iter().map(|s| s.samples).sum();
    let agg_rate = agg_samples as f64 / agg_time.as_secs_f64().max(1e-9);
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let instances = n.div_ceil(args.pods_per_instance.max(1));
    println!(
        "fleet-load: {n} pods ({} report generations) served by {procs} simulator process(es), started in {:.2} s",
        args.generation.as_arg(),
        startup.as_secs_f64(),
    );
    println!(
        "{instances} instances of up to {} pods; concurrency {}; keep-alive {}; per side 1 cold sweep, then {} measured sweeps alternating with the other side; {cpus} CPUs",
        args.pods_per_instance,
        args.concurrency,
        if args.no_keep_alive { "off" } else { "on" },
        args.sweeps,
    );
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
    let rows: Vec<(&str, String, String)> = vec![
        (
            "cold sweep (opens connections)",
            secs(agent.cold.wall),
            secs(bare.cold.wall),
        ),
        (
            "sweep wall time, median",
            secs(agent.median()),
            secs(bare.median()),
        ),
        ("sweep wall time, min / max", range(&agent), range(&bare)),
        (
            "polls per second (median sweep)",
            format!("{:.0}", agent.rate(n)),
            format!("{:.0}", bare.rate(n)),
        ),
        (
            "CPU time per sweep, side process",
            secs(agent.cpu_per_sweep()),
            secs(bare.cpu_per_sweep()),
        ),
        (
            "CPU time per sweep, simulators",
            sim_per_sweep(sim_agent),
            sim_per_sweep(sim_bare),
        ),
        (
            "peak RSS of the side process",
            format!("{:.1} MiB", mib(agent_peak)),
            format!("{:.1} MiB", mib(bare_peak)),
        ),
        (
            "connections opened, cold sweep",
            per(agent.cold_connections, n, "pod"),
            per(bare.cold_connections, n, "pod"),
        ),
        (
            "connections opened, measured sweeps",
            per(agent.connections, n * args.sweeps, "poll"),
            per(bare.connections, n * args.sweeps, "poll"),
        ),
        (
            "failed samples, all sweeps",
            agent.failed().to_string(),
            bare.failed().to_string(),
        ),
        (
            "fold+judge, pod samples/s on 1 core",
            format!("{agg_rate:.0}"),
            "-".to_owned(),
        ),
    ];
    println!();
    println!(
        "{:<38} {:>24} {:>20}",
        "", "agent (poll+aggregate)", "bare GET ceiling"
    );
    for (label, a, b) in &rows {
        println!("{label:<38} {a:>24} {b:>20}");
    }
    println!(
        "{:<38} {:>24}",
        "agent rate / ceiling rate",
        format!("{:.1} %", ratio * 100.0)
    );

    let goals = [
        (
            format!("median sweep of {n} pods <= 2 s"),
            agent.median() <= GOAL_SWEEP,
        ),
        (
            "agent rate >= 70 % of the ceiling".to_owned(),
            ratio >= GOAL_RATIO,
        ),
        (
            "agent peak RSS < 150 MiB".to_owned(),
            mib(agent_peak) < GOAL_RSS_MIB,
        ),
        (
            "every sample a report".to_owned(),
            agent.failed() == 0 && bare.failed() == 0,
        ),
    ];
    println!();
    for (goal, met) in &goals {
        println!("{:<50} {}", goal, if *met { "met" } else { "MISSED" });
    }
    Ok(!args.check || goals.iter().all(|(_, met)| *met))
}
