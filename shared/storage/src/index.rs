//! The ledger index: where each entry lives in the entry logs, each ledger's
//! fence state and LAC, and the journal checkpoint, in sled.
//!
//! Everything a flush produces is committed in sled batches of at most
//! `COMMIT_BATCH_RECORDS` and then flushed (fsynced): the entries'
//! locations, the ledger records, and, in the last batch, the checkpoint
//! that lets the journal forget what they cover. The entry log data they
//! point at is synced before the commit, so the index never points at bytes
//! that are not on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quire_durable::SyncedSled;

use crate::entrylog::RECORD_MAX_BYTES;
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
    /// Syncs and releases every file and lock of the index: when it returns,
    /// the same directory can be opened again at once, by this process or
    /// another. Later calls fail with [`StorageError::IndexClosed`].
    /// Idempotent.
    fn close(&self) -> Result<(), StorageError>;
}

const PREFIX_RUN: u8 = b'r';
/// Entries in one run record, at most (bounds a record to ~4 KiB).
const RUN_ENTRIES_MAX: usize = 1000;
/// Older overlapping runs searched for an entry (overlaps only come from re-adds
/// by recovery or re-replication, so the first run found nearly always has it).
const RUN_SCAN_MAX: usize = 64;
const PREFIX_LEDGER: u8 = b'l';
const KEY_CHECKPOINT: &[u8] = b"checkpoint";

/// Records per sled batch when a flush is committed (`commit`).
const COMMIT_BATCH_RECORDS: usize = 128;

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

    /// Every length and offset a run yields is checked here, once: no
    /// record longer than `RECORD_MAX_BYTES`, no offset past `u64::MAX`,
    /// so that [`Run::location`] cannot overflow and no caller allocates
    /// for a length that damage produced.
    fn decode(v: &[u8]) -> Result<Run, StorageError> {
        if v.len() < 16 || !(v.len() - 12).is_multiple_of(4) {
            return Err(StorageError::Corrupt(format!("index run record of {} bytes", v.len())));
        }
        let ends: Vec<u32> = v[12..].chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("4"))).collect();
        if ends.windows(2).any(|w| w[1] <= w[0]) {
            return Err(StorageError::Corrupt("index run record with unordered offsets".into()));
        }
        let too_long = ends.first().is_some_and(|&e| e > RECORD_MAX_BYTES)
            || ends.windows(2).any(|w| w[1] - w[0] > RECORD_MAX_BYTES);
        if too_long {
            return Err(StorageError::Corrupt(format!(
                "index run record with a record longer than {RECORD_MAX_BYTES} bytes"
            )));
        }
        let base = u64::from_be_bytes(v[4..12].try_into().expect("8"));
        let last = *ends.last().expect("at least one end: checked above");
        if base.checked_add(u64::from(last)).is_none() {
            return Err(StorageError::Corrupt("index run record past the end of any file".into()));
        }
        Ok(Run { log_id: u32::from_be_bytes(v[0..4].try_into().expect("4")), base, ends })
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
            // An entry of another log may lie before the run's base: only
            // one that follows the run's end is measured from it (a debug
            // build's overflow check found the subtraction wrapping).
            let rel_end = (loc.offset + loc.len as u64).checked_sub(run.base);
            if let Some(rel_end) = rel_end.filter(|r| *r <= u32::MAX as u64) {
                if *rl == *l
                    && Some(*e) == next_id
                    && loc.log_id == run.log_id
                    && loc.offset == end
                    && run.ends.len() < RUN_ENTRIES_MAX
                {
                    run.ends.push(rel_end as u32);
                    continue;
                }
            }
        }
        out.push((*l, *e, Run { log_id: loc.log_id, base: loc.offset, ends: vec![loc.len] }));
    }
    out
}

