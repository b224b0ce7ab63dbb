//! The open-file limit of the processes that hold many sockets at once:
//! the tools serving or polling a large simulated fleet (`simulate`, the
//! fleet-load side), the benches and the tests.

/// Raise this process's soft limit on open files towards `wanted` (to the
/// hard limit, or beyond it when the process is privileged). Returns the
/// soft limit in force afterwards.
pub fn raise_fd_limit(wanted: u64) -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= wanted {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: wanted,
        };
        // SAFETY: setrlimit reads the struct we own; it fails without
        // privilege, which is fine.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(wanted);
        }
    }
    lim.rlim_cur = wanted.min(lim.rlim_max);
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}
