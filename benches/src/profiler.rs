//! Running a measured child process under a profiler (`heaptrack`, `perf
//! record`, ...), named by an environment variable.

use std::path::Path;
use std::process::Command;

/// The environment variable naming a profiler command to run the agent
/// side's process under, words split at spaces (e.g. `heaptrack -o /tmp/loop`):
/// how the heap profiles in benches/PERFORMANCE.md were taken. It wraps
/// the measured agent side of both modes: the run loop's process and the
/// burst sweeps' `run-side --side agent` (never the bare ceiling).
/// heaptrack hooks glibc's `malloc`: build `fleet-load` with the
/// `system-allocator` feature for it (jemalloc otherwise).
pub const PROFILER_ENV: &str = "KURA_FLEET_LOAD_PROFILER";

/// `exe`, run by the profiler of [`PROFILER_ENV`] when it is set.
pub fn profiled(exe: &Path) -> Command {
    let wrapper = std::env::var(PROFILER_ENV).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
        None => Command::new(exe),
    }
}

/// The first words of the measured children's protocol lines (the burst
/// side's and the run loop's answers).
const PROTOCOL_WORDS: [&str; 6] = ["ready", "swept", "stats", "history", "timeline", "ran"];

/// Whether `line`, read from a profiled child's standard output, is the
/// profiler's own rather than the child's protocol (heaptrack prints its
/// banner and its preload library there): with a profiler set, any line
/// whose first word is not a protocol word. Without one, none.
pub fn is_profiler_line(line: &str) -> bool {
    if std::env::var_os(PROFILER_ENV).is_none() {
        return false;
    }
    line.split_whitespace()
        .next()
        .is_none_or(|word| !PROTOCOL_WORDS.contains(&word))
}
