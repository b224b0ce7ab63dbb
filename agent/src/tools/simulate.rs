//! `kura-agent simulate SCENARIO`: serve a simulated fleet until Ctrl-C or
//! SIGTERM, printing each pod's URL.

use crate::cli::raise_fd_limit;
use kura_sim::{Scenario, Simulator};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `kura-agent simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (JSON, see testdata/sim/README.md).
    pub scenario: PathBuf,
    /// Multiply the scenario's timeline offsets by this factor instead of
    /// its own `time_scale` (0.1 runs ten times faster).
    #[arg(long)]
    pub time_scale: Option<f64>,
}

/// Run the subcommand.
pub fn run(args: SimulateArgs) -> ExitCode {
    crate::cli::init_logging(crate::cli::LogFormat::Text, "warn");
    let runtime = match crate::cli::multi_thread_runtime("simulate") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura-agent simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: SimulateArgs) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = Scenario::load(&args.scenario)?;
    let pods = scenario.pod_specs().len() as u64;
    // A listener and a served connection per pod, plus some slack.
    if let Err(e) = raise_fd_limit(2 * pods + 256) {
        eprintln!("kura-agent simulate: cannot raise the open-file limit ({e}); try `ulimit -n`");
    }
    let sim = Simulator::from_scenario(&scenario, args.time_scale).await?;
    if !scenario.description.is_empty() {
        println!("# {}", scenario.description);
    }
    for pod in sim.pods() {
        println!("{} {} uid={}", pod.name(), pod.url(), pod.uid());
    }
    println!(
        "# serving {} pods; Ctrl-C or SIGTERM stops",
        sim.pods().len()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    drop(sim);
    Ok(())
}