/// The first entry id a run key names; a key of another shape in the runs'
/// key space is damage, reported, never sliced past its end.
fn run_first(k: &[u8]) -> Result<u64, StorageError> {
    match k {
        [PREFIX_RUN, rest @ ..] if rest.len() == 16 => Ok(u64::from_be_bytes(rest[8..16].try_into().expect("8"))),
        _ => Err(StorageError::Corrupt(format!("malformed run key of {} bytes in the index", k.len()))),
    }
}

fn run_info(k: &[u8], v: &[u8]) -> Result<RunInfo, StorageError> {
    if k.len() != 17 || k[0] != PREFIX_RUN {
        return Err(StorageError::Corrupt("malformed run key in the index".into()));
    }
    let run = Run::decode(v)?;
    Ok(RunInfo {
        ledger_id: u64::from_be_bytes(k[1..9].try_into().expect("8")),
        first_entry: u64::from_be_bytes(k[9..17].try_into().expect("8")),
        log_id: run.log_id,
        base: run.base,
        ends: run.ends,
    })
}

fn encode_run_info(r: &RunInfo) -> Vec<u8> {
    Run { log_id: r.log_id, base: r.base, ends: r.ends.clone() }.encode()
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
    /// The directory sled runs in (its lock file is `db` there).
    dir: PathBuf,
    /// The open database, `None` once closed. Writers hold the lock
    /// exclusively while they check and apply (so `replace_runs` checks and
    /// writes with no other write in between); look-ups share it. A look-up
    /// walks several keys, and a sled range walk is not a snapshot: without
    /// this, a walk overlapping a batch that splits a run (compaction) could
    /// see neither the old run nor the new and report a stored entry absent.
    /// Held only for the in-memory apply, never across a flush to disk (a
    /// flush works on a clone of the handle).
    open: std::sync::RwLock<Option<Handles>>,
}

#[derive(Clone)]
struct Handles {
    db: sled::Db,
    tree: sled::Tree,
    /// sled's flush is not durable (it ends in sync_file_range): every
    /// commit goes through this, which adds the fsyncs (quire-durable).
    synced: Arc<SyncedSled>,
}

impl Handles {
    /// A durable commit of everything applied so far. After a failed sync
    /// every later one fails too (fail-stop: the store then refuses adds).
    fn commit(&self) -> Result<(), StorageError> {
        self.synced.flush(&self.db).map_err(|e| StorageError::Index(e.to_string()))
    }
}

