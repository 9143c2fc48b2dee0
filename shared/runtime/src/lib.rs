//! What every quire service binary shares.
//!
//! - [`config`]: options from flags, environment variables and a TOML file, in
//!   that order of precedence, declared once with clap.
//! - [`logging`]: the tracing subscriber (text or JSON) and the OpenTelemetry
//!   layer that gives spans W3C ids to propagate.
//! - [`service`]: the common options and the start/stop of a service's QUIC server.
//! - [`metrics`]: a Prometheus text endpoint for services without HTTP of their own.
//! - [`slot`]: numbered ids for the replicas of one service (compose `--scale`).
//! - [`Allocator`]: the global allocator every service binary installs.

pub mod config;
pub mod logging;
pub mod metrics;
pub mod packets;
pub mod service;
pub mod slot;

/// The global allocator of every quire binary: mimalloc. A profile of the
/// write path (4 writers x 100 adds in flight over three bookies) put glibc's
/// malloc and free at about a tenth of the machine's CPU, with
/// `malloc_consolidate` and `unlink_chunk` prominent: buffers allocated on one
/// thread (QUIC receive, tokio workers) and freed on another (the journal and
/// the entry-log flusher). Each binary's main.rs installs it with
/// `#[global_allocator] static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// Returns the pages the allocator holds freed to the OS now. mimalloc v3
/// keeps freed pages for a second (ten for whole arenas) before it gives
/// them back, so a burst of short-lived allocations (a bookie's flush of
/// 100 000 ledgers' index blocks, once a second) kept about 30 MiB resident
/// between bursts. Called after such a burst, on the thread that made it.
pub fn release_freed_memory() {
    extern "C" {
        // mimalloc's public API (mimalloc.h), in the library `Allocator` links.
        fn mi_collect(force: bool);
    }
    // SAFETY: no arguments beyond a bool, no pointers; mimalloc allows it
    // from any thread at any time.
    unsafe { mi_collect(true) }
}

pub use packets::PacketArgs;
pub use service::{deny_list, new_instance_id, wait_for_shutdown_signal, CommonArgs, RunningService, ShutdownSignals};
