//! The store: the bookie's storage engine behind one type (see the crate doc
//! for the write path).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use quire_proto::v1::Entry;
use tokio::sync::{oneshot, Semaphore};

use crate::entrylog::read_cache::ReadCache;
use crate::entrylog::write_cache::WriteCache;
use crate::entrylog::EntryLogs;
use crate::error::StorageError;
use crate::failpoint;
use crate::gc::{self, GcOutcome, LogUsage, Throttle};
use crate::index::{IndexBatch, LedgerIndex, LedgerRecord, SledIndex};
use crate::journal::{self, FileJournal, Journal, JournalConfig, JournalPos, Record};

mod lac;
mod range;

use lac::Lac;
pub use range::{RangeQuery, RangeRead, Stripe, ENTRY_OVERHEAD_BYTES, RANGE_BYTES_MAX, RANGE_ENTRIES_MAX};

/// Store settings.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The journal (its own directory, ideally its own device).
    pub journal: JournalConfig,
    /// Entry logs and index live here.
    pub ledger_dir: PathBuf,
    /// Payload bytes journaled but not yet flushed to an entry log, at most.
    /// Adds wait for room beyond it (backpressure), never grow it.
    pub write_cache_bytes: usize,
    /// Flush at least this often.
    pub flush_interval: Duration,
    /// Flush as soon as this many payload bytes are waiting. Small flushes keep
    /// each entry-log fsync short: on a disk shared with the journal, one long
    /// entry-log fsync stalls every journal sync queued behind it.
    pub flush_bytes: usize,
    /// An entry log file is closed and a new one started past this size.
    pub entry_log_bytes: u64,
    /// The newest entry-log bytes kept in the page cache after a flush's
    /// sync; older ones are dropped from it, and a file's whole cache once
    /// the next file starts. `None`, or a value of at least
    /// `entry_log_bytes`: the kernel keeps what it likes.
    pub entry_log_cached_bytes: Option<u64>,
    /// Read-ahead cache, payload bytes.
    pub read_cache_bytes: usize,
    /// The index's cache (sled's), bytes.
    pub index_cache_bytes: u64,
    /// Bytes read per read-ahead from an entry log.
    pub read_ahead_bytes: usize,
    /// Largest entry payload accepted.
    pub max_entry_bytes: usize,
    /// Long polls parked at once.
    pub max_parked_waits: usize,
    /// Called on the flusher thread after each flush (the bookie gives the
    /// allocator's freed pages back to the OS).
    pub after_flush: Option<fn()>,
    /// Where to record that replay skipped damaged journal records: this
    /// file is written and synced (with its directory) before the store
    /// checkpoints past them, so the record that acknowledged data may be
    /// missing here outlives the evidence (replay starts at the checkpoint:
    /// a start that died after it would see no damage). The bookie's
    /// integrity-check marker. `None`: damage is only reported
    /// ([`Store::journal_damaged`]).
    pub damage_marker: Option<PathBuf>,
}

impl StoreConfig {
    /// Defaults with the journal in `journal_dir` and the rest in `ledger_dir`.
    pub fn new(journal_dir: impl Into<PathBuf>, ledger_dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            journal: JournalConfig::new(journal_dir),
            ledger_dir: ledger_dir.into(),
            write_cache_bytes: 64 * 1024 * 1024,
            flush_interval: Duration::from_secs(1),
            flush_bytes: 4 * 1024 * 1024,
            entry_log_bytes: 1024 * 1024 * 1024,
            entry_log_cached_bytes: Some(0),
            read_cache_bytes: 16 * 1024 * 1024,
            index_cache_bytes: crate::index::INDEX_CACHE_BYTES,
            read_ahead_bytes: 64 * 1024,
            max_entry_bytes: quire_proto::MAX_ENTRY_BYTES,
            max_parked_waits: 10_000,
            after_flush: None,
            damage_marker: None,
        }
    }
}

/// Counters of the store.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Adds acknowledged.
    pub adds: AtomicU64,
    /// Reads served (any source).
    pub reads: AtomicU64,
    /// Reads served from the write cache.
    pub reads_write_cache: AtomicU64,
    /// Reads served from the read-ahead cache.
    pub reads_read_cache: AtomicU64,
    /// Range reads (ReadEntries) answered.
    pub range_reads: AtomicU64,
    /// Positioned reads of entry-log regions made by range reads.
    pub range_read_regions: AtomicU64,
    /// Flushes to the entry log.
    pub flushes: AtomicU64,
    /// Entries flushed.
    pub flushed_entries: AtomicU64,
    /// Long polls parked now.
    pub parked_waits: AtomicUsize,
    /// Garbage-collection passes over the entry logs.
    pub gc_passes: AtomicU64,
    /// Ledgers dropped after the bookie found them deleted.
    pub gc_ledgers_deleted: AtomicU64,
    /// Entry logs removed whole.
    pub gc_logs_removed: AtomicU64,
    /// Entry logs compacted.
    pub gc_logs_compacted: AtomicU64,
    /// Entries moved by compaction.
    pub gc_entries_moved: AtomicU64,
    /// Disk bytes freed by garbage collection.
    pub gc_bytes_reclaimed: AtomicU64,
    /// Compactions stopped by an error.
    pub gc_compaction_failures: AtomicU64,
    /// Time spent compacting, microseconds.
    pub gc_compaction_us: AtomicU64,
}

struct LedgerState {
    /// Held while checking fence state and queueing a record, so that an add
    /// and a fence of the same ledger are ordered in the journal.
    fence: Mutex<bool>,
    lac: Lac,
    /// Changed since the last flush (fence or LAC).
    dirty: AtomicBool,
    /// Removed from the ledger map by a deletion: an add already past its
    /// fence check puts it back when it lands, so the ledger stays visible
    /// (and is deleted again) rather than leaving unlisted entries behind.
    dropped: AtomicBool,
}

impl LedgerState {
    fn new(rec: LedgerRecord) -> Arc<Self> {
        Arc::new(LedgerState {
            fence: Mutex::new(rec.fenced),
            lac: Lac::new(rec.lac),
            dirty: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
        })
    }