/// How long `close` waits for sled's own threads to let go of the
/// directory's lock before it reports the index still held.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl SledIndex {
    /// Opens (or creates) the index under `dir`.
    pub fn open(dir: &Path) -> Result<SledIndex, StorageError> {
        // No background flusher: every commit flushes and syncs itself (below).
        let config = sled::Config::new().path(dir).cache_capacity(64 * 1024 * 1024).flush_every_ms(None);
        let (db, synced) = SyncedSled::open(config, dir).map_err(|e| StorageError::io(dir, e))?;
        let tree = db.open_tree("ledger-index").map_err(idx_err)?;
        let handles = Handles { db, tree, synced: Arc::new(synced) };
        Ok(SledIndex { dir: dir.to_path_buf(), open: std::sync::RwLock::new(Some(handles)) })
    }

    /// The open handles, shared with look-ups, for the guard's lifetime.
    fn read(&self) -> Result<ReadGuard<'_>, StorageError> {
        let g = self.open.read().expect("index lock");
        match g.is_some() {
            true => Ok(ReadGuard(g)),
            false => Err(StorageError::IndexClosed),
        }
    }

    /// The open handles, exclusively, for the guard's lifetime.
    fn write(&self) -> Result<WriteGuard<'_>, StorageError> {
        let g = self.open.write().expect("index lock");
        match g.is_some() {
            true => Ok(WriteGuard(g)),
            false => Err(StorageError::IndexClosed),
        }
    }

    /// A clone of the handles, for work that must not hold the lock (a
    /// flush to disk, a long scan that writers need not wait for).
    fn handles(&self) -> Result<Handles, StorageError> {
        Ok(self.read()?.clone())
    }

    /// Drops this index's handles and waits until sled has let go of the
    /// directory. sled 0.34's `Db` drop returns while its thread pool may
    /// still run writes it queued (each holds the database file, and so its
    /// `flock`); the lock is free exactly when the last of them is done. A
    /// blocking `flock` of our own on the same file is woken by the kernel
    /// then: a wait on the condition itself, not a guess at how long it takes.
    fn release(&self) -> Result<(), StorageError> {
        let taken = self.open.write().expect("index lock").take();
        let Some(h) = taken else { return Ok(()) };
        let flushed = h.commit();
        drop(h);
        let lock_path = self.dir.join("db");
        let file = std::fs::File::open(&lock_path).map_err(|e| StorageError::io(&lock_path, e))?;
        let (tx, rx) = std::sync::mpsc::channel();
        // The waiting lock may outlive a timed-out close; it then takes and
        // drops the lock when sled is done, and ends.
        std::thread::Builder::new()
            .name("index-close".into())
            .spawn(move || {
                let got = file.lock().and_then(|()| file.unlock());
                let _ = tx.send(got);
            })
            .map_err(|e| StorageError::io(&lock_path, e))?;
        match rx.recv_timeout(CLOSE_WAIT) {
            Ok(Ok(())) => flushed,
            Ok(Err(e)) => Err(StorageError::io(&lock_path, e)),
            Err(_) => Err(StorageError::Index(format!(
                "{}: still locked {} s after close",
                lock_path.display(),
                CLOSE_WAIT.as_secs()
            ))),
        }
    }

    /// `location` for a caller that holds the lock.
    fn location_unlocked(tree: &sled::Tree, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError> {
        let lo = run_key(ledger_id, 0);
        let hi = run_key(ledger_id, entry_id);
        for kv in tree.range(lo..=hi).rev().take(RUN_SCAN_MAX) {
            let (k, v) = kv.map_err(idx_err)?;
            let first = run_first(&k)?;
            let run = Run::decode(&v)?;
            let i = entry_id.checked_sub(first).ok_or_else(|| StorageError::Corrupt("run key out of order".into()))?;
            if i < run.ends.len() as u64 {
                return Ok(Some(run.location(i as usize)));
            }
        }
        Ok(None)
    }

    /// The runs to write for a commit: `new`, plus, where a new run replaces
    /// a stored run at the same key that covered more entries (a re-add of
    /// the head of a run, as recovery's write-back does, split over two
    /// flushes), the stored run's tail as a run of its own. Without it the
    /// tail's entries would lose their only location until (unless) their
    /// re-adds are committed too. Called with the write lock held.
    fn keeping_tails(tree: &sled::Tree, new: Vec<(u64, u64, Run)>) -> Result<Vec<(u64, u64, Run)>, StorageError> {
        let lens: HashMap<(u64, u64), usize> = new.iter().map(|(l, f, r)| ((*l, *f), r.ends.len())).collect();
        let mut out = Vec::with_capacity(new.len());
        for (l, first, run) in new {
            let stored = tree.get(run_key(l, first)).map_err(idx_err)?;
            let shorter = run.ends.len();
            out.push((l, first, run));
            let Some(stored) = stored else { continue };
            let old = Run::decode(&stored)?;
            let mut i = shorter;
            while i < old.ends.len() {
                let at = first + i as u64;
                // A run already starts there (in this batch or stored): it
                // covers `at` onwards for its length.
                let covered = match lens.get(&(l, at)) {
                    Some(n) => Some(*n),
                    None => match tree.get(run_key(l, at)).map_err(idx_err)? {
                        Some(v) => Some(Run::decode(&v)?.ends.len()),
                        None => None,
                    },
                };
                match covered {
                    Some(n) => i += n,
                    None => {
                        let cut = old.ends[i - 1];
                        let ends = old.ends[i..].iter().map(|e| e - cut).collect();
                        out.push((l, at, Run { log_id: old.log_id, base: old.base + cut as u64, ends }));
                        break;
                    }
                }
            }
        }
        Ok(out)
    }
}

