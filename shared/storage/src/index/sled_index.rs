//! The index in sled: one record per ledger block (`block.rs`), one per
//! ledger, and the journal checkpoint.
//!
//! Everything a flush produces is committed in sled batches of at most
//! `COMMIT_BATCH_RECORDS` and then flushed (fsynced): the entries' blocks,
//! the ledger records, and, in the last batch, the checkpoint that lets the
//! journal forget what they cover. The entry log data they point at is
//! synced before the commit, so the index never points at bytes that are
//! not on disk.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quire_durable::SyncedSled;

use crate::error::StorageError;
use crate::journal::JournalPos;

use super::block::{block_of, Block};
use super::run::{runs, Run};
use super::{IndexBatch, LedgerIndex, LedgerRecord, Location, RangeLocations, RunInfo, RunMove};

pub(super) const PREFIX_BLOCK: u8 = b'b';
pub(super) const PREFIX_LEDGER: u8 = b'l';
pub(super) const KEY_CHECKPOINT: &[u8] = b"checkpoint";
/// Damaged block records, kept as found when a flush rebuilt the block.
pub(super) const PREFIX_SET_ASIDE: u8 = b'q';

/// The index's cache by default (sled's `cache_capacity`), bytes.
pub const INDEX_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Records per sled batch when a flush is committed (`commit`).
pub(super) const COMMIT_BATCH_RECORDS: usize = 128;

pub(super) fn block_key(ledger: u64, first: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = PREFIX_BLOCK;
    k[1..9].copy_from_slice(&ledger.to_be_bytes());
    k[9..17].copy_from_slice(&block_of(first).to_be_bytes());
    k
}

fn set_aside_key(ledger: u64, first: u64) -> [u8; 17] {
    let mut k = block_key(ledger, first);
    k[0] = PREFIX_SET_ASIDE;
    k
}

/// The (ledger, first id) a block key names; a key of another shape in the
/// blocks' key space is damage, reported, never sliced past its end.
fn parse_block_key(k: &[u8]) -> Result<(u64, u64), StorageError> {
    match k {
        [PREFIX_BLOCK, rest @ ..] if rest.len() == 16 => Ok((
            u64::from_be_bytes(rest[0..8].try_into().expect("8")),
            u64::from_be_bytes(rest[8..16].try_into().expect("8")),
        )),
        _ => Err(StorageError::Corrupt(format!("malformed block key of {} bytes in the index", k.len()))),
    }
}

/// A stored block record, decoded: (ledger, block's first id, block).
fn decode_block(k: &[u8], v: &[u8]) -> Result<(u64, u64, Block), StorageError> {
    let (l, first) = parse_block_key(k)?;
    Ok((l, first, Block::decode(first, v)?))
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

pub(super) fn idx_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

/// The stored block holding ledger `l`'s entry `e`, if any.
pub(super) fn load_block(tree: &sled::Tree, l: u64, e: u64) -> Result<Option<Block>, StorageError> {
    match tree.get(block_key(l, e)).map_err(idx_err)? {
        Some(v) => Ok(Some(Block::decode(block_of(e), &v)?)),
        None => Ok(None),
    }
}

/// Writes records into sled batches of at most `COMMIT_BATCH_RECORDS`:
/// sled holds every node a batch touches until the batch ends (one epoch),
/// and one flush of 100 000 open ledgers as one batch took a bookie from
/// 123 to 706 MB. Each block is encoded as it comes, so a flush never holds
/// more than a batch of blocks decoded or encoded.
struct Batches<'a> {
    tree: &'a sled::Tree,
    batch: sled::Batch,
    records: usize,
}

impl<'a> Batches<'a> {
    fn new(tree: &'a sled::Tree) -> Self {
        Batches { tree, batch: sled::Batch::default(), records: 0 }
    }

    fn insert(&mut self, k: &[u8], v: &[u8]) -> Result<(), StorageError> {
        self.batch.insert(k, v);
        self.counted()
    }

    /// A block as written: its record, or none when it holds no run.
    fn block(&mut self, l: u64, b: u64, block: &Block) -> Result<(), StorageError> {
        match block.runs.is_empty() {
            true => self.batch.remove(&block_key(l, b)[..]),
            false => self.batch.insert(&block_key(l, b)[..], block.encode(b)),
        }
        self.counted()
    }

