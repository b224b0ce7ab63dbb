//! `kura-gate`: offline replay of the rollout gate (contract/gate.md).

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kura_gate::GateConfig;
use kura_gate::what_if::{SummaryLine, View};
use serde::Serialize;

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
              \"peerFailureBandMinimum\": 25,
              \"backlogDrainWindowSeconds\": 900},
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
in one object: refused anywhere in the document; control characters in it
are printed escaped, \\u{1b}). Output that cannot be written (a full disk, a
closed pipe) exits 3 with one line on standard error. Counts in health are at
most 2^63-1, the largest integer the API server stores. One leading UTF-8
byte-order mark is skipped.

Rules (contract/gate.md): destroyed servers, suspended ones (health
\"suspended\": true) and servers of later waves are out of scope; hard stops
come first (deployment_failed, server_regressed_to_failed,
memory_pressure_critical, serving_fenced, update_paused: health's
\"updatePaused\" on any server, converged or not); then every server of the
current wave must be converged and every converged soak-eligible server of
the scope must pass the server checks (contract/gate.md, 1 to 19; the
hard-stop checks 1, 16 and 19 first). The outbox and the replication lag
above their bands fail only once they have not fallen for
backlogDrainWindowSeconds (0: the band alone); the evidence names the run
(since, level). Converged and healthy for the wave's soak: pass; any
failing tick restarts the clock; still incomplete waveDeadlineSeconds after
waveStartedAt: hard_stop wave_deadline_exceeded. A hard stop latches until a
tick with a higher attempt, which starts fresh. An empty wave passes on its
first tick with a healthy scope. fd timeouts and peer failures below their
baseline are resets: the effective baseline drops to them.

Exported timelines (the agent's /api/v1/instances/NS/NAME/timeline) are
replay documents with three more keys, read as strictly:
  \"instance\": {\"namespace\", \"name\", \"targetImage\", \"baselineImage\": str|null},
  \"window\": {\"from\": T, \"to\": T, \"droppedTicks\": N, \"complete\": B},
  and on each server \"published\": {\"verdict\": healthy|unhealthy|hard_stop|suspended,
  \"signal\": a signal, null exactly when healthy} (or null).

--agent-view prints, per tick and per server, the verdict the agent computes
for that server as one instance (absolute checks always, counter checks only
when soak-eligible, resets lower the effective baseline; state starts from
the server's baseline, a null baseline is a first sight):
  {\"tick\": 0, \"serverId\": \"ns/n\", \"verdict\": \"unhealthy\",
   \"signal\": \"outbox_regressed\", \"healthySince\": null, \"evidence\": [...],
   \"published\": {...}|null, \"agrees\": true|false|null}
and exits 1 (after every line) when a published verdict or signal differs.

--gate-config FILE judges with FILE (a JSON object of the config keys over
the defaults, at most 64 KiB, refused as the agent's --gate-config is)
instead of the document's config. With --diff only the ticks where its
verdict or signal differs from the document's own configuration are
printed ({\"tick\", \"document\": {...}, \"candidate\": {...}}, with \"serverId\"
under --agent-view), then {\"summary\": {\"view\", \"ticks\", \"differences\",
\"document\": O, \"candidate\": O}} where O is {\"firstPass\", \"firstHold\",
\"firstHardStop\", \"hardStopTicks\", \"timeToPassSeconds\"}; exit 1 when any
tick differs. Details: docs/gate-replay.md.

Exit status: 0; 1 when --agent-view disagrees with what was published or
--diff finds a difference; 2 on invalid input; 3 when the output cannot be
written.";

/// The exit statuses of `replay`, under its own help.
const EXIT_STATUS: &str = "Exit status: 0; 1 when --agent-view disagrees with what was \
published or --diff finds a difference; 2 on invalid input (one line on standard error); 3 \
when the output cannot be written (a full disk, a closed pipe).";

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a recorded sequence of ticks and print one verdict per line.
    #[command(after_help = EXIT_STATUS)]
    Replay {
        /// The replay document (or exported timeline), or - for standard
        /// input.
        file: String,
        /// Print the agent's per-instance verdict of every server at every
        /// tick (one line each) instead of the wave judge's, beside what the
        /// document says the agent published; exit 1 when they disagree.
        #[arg(long)]
        agent_view: bool,
        /// Judge with this configuration (an object of the `config` keys,
        /// up to 64 KiB: JSON, or YAML for a name not ending in `.json`)
        /// instead of the document's own.
        #[arg(long, value_name = "FILE")]
        gate_config: Option<PathBuf>,
        /// With --gate-config: print only the ticks where the candidate's
        /// verdict or signal differs from the document's own
        /// configuration's, then a summary line; exit 1 when any differs.
        #[arg(long, requires = "gate_config")]
        diff: bool,
    },
}

/// Exit status when the input is refused.
const EXIT_REFUSED: u8 = 2;
/// Exit status when the output cannot be written (1 means "disagrees" or
/// "differs").
const EXIT_OUTPUT_FAILED: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay {
            file,
            agent_view,
            gate_config,
            diff,
        } => {
            let text = match read_input(&file) {
                Ok(text) => text,
                Err(message) => return refused(&message),
            };
            let candidate = match gate_config.as_deref().map(load_gate_config).transpose() {
                Ok(candidate) => candidate,
                Err(message) => return refused(&message),
            };
            let view = if agent_view { View::Agent } else { View::Wave };
            match (candidate, diff) {
                (Some(candidate), true) => what_if(&text, &candidate, view),
                (candidate, _) => replay(&text, candidate.as_ref(), view),
            }
        }
    }
}

fn refused(message: &str) -> ExitCode {
    say(message);
    ExitCode::from(EXIT_REFUSED)
}

/// One line on standard error, escaped ([`terminal_line`]); a standard
/// error that cannot be written is no reason to panic.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", terminal_line(message));
}

/// Characters that reorder how text is shown (Unicode bidirectional
/// controls).
fn reorders(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` safe to print as one line on a terminal: control and
/// bidirectional characters escaped (`\n`, `\u{1b}`), as the agent's own
/// terminal output is (a key of a `--gate-config` file is quoted in its
/// error as written).
fn terminal_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() || reorders(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn read_input(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))
    }
}

/// A `--gate-config` file, read by the gate's one configuration file
/// reader ([`kura_gate::config_file`], as the agent's `--gate-config`):
/// refused with one line naming the file, the key and the reason.
fn load_gate_config(path: &Path) -> Result<GateConfig, String> {
    kura_gate::config_file::load(path)
        .map(|file| file.config)
        .map_err(|e| e.to_string())
}

fn replay(text: &str, candidate: Option<&GateConfig>, view: View) -> ExitCode {
    let input = match kura_gate::parse_replay_judged_with(text, candidate) {
        Ok(input) => input,
        Err(e) => return refused(&e.to_string()),
    };
    let printed = match view {
        View::Wave => match kura_gate::run_replay(&input) {
            Ok(lines) => print_lines(&lines).map(|()| ExitCode::SUCCESS),
            Err(e) => return refused(&e.to_string()),
        },
        View::Agent => {
            let lines = kura_gate::agent_view(&input);
            let disagree = lines.iter().any(|line| line.agrees == Some(false));
            print_lines(&lines).map(|()| {
                if disagree {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            })
        }
    };
    printed.unwrap_or_else(|e| output_failed(&e))
}

fn what_if(text: &str, candidate: &GateConfig, view: View) -> ExitCode {
    let answer = match kura_gate::what_if(text, candidate, view) {
        Ok(answer) => answer,
        Err(e) => return refused(&e.to_string()),
    };
    let code = if answer.differences.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    print_lines(&answer.differences)
        .and_then(|()| {
            print_lines(&[SummaryLine {
                summary: &answer.summary,
            }])
        })
        .map_or_else(|e| output_failed(&e), |()| code)
}

/// Writes one JSON line per item to standard output, flushed.
fn print_lines<T: Serialize>(lines: &[T]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for line in lines {
        let json = serde_json::to_string(line).map_err(std::io::Error::other)?;
        writeln!(out, "{json}")?;
    }
    out.flush()
}

/// The output could not be written: one line on standard error, exit 3.
fn output_failed(error: &std::io::Error) -> ExitCode {
    say(&format!("kura-gate replay: cannot write output: {error}"));
    ExitCode::from(EXIT_OUTPUT_FAILED)
}
