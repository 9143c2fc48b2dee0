//! What durability takes on Linux, in one place.
//!
//! - [`dir`]: a directory entry (a created, renamed or removed file, a new
//!   directory) is durable only once its directory is fsynced; a directory
//!   made by `create_dir_all` needs each new level's parent synced.
//! - [`sled`]: sled 0.34's `flush()` ends in `sync_file_range`, which
//!   persists neither a grown file's size nor the disk's write cache, and
//!   never fsyncs a directory or a blob file. [`sled::SyncedSled`] adds the
//!   fsyncs that make a flushed sled durable.
//! - Fail-stop: after a failed fsync Linux may have dropped the dirty pages
//!   and report success to the next fsync ("fsyncgate"). A [`sled::SyncedSled`]
//!   whose sync failed fails every later sync; callers stop acknowledging.
//!
//! What this crate does not do: sync anything on its own schedule, or retry.

pub mod dir;
pub mod sled;

pub use dir::{create_dir_all_durable, sync_dir, sync_parent};
pub use sled::SyncedSled;
