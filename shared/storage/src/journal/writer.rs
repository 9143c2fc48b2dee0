//! The journal's thread: gather records under the group-commit policy, write
//! them in one pwrite, fdatasync, then run their completions in order.
//!
//! A dedicated OS thread, not a tokio task: fdatasync blocks for up to
//! milliseconds, and records keep arriving (and queueing for the next batch)
//! while it does. That overlap is the group commit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::BytesMut;

use super::policy::{Decision, GroupCommit, GroupCommitPolicy};
use super::record::{encode_tail, reseal, Record};
use super::sector;
use super::segment::{list_segments, list_spares, segment_path, spare_path, sync_dir, Segment, HEADER_BYTES};
use super::{Completion, Journal, JournalPos};
use crate::error::StorageError;

/// Journal settings.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// Directory of the segments (ideally on its own device).
    pub dir: PathBuf,
    /// When to sync.
    pub policy: GroupCommitPolicy,
    /// A segment is closed and a new one started past this size.
    pub segment_bytes: u64,
    /// Zero-fill a new segment file this far ahead of the write position.
    pub prealloc_bytes: u64,
    /// Checkpointed segments kept for reuse (their files' blocks already
    /// written, so records overwrite them without zeros or metadata
    /// updates); more are deleted.
    pub spare_segments: usize,
}

impl JournalConfig {
    /// Defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalConfig {
            dir: dir.into(),
            policy: GroupCommitPolicy::default(),
            segment_bytes: 256 * 1024 * 1024,
            prealloc_bytes: 4 * 1024 * 1024,
            spare_segments: 2,
        }
    }
}

/// Counters of the journal's work.
#[derive(Debug)]
pub struct JournalStats {
    /// Records handed to the journal (synced or not yet): the queue's depth
    /// is this less `records`.
    pub appended: AtomicU64,
    /// Write + fdatasync time of each group commit, seconds.
    pub sync_seconds: quire_metrics::Histogram,
    /// Records per group commit.
    pub batch_records: quire_metrics::Histogram,
    /// fdatasyncs done.
    pub syncs: AtomicU64,
    /// Records made durable.
    pub records: AtomicU64,
    /// Bytes made durable.
    pub bytes: AtomicU64,
    /// Total time spent in write + fdatasync, microseconds.
    pub sync_us_total: AtomicU64,
    /// Longest write + fdatasync, microseconds.
    pub sync_us_max: AtomicU64,
    /// Segments deleted after checkpoints.
    pub segments_deleted: AtomicU64,
    /// Segments kept as spares after checkpoints.
    pub segments_spared: AtomicU64,
    /// Segments started in a spare's file (no zero-fill).
    pub segments_reused: AtomicU64,
}

impl Default for JournalStats {
    fn default() -> Self {
        JournalStats {
            appended: AtomicU64::new(0),
            sync_seconds: quire_metrics::Histogram::latency(),
            batch_records: quire_metrics::Histogram::new(quire_metrics::BATCH_SIZES),
            syncs: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            sync_us_total: AtomicU64::new(0),
            sync_us_max: AtomicU64::new(0),
            segments_deleted: AtomicU64::new(0),
            segments_spared: AtomicU64::new(0),
            segments_reused: AtomicU64::new(0),
        }
    }
}

enum Request {
    /// Records that go into one batch, with one completion (a lone
    /// `append` is a batch of one).
    AppendMany {
        records: Vec<Record>,
        enqueued_at: Instant,
        done: Completion,
    },
    Checkpoint(JournalPos),
}

/// The file-backed journal.
pub struct FileJournal {
    tx: Mutex<Option<Sender<Request>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    failed: Arc<AtomicBool>,
    stats: Arc<JournalStats>,
}

impl FileJournal {
    /// Starts a journal in `config.dir` whose new records go to a fresh
    /// segment after every existing one. Replay existing segments first
    /// ([`super::replay`]); this does not read them.
    pub fn start(config: JournalConfig) -> Result<FileJournal, StorageError> {
        quire_durable::create_dir_all_durable(&config.dir).map_err(|e| StorageError::io(&config.dir, e))?;
        let io = |e| StorageError::io(&config.dir, e);
        let segments = list_segments(&config.dir).map_err(io)?;
        let spares = list_spares(&config.dir).map_err(io)?;
        // Ids only grow, past every spare's too: a segment's records are
        // sealed with its id, and a reused file must never hold records
        // sealed for the id it gets.
        let next_id = segments.last().copied().max(spares.last().copied()).map_or(1, |l| l + 1);
        let stats = Arc::new(JournalStats::default());
        let mut spares = spares;
        let segment = open_segment(&config.dir, &mut spares, next_id, config.prealloc_bytes, &stats)?;
        let (tx, rx) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let mut w = Writer {
            dir: config.dir.clone(),
            segment_bytes: config.segment_bytes,
            prealloc_bytes: config.prealloc_bytes,
            max_spares: config.spare_segments,
            spares,
            segment,
            buf: BytesMut::with_capacity(1024 * 1024),
            pending: Vec::new(),
            gc: GroupCommit::new(config.policy),
            failed: failed.clone(),
            stats: stats.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || w.run(rx))
            .map_err(|e| StorageError::io(&config.dir, e))?;
        Ok(FileJournal { tx: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)), failed, stats })
    }

    /// The journal's counters.
    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }

    /// Whether a write or sync has failed (every append now fails).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Syncs what is queued, completes it, and stops the thread. Later appends fail.
    pub fn close(&self) {
        drop(self.tx.lock().expect("journal tx lock").take());
        if let Some(t) = self.thread.lock().expect("journal thread lock").take() {
            let _ = t.join();
        }
    }
}