    fn raise_lac(&self, lac: i64) {
        if self.lac.raise(lac) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    fn record(&self) -> LedgerRecord {
        LedgerRecord { fenced: *self.fence.lock().expect("fence lock"), lac: self.lac.get() }
    }
}

#[derive(Default)]
struct Caches {
    active: WriteCache,
    flushing: Option<Arc<WriteCache>>,
    /// The position of the last journal record whose effects are in `active`.
    applied: JournalPos,
    /// Budget permits (KiB) held by entries in `active`.
    active_kib: usize,
}

struct Inner {
    config: StoreConfig,
    journal: FileJournal,
    index: SledIndex,
    logs: EntryLogs,
    caches: RwLock<Caches>,
    ledgers: RwLock<HashMap<u64, Arc<LedgerState>>>,
    /// Told whenever a ledger becomes known here: long polls on a ledger not
    /// seen yet wait for it.
    appeared: tokio::sync::Notify,
    read_cache: Mutex<ReadCache>,
    budget: Arc<Semaphore>,
    budget_kib: usize,
    /// Set by the operator or the disk guard.
    read_only: Mutex<Option<String>>,
    /// Set when a flush fails: the disk under the entry logs or index is in
    /// trouble. Cleared by a later successful flush.
    failed: Mutex<Option<String>>,
    stats: StoreStats,
    flush_tx: Mutex<Option<mpsc::Sender<FlushCmd>>>,
    /// Held for a whole flush (entry-log append and index commit) and by
    /// whatever must not interleave with one: a ledger's deletion, and GC
    /// reading which logs are sealed (every log below the current one then
    /// has its runs committed).
    flush_lock: Mutex<()>,
    /// One garbage-collection pass at a time.
    gc_lock: Mutex<()>,
    /// Every entry log's usage as the last pass (or refresh) found it.
    usage: Mutex<Vec<LogUsage>>,
    /// A read met damage in the index (reported once).
    index_damaged: std::sync::atomic::AtomicBool,
}

enum FlushCmd {
    Now(Option<oneshot::Sender<Result<(), String>>>),
}

/// The pending result of [`Store::add`].
pub type AddFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StorageError>> + Send>>;

/// Resolves to each add's result, in the order given to [`Store::add_many`].
pub type AddManyFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Result<(), StorageError>>> + Send>>;

/// An add of an [`Store::add_many`] that passed the checks needing no lock.
struct Accepted {
    /// Its place in the request.
    slot: usize,
    entry: Entry,
    recovery: bool,
    /// Budget permits it holds.
    kib: usize,
}

/// The storage engine.
pub struct Store {
    inner: Arc<Inner>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    journal_damaged: bool,
}

fn kib_of(e: &Entry) -> usize {
    e.payload.len() / 1024 + 1
}

impl Store {
    /// Opens the store: reads the index, replays the journal from the last
    /// checkpoint, flushes what it replayed, and starts the journal and flusher.
    pub fn open(config: StoreConfig) -> Result<Store, StorageError> {
        let index_dir = config.ledger_dir.join("index");
        let logs_dir = config.ledger_dir.join("entrylogs");
        let index = SledIndex::open_with_cache(&index_dir, config.index_cache_bytes)?;
        let cached = config.entry_log_cached_bytes.filter(|b| *b < config.entry_log_bytes);
        let logs = EntryLogs::open(&logs_dir, config.entry_log_bytes, cached)?;
        let mut ledgers = HashMap::new();
        for (id, rec) in index.ledgers()? {
            ledgers.insert(id, LedgerState::new(rec));
        }
        let checkpoint = index.checkpoint()?.unwrap_or_default();
        quire_durable::create_dir_all_durable(&config.journal.dir)
            .map_err(|e| StorageError::io(&config.journal.dir, e))?;
        let mut caches = Caches::default();
        let outcome = journal::replay(&config.journal.dir, checkpoint, |pos, rec| {
            match rec {
                Record::Entry { ledger_id, entry_id, last_add_confirmed, ledger_length, crc32c, payload } => {
                    let st = ledgers.entry(ledger_id).or_insert_with(|| LedgerState::new(LedgerRecord::default()));
                    st.raise_lac(last_add_confirmed);
                    st.dirty.store(true, Ordering::Release);
                    caches.active.insert(Entry {
                        ledger_id,
                        entry_id,
                        last_add_confirmed,
                        payload,
                        crc32c,
                        ledger_length,
                    });
                }
                Record::Fence { ledger_id } => {
                    let st = ledgers.entry(ledger_id).or_insert_with(|| LedgerState::new(LedgerRecord::default()));
                    *st.fence.lock().expect("fence lock") = true;
                    st.dirty.store(true, Ordering::Release);
                }
            }
            caches.applied = pos;
        })?;
        if outcome.records > 0 || outcome.cut.is_some() || !outcome.damaged.is_empty() {
            tracing::info!(records = outcome.records, cut = ?outcome.cut, damaged = ?outcome.damaged, "replayed journal");
        }
        let journal_damaged = !outcome.damaged.is_empty();
        if journal_damaged {
            if let Some(marker) = &config.damage_marker {
                write_marker(marker)?;
            }
        }
        caches.applied = caches.applied.max(checkpoint);
        let journal = FileJournal::start(config.journal.clone())?;
        let budget_kib = (config.write_cache_bytes / 1024).max(1);
        let inner = Arc::new(Inner {
            read_cache: Mutex::new(ReadCache::new(config.read_cache_bytes)),
            budget: Arc::new(Semaphore::new(budget_kib)),
            budget_kib,
            config,
            journal,
            index,
            logs,
            caches: RwLock::new(caches),
            ledgers: RwLock::new(ledgers),
            appeared: tokio::sync::Notify::new(),
            read_only: Mutex::new(None),
            failed: Mutex::new(None),
            stats: StoreStats::default(),
            flush_tx: Mutex::new(None),
            flush_lock: Mutex::new(()),
            gc_lock: Mutex::new(()),
            usage: Mutex::new(Vec::new()),
            index_damaged: std::sync::atomic::AtomicBool::new(false),
        });
        // Replayed entries go to the entry log before anything new is accepted,
        // and the checkpoint then lets the journal drop what it replayed.
        inner.flush()?;
        // (A start that dies here has checkpointed past whatever replay found.)
        failpoint::hit("store.open_flushed");
        let (tx, rx) = mpsc::channel();
        *inner.flush_tx.lock().expect("flush tx lock") = Some(tx);
        let flusher_inner = inner.clone();
        let flusher = std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || flusher_inner.flush_loop(rx))
            .map_err(|e| StorageError::io(&inner.config.ledger_dir, e))?;
        Ok(Store { inner, flusher: Mutex::new(Some(flusher)), journal_damaged })
    }