    fn counted(&mut self) -> Result<(), StorageError> {
        self.records += 1;
        if self.records == COMMIT_BATCH_RECORDS {
            self.tree.apply_batch(std::mem::take(&mut self.batch)).map_err(idx_err)?;
            self.records = 0;
            if crate::failpoint::is_armed("index.between_batches") {
                // The worst a crash here can leave: sled writes its buffer
                // out when it fills, so the batches so far may be on disk
                // without the checkpoint.
                self.tree.flush().map_err(idx_err)?;
                crate::failpoint::hit("index.between_batches");
            }
        }
        Ok(())
    }

    /// Applies the last batch, with `last` in it.
    fn finish(mut self, last: Option<(&[u8], &[u8])>) -> Result<(), StorageError> {
        if let Some((k, v)) = last {
            self.batch.insert(k, v);
        }
        self.tree.apply_batch(self.batch).map_err(idx_err)
    }
}

/// The sled-backed index.
pub struct SledIndex {
    /// The directory sled runs in (its lock file is `db` there).
    dir: PathBuf,
    /// The open database, `None` once closed. Writers hold the lock
    /// exclusively while they check and apply (so `replace_runs` checks and
    /// writes with no other write in between); look-ups share it. A range
    /// look-up walks several keys, and a sled range walk is not a snapshot:
    /// without this, a walk overlapping a batch could see a block before it
    /// and the next after it. Held only for the in-memory apply, never
    /// across a flush to disk (a flush works on a clone of the handle).
    open: std::sync::RwLock<Option<Handles>>,
    /// Damage commits met and worked around since the last `take_damage`.
    damage: std::sync::Mutex<Vec<String>>,
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
    /// Opens (or creates) the index under `dir`; an index of the earlier
    /// layout (a record per run) is moved to blocks first (`migrate.rs`).
    pub fn open(dir: &Path) -> Result<SledIndex, StorageError> {
        Self::open_with_cache(dir, INDEX_CACHE_BYTES)
    }

