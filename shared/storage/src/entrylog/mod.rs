//! Entry logs: shared append-only files holding every ledger's entries,
//! written in batches sorted by ledger (so a ledger's entries sit together),
//! read with positioned reads.
//!
//! ```text
//! file:   "QUIRELOG" | version u32 | log id u32 | record* ...
//! record: len u32 | ledger u64 | entry u64 | lac i64 | ledger length u64 | crc32c u32 | payload
//! ```
//! `len` counts everything after itself. The record keeps the writer's digest,
//! which is checked again on every read: a damaged copy is reported as
//! corrupt, never as absent.

pub mod buffers;
pub mod read_cache;
pub mod write_cache;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{BufMut, Bytes};
use quire_proto::v1::Entry;

use crate::error::StorageError;
use crate::index::Location;

const MAGIC: &[u8; 8] = b"QUIRELOG";
const VERSION: u32 = 2;
const FILE_HEADER_BYTES: u64 = 16;
/// Bytes of a record before its payload.
pub const RECORD_HEADER_BYTES: usize = 4 + 8 + 8 + 8 + 8 + 4;
/// The most [`EntryLogs::read_region`] reads at once: compaction's slices
/// (a few MiB) plus one record of the largest size.
pub const REGION_MAX_BYTES: usize = 2 * RECORD_MAX_BYTES as usize;
/// No record is longer: far above any entry a request frame can carry
/// (`quire_proto::codec::MAX_FRAME_BYTES_DEFAULT`, about 5 MiB). A length
/// past it, in the index or a log, is damage: refused before anything is
/// allocated for it (issue #20 item 5).
pub const RECORD_MAX_BYTES: u32 = 64 << 20;

/// An entry log file's name: `entrylog-<id, 8 hex digits>.log`.
pub fn log_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("entrylog-{id:08x}.log"))
}

