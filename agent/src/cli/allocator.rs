//! The allocator of the agent's processes: jemalloc with one arena.
//!
//! The agent's allocations are many and small (samples, per-pod entries,
//! report strings), made on one tokio worker and freed on another, with
//! long-lived aggregates replaced every sweep among short-lived ones. At
//! 10,000 pods glibc malloc kept about 9 MiB of free holes at the peak
//! (one arena; eight per CPU of the node by default, worse), where jemalloc's
//! size classes keep fewer: the shipped binary peaks at 45.1-45.7 MiB
//! instead of 49.4-50.1 MiB, at the same share of the ceiling and no more
//! CPU per sweep (benches/PERFORMANCE.md).
//!
//! One arena, as glibc was capped before: jemalloc's default is four per
//! CPU of the node (not of the container), each holding its own free
//! pages, while most allocations are served from each thread's cache
//! without the arena's lock. An operator can still change it:
//! `_RJEM_MALLOC_CONF` in the environment is read after [`MALLOC_CONF`]
//! (e.g. `_RJEM_MALLOC_CONF=narenas:2`).
//!
//! Only the binaries declare it (`main` and `fleet-load`, as
//! `#[global_allocator] static A: Allocator = Allocator;`): the library's
//! tests and fuzz targets keep the system allocator and its sanitizers.
//! With the `system-allocator` feature the binaries use glibc malloc
//! instead, so heap profilers that hook `malloc` (heaptrack) see every
//! allocation.

/// jemalloc's options for the agent's processes, read once at its first
/// allocation (jemalloc's `malloc_conf`, under the `_rjem_` prefix the
/// crate builds it with).
///
/// Freed pages go back to the kernel at once (`dirty_decay_ms:0`,
/// `muzzy_decay_ms:0`; jemalloc keeps them 10 s by default), purged by
/// jemalloc's background thread: at 10,000 pods the shipped binary peaked
/// at 62.9 MiB instead of 64.3-64.4 MiB (300 ms and 1 s decays) for about
/// 1.5 points more CPU at rest (9.2 % against 7.6 %; benches/PERFORMANCE.md,
/// "The 10,000-pod budget met").
#[cfg(not(feature = "system-allocator"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 67] =
    b"narenas:1,background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0\0";

/// The allocator the agent's binaries declare global: a unit struct, so
/// `Allocator` is its value too.
#[cfg(feature = "system-allocator")]
pub use std::alloc::System as Allocator;
/// The allocator the agent's binaries declare global: a unit struct, so
/// `Allocator` is its value too.
#[cfg(not(feature = "system-allocator"))]
pub use tikv_jemallocator::Jemalloc as Allocator;
