//! The allocator of the agent's processes: jemalloc with one arena.
//!
//! The agent's allocations are many and small (samples, per-pod entries,
//! report strings), made on one tokio worker and freed on another, with
//! long-lived aggregates replaced every sweep among short-lived ones. glibc
//! malloc kept many free holes at the peak (one arena; eight per CPU of
//! the node by default, worse), where jemalloc's size classes keep fewer:
//! the shipped binary peaks lower at the same share of the ceiling and no
//! more CPU per sweep (benches/PERFORMANCE.md has the figures).
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
/// `muzzy_decay_ms:0`; jemalloc keeps them for a while by default),
/// purged by jemalloc's background thread: a lower peak for a little more
/// CPU at rest than with short decays (benches/PERFORMANCE.md, "The
/// 10,000-pod budget met", has the figures).
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