fn parse_log_name(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("entrylog-")?.strip_suffix(".log")?;
    if hex.len() != 8 {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Bytes of `e`'s record.
pub fn record_len(e: &Entry) -> usize {
    RECORD_HEADER_BYTES + e.payload.len()
}

/// A flush buffer larger than this is not kept for the next flush.
const KEEP_FLUSH_BUFFER_BYTES: usize = 16 * 1024 * 1024;

/// Drops the cached pages of `file` in `[from, to)` (advice: a failure costs
/// only the memory it would have saved).
/// `to == u64::MAX`: to the end of the file.
fn release_pages(file: &File, from: u64, to: u64) {
    let len = match to {
        u64::MAX => None,
        _ if to <= from => return,
        _ => std::num::NonZeroU64::new(to - from),
    };
    if let Err(e) = rustix::fs::fadvise(file, from, len, rustix::fs::Advice::DontNeed) {
        tracing::debug!(error = %e, "could not drop an entry log's cached pages");
    }
}

/// Encodes one entry's record.
pub fn encode_record(e: &Entry, out: &mut impl BufMut) {
    out.put_u32((RECORD_HEADER_BYTES - 4 + e.payload.len()) as u32);
    out.put_u64(e.ledger_id);
    out.put_u64(e.entry_id);
    out.put_i64(e.last_add_confirmed);
    out.put_u64(e.ledger_length);
    out.put_u32(e.crc32c);
    out.put_slice(&e.payload);
}

/// Decodes a record read from `loc`, checking it is the entry asked for and
/// that its digest holds.
pub fn decode_record(buf: Bytes, ledger_id: u64, entry_id: u64) -> Result<Entry, StorageError> {
    let corrupt = |why: String| StorageError::CorruptEntry(ledger_id, entry_id, why);
    if buf.len() < RECORD_HEADER_BYTES {
        return Err(corrupt(format!("record of {} bytes is shorter than its header", buf.len())));
    }
    let len = u32::from_be_bytes(buf[0..4].try_into().expect("4")) as usize;
    if len + 4 != buf.len() {
        return Err(corrupt(format!("record length {len} does not match the index ({} bytes)", buf.len())));
    }
    let e = Entry {
        ledger_id: u64::from_be_bytes(buf[4..12].try_into().expect("8")),
        entry_id: u64::from_be_bytes(buf[12..20].try_into().expect("8")),
        last_add_confirmed: i64::from_be_bytes(buf[20..28].try_into().expect("8")),
        ledger_length: u64::from_be_bytes(buf[28..36].try_into().expect("8")),
        crc32c: u32::from_be_bytes(buf[36..40].try_into().expect("4")),
        payload: buf.slice(RECORD_HEADER_BYTES..),
    };
    if e.ledger_id != ledger_id || e.entry_id != entry_id {
        return Err(corrupt(format!("record holds entry {}/{}", e.ledger_id, e.entry_id)));
    }
    if !e.digest_ok() {
        return Err(corrupt("CRC32C mismatch".into()));
    }
    Ok(e)
}

struct Current {
    id: u32,
    file: Arc<File>,
    written: u64,
    /// Bytes from the file's start whose pages were let go of (see
    /// [`EntryLogs::page_cache_behind_bytes`]).
    released: u64,
}

/// Pages are released whole: the partly written last page stays cached, so
/// the next append to it never reads it back from disk first.
const PAGE_BYTES: u64 = 4096;

/// The set of entry log files in a directory.
pub struct EntryLogs {
    dir: PathBuf,
    max_file_bytes: u64,
    current: Mutex<Current>,
    files: RwLock<HashMap<u32, Arc<File>>>,
    buffers: Arc<buffers::BufferPool>,
    /// The flush buffer, kept for the next [`EntryLogs::append_batch`]
    /// (locked after `current`).
    scratch: Mutex<Vec<u8>>,
    /// How much of what was appended last stays in the page cache; older,
    /// synced bytes are dropped from it (`None`: nothing is dropped). Each
    /// flush otherwise takes fresh pages and the page cache only grows;
    /// recycling its own pages makes the flusher's page-cache copy several
    /// times cheaper (8x on the benchmark VM, where a page the guest has not
    /// touched lately costs a fault in the host: docs/benchmarks.md). Reads
    /// of older entries then come from the disk, through the read-ahead
    /// cache, as they would once the page cache had turned over.
    page_cache_behind_bytes: Option<u64>,
}

impl EntryLogs {
    /// Opens the directory; new entries go to a fresh file after every existing one
    /// (a file's tail after a crash may hold unindexed bytes: never appended to again).
    pub fn open(
        dir: &Path,
        max_file_bytes: u64,
        page_cache_behind_bytes: Option<u64>,
    ) -> Result<EntryLogs, StorageError> {
        quire_durable::create_dir_all_durable(dir).map_err(|e| StorageError::io(dir, e))?;
        let mut files = HashMap::new();
        let mut max_id = 0;
        for e in std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
            let e = e.map_err(|e| StorageError::io(dir, e))?;
            if let Some(id) = e.file_name().to_str().and_then(parse_log_name) {
                let f = File::open(e.path()).map_err(|err| StorageError::io(&e.path(), err))?;
                files.insert(id, Arc::new(f));
                max_id = max_id.max(id);
            }
        }
        let current = Self::create(dir, max_id + 1)?;
        files.insert(current.id, current.file.clone());
        Ok(EntryLogs {
            dir: dir.to_path_buf(),
            max_file_bytes,
            current: Mutex::new(current),
            files: RwLock::new(files),
            buffers: Arc::default(),
            scratch: Mutex::default(),
            page_cache_behind_bytes,
        })
    }

    fn create(dir: &Path, id: u32) -> Result<Current, StorageError> {
        let path = log_path(dir, id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        let mut header = Vec::with_capacity(FILE_HEADER_BYTES as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_be_bytes());
        header.extend_from_slice(&id.to_be_bytes());
        file.write_all_at(&header, 0).map_err(|e| StorageError::io(&path, e))?;
        file.sync_all().map_err(|e| StorageError::io(&path, e))?;
        crate::journal::segment::sync_dir(dir).map_err(|e| StorageError::io(dir, e))?;
        Ok(Current { id, file: Arc::new(file), written: FILE_HEADER_BYTES, released: 0 })
    }

    /// Appends the entries (in the order given) and syncs. Returns each entry's location.
    /// Called by one flusher at a time.
    pub fn append_batch(&self, entries: &[&Entry]) -> Result<Vec<Location>, StorageError> {
        let mut cur = self.current.lock().expect("entry log lock");
        // One buffer, sized once and kept from flush to flush: grown by
        // doubling it was copied at each step, and a fresh multi-megabyte
        // buffer is fresh pages the kernel zeroes (both were in the
        // flusher's profile).
        let mut scratch = self.scratch.lock().expect("flush buffer lock");
        let buf = &mut *scratch;
        buf.clear();
        buf.reserve(entries.iter().map(|e| record_len(e)).sum());
        let mut locs = Vec::with_capacity(entries.len());
        // Every file this batch rotates away from (a batch larger than a
        // file rotates more than once) is synced before the batch returns.
        let mut rotated: Vec<(u32, Arc<File>)> = Vec::new();
        // Where the part of `buf` not yet written to a file starts.
        let mut start = 0;
        for e in entries {
            let before = buf.len();
            encode_record(e, buf);
            let len = (buf.len() - before) as u32;
            if cur.written + (buf.len() - start) as u64 > self.max_file_bytes && cur.written > FILE_HEADER_BYTES {
                // Rotate: write what is gathered to the old file, then start a new one.
                let path = log_path(&self.dir, cur.id);
                cur.file.write_all_at(&buf[start..before], cur.written).map_err(|err| StorageError::io(&path, err))?;
                start = before;
                rotated.push((cur.id, cur.file.clone()));
                let next = Self::create(&self.dir, cur.id + 1)?;
                self.files.write().expect("files lock").insert(next.id, next.file.clone());
                *cur = next;
            }
            let offset = cur.written + (before - start) as u64;
            locs.push(Location { log_id: cur.id, offset, len });
        }
        for (id, old) in rotated {
            old.sync_data().map_err(|e| StorageError::io(&log_path(&self.dir, id), e))?;
            if self.page_cache_behind_bytes.is_some() {
                release_pages(&old, 0, u64::MAX);
            }
        }
        let path = log_path(&self.dir, cur.id);
        let tail = &buf[start..];
        cur.file.write_all_at(tail, cur.written).map_err(|e| StorageError::io(&path, e))?;
        crate::failpoint::slow_disk();
        cur.file.sync_data().map_err(|e| StorageError::io(&path, e))?;
        cur.written += tail.len() as u64;
        if let Some(behind) = self.page_cache_behind_bytes {
            // Synced above: clean pages, which the kernel really drops.
            let upto = cur.written.saturating_sub(behind) / PAGE_BYTES * PAGE_BYTES;
            if upto > cur.released {
                release_pages(&cur.file, cur.released, upto);
                cur.released = upto;
            }
        }
        if buf.capacity() > KEEP_FLUSH_BUFFER_BYTES {
            *buf = Vec::new();
        }
        Ok(locs)
    }

    /// Reads the record at `loc` (blocking I/O) and checks it.
    pub fn read(&self, loc: Location, ledger_id: u64, entry_id: u64) -> Result<Entry, StorageError> {
        let file = self.files.read().expect("files lock").get(&loc.log_id).cloned();
        let Some(file) = file else {
            // Compaction moved what the caller looked up: it looks again.
            return Err(StorageError::LogRemoved(loc.log_id));
        };
        if loc.len > RECORD_MAX_BYTES {
            return Err(StorageError::CorruptEntry(
                ledger_id,
                entry_id,
                format!("the index gives a record of {} bytes (at most {RECORD_MAX_BYTES})", loc.len),
            ));
        }
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                StorageError::CorruptEntry(ledger_id, entry_id, format!("entry log {} is truncated", loc.log_id))
            }
            _ => StorageError::io(&log_path(&self.dir, loc.log_id), e),
        })?;
        decode_record(Bytes::from(buf), ledger_id, entry_id)
    }

    /// The id of the file new entries go to.
    pub fn current_id(&self) -> u32 {
        self.current.lock().expect("entry log lock").id
    }

    /// Every entry log and its size in bytes (header included).
    pub fn sizes(&self) -> Vec<(u32, u64)> {
        let (cur_id, cur_written) = {
            let c = self.current.lock().expect("entry log lock");
            (c.id, c.written)
        };
        let files = self.files.read().expect("files lock");
        let mut out: Vec<(u32, u64)> = files
            .iter()
            .map(|(id, f)| {
                let len = if *id == cur_id { cur_written } else { f.metadata().map(|m| m.len()).unwrap_or(0) };
                (*id, len)
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Bytes of a file before its first record.
    pub const fn header_bytes() -> u64 {
        FILE_HEADER_BYTES
    }

    /// Reads `len` bytes at `offset` of log `id` (blocking I/O).
    pub fn read_region(&self, id: u32, offset: u64, len: usize) -> Result<Bytes, StorageError> {
        // Callers read a bounded slice of records; more is a length from damage.
        if len > REGION_MAX_BYTES {
            return Err(StorageError::Corrupt(format!(
                "a read of {len} bytes of entry log {id} (at most {REGION_MAX_BYTES}): the index is damaged"
            )));
        }
        let file = self.files.read().expect("files lock").get(&id).cloned().ok_or(StorageError::LogRemoved(id))?;
        let mut buf = self.buffers.take(len);
        file.read_exact_at(buf.as_mut_slice(), offset).map_err(|e| StorageError::io(&log_path(&self.dir, id), e))?;
        Ok(buf.freeze())
    }

    /// Removes a sealed log: forgotten here first (readers holding its
    /// handle finish their reads; later look-ups get `LogRemoved`), then
    /// unlinked, then the directory synced so the removal is durable. The
    /// caller guarantees the index references nothing in it.
    pub fn remove(&self, id: u32) -> Result<u64, StorageError> {
        assert_ne!(id, self.current_id(), "the current entry log is never removed");
        let file = self.files.write().expect("files lock").remove(&id);
        let len = file.as_ref().and_then(|f| f.metadata().ok()).map(|m| m.len()).unwrap_or(0);
        drop(file);
        let path = log_path(&self.dir, id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&path, e)),
        }
        crate::journal::segment::sync_dir(&self.dir).map_err(|e| StorageError::io(&self.dir, e))?;
        Ok(len)
    }

    /// Reads up to `max_bytes` of consecutive records starting at `loc`, for
    /// read-ahead: returns the entries of `ledger_id` that follow it in the file.
    pub fn read_ahead(&self, loc: Location, ledger_id: u64, max_bytes: usize) -> Vec<Entry> {
        let Some(file) = self.files.read().expect("files lock").get(&loc.log_id).cloned() else {
            return Vec::new();
        };
        let mut buf = vec![0u8; max_bytes];
        let n = match file.read_at(&mut buf, loc.offset) {
            Ok(n) => n,
            Err(_) => return Vec::new(),
        };
        buf.truncate(n);
        let buf = Bytes::from(buf);
        let mut out = Vec::new();
        let mut off = 0usize;
        while off + RECORD_HEADER_BYTES <= buf.len() {
            let len = u32::from_be_bytes(buf[off..off + 4].try_into().expect("4")) as usize;
            if len < RECORD_HEADER_BYTES - 4 || off + 4 + len > buf.len() {
                break;
            }
            let rec = buf.slice(off..off + 4 + len);
            let l = u64::from_be_bytes(rec[4..12].try_into().expect("8"));
            let e = u64::from_be_bytes(rec[12..20].try_into().expect("8"));
            if l != ledger_id {
                break;
            }
            // Only entries whose digest holds are cached; a bad one is read (and
            // reported) on its own when asked for.
            match decode_record(rec, l, e) {
                Ok(entry) => out.push(entry),
                Err(_) => break,
            }
            off += 4 + len;
        }
        out
    }
}