    /// `open`, with a cache of `cache_bytes` (the bookie's --index-cache-mib).
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledIndex, StorageError> {
        // No background flusher: every commit flushes and syncs itself (below).
        let config = sled::Config::new().path(dir).cache_capacity(cache_bytes).flush_every_ms(None);
        let (db, synced) = SyncedSled::open(config, dir).map_err(|e| StorageError::io(dir, e))?;
        let tree = db.open_tree("ledger-index").map_err(idx_err)?;
        let handles = Handles { db, tree, synced: Arc::new(synced) };
        let moved = super::migrate::runs_to_blocks(&handles.tree, &mut || handles.commit())?;
        if moved > 0 {
            tracing::info!(runs = moved, dir = %dir.display(), "moved the index's run records into blocks");
        }
        Ok(SledIndex {
            dir: dir.to_path_buf(),
            open: std::sync::RwLock::new(Some(handles)),
            damage: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The stored block `(l, b)` with `pieces` put into it, for a commit. A
    /// stored record that fails to decode must not stop every later flush
    /// (adds to any ledger would be refused for good, and the flush at the
    /// next start would fail too): its bytes are set aside under their own
    /// key (the first damage found is kept), the block is rebuilt from the
    /// new runs and marked damaged, so the lost ids answer `Corrupt`, and
    /// the damage is reported (`take_damage`).
    fn merged(
        &self,
        tree: &sled::Tree,
        out: &mut Batches<'_>,
        l: u64,
        b: u64,
        pieces: Vec<(u64, Run)>,
    ) -> Result<Block, StorageError> {
        let mut block = match load_block(tree, l, b) {
            Ok(stored) => stored.unwrap_or_default(),
            Err(StorageError::Corrupt(why)) => {
                let aside = set_aside_key(l, b);
                if let Some(raw) = tree.get(block_key(l, b)).map_err(idx_err)? {
                    if !tree.contains_key(aside).map_err(idx_err)? {
                        out.insert(&aside, &raw)?;
                    }
                }
                let what = format!(
                    "ledger {l}, entries {b} to {}: {why}; the record is set aside and the block rebuilt",
                    b.saturating_add(super::block::BLOCK_ENTRIES - 1)
                );
                self.damage.lock().expect("damage lock").push(what);
                Block { damaged: true, ..Default::default() }
            }
            Err(e) => return Err(e),
        };
        block.put(pieces);
        Ok(block)
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
            // In sled batches (`Batches`). The checkpoint goes in the last:
            // a crash between batches leaves locations of entries the
            // journal still holds (their entry-log bytes synced before this
            // commit), which its replay writes again.
            let mut out = Batches::new(&w.tree);
            // In (ledger, entry) order (a flush gives them so; any other
            // batch is sorted first, stably, so a later location of the
            // same entry still wins): a block's entries are one slice,
            // taken one block at a time, so a flush of 100 000 ledgers
            // never holds all their runs.
            let in_order = batch.locations.windows(2).all(|w| (w[0].0, w[0].1) <= (w[1].0, w[1].1));
            let locs: std::borrow::Cow<'_, [(u64, u64, Location)]> = match in_order {
                true => std::borrow::Cow::Borrowed(&batch.locations),
                false => {
                    let mut sorted = batch.locations.clone();
                    sorted.sort_by_key(|(l, e, _)| (*l, *e));
                    std::borrow::Cow::Owned(sorted)
                }
            };
            let key = |i: usize| (locs[i].0, block_of(locs[i].1));
            let mut i = 0;
            while i < locs.len() {
                let (l, b) = key(i);
                let j = (i + 1..locs.len()).find(|&j| key(j) != (l, b)).unwrap_or(locs.len());
                let pieces = runs(&locs[i..j]).into_iter().map(|(_, f, r)| (f, r)).collect();
                let block = self.merged(&w.tree, &mut out, l, b, pieces)?;
                out.block(l, b, &block)?;
                i = j;
            }
            for (l, r) in &batch.ledgers {
                out.insert(&ledger_key(*l), &encode_ledger(r))?;
            }
            let checkpoint = batch.checkpoint.map(|c| {
                let mut v = [0u8; 16];
                v[0..8].copy_from_slice(&c.segment.to_be_bytes());
                v[8..16].copy_from_slice(&c.offset.to_be_bytes());
                v
            });
            out.finish(checkpoint.as_ref().map(|v| (KEY_CHECKPOINT, &v[..])))?;
            w.clone()
        };
        db.commit()?;
        Ok(())
    }

    fn location(&self, ledger_id: u64, entry_id: u64) -> Result<Option<Location>, StorageError> {
        let r = self.read()?;
        match load_block(&r.tree, ledger_id, entry_id)? {
            Some(b) => b.look_up(entry_id),
            None => Ok(None),
        }
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
        // Block by block: no run crosses a block, so what one block gives
        // is final for its ids.
        let mut found: Vec<(u64, Location)> = Vec::new();
        let mut next = None;
        for kv in r.tree.range(block_key(ledger_id, first)..=block_key(ledger_id, last)) {
            let (k, v) = kv.map_err(idx_err)?;
            let (_, b, block) = decode_block(&k, &v)?;
            if found.len() >= max_entries {
                next = Some(b);
                break;
            }
            block.paint(first.max(b), last.min(b.saturating_add(super::block::BLOCK_ENTRIES - 1)), &mut found)?;
        }
        drop(r);
        if found.len() > max_entries {
            next = Some(found[max_entries].0);
            found.truncate(max_entries);
        }
        Ok(RangeLocations { found, next })
    }

    fn last_entry(&self, ledger_id: u64) -> Result<Option<u64>, StorageError> {
        let r = self.read()?;
        // No run crosses a block: the ledger's last block holds its highest id.
        let top = r.tree.range(block_key(ledger_id, 0)..=block_key(ledger_id, u64::MAX)).next_back();
        match top {
            Some(kv) => {
                let (k, v) = kv.map_err(idx_err)?;
                let (_, b, block) = decode_block(&k, &v)?;
                if block.damaged {
                    // A lost id may have been the highest.
                    return Err(StorageError::Corrupt(format!(
                        "ledger {ledger_id}: the index block from entry {b} was damaged; its last entry is unknown"
                    )));
                }
                Ok(block.last_entry())
            }
            None => Ok(None),
        }
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
        for kv in self.handles()?.tree.scan_prefix([PREFIX_BLOCK]) {
            let (k, v) = kv.map_err(idx_err)?;
            let (ledger_id, _, block) = decode_block(&k, &v)?;
            for (first_entry, run) in block.runs {
                visit(RunInfo { ledger_id, first_entry, log_id: run.log_id, base: run.base, ends: run.ends });
            }
        }
        Ok(())
    }

    fn delete_ledgers(&self, ledger_ids: &[u64], records: &[(u64, LedgerRecord)]) -> Result<u64, StorageError> {
        let mut runs = 0;
        let db = {
            let w = self.write()?;
            let mut b = sled::Batch::default();
            for l in ledger_ids {
                for kv in w.tree.range(block_key(*l, 0)..=block_key(*l, u64::MAX)) {
                    let (k, v) = kv.map_err(idx_err)?;
                    // A damaged block goes with its ledger all the same.
                    runs += decode_block(&k, &v).map_or(1, |(_, _, block)| block.runs.len() as u64);
                    b.remove(k);
                }
                for kv in w.tree.range(set_aside_key(*l, 0)..=set_aside_key(*l, u64::MAX)) {
                    b.remove(kv.map_err(idx_err)?.0);
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

    fn take_damage(&self) -> Vec<String> {
        std::mem::take(&mut *self.damage.lock().expect("damage lock"))
    }

    fn replace_runs(&self, moves: &[RunMove]) -> Result<Vec<bool>, StorageError> {
        let w = self.write()?;
        // Blocks as this call leaves them, so that each move is checked
        // against the moves applied before it.
        let mut pending: BTreeMap<(u64, u64), Block> = BTreeMap::new();
        let mut applied = Vec::with_capacity(moves.len());
        let mut written: HashSet<(u64, u64)> = HashSet::new();
        for m in moves {
            let (l, first) = (m.old.ledger_id, m.old.first_entry);
            let key = (l, block_of(first));
            let block = match pending.entry(key) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(load_block(&w.tree, l, first)?.unwrap_or_default())
                }
            };
            let old = Run { log_id: m.old.log_id, base: m.old.base, ends: m.old.ends.clone() };
            // (A run an earlier move of this call wrote is no longer the run read.)
            let unchanged = !written.contains(&(l, first)) && block.runs.get(&first) == Some(&old);
            if !unchanged {
                applied.push(false);
                continue;
            }
            let locations: Vec<(u64, u64, Location)> = m.moved.iter().map(|(e, loc)| (l, *e, *loc)).collect();
            let new_runs = runs(&locations);
            // (Stored runs are never empty.)
            let old_last = first + (old.len() as u64 - 1);
            let outside =
                new_runs.iter().any(|(nl, f, r)| *nl != l || *f < first || f + (r.len() as u64 - 1) > old_last);
            let clash = new_runs
                .iter()
                .any(|(_, f, _)| *f != first && (written.contains(&(l, *f)) || block.runs.contains_key(f)));
            if outside || clash {
                applied.push(false);
                continue;
            }
            // Entries the move leaves out must still be found elsewhere: the
            // copy that superseded them may have gone since compaction looked.
            let mut without = block.clone();
            without.runs.remove(&first);
            let moved: HashSet<u64> = m.moved.iter().map(|(e, _)| *e).collect();
            let orphan = (0..old.len()).any(|i| {
                let e = first + i as u64;
                !moved.contains(&e) && without.find(e).is_none()
            });
            if orphan {
                applied.push(false);
                continue;
            }
            for (_, f, run) in new_runs {
                written.insert((l, f));
                without.runs.insert(f, run);
            }
            *block = without;
            applied.push(true);
        }
        if applied.iter().any(|a| *a) {
            // One sled batch: the contract makes the applied moves atomic.
            let mut b = sled::Batch::default();
            for ((l, first), block) in pending {
                match block.runs.is_empty() {
                    true => b.remove(&block_key(l, first)[..]),
                    false => b.insert(&block_key(l, first)[..], block.encode(first)),
                }
            }
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

    /// The stored bytes of the block holding ledger `l`'s entry `e` (tests only).
    #[cfg(test)]
    pub(crate) fn raw_block(&self, l: u64, e: u64) -> Option<Vec<u8>> {
        self.handles().unwrap().tree.get(block_key(l, e)).unwrap().map(|v| v.to_vec())
    }

    /// Moves the first `n` run records of the earlier layout, as a crash
    /// might have left a move (tests only).
    #[cfg(test)]
    pub(crate) fn move_legacy(&self, n: usize) {
        super::migrate::move_chunk(&self.handles().unwrap().tree, n).unwrap();
    }

    /// How many records have keys starting with `prefix` (tests only).
    #[cfg(test)]
    pub(crate) fn records_with_prefix(&self, prefix: u8) -> usize {
        self.handles().unwrap().tree.scan_prefix([prefix]).count()
    }

    /// The key of the block holding ledger `l`'s entry `e` (tests only).
    #[cfg(test)]
    pub(crate) fn block_key_of(l: u64, e: u64) -> [u8; 17] {
        block_key(l, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entrylog::RECORD_MAX_BYTES;
    use proptest::prelude::*;

    fn block_bytes(first: u64, at: u64, log_id: u32, base: u64, ends: &[u32]) -> Vec<u8> {
        let mut b = Block::default();
        b.runs.insert(at, Run { log_id, base, ends: ends.to_vec() });
        b.encode(first)
    }

    /// A block record whose one run starts at id 60 and holds 5 entries.
    fn past_its_block() -> Vec<u8> {
        let mut v = vec![60u8];
        v.extend_from_slice(&1u32.to_be_bytes());
        v.extend_from_slice(&16u64.to_be_bytes());
        v.push(5);
        for e in 1..=5u32 {
            v.extend_from_slice(&(10 * e).to_be_bytes());
        }
        v
    }

    /// Issue #20 item 5: lengths and offsets from a damaged block are
    /// refused when it is decoded, before anything is allocated or added
    /// with them.
    #[test]
    fn a_block_with_an_impossible_length_or_offset_is_damage() {
        let t = tempfile::tempdir().unwrap();
        let idx = SledIndex::open(t.path()).unwrap();
        let ok = block_bytes(0, 0, 1, 16, &[100, 200]);
        idx.damage(&block_key(1, 0), &ok);
        assert_eq!(idx.location(1, 1).unwrap(), Some(Location { log_id: 1, offset: 116, len: 100 }));
        for bad in [
            block_bytes(0, 0, 1, 16, &[u32::MAX]),                    // a 4 GiB record
            block_bytes(0, 0, 1, 16, &[100, RECORD_MAX_BYTES + 101]), // the second one too long
            block_bytes(0, 0, 1, u64::MAX - 10, &[100]),              // past the end of any file
            past_its_block(),                                         // a run past its block
            ok[..ok.len() - 1].to_vec(),                              // cut short
        ] {
            idx.damage(&block_key(2, 0), &bad);
            assert!(matches!(idx.location(2, 0), Err(StorageError::Corrupt(_))), "{bad:?}");
            assert!(matches!(idx.last_entry(2), Err(StorageError::Corrupt(_))), "{bad:?}");
            assert!(matches!(idx.locations(2, 0, 10, 5), Err(StorageError::Corrupt(_))), "{bad:?}");
        }
        // A short key in the ledger's key range is reported, not sliced.
        idx.damage(&[PREFIX_BLOCK, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 9], &ok);
        assert!(matches!(idx.last_entry(3), Err(StorageError::Corrupt(_))));
        // A key that is not a block's first id.
        idx.damage(&[PREFIX_BLOCK, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 3], &ok);
        assert!(matches!(idx.last_entry(4), Err(StorageError::Corrupt(_))));
        let mut seen = 0;
        assert!(matches!(idx.for_each_run(&mut |_| seen += 1), Err(StorageError::Corrupt(_))));
        // A flush over a damaged block goes on: the new entry is indexed,
        // the lost ones answer Corrupt (never absent), the damage is
        // reported once and its bytes kept aside.
        idx.damage(&block_key(5, 0), &ok[..ok.len() - 1]);
        let fresh = Location { log_id: 2, offset: 16, len: 10 };
        idx.commit(&IndexBatch { locations: vec![(5, 3, fresh)], ..Default::default() }).unwrap();
        assert_eq!(idx.location(5, 3).unwrap(), Some(fresh));
        assert!(matches!(idx.location(5, 1), Err(StorageError::Corrupt(_))));
        assert!(matches!(idx.locations(5, 0, 5, 10), Err(StorageError::Corrupt(_))));
        assert!(matches!(idx.last_entry(5), Err(StorageError::Corrupt(_))));
        assert_eq!(idx.take_damage().len(), 1);
        assert!(idx.take_damage().is_empty());
        assert_eq!(idx.records_with_prefix(PREFIX_SET_ASIDE), 1);
        idx.commit(&IndexBatch { locations: vec![(5, 4, fresh)], ..Default::default() }).unwrap();
        assert!(idx.take_damage().is_empty(), "a rebuilt block is not damage again");
        // A damaged ledger is deleted all the same, with what was set aside.
        idx.delete_ledgers(&[5], &[]).unwrap();
        assert_eq!(idx.records_with_prefix(PREFIX_SET_ASIDE), 0);
        idx.delete_ledgers(&[2, 3, 4], &[]).unwrap();
        assert_eq!(idx.last_entry(2).unwrap(), None);
        idx.for_each_run(&mut |_| seen += 1).unwrap();
    }

    fn damaged_pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        // Keys mostly in the key spaces the look-ups below walk (blocks and
        // records of ledgers 0..4, the checkpoint), of any length.
        let key = (0u8..3, 0u64..4, prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(kind, l, tail)| {
            let mut k = match kind {
                0 => vec![PREFIX_BLOCK],
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
                let _ = idx.locations(l, 0, u64::MAX, 100);
                let _ = idx.ledger(l);
            }
            let _ = idx.ledgers();
            let _ = idx.checkpoint();
            let _ = idx.for_each_run(&mut |_| {});
        }
    }
}
