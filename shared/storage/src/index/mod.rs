//! The ledger index: where each entry lives in the entry logs, each ledger's
//! fence state and LAC, and the journal checkpoint.
//!
//! - `run.rs`: runs, entries with consecutive ids back to back in one log;
//! - `block.rs`: a block, the runs of one ledger in 64 aligned ids, one record;
//! - `sled_index.rs`: the blocks, ledger records and checkpoint in sled;
//! - `migrate.rs`: the earlier layout (a record per run) moved to blocks at open.

mod block;
mod migrate;
mod run;
mod sled_index;

pub use sled_index::{SledIndex, INDEX_CACHE_BYTES};

use crate::error::StorageError;
use crate::journal::JournalPos;

/// Where an entry lives: entry log id, byte offset of its record, record length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Entry log file id.
    pub log_id: u32,
    /// Offset of the entry's record in that file.
    pub offset: u64,
    /// Length of the record.
    pub len: u32,
}

/// What the index keeps per ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerRecord {
    /// Fenced: only recovery adds are accepted.
    pub fenced: bool,
    /// The highest LastAddConfirmed seen, -1 for none.
    pub lac: i64,
}

impl Default for LedgerRecord {
    fn default() -> Self {
        LedgerRecord { fenced: false, lac: -1 }
    }
}

/// What one flush commits.
#[derive(Debug, Default, Clone)]
pub struct IndexBatch {
    /// (ledger, entry, location) of every entry written to the entry log.
    pub locations: Vec<(u64, u64, Location)>,
    /// Ledger records to store.
    pub ledgers: Vec<(u64, LedgerRecord)>,
    /// The journal position everything above covers.
    pub checkpoint: Option<JournalPos>,
}

/// One stored run: entries `first_entry..first_entry + len()` of a ledger,
/// back to back in one entry log. What garbage collection sees of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The ledger.
    pub ledger_id: u64,
    /// The run's first entry id (its key).
    pub first_entry: u64,
    /// The entry log holding it.
    pub log_id: u32,
    /// Offset of its first record.
    pub base: u64,
    /// Each entry's end, relative to `base`.
    pub ends: Vec<u32>,
}

impl RunInfo {
    /// Entries in the run.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the run is empty (stored runs never are).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of entry log the run covers.
    pub fn bytes(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0) as u64
    }

    /// The location of the i-th entry of the run.
    pub fn location(&self, i: usize) -> Location {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Location { log_id: self.log_id, offset: self.base + start as u64, len: self.ends[i] - start }
    }
}

/// Compaction's change to one run: the live entries of `old` now live at
/// `moved` (entry id, new location), in entry order; entries of `old` not in
/// `moved` were already superseded by other runs.
#[derive(Debug, Clone)]
pub struct RunMove {
    /// The run as compaction read it.
    pub old: RunInfo,
    /// Where its live entries were copied.
    pub moved: Vec<(u64, Location)>,
}

/// What [`LedgerIndex::locations`] found in a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeLocations {
    /// (entry id, newest location) of every indexed entry looked at, in entry order.
    pub found: Vec<(u64, Location)>,
    /// Where the look-up stopped at its bound: ids from here on were not
    /// looked at. `None`: the whole range was.
    pub next: Option<u64>,
}

/// The index contract (tests/conformance.rs checks it against every implementation):
/// - `commit` is atomic and durable on return: after a crash either all of a
///   batch is visible or none of it;
/// - `location` returns the newest committed location of an entry;
/// - `locations` over a range gives, for every id it looked at, exactly what
///   `location` gives (absent ids absent), in entry order, at most the
///   number asked for, and says where it stopped;
/// - `last_entry` is the highest committed entry id of a ledger;
/// - `checkpoint` is the last committed checkpoint;
/// - a committed entry keeps a location until its ledger is deleted: a run
///   written over a longer one at the same key keeps the longer one's tail;
/// - `delete_ledgers` removes every run and record of the ledgers, atomically
///   and durably;
/// - `replace_runs` applies each move only if its old run is still stored
///   exactly as read and no run it would write already exists, all applied
///   moves in one atomic durable batch, and never a move leaving out an
///   entry no other run covers; writes are serialised with `commit` and
///   `delete_ledgers`, so a move never undoes a newer write; a look-up never
///   sees a batch half applied.
pub trait LedgerIndex: Send + Sync {
    /// Commits a batch atomically and durably.
    fn commit(&self, batch: &IndexBatch) -> Result<(), StorageError>;
    /// Where an entry is stored, if indexed.
    fn location(&self, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError>;
    /// The indexed entries of a ledger in `first..=last` and their newest
    /// locations, in entry order: at most `max_entries`, then `next` says
    /// where to go on. One walk over the ledger's runs (a range read), not a
    /// look-up per id.
    fn locations(
        &self,
        ledger_id: u64,
        first: u64,
        last: u64,
        max_entries: usize,
    ) -> Result<RangeLocations, StorageError>;
    /// The highest indexed entry id of a ledger.
    fn last_entry(&self, ledger_id: u64) -> Result<Option<u64>, StorageError>;
    /// A ledger's record, if stored.
    fn ledger(&self, ledger_id: u64) -> Result<Option<LedgerRecord>, StorageError>;
    /// Every stored ledger record (read once at start).
    fn ledgers(&self) -> Result<Vec<(u64, LedgerRecord)>, StorageError>;
    /// The last committed journal checkpoint.
    fn checkpoint(&self) -> Result<Option<JournalPos>, StorageError>;
    /// Visits every stored run (in key order: by ledger, then first entry).
    fn for_each_run(&self, visit: &mut dyn FnMut(RunInfo)) -> Result<(), StorageError>;
    /// Removes the ledgers' runs and records, then stores `records` (in the
    /// same batch: a ledger whose copies go but whose fence must stay).
    /// Returns the runs removed.
    fn delete_ledgers(&self, ledger_ids: &[u64], records: &[(u64, LedgerRecord)]) -> Result<u64, StorageError>;
    /// Applies compaction's moves (see the contract); which were applied.
    fn replace_runs(&self, moves: &[RunMove]) -> Result<Vec<bool>, StorageError>;
    /// Makes everything applied so far durable (a no-op when it already is).
    fn sync(&self) -> Result<(), StorageError>;
    /// Damage in stored records that writes met and worked around since
    /// the last call (the store records it, as for damage a read meets).
    fn take_damage(&self) -> Vec<String> {
        Vec::new()
    }
    /// Syncs and releases every file and lock of the index: when it returns,
    /// the same directory can be opened again at once, by this process or
    /// another. Later calls fail with [`StorageError::IndexClosed`].
    /// Idempotent.
    fn close(&self) -> Result<(), StorageError>;
}