impl Drop for FileJournal {
    fn drop(&mut self) {
        self.close();
    }
}

impl Journal for FileJournal {
    fn append(&self, record: Record, done: Completion) {
        self.append_many(vec![record], done);
    }

    fn append_many(&self, records: Vec<Record>, done: Completion) {
        if records.is_empty() {
            // Nothing to make durable; the position is not used by a caller
            // that appended nothing.
            done(Ok(JournalPos::default()));
            return;
        }
        self.stats.appended.fetch_add(records.len() as u64, Ordering::Relaxed);
        let req = Request::AppendMany { records, enqueued_at: Instant::now(), done };
        let sent = match self.tx.lock().expect("journal tx lock").as_ref() {
            Some(tx) => tx.send(req).map_err(|e| e.0),
            None => Err(req),
        };
        if let Err(Request::AppendMany { done, .. }) = sent {
            done(Err(StorageError::JournalClosed));
        }
    }

    fn checkpoint(&self, upto: JournalPos) {
        if let Some(tx) = self.tx.lock().expect("journal tx lock").as_ref() {
            let _ = tx.send(Request::Checkpoint(upto));
        }
    }
}

/// Segment `id`: in the newest spare's file if there is one (rather than a
/// new, zero-filled file), else in a new file.
fn open_segment(
    dir: &std::path::Path,
    spares: &mut Vec<u64>,
    id: u64,
    prealloc_bytes: u64,
    stats: &JournalStats,
) -> Result<Segment, StorageError> {
    while let Some(last) = spares.pop() {
        match Segment::reuse(dir, last, id, prealloc_bytes) {
            Ok(seg) => {
                stats.segments_reused.fetch_add(1, Ordering::Relaxed);
                return Ok(seg);
            }
            Err(e) => {
                // A spare holds nothing needed: drop it, make a new file.
                tracing::warn!(spare = last, error = %e, "could not reuse a spare journal segment; deleting it");
                let _ = std::fs::remove_file(spare_path(dir, last));
            }
        }
    }
    Segment::create(dir, id, prealloc_bytes).map_err(|e| StorageError::io(&segment_path(dir, id), e))
}

struct Writer {
    dir: PathBuf,
    segment_bytes: u64,
    prealloc_bytes: u64,
    max_spares: usize,
    /// Spares' last ids, ascending.
    spares: Vec<u64>,
    segment: Segment,
    buf: BytesMut,
    /// Encoded length, record count and completion of each gathered
    /// request, in order.
    pending: Vec<(usize, usize, Completion)>,
    gc: GroupCommit,
    failed: Arc<AtomicBool>,
    stats: Arc<JournalStats>,
}

