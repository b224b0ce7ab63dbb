//! What this process (or a child) has cost so far: CPU time and resident
//! memory, read from `getrusage` and `/proc`.

use std::time::Duration;

/// User plus system CPU time this process has used so far.
pub fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
}

/// User plus system CPU time of process `pid` so far, from
/// `/proc/<pid>/stat` (`None` if it cannot be read).
pub fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields resume after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13
    // here (this slice starts at field 3).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    if ticks == 0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / ticks as f64,
    ))
}

/// A `kB` field of `/proc/<who>/status` (e.g. `VmHWM`, `VmRSS`) in bytes.
fn status_kb(who: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{who}/status")).ok()?;
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// This process's peak resident set size (`VmHWM`) in bytes.
pub fn peak_rss() -> Option<u64> {
    status_kb("self", "VmHWM")
}

/// This process's current resident set size (`VmRSS`) in bytes.
pub fn rss() -> Option<u64> {
    status_kb("self", "VmRSS")
}

/// Peak resident set size of process `pid` in bytes.
pub fn peak_rss_of(pid: u32) -> Option<u64> {
    status_kb(&pid.to_string(), "VmHWM")
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// CPU time the calling thread has used so far (immune to the thread being
/// preempted, unlike wall time).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the struct we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::from_secs(u64::try_from(ts.tv_sec).unwrap_or(0))
        + Duration::from_nanos(u64::try_from(ts.tv_nsec).unwrap_or(0))
}
