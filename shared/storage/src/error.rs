//! What can go wrong in the storage engine.

use std::path::{Path, PathBuf};

/// A storage failure. Logical outcomes a client must see as protocol error
/// codes (fenced, no such entry, corrupt copy, ...) are variants here too, so
/// the bookie maps them one to one.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Stored data is damaged in a way that loses acknowledged entries if ignored.
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    /// The journal was closed (shutdown).
    #[error("journal closed")]
    JournalClosed,
    /// An earlier journal write or sync failed; nothing more is accepted.
    #[error("journal failed earlier; no further adds are accepted until restart")]
    JournalFailed,
    /// The index was closed (shutdown).
    #[error("index closed")]
    IndexClosed,
    /// The index store failed.
    #[error("index: {0}")]
    Index(String),
    /// No entry of the ledger is stored here.
    #[error("no such ledger {0}")]
    NoSuchLedger(u64),
    /// The ledger is known but not this entry.
    #[error("no such entry {1} in ledger {0}")]
    NoSuchEntry(u64, u64),
    /// The stored copy fails its CRC32C: treat as missing and repair, never as absent.
    #[error("entry {1} of ledger {0} is corrupt: {2}")]
    CorruptEntry(u64, u64, String),
    /// The ledger is fenced; only recovery adds are accepted.
    #[error("ledger {0} is fenced")]
    Fenced(u64),
    /// The add's digest does not match its contents.
    #[error("entry {1} of ledger {0}: digest mismatch")]
    DigestMismatch(u64, u64),
    /// The payload exceeds the entry size limit.
    #[error("entry of {0} bytes exceeds the limit of {1} bytes")]
    TooLarge(usize, usize),
    /// The bookie is read-only (disk full or set so).
    #[error("bookie is read-only: {0}")]
    ReadOnly(String),
    /// Too many requests are parked or queued.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// An entry log was removed (compacted or garbage) after its location
    /// was looked up: look the entry up again.
    #[error("entry log {0} was removed")]
    LogRemoved(u32),
    /// The data directories do not belong to this bookie instance.
    #[error("cookie: {0}")]
    Cookie(String),
}

/// A copy for each of several adds that one failure refused (an
/// `add_many`'s journal completion): the OS error keeps its kind and
/// message, the rest is copied as is.
impl Clone for StorageError {
    fn clone(&self) -> Self {
        use StorageError::*;
        match self {
            Io { path, source } => {
                Io { path: path.clone(), source: std::io::Error::new(source.kind(), source.to_string()) }
            }
            Corrupt(s) => Corrupt(s.clone()),
            JournalClosed => JournalClosed,
            JournalFailed => JournalFailed,
            IndexClosed => IndexClosed,
            Index(s) => Index(s.clone()),
            NoSuchLedger(l) => NoSuchLedger(*l),
            NoSuchEntry(l, e) => NoSuchEntry(*l, *e),
            CorruptEntry(l, e, s) => CorruptEntry(*l, *e, s.clone()),
            Fenced(l) => Fenced(*l),
            DigestMismatch(l, e) => DigestMismatch(*l, *e),
            TooLarge(a, b) => TooLarge(*a, *b),
            ReadOnly(s) => ReadOnly(s.clone()),
            Overloaded(s) => Overloaded(s.clone()),
            LogRemoved(id) => LogRemoved(*id),
            Cookie(s) => Cookie(s.clone()),
        }
    }
}

impl StorageError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        StorageError::Io { path: path.to_path_buf(), source }
    }
}
