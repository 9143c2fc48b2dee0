//! The ledger index: where each entry lives in the entry logs, each ledger's
//! fence state and LAC, and the journal checkpoint, in sled.
//!
//! Everything a flush produces is committed in one atomic sled batch and then
//! flushed (fsynced): the entries' locations, the ledger records, and the
//! checkpoint that lets the journal forget what they cover. The entry log data
//! they point at is synced before the commit, so the index never points at
//! bytes that are not on disk.

use std::path::Path;

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

/// The index contract (tests/conformance.rs checks it against every implementation):
/// - `commit` is atomic and durable on return: after a crash either all of a
///   batch is visible or none of it;
/// - `location` returns the newest committed location of an entry;
/// - `last_entry` is the highest committed entry id of a ledger;
/// - `checkpoint` is the last committed checkpoint.
pub trait LedgerIndex: Send + Sync {
    /// Commits a batch atomically and durably.
    fn commit(&self, batch: &IndexBatch) -> Result<(), StorageError>;
    /// Where an entry is stored, if indexed.
    fn location(&self, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError>;
    /// The highest indexed entry id of a ledger.
    fn last_entry(&self, ledger_id: u64) -> Result<Option<u64>, StorageError>;
    /// A ledger's record, if stored.
    fn ledger(&self, ledger_id: u64) -> Result<Option<LedgerRecord>, StorageError>;
    /// Every stored ledger record (read once at start).
    fn ledgers(&self) -> Result<Vec<(u64, LedgerRecord)>, StorageError>;
    /// The last committed journal checkpoint.
    fn checkpoint(&self) -> Result<Option<JournalPos>, StorageError>;
}

const PREFIX_RUN: u8 = b'r';
/// Entries in one run record, at most (bounds a record to ~4 KiB).
const RUN_ENTRIES_MAX: usize = 1000;
/// Older overlapping runs searched for an entry (overlaps only come from re-adds
/// by recovery or re-replication, so the first run found nearly always has it).
const RUN_SCAN_MAX: usize = 64;
const PREFIX_LEDGER: u8 = b'l';
const KEY_CHECKPOINT: &[u8] = b"checkpoint";

fn run_key(ledger: u64, first_entry: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = PREFIX_RUN;
    k[1..9].copy_from_slice(&ledger.to_be_bytes());
    k[9..17].copy_from_slice(&first_entry.to_be_bytes());
    k
}

/// A run: entries `first..first + ends.len()` stored back to back in `log_id`
/// from `base`; entry i ends at `base + ends[i]`.
struct Run {
    log_id: u32,
    base: u64,
    ends: Vec<u32>,
}

impl Run {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + 4 * self.ends.len());
        v.extend_from_slice(&self.log_id.to_be_bytes());
        v.extend_from_slice(&self.base.to_be_bytes());
        for e in &self.ends {
            v.extend_from_slice(&e.to_be_bytes());
        }
        v
    }

    fn decode(v: &[u8]) -> Result<Run, StorageError> {
        if v.len() < 16 || !(v.len() - 12).is_multiple_of(4) {
            return Err(StorageError::Corrupt(format!("index run record of {} bytes", v.len())));
        }
        let ends: Vec<u32> = v[12..].chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("4"))).collect();
        if ends.windows(2).any(|w| w[1] <= w[0]) {
            return Err(StorageError::Corrupt("index run record with unordered offsets".into()));
        }
        Ok(Run {
            log_id: u32::from_be_bytes(v[0..4].try_into().expect("4")),
            base: u64::from_be_bytes(v[4..12].try_into().expect("8")),
            ends,
        })
    }

    /// The location of the i-th entry of the run.
    fn location(&self, i: usize) -> Location {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Location { log_id: self.log_id, offset: self.base + start as u64, len: self.ends[i] - start }
    }
}

/// Groups (ledger, entry, location) into runs of consecutive ids laid out back to back.
fn runs(locations: &[(u64, u64, Location)]) -> Vec<(u64, u64, Run)> {
    let mut out: Vec<(u64, u64, Run)> = Vec::new();
    for (l, e, loc) in locations {
        if let Some((rl, first, run)) = out.last_mut() {
            let next_id = first.checked_add(run.ends.len() as u64);
            let end = run.base + *run.ends.last().expect("runs are never empty") as u64;
            let rel_end = loc.offset + loc.len as u64 - run.base;
            if *rl == *l
                && Some(*e) == next_id
                && loc.log_id == run.log_id
                && loc.offset == end
                && run.ends.len() < RUN_ENTRIES_MAX
                && rel_end <= u32::MAX as u64
            {
                run.ends.push(rel_end as u32);
                continue;
            }
        }
        out.push((*l, *e, Run { log_id: loc.log_id, base: loc.offset, ends: vec![loc.len] }));
    }
    out
}

fn ledger_key(ledger: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = PREFIX_LEDGER;
    k[1..9].copy_from_slice(&ledger.to_be_bytes());
    k
}