struct ReadGuard<'a>(std::sync::RwLockReadGuard<'a, Option<Handles>>);
struct WriteGuard<'a>(std::sync::RwLockWriteGuard<'a, Option<Handles>>);

impl std::ops::Deref for ReadGuard<'_> {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        self.0.as_ref().expect("checked open when taken")
    }
}

impl std::ops::Deref for WriteGuard<'_> {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        self.0.as_ref().expect("checked open when taken")
    }
}

impl Drop for SledIndex {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!(error = %e, "closing the ledger index");
        }
    }
}

impl LedgerIndex for SledIndex {
    fn commit(&self, batch: &IndexBatch) -> Result<(), StorageError> {
        let db = {
            let w = self.write()?;
            // In sled batches of at most `COMMIT_BATCH_RECORDS`: sled holds
            // every node a batch touches until the batch ends (one epoch),
            // and one flush of 100 000 open ledgers (a run and a ledger
            // record each) took a bookie from 123 to 706 MB. The checkpoint
            // goes in the last: a crash between batches leaves locations of
            // entries the journal still holds (their entry-log bytes synced
            // before this commit), which its replay writes again.
            let mut b = sled::Batch::default();
            let mut n = 0;
            let mut put = |b: &mut sled::Batch, k: &[u8], v: &[u8]| -> Result<(), StorageError> {
                b.insert(k, v);
                n += 1;
                if n == COMMIT_BATCH_RECORDS {
                    w.tree.apply_batch(std::mem::take(b)).map_err(idx_err)?;
                    n = 0;
                    if crate::failpoint::is_armed("index.between_batches") {
                        // The worst a crash here can leave: sled writes its
                        // buffer out when it fills, so the batches so far
                        // may be on disk without the checkpoint.
                        w.tree.flush().map_err(idx_err)?;
                        crate::failpoint::hit("index.between_batches");
                    }
                }
                Ok(())
            };
            for (l, first, run) in Self::keeping_tails(&w.tree, runs(&batch.locations))? {
                put(&mut b, &run_key(l, first)[..], &run.encode())?;
            }
            for (l, r) in &batch.ledgers {
                put(&mut b, &ledger_key(*l)[..], &encode_ledger(r)[..])?;
            }
            if let Some(c) = batch.checkpoint {
                let mut v = [0u8; 16];
                v[0..8].copy_from_slice(&c.segment.to_be_bytes());
                v[8..16].copy_from_slice(&c.offset.to_be_bytes());
                b.insert(KEY_CHECKPOINT, &v[..]);
            }
            w.tree.apply_batch(b).map_err(idx_err)?;
            w.clone()
        };
        db.commit()?;
        Ok(())
    }

