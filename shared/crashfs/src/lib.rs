//! crashfs: a filesystem for tests that forgets what was never synced.
//!
//! SIGKILL leaves the page cache alone, so a process-crash test can never see
//! a missing fsync. A power cut drops the page cache. crashfs is a FUSE
//! filesystem that writes through to a backing directory and remembers, for
//! every file, what each write since its last fsync or fdatasync overwrote
//! (and its size), and for every directory, the entries made, removed or
//! renamed since its last fsync. [`Mount::crash`] then puts back what a power
//! cut may lose:
//! - data ([`DataLoss`]): every unsynced write (`Drop`, LazyFS's clear-cache),
//!   each 512-byte sector of each unsynced write independently old or new
//!   (`Torn`, as FoundationDB's simulated files and ALICE), or a random
//!   prefix of each file's unsynced writes (`Prefix`);
//! - names ([`NameLoss`]): every namespace change no fsync of its directory
//!   made durable (`All`), or a random prefix of them (`Prefix`).
//!
//! `sync_file_range` never reaches a FUSE daemon as a sync, so it makes
//! nothing durable here, as on a real power cut. An fsync can be made to fail
//! ([`FsyncFault`]); its writes are then lost at a crash even if a later
//! fsync succeeds (Linux's behaviour after a writeback error).
//!
//! What it does not model: a disk's volatile write cache being reordered
//! across an fsync, misdirected or corrupted writes of synced data, hard links,
//! symlinks, fallocate, or mmap writes (none of which quire uses).

mod fs;
mod mount;
mod names;
mod nodes;
mod rng;
mod undo;

use std::path::{Path, PathBuf};

pub use mount::Mount;
pub use undo::SECTOR_BYTES;

/// What a crash does to data written since a file's last sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataLoss {
    /// All of it is lost.
    Drop,
    /// Each sector of each write is old or new, independently; the size is any
    /// the file had since the sync.
    Torn,
    /// A random prefix of each file's writes survives.
    Prefix,
}

/// What a crash does to namespace changes no directory fsync made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameLoss {
    All,
    Prefix,
}

/// One power cut, replayable from its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    pub seed: u64,
    pub data: DataLoss,
    pub names: NameLoss,
}

impl Crash {
    /// The harshest cut: nothing unsynced survives.
    pub fn drop_all(seed: u64) -> Self {
        Crash { seed, data: DataLoss::Drop, names: NameLoss::All }
    }
}

/// What a crash put back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CrashReport {
    /// Files with unsynced changes.
    pub files: u64,
    /// Writes (or, torn, sectors) undone and kept.
    pub writes_undone: u64,
    pub writes_kept: u64,
    /// Ranges lost to a failed fsync, restored to their old bytes.
    pub lost_ranges: u64,
    pub names_undone: u64,
    pub names_kept: u64,
}

/// Fails fsync/fdatasync (or directory fsync) with EIO on paths (relative to
/// the mount) containing `path_contains`: the first `skip` matching syncs
/// pass, the next `fail` fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsyncFault {
    pub path_contains: String,
    pub target: SyncTarget,
    pub skip: u64,
    pub fail: u64,
    /// The failing sync is where the power goes: the mount freezes as it
    /// arrives (what it was to sync stays unsynced), so a crash then sees
    /// the writes before it as a cut mid-flight would.
    pub cut: bool,
}

impl FsyncFault {
    /// The next sync of a file whose path contains `path_contains` fails.
    pub fn next_file(path_contains: &str) -> Self {
        FsyncFault { path_contains: path_contains.into(), target: SyncTarget::Files, skip: 0, fail: 1, cut: false }
    }

    /// The power goes at the next sync of a file whose path contains `path_contains`.
    pub fn cut_at_next_file(path_contains: &str) -> Self {
        FsyncFault { cut: true, ..FsyncFault::next_file(path_contains) }
    }

    /// The next fsync of a directory whose path contains `path_contains` fails.
    pub fn next_dir(path_contains: &str) -> Self {
        FsyncFault { path_contains: path_contains.into(), target: SyncTarget::Dirs, skip: 0, fail: 1, cut: false }
    }
}

/// Which syncs an [`FsyncFault`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncTarget {
    Any,
    Files,
    Dirs,
}

/// Counters of a mount.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub writes: u64,
    pub syncs: u64,
    pub dir_syncs: u64,
    pub failed_syncs: u64,
    /// Writes and namespace changes a crash now would undo.
    pub pending_writes: u64,
    pub pending_names: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The filesystem could not be mounted or its session failed.
    #[error("crashfs at {at}: {source}")]
    Mount { at: PathBuf, source: std::io::Error },
    /// The backing directory could not be read or rolled back.
    #[error("crashfs backing file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io { path: path.to_path_buf(), source }
    }
}