fn encode_ledger(r: &LedgerRecord) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = r.fenced as u8;
    v[1..9].copy_from_slice(&r.lac.to_be_bytes());
    v
}

fn decode_ledger(v: &[u8]) -> Result<LedgerRecord, StorageError> {
    if v.len() != 9 || v[0] > 1 {
        return Err(StorageError::Corrupt("malformed ledger record in the index".into()));
    }
    Ok(LedgerRecord { fenced: v[0] == 1, lac: i64::from_be_bytes(v[1..9].try_into().expect("8")) })
}

fn idx_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

/// The sled-backed index.
pub struct SledIndex {
    db: sled::Db,
    tree: sled::Tree,
}

impl SledIndex {
    /// Opens (or creates) the index under `dir`.
    pub fn open(dir: &Path) -> Result<SledIndex, StorageError> {
        // No background flusher: every commit flushes itself (below), and
        // without that thread the directory's lock goes with the last
        // handle, so a store closed and reopened at once (a restart) never
        // finds it still held.
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(64 * 1024 * 1024)
            .flush_every_ms(None)
            .open()
            .map_err(idx_err)?;
        let tree = db.open_tree("ledger-index").map_err(idx_err)?;
        Ok(SledIndex { db, tree })
    }
}

impl LedgerIndex for SledIndex {
    fn commit(&self, batch: &IndexBatch) -> Result<(), StorageError> {
        let mut b = sled::Batch::default();
        for (l, first, run) in runs(&batch.locations) {
            b.insert(&run_key(l, first)[..], run.encode());
        }
        for (l, r) in &batch.ledgers {
            b.insert(&ledger_key(*l)[..], &encode_ledger(r)[..]);
        }
        if let Some(c) = batch.checkpoint {
            let mut v = [0u8; 16];
            v[0..8].copy_from_slice(&c.segment.to_be_bytes());
            v[8..16].copy_from_slice(&c.offset.to_be_bytes());
            b.insert(KEY_CHECKPOINT, &v[..]);
        }
        self.tree.apply_batch(b).map_err(idx_err)?;
        self.db.flush().map_err(idx_err)?;
        Ok(())
    }

    fn location(&self, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError> {
        let lo = run_key(ledger_id, 0);
        let hi = run_key(ledger_id, entry_id);
        for kv in self.tree.range(lo..=hi).rev().take(RUN_SCAN_MAX) {
            let (k, v) = kv.map_err(idx_err)?;
            let first = u64::from_be_bytes(k[9..17].try_into().map_err(|_| StorageError::Corrupt("index key".into()))?);
            let run = Run::decode(&v)?;
            let i = entry_id - first;
            if i < run.ends.len() as u64 {
                return Ok(Some(run.location(i as usize)));
            }
        }
        Ok(None)
    }

    fn last_entry(&self, ledger_id: u64) -> Result<Option<u64>, StorageError> {
        // The run starting last need not end last (a later re-add of one old
        // entry is a short run): take the highest end over the ledger's runs.
        let mut last = None;
        for kv in self.tree.range(run_key(ledger_id, 0)..=run_key(ledger_id, u64::MAX)) {
            let (k, v) = kv.map_err(idx_err)?;
            let first = u64::from_be_bytes(k[9..17].try_into().map_err(|_| StorageError::Corrupt("index key".into()))?);
            let end = first.saturating_add(Run::decode(&v)?.ends.len() as u64 - 1);
            last = Some(last.map_or(end, |l: u64| l.max(end)));
        }
        Ok(last)
    }

    fn ledger(&self, ledger_id: u64) -> Result<Option<LedgerRecord>, StorageError> {
        match self.tree.get(ledger_key(ledger_id)).map_err(idx_err)? {
            Some(v) => Ok(Some(decode_ledger(&v)?)),
            None => Ok(None),
        }
    }

    fn ledgers(&self) -> Result<Vec<(u64, LedgerRecord)>, StorageError> {
        let mut out = Vec::new();
        for kv in self.tree.scan_prefix([PREFIX_LEDGER]) {
            let (k, v) = kv.map_err(idx_err)?;
            if k.len() != 9 {
                return Err(StorageError::Corrupt("malformed ledger key in the index".into()));
            }
            out.push((u64::from_be_bytes(k[1..9].try_into().expect("8")), decode_ledger(&v)?));
        }
        Ok(out)
    }

    fn checkpoint(&self) -> Result<Option<JournalPos>, StorageError> {
        match self.tree.get(KEY_CHECKPOINT).map_err(idx_err)? {
            Some(v) if v.len() == 16 => Ok(Some(JournalPos {
                segment: u64::from_be_bytes(v[0..8].try_into().expect("8")),
                offset: u64::from_be_bytes(v[8..16].try_into().expect("8")),
            })),
            Some(_) => Err(StorageError::Corrupt("malformed checkpoint in the index".into())),
            None => Ok(None),
        }
    }
}