impl Writer {
    fn run(&mut self, rx: Receiver<Request>) {
        let mut disconnected = false;
        loop {
            // Take whatever is queued now, without waiting.
            while !disconnected {
                match rx.try_recv() {
                    Ok(r) => {
                        self.take(r);
                        if self.gc.decide(Instant::now(), false) == Decision::Sync {
                            break;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => disconnected = true,
                }
            }
            match self.gc.decide(Instant::now(), true) {
                Decision::Sync => self.flush(),
                Decision::Idle if disconnected => return,
                Decision::Idle => match rx.recv() {
                    Ok(r) => self.take(r),
                    Err(_) => disconnected = true,
                },
                Decision::Gather { until } if !disconnected => {
                    match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                        Ok(r) => self.take(r),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => disconnected = true,
                    }
                }
                Decision::Gather { .. } => self.flush(),
            }
        }
    }

    fn take(&mut self, req: Request) {
        match req {
            Request::AppendMany { records, enqueued_at, done } => {
                if self.failed.load(Ordering::SeqCst) {
                    done(Err(StorageError::JournalFailed));
                    return;
                }
                // All in one batch: one completion cannot be half durable.
                let format = self.segment.format();
                let len: usize = records.iter().map(|r| r.encoded_len_in(format)).sum();
                if self.gc.would_overflow(len, records.len()) {
                    self.flush();
                }
                let now = Instant::now();
                for r in &records {
                    r.encode(&mut self.buf, self.segment.format());
                    self.gc.gathered(r.encoded_len_in(format), enqueued_at, now);
                }
                self.pending.push((len, records.len(), done));
            }
            Request::Checkpoint(upto) => self.delete_before(upto),
        }
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            self.gc.synced(std::time::Duration::ZERO);
            return;
        }
        let started = Instant::now();
        let result = self.write_and_sync();
        let took_us = started.elapsed().as_micros() as u64;
        let pending = std::mem::take(&mut self.pending);
        match result {
            Ok(base) => {
                self.stats.syncs.fetch_add(1, Ordering::Relaxed);
                let records: usize = pending.iter().map(|(_, n, _)| n).sum();
                self.stats.records.fetch_add(records as u64, Ordering::Relaxed);
                self.stats.bytes.fetch_add(self.buf.len() as u64, Ordering::Relaxed);
                self.stats.sync_us_total.fetch_add(took_us, Ordering::Relaxed);
                self.stats.sync_us_max.fetch_max(took_us, Ordering::Relaxed);
                self.stats.sync_seconds.observe(took_us as f64 / 1e6);
                self.stats.batch_records.observe(records as f64);
                // Each completion's position is the file offset just after
                // its last record (stamps skipped).
                let mut len_so_far = 0;
                for (len, _, done) in pending {
                    len_so_far += len;
                    let offset = sector::end_offset(base, len_so_far);
                    done(Ok(JournalPos { segment: self.segment.id(), offset }));
                }
            }
            Err(e) => {
                // fsync failure semantics: the page cache may have dropped the
                // dirty pages, so nothing in this batch can be called durable and
                // nothing after it either.
                tracing::error!(error = %e, "journal write failed; the journal refuses all further appends");
                self.failed.store(true, Ordering::SeqCst);
                for (_, _, done) in pending {
                    done(Err(StorageError::JournalFailed));
                }
            }
        }
        self.buf.clear();
        self.gc.synced(started.elapsed());
    }

    /// Writes the gathered batch after the current segment's last (rotating
    /// first if it would overflow) and syncs. Returns the offset of the
    /// batch's first sector.
    fn write_and_sync(&mut self) -> Result<u64, StorageError> {
        let records = self.buf.len();
        let need = Segment::batch_bytes(records + self.segment.format().tail_bytes());
        if self.segment.written() > HEADER_BYTES && self.segment.written() + need > self.segment_bytes {
            // The segment that ends here ends in its last batch, whole and
            // durable: nothing more to write to it.
            let next = self.segment.id() + 1;
            self.segment = open_segment(&self.dir, &mut self.spares, next, self.prealloc_bytes, &self.stats)?;
            reseal(&mut self.buf, self.segment.format());
        }
        let path = segment_path(&self.dir, self.segment.id());
        encode_tail(&mut self.buf, self.segment.format());
        // A bookie that dies before any byte of a batch reaches its journal
        // (the recovery tests' member that never stored a write-back).
        crate::failpoint::hit("journal.before_write");
        let written = self.segment.append_batch(&self.buf);
        self.buf.truncate(records);
        let base = written.map_err(|e| StorageError::io(&path, e))?;
        self.segment.sync().map_err(|e| StorageError::io(&path, e))?;
        Ok(base)
    }

    /// Retires segments whose every record is at or before `upto`: the
    /// newest become spares (up to `max_spares`), the rest are deleted.
    fn delete_before(&mut self, upto: JournalPos) {
        let Ok(ids) = list_segments(&self.dir) else { return };
        let mut changed = false;
        for id in ids.into_iter().rev().filter(|id| *id < upto.segment && *id != self.segment.id()) {
            let path = segment_path(&self.dir, id);
            if self.spares.len() < self.max_spares {
                match std::fs::rename(&path, spare_path(&self.dir, id)) {
                    Ok(()) => {
                        changed = true;
                        self.spares.push(id);
                        self.spares.sort_unstable();
                        self.stats.segments_spared.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(e) => tracing::warn!(segment = id, error = %e, "could not keep a journal segment as a spare"),
                }
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    changed = true;
                    self.stats.segments_deleted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(segment = id, error = %e, "could not delete checkpointed journal segment"),
            }
        }
        // A failed directory fsync is fail-stop like a failed fdatasync:
        // after it the kernel may report success to the next fsync without
        // having written the directory ("fsyncgate"), and the next segment's
        // durability rests on that directory.
        if changed {
            if let Err(e) = sync_dir(&self.dir) {
                tracing::error!(error = %e, dir = %self.dir.display(), "journal directory fsync failed; the journal refuses all further appends");
                self.failed.store(true, Ordering::SeqCst);
            }
        }
    }
}