    /// Whether replay skipped damaged journal records at open: acknowledged
    /// entries may be missing, and must be refilled from peers before this
    /// bookie answers "no such entry" (the bookie's data-integrity check).
    pub fn journal_damaged(&self) -> bool {
        self.journal_damaged
    }

    /// Adds an entry; the returned future resolves once it is durable in the journal.
    ///
    /// Refused: too large, bad digest, read-only or failed store, and (unless
    /// `recovery`) a fenced ledger. When the write cache has room, the entry is
    /// queued to the journal before this returns, so adds made in some order
    /// are journaled in that order; otherwise the future waits for room first.
    pub fn add(&self, entry: Entry, recovery: bool) -> AddFuture {
        let added = self.add_many(vec![(entry, recovery)]);
        Box::pin(async move { added.await.pop().expect("one add, one result") })
    }

    /// Adds several entries (an AddEntries request's): each judged as
    /// [`Store::add`] would judge it, the accepted ones journaled back to
    /// back in one group commit with one completion. The future resolves
    /// once they are durable, with each add's result in the order given.
    /// `adds`: the entry and whether it is a recovery add.
    pub fn add_many(&self, adds: Vec<(Entry, bool)>) -> AddManyFuture {
        let inner = self.inner.clone();
        let mut results: Vec<Option<Result<(), StorageError>>> = Vec::with_capacity(adds.len());
        let mut accepted = Vec::with_capacity(adds.len());
        let mut kib_total = 0usize;
        for (i, (entry, recovery)) in adds.into_iter().enumerate() {
            match inner.check_add(&entry) {
                Ok(()) => {
                    let kib = kib_of(&entry).min(inner.budget_kib);
                    kib_total += kib;
                    accepted.push(Accepted { slot: i, entry, recovery, kib });
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        if kib_total > inner.budget_kib {
            // More than the whole write cache at once: one by one, each
            // waiting for its own room (a batch's room might never come).
            let each: Vec<(usize, AddFuture)> =
                accepted.into_iter().map(|a| (a.slot, self.add(a.entry, a.recovery))).collect();
            return Box::pin(async move {
                for (slot, f) in each {
                    results[slot] = Some(f.await);
                }
                results.into_iter().map(|r| r.expect("judged")).collect()
            });
        }
        // With room in the write cache the adds are queued before this
        // returns (so adds made in some order are journaled in it);
        // otherwise the future waits for room first. The permits go back
        // to the budget when flushed (or on failure).
        let (mut queued, mut waiting) = (None, None);
        match inner.budget.try_acquire_many(kib_total as u32) {
            Ok(permit) => {
                permit.forget();
                queued = inner.enqueue_many(accepted, &mut results);
            }
            Err(_) => waiting = Some(accepted),
        }
        Box::pin(async move {
            if let Some(accepted) = waiting {
                match inner.budget.acquire_many(kib_total as u32).await {
                    Ok(permit) => {
                        permit.forget();
                        queued = inner.enqueue_many(accepted, &mut results);
                    }
                    Err(_) => {
                        for a in accepted {
                            results[a.slot] = Some(Err(StorageError::Overloaded("store is closing".into())));
                        }
                    }
                }
            }
            if let Some((slots, rx)) = queued {
                let res = rx.await.unwrap_or(Err(StorageError::JournalClosed));
                for slot in slots {
                    results[slot] = Some(res.clone());
                }
            }
            results.into_iter().map(|r| r.expect("judged")).collect()
        })
    }

    /// Fences a ledger (idempotent): from now on only recovery adds are
    /// accepted. Resolves once the fence is durable, with the ledger's LAC.
    pub async fn fence(&self, ledger_id: u64) -> Result<i64, StorageError> {
        let inner = &self.inner;
        let st = inner.ledger_or_create(ledger_id);
        let (tx, rx) = oneshot::channel();
        {
            let mut fenced = st.fence.lock().expect("fence lock");
            *fenced = true;
            st.dirty.store(true, Ordering::Release);
            let inner2 = inner.clone();
            inner.journal.append(
                Record::Fence { ledger_id },
                Box::new(move |res| {
                    if let Ok(pos) = &res {
                        let mut c = inner2.caches.write().expect("caches lock");
                        c.applied = c.applied.max(*pos);
                    }
                    let _ = tx.send(res.map(|_| ()));
                }),
            );
        }
        rx.await.map_err(|_| StorageError::JournalClosed)??;
        let lac = st.lac.get();
        Ok(lac)
    }

    /// Whether this store has seen the ledger (an add, a fence or an explicit LAC).
    pub fn knows_ledger(&self, ledger_id: u64) -> bool {
        self.inner.ledger(ledger_id).is_some()
    }

    /// Whether a ledger is fenced (unknown ledgers are not).
    pub fn is_fenced(&self, ledger_id: u64) -> bool {
        self.inner.ledger(ledger_id).is_some_and(|st| *st.fence.lock().expect("fence lock"))
    }

    /// Reads an entry from memory if it is there (no I/O).
    pub fn read_cached(&self, ledger_id: u64, entry_id: u64) -> Option<Entry> {
        let inner = &self.inner;
        {
            let c = inner.caches.read().expect("caches lock");
            let hit = c
                .active
                .get(ledger_id, entry_id)
                .or_else(|| c.flushing.as_ref().and_then(|f| f.get(ledger_id, entry_id)));
            if let Some(e) = hit {
                inner.stats.reads.fetch_add(1, Ordering::Relaxed);
                inner.stats.reads_write_cache.fetch_add(1, Ordering::Relaxed);
                return Some(e.clone());
            }
        }
        let e = inner.read_cache.lock().expect("read cache lock").take(ledger_id, entry_id)?;
        inner.stats.reads.fetch_add(1, Ordering::Relaxed);
        inner.stats.reads_read_cache.fetch_add(1, Ordering::Relaxed);
        Some(e)
    }

    /// Reads an entry: memory first, then the index and an entry log (blocking
    /// I/O: call from a blocking context). A damaged copy is `CorruptEntry`,
    /// never `NoSuchEntry`.
    pub fn read(&self, ledger_id: u64, entry_id: u64) -> Result<Entry, StorageError> {
        if let Some(e) = self.read_cached(ledger_id, entry_id) {
            return Ok(e);
        }
        // Compaction may remove the log a location names between the index
        // look-up and the read: the next look-up finds where it moved.
        for _ in 0..4 {
            match self.read_indexed(ledger_id, entry_id) {
                Err(StorageError::LogRemoved(_)) => continue,
                r => return r,
            }
        }
        Err(StorageError::CorruptEntry(ledger_id, entry_id, "its entry log kept being removed during the read".into()))
    }

    /// Damage met in the index (a malformed key or run): the read fails
    /// with it, and, as for journal damage, the data-integrity check is
    /// made pending (the damage marker, where configured) so that the next
    /// start refills from peers what the index no longer finds.
    fn note_index_damage(&self, e: StorageError) -> StorageError {
        self.inner.note_index_damage(e)
    }

    /// Whether a read has met damage in the index since the store opened.
    pub fn index_damaged(&self) -> bool {
        self.inner.index_damaged.load(Ordering::Acquire)
    }

    fn read_indexed(&self, ledger_id: u64, entry_id: u64) -> Result<Entry, StorageError> {
        let inner = &self.inner;
        let Some(loc) = inner.index.location(ledger_id, entry_id).map_err(|e| self.note_index_damage(e))? else {
            // It may have been flushed between the cache look-up and the index's.
            if let Some(e) = self.read_cached(ledger_id, entry_id) {
                return Ok(e);
            }
            let known = inner.ledger(ledger_id).is_some()
                || inner.index.last_entry(ledger_id).map_err(|e| self.note_index_damage(e))?.is_some();
            return Err(if known {
                StorageError::NoSuchEntry(ledger_id, entry_id)
            } else {
                StorageError::NoSuchLedger(ledger_id)
            });
        };
        inner.stats.reads.fetch_add(1, Ordering::Relaxed);
        let mut ahead = inner.logs.read_ahead(loc, ledger_id, inner.config.read_ahead_bytes.max(loc.len as usize));
        match ahead.first() {
            Some(first) if first.entry_id == entry_id => {
                let first = ahead.remove(0);
                let mut rc = inner.read_cache.lock().expect("read cache lock");
                for e in ahead {
                    rc.put(e);
                }
                Ok(first)
            }
            // Read-ahead could not decode the entry: read it alone for the precise error.
            _ => inner.logs.read(loc, ledger_id, entry_id),
        }
    }

    /// Every ledger this store knows (an entry, a fence or a LAC).
    pub fn ledger_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.inner.ledgers.read().expect("ledgers lock").keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Whether any entry of the ledger is stored (blocking: reads the index).
    pub fn has_entries(&self, ledger_id: u64) -> Result<bool, StorageError> {
        {
            let c = self.inner.caches.read().expect("caches lock");
            if c.active.last_entry(ledger_id).is_some()
                || c.flushing.as_ref().is_some_and(|f| f.last_entry(ledger_id).is_some())
            {
                return Ok(true);
            }
        }
        Ok(self.inner.index.last_entry(ledger_id)?.is_some())
    }

    /// Drops deleted ledgers: their runs and records leave the index in one
    /// durable batch, then their state and cached entries leave memory. Their
    /// bytes in the entry logs become garbage for [`Store::collect_garbage`].
    /// Blocking. Returns how many of them this store held.
    ///
    /// The caller vouches that the ledgers are deleted. An add already on its
    /// way through the journal brings one back (it is dropped again by a
    /// later pass), as does a journal replay.
    pub fn delete_ledgers(&self, ledger_ids: &[u64]) -> Result<u64, StorageError> {
        self.remove_ledgers(ledger_ids, false)
    }

    /// Drops the entries of ledgers whose copies are no longer this store's
    /// to keep (a closed ledger no ensemble names this bookie in), keeping
    /// each ledger's record, fenced: a zombie writer's add stays refused.
    /// Blocking. Returns how many of them this store held.
    pub fn drop_entries(&self, ledger_ids: &[u64]) -> Result<u64, StorageError> {
        self.remove_ledgers(ledger_ids, true)
    }

    fn remove_ledgers(&self, ledger_ids: &[u64], keep_fenced: bool) -> Result<u64, StorageError> {
        let inner = &self.inner;
        let _flush = inner.flush_lock.lock().expect("flush lock");
        let kept: Vec<(u64, LedgerRecord)> = if keep_fenced {
            let ledgers = inner.ledgers.read().expect("ledgers lock");
            ledger_ids
                .iter()
                .map(|l| (*l, LedgerRecord { fenced: true, lac: ledgers.get(l).map_or(-1, |st| st.lac.get()) }))
                .collect()
        } else {
            Vec::new()
        };
        inner.index.delete_ledgers(ledger_ids, &kept)?;
        let mut held = 0;
        {
            let mut ledgers = inner.ledgers.write().expect("ledgers lock");
            let mut c = inner.caches.write().expect("caches lock");
            let mut rc = inner.read_cache.lock().expect("read cache lock");
            for l in ledger_ids {
                if keep_fenced {
                    if let Some(st) = ledgers.get(l) {
                        held += 1;
                        *st.fence.lock().expect("fence lock") = true;
                    }
                } else if let Some(st) = ledgers.remove(l) {
                    held += 1;
                    st.dropped.store(true, Ordering::Release);
                }
                c.active.remove_ledger(*l);
                rc.forget_ledger(*l);
            }
        }
        inner.stats.gc_ledgers_deleted.fetch_add(held, Ordering::Relaxed);
        failpoint::hit("gc.ledgers_deleted");
        Ok(held)
    }

    /// One pass over the entry logs (blocking; one pass at a time): removes
    /// logs nothing references, and compacts sealed logs whose live fraction
    /// is under `threshold` (0: compact nothing), paced by `throttle`.
    pub fn collect_garbage(&self, threshold: f64, throttle: &mut Throttle) -> Result<GcOutcome, StorageError> {
        let inner = &self.inner;
        let _gc = inner.gc_lock.lock().expect("gc lock");
        if let Some(why) = inner.failed.lock().expect("failed lock").clone() {
            return Err(StorageError::ReadOnly(format!("no garbage collection while the store is failing: {why}")));
        }
        // What this pass judges dead must be dead on disk too: an index
        // write applied but never synced (its flush failed) would otherwise
        // let a log go that a restart's index still names.
        inner.index.sync()?;
        let sealed_below = {
            let _flush = inner.flush_lock.lock().expect("flush lock");
            inner.logs.current_id()
        };
        let usage = self.scan_usage()?;
        let plan = gc::plan::choose(&usage, sealed_below, threshold);
        let mut out = GcOutcome::default();
        for id in &plan.remove {
            out.bytes_reclaimed += inner.logs.remove(*id)?;
            out.logs_removed += 1;
            tracing::info!(log = id, "removed an entry log nothing references");
        }
        if !plan.compact.is_empty() {
            let wanted: std::collections::HashSet<u32> = plan.compact.iter().copied().collect();
            let mut runs: HashMap<u32, Vec<crate::index::RunInfo>> = HashMap::new();
            inner.index.for_each_run(&mut |r| {
                if wanted.contains(&r.log_id) {
                    runs.entry(r.log_id).or_default().push(r);
                }
            })?;
            for id in &plan.compact {
                let started = std::time::Instant::now();
                let res = gc::compact::compact_log(
                    &inner.logs,
                    &inner.index,
                    *id,
                    runs.remove(id).unwrap_or_default(),
                    throttle,
                );
                let took_us = started.elapsed().as_micros() as u64;
                inner.stats.gc_compaction_us.fetch_add(took_us, Ordering::Relaxed);
                match res {
                    Ok(c) if c.complete => {
                        failpoint::hit("compaction.before_unlink");
                        inner.index.sync()?;
                        let freed = inner.logs.remove(*id)?;
                        out.bytes_reclaimed += freed.saturating_sub(c.bytes_written);
                        out.entries_moved += c.entries_moved;
                        out.logs_compacted += 1;
                        tracing::info!(
                            log = id,
                            entries_moved = c.entries_moved,
                            freed,
                            took_us,
                            "compacted an entry log"
                        );
                    }
                    Ok(c) => {
                        out.entries_moved += c.entries_moved;
                        tracing::info!(log = id, "entry log changed during compaction; kept for a later pass");
                    }
                    Err(e) => {
                        out.failures += 1;
                        tracing::warn!(log = id, error = %e, "compaction of an entry log stopped; it is kept");
                    }
                }
            }
        }
        let st = &inner.stats;
        st.gc_passes.fetch_add(1, Ordering::Relaxed);
        st.gc_logs_removed.fetch_add(out.logs_removed, Ordering::Relaxed);
        st.gc_logs_compacted.fetch_add(out.logs_compacted, Ordering::Relaxed);
        st.gc_entries_moved.fetch_add(out.entries_moved, Ordering::Relaxed);
        st.gc_bytes_reclaimed.fetch_add(out.bytes_reclaimed, Ordering::Relaxed);
        st.gc_compaction_failures.fetch_add(out.failures, Ordering::Relaxed);
        self.scan_usage()?;
        Ok(out)
    }

    /// Every entry log's usage, from one scan of the index now (blocking).
    pub fn scan_usage(&self) -> Result<Vec<LogUsage>, StorageError> {
        let inner = &self.inner;
        // Sizes first: a log created after this cannot be in the list, and
        // one listed has all the runs the scan will see.
        let sizes = inner.logs.sizes();
        let mut live: HashMap<u32, u64> = HashMap::new();
        inner.index.for_each_run(&mut |r| *live.entry(r.log_id).or_default() += r.bytes())?;
        let usage = gc::plan::usage(&sizes, &live, EntryLogs::header_bytes());
        *inner.usage.lock().expect("usage lock") = usage.clone();
        Ok(usage)
    }

    /// Entry-log usage as last scanned (for metrics; no I/O).
    pub fn log_usage(&self) -> Vec<LogUsage> {
        self.inner.usage.lock().expect("usage lock").clone()
    }

    /// Reads every record every index run points at (blocking; an offline
    /// or test check). Returns what is wrong: a location in a missing log,
    /// past a file's end, or failing its record checks. Empty when sound.
    pub fn verify_index(&self) -> Result<Vec<String>, StorageError> {
        let inner = &self.inner;
        let mut runs = Vec::new();
        inner.index.for_each_run(&mut |r| runs.push(r))?;
        let mut problems = Vec::new();
        for r in runs {
            for i in 0..r.len() {
                let e = r.first_entry + i as u64;
                if let Err(err) = inner.logs.read(r.location(i), r.ledger_id, e) {
                    problems.push(format!("ledger {} entry {}: {err}", r.ledger_id, e));
                }
            }
        }
        Ok(problems)
    }

    /// The highest LAC this store has seen for a ledger.
    pub fn lac(&self, ledger_id: u64) -> Result<i64, StorageError> {
        match self.inner.ledger(ledger_id) {
            Some(st) => Ok(st.lac.get()),
            None => Err(StorageError::NoSuchLedger(ledger_id)),
        }
    }

    /// Records an explicit LAC from an idle writer, for a ledger this store
    /// holds. An explicit LAC for an unknown ledger is dropped: it must not
    /// make the ledger known (and unfenced) here, which would let a zombie
    /// writer's next add past the unknown-ledger check. Whether it was kept.
    pub fn write_lac(&self, ledger_id: u64, lac: i64) -> bool {
        match self.inner.ledger(ledger_id) {
            Some(st) => {
                st.raise_lac(lac);
                true
            }
            None => false,
        }
    }

    /// Waits until the ledger's LAC exceeds `after`, or `timeout`. Returns the
    /// LAC and whether it timed out. A ledger this store has not seen yet (a
    /// reader tails a ledger from its creation, before its first entry) has
    /// LAC -1 here: the poll waits for its first entries like any other,
    /// without making the ledger known (which would let a zombie writer's add
    /// past the unknown-ledger check). Before, it was refused at once, and a
    /// tail reader asked again and again.
    pub async fn wait_lac(&self, ledger_id: u64, after: i64, timeout: Duration) -> Result<(i64, bool), StorageError> {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + timeout;
        let known = inner.ledger(ledger_id);
        let lac_now = known.as_ref().map_or(-1, |st| st.lac.get());
        if lac_now > after {
            return Ok((lac_now, false));
        }
        let parked = inner.stats.parked_waits.fetch_add(1, Ordering::SeqCst);
        let _unpark = Unpark(&inner.stats.parked_waits);
        if parked >= inner.config.max_parked_waits {
            return Err(StorageError::Overloaded(format!("{parked} long polls already parked")));
        }
        let st = match known {
            Some(st) => st,
            None => loop {
                let appeared = inner.appeared.notified();
                tokio::pin!(appeared);
                // Registered before the look-up: a ledger that appears in
                // between still wakes this poll.
                appeared.as_mut().enable();
                if let Some(st) = inner.ledger(ledger_id) {
                    break st;
                }
                if tokio::time::timeout_at(deadline, appeared).await.is_err() {
                    return Ok((-1, true));
                }
            },
        };
        match tokio::time::timeout_at(deadline, st.lac.above(after)).await {
            Ok(l) => Ok((l, false)),
            Err(_) => Ok((st.lac.get(), true)),
        }
    }

    /// Makes the store refuse adds (disk guard, operator) with `reason`, or accept them again.
    pub fn set_read_only(&self, reason: Option<String>) {
        *self.inner.read_only.lock().expect("read-only lock") = reason;
    }

    /// Whether a journal write or fsync failed: fail-stop, every add is
    /// refused until the store is opened again.
    pub fn journal_failed(&self) -> bool {
        self.inner.journal.has_failed()
    }

    /// Why the store refuses adds, if it does (read-only, or a failed flush or journal).
    pub fn read_only(&self) -> Option<String> {
        if self.inner.journal.has_failed() {
            return Some("journal write failed".into());
        }
        let failed = self.inner.failed.lock().expect("failed lock").clone();
        failed.or_else(|| self.inner.read_only.lock().expect("read-only lock").clone())
    }

    /// Flushes the write cache to the entry log and checkpoints, now.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.inner.flush()
    }

    /// Payload bytes journaled and not yet in an entry log (the write cache).
    pub fn write_cache_bytes(&self) -> usize {
        let c = self.inner.caches.read().expect("caches lock");
        c.active.bytes() + c.flushing.as_ref().map_or(0, |f| f.bytes())
    }

    /// The store's counters.
    pub fn stats(&self) -> &StoreStats {
        &self.inner.stats
    }

    /// The journal's counters.
    pub fn journal_stats(&self) -> &journal::JournalStats {
        self.inner.journal.stats()
    }

    /// Stops the flusher, closes the journal (every queued record synced and
    /// its completion run), flushes, and closes the index. When it returns,
    /// no thread of the store runs and every lock it took is released, even
    /// while callers still hold futures of adds or other handles on the
    /// store: the directories can be opened again at once (a restart in
    /// the same process). Every later operation fails. Idempotent; drop
    /// calls it.
    pub fn close(&self) {
        drop(self.inner.flush_tx.lock().expect("flush tx lock").take());
        if let Some(t) = self.flusher.lock().expect("flusher lock").take() {
            let _ = t.join();
        }
        self.inner.journal.close();
        if let Err(e) = self.inner.flush() {
            if !matches!(e, StorageError::IndexClosed) {
                tracing::warn!(error = %e, "final flush failed; the journal still holds the entries");
            }
        }
        // Adds still waiting for room in the write cache give up now.
        self.inner.budget.close();
        if let Err(e) = self.inner.index.close() {
            tracing::error!(error = %e, "closing the ledger index");
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

/// Writes `path` durably: the file synced, then its directory.
fn write_marker(path: &Path) -> Result<(), StorageError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| StorageError::io(path, e))?;
    f.write_all(b"damage found (journal or index): integrity check pending\n")
        .map_err(|e| StorageError::io(path, e))?;
    f.sync_all().map_err(|e| StorageError::io(path, e))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| StorageError::io(dir, e))
}

struct Unpark<'a>(&'a AtomicUsize);

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inner {
    fn check_add(&self, entry: &Entry) -> Result<(), StorageError> {
        if entry.payload.len() > self.config.max_entry_bytes {
            return Err(StorageError::TooLarge(entry.payload.len(), self.config.max_entry_bytes));
        }
        if !entry.digest_ok() {
            return Err(StorageError::DigestMismatch(entry.ledger_id, entry.entry_id));
        }
        if let Some(why) = self.failed.lock().expect("failed lock").clone() {
            return Err(StorageError::ReadOnly(why));
        }
        if let Some(why) = self.read_only.lock().expect("read-only lock").clone() {
            return Err(StorageError::ReadOnly(why));
        }
        Ok(())
    }

    /// Checks the fences of the adds' ledgers and queues their journal
    /// records as one request, atomically with respect to fences of those
    /// ledgers (an add and a fence of one ledger are ordered in the
    /// journal). `accepted` hold their budget permits. A refused add gets its result in `results`
    /// and its permits back; returns the slots queued and their completion
    /// (`None`: nothing was queued).
    #[allow(clippy::type_complexity)]
    fn enqueue_many(
        self: &Arc<Self>,
        accepted: Vec<Accepted>,
        results: &mut [Option<Result<(), StorageError>>],
    ) -> Option<(Vec<usize>, oneshot::Receiver<Result<(), StorageError>>)> {
        // Each ledger once, its fence lock taken in id order: fence() takes
        // one lock at a time, so this order cannot deadlock.
        let mut ids: Vec<u64> = accepted.iter().map(|a| a.entry.ledger_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let states: Vec<Arc<LedgerState>> = ids.iter().map(|id| self.ledger_or_create(*id)).collect();
        let guards: Vec<std::sync::MutexGuard<'_, bool>> =
            states.iter().map(|st| st.fence.lock().expect("fence lock")).collect();
        let mut records = Vec::with_capacity(accepted.len());
        let mut landed = Vec::with_capacity(accepted.len());
        let mut slots = Vec::with_capacity(accepted.len());
        for a in accepted {
            let at = ids.binary_search(&a.entry.ledger_id).expect("listed");
            if *guards[at] && !a.recovery {
                self.budget.add_permits(a.kib);
                results[a.slot] = Some(Err(StorageError::Fenced(a.entry.ledger_id)));
                continue;
            }
            records.push(Record::Entry {
                ledger_id: a.entry.ledger_id,
                entry_id: a.entry.entry_id,
                last_add_confirmed: a.entry.last_add_confirmed,
                ledger_length: a.entry.ledger_length,
                crc32c: a.entry.crc32c,
                payload: a.entry.payload.clone(),
            });
            slots.push(a.slot);
            landed.push((a.entry, a.kib, states[at].clone()));
        }
        if records.is_empty() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let inner = self.clone();
        self.journal.append_many(
            records,
            Box::new(move |res| {
                let out = match res {
                    Ok(pos) => {
                        inner.apply_entries(pos, landed);
                        Ok(())
                    }
                    Err(e) => {
                        inner.budget.add_permits(landed.iter().map(|(_, kib, _)| kib).sum());
                        Err(e)
                    }
                };
                let _ = tx.send(out);
            }),
        );
        drop(guards);
        Some((slots, rx))
    }

    fn ledger(&self, id: u64) -> Option<Arc<LedgerState>> {
        self.ledgers.read().expect("ledgers lock").get(&id).cloned()
    }

    fn ledger_or_create(&self, id: u64) -> Arc<LedgerState> {
        if let Some(st) = self.ledger(id) {
            return st;
        }
        let st = self
            .ledgers
            .write()
            .expect("ledgers lock")
            .entry(id)
            .or_insert_with(|| LedgerState::new(LedgerRecord::default()))
            .clone();
        self.appeared.notify_waiters();
        st
    }

    /// On the journal thread, in journal order: these entries are durable,
    /// the last of them ending at `pos`. Into the write cache under one
    /// lock, then each ledger's LAC.
    fn apply_entries(&self, pos: JournalPos, entries: Vec<(Entry, usize, Arc<LedgerState>)>) {
        let n = entries.len() as u64;
        let mut marks = Vec::with_capacity(entries.len());
        let full = {
            let mut c = self.caches.write().expect("caches lock");
            for (mut entry, kib, st) in entries {
                marks.push((entry.last_add_confirmed, entry.ledger_id, st));
                // The payload arrived as a slice of a network receive buffer; held in the
                // cache it would pin that whole buffer until the next flush. A copy of
                // the entry's own bytes keeps the cache's memory what its bound says.
                entry.payload = bytes::Bytes::copy_from_slice(&entry.payload);
                c.active.insert(entry);
                c.active_kib += kib;
            }
            c.applied = c.applied.max(pos);
            c.active.bytes() >= self.config.flush_bytes.min(self.config.write_cache_bytes / 2)
        };
        for (lac, entry_ledger, st) in marks {
            st.raise_lac(lac);
            st.dirty.store(true, Ordering::Release);
            if st.dropped.load(Ordering::Acquire) {
                // Deleted while this add was in the journal: visible again, so
                // that the next GC pass finds and drops it.
                let mut ledgers = self.ledgers.write().expect("ledgers lock");
                let cur = ledgers.entry(entry_ledger).or_insert_with(|| st.clone());
                cur.dirty.store(true, Ordering::Release);
                st.dropped.store(false, Ordering::Release);
                self.appeared.notify_waiters();
            }
        }
        self.stats.adds.fetch_add(n, Ordering::Relaxed);
        if full {
            if let Some(tx) = self.flush_tx.lock().expect("flush tx lock").as_ref() {
                let _ = tx.send(FlushCmd::Now(None));
            }
        }
    }

    fn flush_loop(&self, rx: mpsc::Receiver<FlushCmd>) {
        loop {
            let reply = match rx.recv_timeout(self.config.flush_interval) {
                Ok(FlushCmd::Now(reply)) => reply,
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let flushed_before = self.stats.flushed_entries.load(Ordering::Relaxed);
            let res = self.flush();
            if let Some(after) = self.config.after_flush {
                // Only after a flush that moved entries: an idle bookie's
                // flusher wakes every interval with nothing to give back.
                if self.stats.flushed_entries.load(Ordering::Relaxed) != flushed_before {
                    after();
                }
            }
            let mut failed = self.failed.lock().expect("failed lock");
            match &res {
                Err(e) => {
                    tracing::error!(error = %e, "flush failed; refusing adds until a flush succeeds");
                    *failed = Some(format!("flush failed: {e}"));
                }
                Ok(()) => *failed = None,
            }
            drop(failed);
            if let Some(r) = reply {
                let _ = r.send(res.map_err(|e| e.to_string()));
            }
        }
    }

    /// Records damage found in the index (a read's, or a flush's that set a
    /// damaged block aside): logged once, and the integrity check made
    /// pending. Returns the error.
    fn note_index_damage(&self, e: StorageError) -> StorageError {
        if matches!(e, StorageError::Corrupt(_)) && !self.index_damaged.swap(true, Ordering::AcqRel) {
            tracing::error!(error = %e, "the index is damaged: reads that meet the damage fail, and the data-integrity check runs at the next start");
            if let Some(marker) = &self.config.damage_marker {
                if let Err(w) = write_marker(marker) {
                    tracing::error!(error = %w, "could not record the pending integrity check");
                }
            }
        }
        e
    }

    /// Moves the write cache into an entry log and commits the index and the
    /// checkpoint. One flusher at a time (the flusher thread, or open/close).
    fn flush(&self) -> Result<(), StorageError> {
        let _flush = self.flush_lock.lock().expect("flush lock");
        let (gen, checkpoint, kib) = {
            let mut c = self.caches.write().expect("caches lock");
            if c.flushing.is_some() {
                return Ok(()); // another flush is in progress
            }
            let gen = Arc::new(std::mem::take(&mut c.active));
            c.flushing = Some(gen.clone());
            let kib = std::mem::take(&mut c.active_kib);
            (gen, c.applied, kib)
        };
        // Ledger records after the swap: every fence and LAC the generation's
        // records imply is set in memory by now (fences even before they are durable).
        let dirty: Vec<(u64, LedgerRecord)> = self
            .ledgers
            .read()
            .expect("ledgers lock")
            .iter()
            .filter(|(_, st)| st.dirty.swap(false, Ordering::AcqRel))
            .map(|(id, st)| (*id, st.record()))
            .collect();
        let result = (|| {
            let entries: Vec<&Entry> = gen.iter().collect();
            let locs = if entries.is_empty() { Vec::new() } else { self.logs.append_batch(&entries)? };
            let batch = IndexBatch {
                locations: entries.iter().zip(locs).map(|(e, l)| (e.ledger_id, e.entry_id, l)).collect(),
                ledgers: dirty.clone(),
                checkpoint: Some(checkpoint),
            };
            self.index.commit(&batch)?;
            for d in self.index.take_damage() {
                self.note_index_damage(StorageError::Corrupt(d));
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.caches.write().expect("caches lock").flushing = None;
                self.budget.add_permits(kib);
                self.journal.checkpoint(checkpoint);
                self.stats.flushes.fetch_add(1, Ordering::Relaxed);
                self.stats.flushed_entries.fetch_add(gen.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                // Nothing is lost (the journal still has it all, no checkpoint
                // moved): put the generation back so it stays readable and is
                // retried, and mark the ledgers dirty again.
                let mut c = self.caches.write().expect("caches lock");
                let mut merged = WriteCache::default();
                for entry in gen.iter() {
                    merged.insert(entry.clone());
                }
                for entry in c.active.iter() {
                    merged.insert(entry.clone());
                }
                c.active = merged;
                c.active_kib += kib;
                c.flushing = None;
                let ledgers = self.ledgers.read().expect("ledgers lock");
                for (id, _) in &dirty {
                    if let Some(st) = ledgers.get(id) {
                        st.dirty.store(true, Ordering::Release);
                    }
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #20 item 5: a read that meets damage in the index fails with
    /// Corrupt (no panic, no allocation sized by the damage), and the
    /// data-integrity check is made pending, as for journal damage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn index_damage_fails_the_read_and_makes_the_integrity_check_pending() {
        let t = tempfile::tempdir().unwrap();
        let marker = t.path().join("INTEGRITY_CHECK_PENDING");
        let mut config = StoreConfig::new(t.path().join("journal"), t.path().join("ledgers"));
        config.damage_marker = Some(marker.clone());
        let store = Store::open(config).unwrap();
        for e in 0..3u64 {
            let entry = Entry::sealed(5, e, e as i64 - 1, bytes::Bytes::from(vec![e as u8; 64]));
            store.add(entry, false).await.unwrap();
        }
        store.flush().unwrap();
        // The block's last run now claims a 4 GiB record.
        let mut block = store.inner.index.raw_block(5, 0).expect("ledger 5's block");
        let n = block.len();
        block[n - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
        store.inner.index.damage(&SledIndex::block_key_of(5, 0), &block);
        assert!(!marker.exists());
        let err = store.read(5, 2).unwrap_err();
        assert!(matches!(err, StorageError::Corrupt(_)), "{err}");
        assert!(store.index_damaged());
        assert!(marker.exists(), "the integrity check is pending");
    }

    /// One damaged index block must not stop the bookie: a later add to the
    /// same block is flushed (before, every flush failed on it and the store
    /// refused adds for good, and the flush at open failed too), the lost
    /// entries still answer Corrupt, never "no such entry", and the store
    /// opens again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_add_after_index_damage_is_flushed_and_the_store_opens_again() {
        let t = tempfile::tempdir().unwrap();
        let marker = t.path().join("INTEGRITY_CHECK_PENDING");
        let config = || {
            let mut c = StoreConfig::new(t.path().join("journal"), t.path().join("ledgers"));
            c.damage_marker = Some(marker.clone());
            c
        };
        let entry = |e: u64| Entry::sealed(5, e, e as i64 - 1, bytes::Bytes::from(vec![e as u8; 64]));
        {
            let store = Store::open(config()).unwrap();
            for e in 0..3u64 {
                store.add(entry(e), false).await.unwrap();
            }
            store.flush().unwrap();
            let block = store.inner.index.raw_block(5, 0).expect("ledger 5's block");
            store.inner.index.damage(&SledIndex::block_key_of(5, 0), &block[..block.len() - 1]);
            store.add(entry(3), false).await.unwrap();
            store.flush().unwrap();
            assert!(marker.exists(), "the integrity check is pending");
            assert_eq!(store.read(5, 3).unwrap().entry_id, 3);
            assert!(matches!(store.read(5, 1), Err(StorageError::Corrupt(_))));
            store.add(entry(4), false).await.unwrap();
            store.close();
        }
        let store = Store::open(config()).unwrap();
        assert_eq!(store.read(5, 4).unwrap().entry_id, 4);
        assert!(matches!(store.read(5, 2), Err(StorageError::Corrupt(_))));
    }
}