    fn location(&self, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError> {
        let r = self.read()?;
        Self::location_unlocked(&r.tree, ledger_id, entry_id)
    }

    fn locations(
        &self,
        ledger_id: u64,
        first: u64,
        last: u64,
        max_entries: usize,
    ) -> Result<RangeLocations, StorageError> {
        if first > last || max_entries == 0 {
            return Ok(RangeLocations { found: Vec::new(), next: (first <= last).then_some(first) });
        }
        let r = self.read()?;
        // Runs in key order. Those starting before `first` may reach into the
        // range: the newest RUN_SCAN_MAX of them, as `location` looks back.
        let mut runs: Vec<(u64, Run)> = Vec::new();
        for kv in r.tree.range(run_key(ledger_id, 0)..run_key(ledger_id, first)).rev().take(RUN_SCAN_MAX) {
            let (k, v) = kv.map_err(idx_err)?;
            let f = run_first(&k)?;
            let run = Run::decode(&v)?;
            if first - f < run.ends.len() as u64 {
                runs.push((f, run));
            }
        }
        runs.reverse();
        // Then the runs starting in the range, until they cover enough ids.
        // A run starting later may supersede ids of an earlier one, so what
        // is found is final only below the first run not read.
        let mut next = None;
        let mut covered = 0usize;
        for kv in r.tree.range(run_key(ledger_id, first)..=run_key(ledger_id, last)) {
            let (k, v) = kv.map_err(idx_err)?;
            let f = run_first(&k)?;
            if covered >= max_entries {
                next = Some(f);
                break;
            }
            let run = Run::decode(&v)?;
            covered += run.ends.len();
            runs.push((f, run));
        }
        drop(r);
        let upto = next.map_or(last, |n| last.min(n - 1));
        // Paint the runs in key order: for an id, the last run painted over
        // it (the one starting latest, as `location` finds) wins.
        let mut found: Vec<(u64, Location)> = Vec::with_capacity(covered.min(max_entries.saturating_mul(2)));
        for (f, run) in &runs {
            if upto < *f {
                continue;
            }
            let lo = first.saturating_sub(*f).min(run.ends.len() as u64) as usize;
            let hi = (upto - f).saturating_add(1).min(run.ends.len() as u64) as usize;
            for i in lo..hi {
                found.push((f + i as u64, run.location(i)));
            }
        }
        found.sort_by_key(|(e, _)| *e);
        let mut out: Vec<(u64, Location)> = Vec::with_capacity(found.len());
        for (e, loc) in found {
            match out.last_mut() {
                Some(last) if last.0 == e => *last = (e, loc),
                _ => out.push((e, loc)),
            }
        }
        if out.len() > max_entries {
            next = Some(out[max_entries].0);
            out.truncate(max_entries);
        }
        Ok(RangeLocations { found: out, next })
    }

    fn last_entry(&self, ledger_id: u64) -> Result<Option<u64>, StorageError> {
        let r = self.read()?;
        // The run starting last need not end last (a later re-add of one old
        // entry is a short run): take the highest end over the ledger's runs.
        let mut last = None;
        for kv in r.tree.range(run_key(ledger_id, 0)..=run_key(ledger_id, u64::MAX)) {
            let (k, v) = kv.map_err(idx_err)?;
            let first = run_first(&k)?;
            let end = first.saturating_add(Run::decode(&v)?.ends.len() as u64 - 1);
            last = Some(last.map_or(end, |l: u64| l.max(end)));
        }
        Ok(last)
    }

    fn ledger(&self, ledger_id: u64) -> Result<Option<LedgerRecord>, StorageError> {
        match self.read()?.tree.get(ledger_key(ledger_id)).map_err(idx_err)? {
            Some(v) => Ok(Some(decode_ledger(&v)?)),
            None => Ok(None),
        }
    }

    fn ledgers(&self) -> Result<Vec<(u64, LedgerRecord)>, StorageError> {
        let mut out = Vec::new();
        for kv in self.handles()?.tree.scan_prefix([PREFIX_LEDGER]) {
            let (k, v) = kv.map_err(idx_err)?;
            if k.len() != 9 {
                return Err(StorageError::Corrupt("malformed ledger key in the index".into()));
            }
            out.push((u64::from_be_bytes(k[1..9].try_into().expect("8")), decode_ledger(&v)?));
        }
        Ok(out)
    }

    fn checkpoint(&self) -> Result<Option<JournalPos>, StorageError> {
        match self.read()?.tree.get(KEY_CHECKPOINT).map_err(idx_err)? {
            Some(v) if v.len() == 16 => Ok(Some(JournalPos {
                segment: u64::from_be_bytes(v[0..8].try_into().expect("8")),
                offset: u64::from_be_bytes(v[8..16].try_into().expect("8")),
            })),
            Some(_) => Err(StorageError::Corrupt("malformed checkpoint in the index".into())),
            None => Ok(None),
        }
    }

    fn for_each_run(&self, visit: &mut dyn FnMut(RunInfo)) -> Result<(), StorageError> {
        for kv in self.handles()?.tree.scan_prefix([PREFIX_RUN]) {
            let (k, v) = kv.map_err(idx_err)?;
            visit(run_info(&k, &v)?);
        }
        Ok(())
    }

    fn delete_ledgers(&self, ledger_ids: &[u64], records: &[(u64, LedgerRecord)]) -> Result<u64, StorageError> {
        let mut runs = 0;
        let db = {
            let w = self.write()?;
            let mut b = sled::Batch::default();
            for l in ledger_ids {
                for kv in w.tree.range(run_key(*l, 0)..=run_key(*l, u64::MAX)) {
                    let (k, _) = kv.map_err(idx_err)?;
                    b.remove(k);
                    runs += 1;
                }
                b.remove(&ledger_key(*l)[..]);
            }
            for (l, r) in records {
                b.insert(&ledger_key(*l)[..], &encode_ledger(r)[..]);
            }
            w.tree.apply_batch(b).map_err(idx_err)?;
            w.clone()
        };
        db.commit()?;
        Ok(runs)
    }

    fn sync(&self) -> Result<(), StorageError> {
        self.handles()?.commit()
    }

    fn close(&self) -> Result<(), StorageError> {
        self.release()
    }

    fn replace_runs(&self, moves: &[RunMove]) -> Result<Vec<bool>, StorageError> {
        let w = self.write()?;
        let mut b = sled::Batch::default();
        let mut applied = Vec::with_capacity(moves.len());
        let mut written: std::collections::HashSet<[u8; 17]> = std::collections::HashSet::new();
        for m in moves {
            let old_key = run_key(m.old.ledger_id, m.old.first_entry);
            // (A key an earlier move of this batch writes is no longer the run read.)
            let unchanged = !written.contains(&old_key)
                && w.tree.get(old_key).map_err(idx_err)?.is_some_and(|v| v[..] == encode_run_info(&m.old)[..]);
            let locations: Vec<(u64, u64, Location)> = m.moved.iter().map(|(e, l)| (m.old.ledger_id, *e, *l)).collect();
            let new_runs = runs(&locations);
            let mut clash = false;
            for (l, first, _) in &new_runs {
                let k = run_key(*l, *first);
                if k != old_key && (written.contains(&k) || w.tree.contains_key(k).map_err(idx_err)?) {
                    clash = true;
                }
            }
            // Entries the move leaves out must still be found elsewhere: the
            // copy that superseded them may have gone since compaction looked.
            let mut orphan = false;
            if unchanged && !clash && m.moved.len() < m.old.len() {
                let moved: std::collections::HashSet<u64> = m.moved.iter().map(|(e, _)| *e).collect();
                for i in 0..m.old.len() {
                    let e = m.old.first_entry + i as u64;
                    if !moved.contains(&e) {
                        let found = Self::location_unlocked(&w.tree, m.old.ledger_id, e)?;
                        if found.is_none() || found == Some(m.old.location(i)) {
                            orphan = true;
                            break;
                        }
                    }
                }
            }
            if !unchanged || clash || orphan {
                applied.push(false);
                continue;
            }
            b.remove(&old_key[..]);
            for (l, first, run) in new_runs {
                let k = run_key(l, first);
                written.insert(k);
                b.insert(&k[..], run.encode());
            }
            applied.push(true);
        }
        if applied.iter().any(|a| *a) {
            w.tree.apply_batch(b).map_err(idx_err)?;
            let h = w.clone();
            drop(w);
            h.commit()?;
        }
        Ok(applied)
    }
}

impl SledIndex {
    /// Writes raw bytes under a key, as damage might leave them (tests only).
    #[cfg(test)]
    pub(crate) fn damage(&self, key: &[u8], value: &[u8]) {
        self.handles().unwrap().tree.insert(key, value).unwrap();
    }

