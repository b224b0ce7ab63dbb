//! `kura-gate`: offline replay of the rollout gate (contract/gate.md).

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Rollout gate rules, offline.
#[derive(Debug, Parser)]
#[command(name = "kura-gate", version, about, long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const LONG_ABOUT: &str = "\
Pure rollout gate rules: compare each server's rollout-health aggregate with
the baseline captured before its wave, and answer pass, soak or hard_stop.

kura-gate replay FILE reads one JSON document (FILE, or - for standard input):
  {\"config\": {\"soakSeconds\": [900, 300], \"waveDeadlineSeconds\": 3600,
              \"maxSampleAgeSeconds\": 180, \"futureSkewSeconds\": 60,
              \"outboxBandPercent\": 10, \"outboxBandMinimum\": 50,
              \"replicationLagBandPercent\": 10,
              \"replicationLagBandMinimum\": 50,
              \"fdTimeoutBand\": 0, \"peerFailureBandPercent\": 10,
              \"peerFailureBandMinimum\": 25},
   \"ticks\": [{\"now\": T, \"wave\": 0, \"waveStartedAt\": T, \"attempt\": 0,
              \"servers\": [{\"id\": \"s1\", \"wave\": 0, \"converged\": true,
                \"deployment\": \"succeeded\", \"status\": \"active\",
                \"baseline\": {\"capturedAt\": T, \"health\": {...}},
                \"health\": {...}}]}]}
config and each key are optional (defaults shown; the last soakSeconds value
repeats; soakSeconds lists at least one value, maxSampleAgeSeconds is at
least 1 and the band percentages are at most 1000; unknown keys are refused). health and baseline.health are rolloutHealth aggregates (camelCase)
or null; only the fields the checks read matter, a missing one is null and a
missing required one (ready, serving, sampledPods, fdTimeoutCount, ...) fails
its check. A null baseline means not soak-eligible; a baseline captured
earlier may be given as {\"capturedAt\": T, \"counters\": {\"outboxMessages\": N,
\"replicationLagEntries\": N, \"fdTimeoutCount\": N,
\"peerConnectionFailures\": N}, \"soakEligible\": B}
instead of its aggregate. Unknown keys outside health are refused.

It writes one JSON line per tick and exits 0:
  {\"tick\": 0, \"verdict\": \"soak\", \"signal\": \"soaking\", \"serverId\": null,
   \"healthySince\": T, \"remainingSeconds\": 900, \"evidence\": []}
verdict is pass, soak or hard_stop; remainingSeconds is null unless soaking;
evidence lists the failed checks (server, signal, observed, bandTop, baseline,
detail): empty for pass and soaking, at most 16 entries.
Invalid input exits 2 with one line on standard error naming the tick, the
server and the field at fault (or the line and column of a key given twice
in one object: refused anywhere in the document). Counts in health are at
most 2^63-1, the largest integer the API server stores. One leading UTF-8
byte-order mark is skipped.

Rules (contract/gate.md): destroyed servers and servers of later waves are out
of scope; hard stops come first (deployment_failed, server_regressed_to_failed,
memory_pressure_critical, serving_fenced); then every server of the current wave must be
converged and every converged soak-eligible server of the scope must pass the
server checks (contract/gate.md, 1 to 18; the hard-stop checks 1 and 16
first). Converged and healthy for the wave's soak: pass; any
failing tick restarts the clock; still incomplete waveDeadlineSeconds after
waveStartedAt: hard_stop wave_deadline_exceeded. A hard stop latches until a
tick with a higher attempt, which starts fresh. An empty wave passes on its
first tick with a healthy scope. fd timeouts and peer failures below their
baseline are resets: the effective baseline drops to them.";

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a recorded sequence of ticks and print one verdict per line.
    Replay {
        /// The replay document, or - for standard input.
        file: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay { file } => replay(&file),
    }
}

fn replay(file: &str) -> ExitCode {
    let text = if file == "-" {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            eprintln!("cannot read standard input: {e}");
            return ExitCode::from(2);
        }
        text
    } else {
        match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("cannot read {file}: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let lines = match kura_gate::replay(&text) {
        Ok(lines) => lines,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    for line in &lines {
        let written = serde_json::to_string(line)
            .map_err(std::io::Error::other)
            .and_then(|json| writeln!(out, "{json}"));
        if let Err(e) = written {
            eprintln!("cannot write output: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
