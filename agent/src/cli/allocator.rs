//! The C allocator's settings for the agent's processes.
//!
//! glibc's malloc gives each thread that allocates under contention an
//! arena of its own, up to eight per CPU the node has (not per CPU the
//! container may use), and memory freed into one arena is not reused by
//! another. The agent's allocations are many and small (samples, per-pod
//! entries, report strings), made on one tokio worker and freed on
//! another, so extra arenas mostly hold free holes. Most of those
//! allocations are served by each thread's cache without taking the
//! arena's lock, so one arena costs no measurable speed: at 10,000 pods
//! its peak RSS is 46 MiB in every run, where glibc's default gives 48-50
//! MiB and two arenas 44.5 or 50 MiB depending on whether the second one
//! was created (benches/PERFORMANCE.md).

/// The most glibc malloc arenas the agent's processes use.
pub const MALLOC_ARENAS: i32 = 1;

/// Caps glibc malloc at [`MALLOC_ARENAS`] arenas, unless the environment
/// sets `MALLOC_ARENA_MAX` (glibc then follows that, so an operator can
/// still choose). Call first thing at start-up, before any thread starts.
/// Does nothing with another C library.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of the allocator; it is
        // called before the process starts any other thread.
        let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
}