    /// The stored bytes of ledger `l`'s run starting at `first` (tests only).
    #[cfg(test)]
    pub(crate) fn raw_run(&self, l: u64, first: u64) -> Option<Vec<u8>> {
        self.handles().unwrap().tree.get(run_key(l, first)).unwrap().map(|v| v.to_vec())
    }

    /// The key of ledger `l`'s run starting at `first` (tests only).
    #[cfg(test)]
    pub(crate) fn run_key_of(l: u64, first: u64) -> [u8; 17] {
        run_key(l, first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run_bytes(log_id: u32, base: u64, ends: &[u32]) -> Vec<u8> {
        Run { log_id, base, ends: ends.to_vec() }.encode()
    }

    /// Issue #20 item 5: lengths and offsets from a damaged run are refused
    /// when it is decoded, before anything is allocated or added with them.
    #[test]
    fn a_run_with_an_impossible_length_or_offset_is_damage() {
        let t = tempfile::tempdir().unwrap();
        let idx = SledIndex::open(t.path()).unwrap();
        let ok = run_bytes(1, 16, &[100, 200]);
        idx.damage(&run_key(1, 0), &ok);
        assert_eq!(idx.location(1, 1).unwrap(), Some(Location { log_id: 1, offset: 116, len: 100 }));
        for bad in [
            run_bytes(1, 16, &[u32::MAX]),                    // a 4 GiB record
            run_bytes(1, 16, &[100, RECORD_MAX_BYTES + 101]), // the second one too long
            run_bytes(1, u64::MAX - 10, &[100]),              // past the end of any file
        ] {
            idx.damage(&run_key(2, 0), &bad);
            assert!(matches!(idx.location(2, 0), Err(StorageError::Corrupt(_))), "{bad:?}");
            assert!(matches!(idx.last_entry(2), Err(StorageError::Corrupt(_))), "{bad:?}");
        }
        // A short key in the ledger's key range is reported, not sliced.
        idx.damage(&[PREFIX_RUN, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 9], &ok);
        assert!(matches!(idx.location(3, 5), Err(StorageError::Corrupt(_))));
        assert!(matches!(idx.last_entry(3), Err(StorageError::Corrupt(_))));
        let mut seen = 0;
        assert!(matches!(idx.for_each_run(&mut |_| seen += 1), Err(StorageError::Corrupt(_))));
    }

    fn damaged_pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        // Keys mostly in the key spaces the look-ups below walk (runs and
        // records of ledgers 0..4, the checkpoint), of any length.
        let key = (0u8..3, 0u64..4, prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(kind, l, tail)| {
            let mut k = match kind {
                0 => vec![PREFIX_RUN],
                1 => vec![PREFIX_LEDGER],
                _ => KEY_CHECKPOINT.to_vec(),
            };
            if kind < 2 {
                k.extend_from_slice(&l.to_be_bytes());
            }
            k.extend(tail);
            k
        });
        (key, prop::collection::vec(any::<u8>(), 0..48))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Whatever bytes the index holds, every read of it answers, with
        /// a value or with Corrupt: none panics, none overflows.
        #[test]
        fn damaged_index_bytes_give_errors_not_panics(
            pairs in prop::collection::vec(damaged_pair(), 1..8),
            probe in any::<u64>(),
        ) {
            let t = tempfile::tempdir().unwrap();
            let idx = SledIndex::open(t.path()).unwrap();
            for (k, v) in &pairs {
                idx.damage(k, v);
            }
            for l in 0..4 {
                for e in [0, 1, probe, u64::MAX] {
                    if let Ok(Some(loc)) = idx.location(l, e) {
                        prop_assert!(loc.len <= RECORD_MAX_BYTES);
                        prop_assert!(loc.offset.checked_add(u64::from(loc.len)).is_some());
                    }
                }
                let _ = idx.last_entry(l);
                let _ = idx.ledger(l);
            }
            let _ = idx.ledgers();
            let _ = idx.checkpoint();
            let _ = idx.for_each_run(&mut |_| {});
        }
    }
}
