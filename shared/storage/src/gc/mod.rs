//! Garbage collection of the entry logs: which logs are dead or sparse
//! ([`plan`]), moving a sparse log's live entries ([`compact`]), and the
//! byte-rate limit that keeps it from crowding out adds ([`throttle`]).
//! Deciding which ledgers are deleted is the bookie's (it asks the metadata
//! service); the store only drops what it is told to.

pub mod compact;
pub mod plan;
pub mod throttle;

pub use plan::LogUsage;
pub use throttle::Throttle;

/// What one pass over the entry logs did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcOutcome {
    /// Logs removed whole (nothing referenced them).
    pub logs_removed: u64,
    /// Logs compacted and removed.
    pub logs_compacted: u64,
    /// Entries moved by compaction.
    pub entries_moved: u64,
    /// Bytes freed on disk: removed files less the copies written.
    pub bytes_reclaimed: u64,
    /// Logs whose compaction stopped on an error (kept for a later pass).
    pub failures: u64,
}
