//! The journal: a bookie's write-ahead log of entries and fences in arrival
//! order, made durable by group-committed fdatasync.
//!
//! An add is acknowledged only after its record is on disk. Records are
//! replayed at start from the last checkpoint (the position up to which the
//! entry log and index hold everything); segments wholly before the checkpoint
//! are deleted.
//!
//! - [`record`]: the record format and torn-tail detection;
//! - [`policy`]: when to sync (a pure type);
//! - [`segment`]: one preallocated file;
//! - [`sector`]: version 4's stamped sectors, which tell a torn batch from damage;
//! - [`batches`]: reading a version 4 segment back as judged batches;
//! - [`inspect`]: where each record lies in its file (for tests that damage one);
//! - [`writer`]: the thread that gathers, writes, syncs and completes;
//! - [`replay`]: reading back after a restart.

pub mod batches;
pub mod inspect;
pub mod policy;
pub mod record;
pub mod replay;
pub mod sector;
pub mod segment;
pub mod writer;

pub use policy::{Decision, GroupCommit, GroupCommitPolicy};
pub use record::Record;
pub use replay::{replay, ReplayOutcome};
pub use writer::{FileJournal, JournalConfig, JournalStats};

use crate::error::StorageError;

/// A position in the journal: just after a record. Ordered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalPos {
    /// Segment id.
    pub segment: u64,
    /// Byte offset in the segment just after the record.
    pub offset: u64,
}

/// Called once per appended record, in append order, from the journal's
/// thread, after the record is durable (or with the error that stopped it).
/// It must be quick: the next batch waits for it.
pub type Completion = Box<dyn FnOnce(Result<JournalPos, StorageError>) + Send>;

/// A durable, ordered log of records.
///
/// The contract every implementation keeps (tests/conformance.rs checks it):
/// - `append` (and `append_many`) completions run in append order, each
///   after the record(s) and all records before are durable, with strictly
///   increasing positions;
/// - after a crash, replay from any completed position yields exactly the
///   records completed after it, in order, and possibly some that were never
///   completed (written but not acknowledged), never a record that was not appended;
/// - `checkpoint(p)` may discard records at or before `p` and nothing after;
/// - once an append fails, every later append fails too (an fsync error leaves
///   the file's state unknown; retrying would risk acknowledging lost data).
pub trait Journal: Send + Sync {
    /// Appends a record; `done` runs when it is durable or failed.
    fn append(&self, record: Record, done: Completion);
    /// Appends records back to back, none between them, in one group
    /// commit; `done` runs once, when all are durable (with the position
    /// after the last) or failed. One queue operation and one completion
    /// for a request's adds instead of one each.
    fn append_many(&self, records: Vec<Record>, done: Completion);
    /// Records at or before `upto` are no longer needed.
    fn checkpoint(&self, upto: JournalPos);
}
