//! Range reads: the entries of a ledger this bookie holds in an id range,
//! for the batch read RPC (ReadEntries).
//!
//! A flush writes each ledger's entries back to back in one entry log, so a
//! range of them is a few byte regions on disk. The index is walked once for
//! the range ([`LedgerIndex::locations`]), neighbouring records are merged
//! into regions, and each region is one positioned read — instead of a look-up
//! and a read per entry. Entries not flushed yet come from the write cache.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use quire_proto::v1::Entry;

use super::Store;
use crate::entrylog::decode_record;
use crate::error::StorageError;
use crate::index::{LedgerIndex, Location};

/// Most entries one range read returns.
pub const RANGE_ENTRIES_MAX: usize = 8192;
/// Most bytes one range read returns (payload plus [`ENTRY_OVERHEAD_BYTES`]
/// each), bar its first entry: a response stays within one frame.
pub const RANGE_BYTES_MAX: usize = 4 << 20;
pub use quire_proto::ENTRY_OVERHEAD_BYTES;
/// Records this close together are read in one region: reading a gap (the
/// other ledgers' entries between two of this one's) is cheaper than another
/// system call for small gaps.
const REGION_GAP_BYTES: u64 = 64 * 1024;
/// A region is cut at this size (one response's worth).
const REGION_BYTES_MAX: u64 = 8 << 20;

/// Which ids of a range are wanted: all, or a stripe (the ids whose
/// remainder by `modulus` is a set bit of `residues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    modulus: u32,
    residues: u64,
}

impl Stripe {
    /// Every id.
    pub const ALL: Stripe = Stripe { modulus: 0, residues: 0 };

    /// A stripe; `None` unless `1 <= modulus <= 64` and some residue below
    /// `modulus` is set. `modulus` 0 is [`Stripe::ALL`].
    pub fn new(modulus: u32, residues: u64) -> Option<Stripe> {
        match modulus {
            0 => Some(Stripe::ALL),
            1..=64 => {
                let mask = if modulus == 64 { u64::MAX } else { (1u64 << modulus) - 1 };
                (residues & mask != 0).then_some(Stripe { modulus, residues: residues & mask })
            }
            _ => None,
        }
    }

    /// Whether `entry_id` is wanted.
    pub fn holds(&self, entry_id: u64) -> bool {
        self.modulus == 0 || (self.residues >> (entry_id % self.modulus as u64)) & 1 == 1
    }

    /// How many ids one wanted id stands for at most, on average, among the
    /// ids held (a look-up walks this many more).
    fn spread(&self) -> usize {
        if self.modulus == 0 {
            1
        } else {
            (self.modulus as usize).div_ceil(self.residues.count_ones() as usize)
        }
    }
}

/// One range read's request.
#[derive(Debug, Clone, Copy)]
pub struct RangeQuery {
    /// The ledger.
    pub ledger_id: u64,
    /// First id of the range.
    pub first: u64,
    /// Last id of the range (inclusive).
    pub last: u64,
    /// Which ids of it.
    pub stripe: Stripe,
    /// At most this many entries (capped at [`RANGE_ENTRIES_MAX`]).
    pub max_entries: usize,
    /// At most this many bytes (capped at [`RANGE_BYTES_MAX`]), bar the first entry.
    pub max_bytes: usize,
}

/// What a range read found.
#[derive(Debug, Default)]
pub struct RangeRead {
    /// The entries, in entry order, each one's digest checked.
    pub entries: Vec<Entry>,
    /// Ids held whose copy is damaged (a bad digest, a short record).
    pub corrupt: Vec<u64>,
    /// Where the read stopped at a bound: ids from here on were not looked
    /// at. `None`: the whole range was.
    pub next: Option<u64>,
}

/// Where one wanted entry comes from.
enum Source {
    Cached(Entry),
    Stored(Location),
}

impl Store {
    /// Reads the entries of a ledger this store holds in `q.first..=q.last`
    /// (in `q.stripe`), in entry order, up to `q.max_entries` and
    /// `q.max_bytes` (blocking I/O: call from a blocking context). A ledger
    /// it has never seen is `NoSuchLedger`; a range it holds nothing of is
    /// an empty answer.
    pub fn read_range(&self, q: RangeQuery) -> Result<RangeRead, StorageError> {
        if q.first > q.last {
            return Ok(RangeRead::default());
        }
        // Compaction may remove a log between the look-up and the read: the
        // next look-up finds where its entries moved (as `read` does).
        for _ in 0..4 {
            match self.read_range_once(q) {
                Err(StorageError::LogRemoved(_)) => continue,
                r => return r,
            }
        }
        Err(StorageError::Corrupt(format!(
            "a range read of ledger {} kept meeting entry logs removed under it",
            q.ledger_id
        )))
    }

    fn read_range_once(&self, q: RangeQuery) -> Result<RangeRead, StorageError> {
        let inner = &self.inner;
        let max_entries = q.max_entries.clamp(1, RANGE_ENTRIES_MAX);
        let max_bytes = q.max_bytes.clamp(1, RANGE_BYTES_MAX);
        // The write cache first, then the index: an entry flushed between
        // the two is then seen in one or the other (the other order could
        // miss it in both).
        let mut cached: BTreeMap<u64, Entry> = BTreeMap::new();
        let mut cut: Option<u64> = None;
        {
            let c = inner.caches.read().expect("caches lock");
            // The older generation first: the newer one's copy of an id wins.
            let gens = c.flushing.as_deref().into_iter().chain(std::iter::once(&c.active));
            for g in gens {
                let wanted = g.range(q.ledger_id, q.first, q.last).filter(|e| q.stripe.holds(e.entry_id));
                for (taken, e) in wanted.enumerate() {
                    if taken == max_entries {
                        // What this generation holds past here was not looked at.
                        cut = Some(cut.map_or(e.entry_id, |c: u64| c.min(e.entry_id)));
                        break;
                    }
                    cached.insert(e.entry_id, e.clone());
                }
            }
        }
        let walk = max_entries.saturating_mul(q.stripe.spread()).min(RANGE_ENTRIES_MAX * 64);
        let stored =
            inner.index.locations(q.ledger_id, q.first, q.last, walk).map_err(|e| self.note_index_damage(e))?;
        if cached.is_empty() && stored.found.is_empty() && !self.knows_ledger(q.ledger_id) {
            let indexed = inner.index.last_entry(q.ledger_id).map_err(|e| self.note_index_damage(e))?.is_some();
            if !indexed {
                return Err(StorageError::NoSuchLedger(q.ledger_id));
            }
        }
        // Final only below both cut points.
        let bound = match (cut, stored.next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut stored_iter =
            stored.found.into_iter().filter(|(e, _)| q.stripe.holds(*e) && bound.is_none_or(|b| *e < b)).peekable();
        let mut cached_iter = cached.into_iter().filter(|(e, _)| bound.is_none_or(|b| *e < b)).peekable();
        // Merge in id order, the cache's copy preferred; then the bounds.
        let mut picked: Vec<(u64, Source)> = Vec::new();
        let mut bytes = 0usize;
        let mut next = bound;
        loop {
            let id = match (cached_iter.peek(), stored_iter.peek()) {
                (None, None) => break,
                (Some((c, _)), None) => *c,
                (None, Some((s, _))) => *s,
                (Some((c, _)), Some((s, _))) => (*c).min(*s),
            };
            let size = match cached_iter.peek() {
                Some((c, e)) if *c == id => e.payload.len(),
                _ => stored_iter.peek().map_or(0, |(_, l)| l.len as usize),
            } + ENTRY_OVERHEAD_BYTES;
            if !picked.is_empty() && (picked.len() == max_entries || bytes + size > max_bytes) {
                next = Some(id);
                break;
            }
            bytes += size;
            let from_cache = cached_iter.next_if(|(c, _)| *c == id);
            let from_disk = stored_iter.next_if(|(s, _)| *s == id);
            match (from_cache, from_disk) {
                (Some((_, e)), _) => picked.push((id, Source::Cached(e))),
                (None, Some((_, l))) => picked.push((id, Source::Stored(l))),
                (None, None) => unreachable!("id {id} came from one of the two"),
            }
        }
        let mut out = RangeRead { entries: Vec::with_capacity(picked.len()), corrupt: Vec::new(), next };
        let mut region: Vec<(u64, Location)> = Vec::new();
        for (id, src) in picked {
            match src {
                Source::Cached(e) => {
                    self.read_region(q.ledger_id, &mut region, &mut out)?;
                    out.entries.push(e);
                }
                Source::Stored(l) => {
                    let joins = region.last().is_some_and(|(_, p)| {
                        let end = p.offset + p.len as u64;
                        let start = region[0].1.offset;
                        p.log_id == l.log_id
                            && l.offset >= end
                            && l.offset - end <= REGION_GAP_BYTES
                            && l.offset + l.len as u64 - start <= REGION_BYTES_MAX
                    });
                    if !joins {
                        self.read_region(q.ledger_id, &mut region, &mut out)?;
                    }
                    region.push((id, l));
                }
            }
        }
        self.read_region(q.ledger_id, &mut region, &mut out)?;
        let n = out.entries.len() as u64;
        inner.stats.reads.fetch_add(n, Ordering::Relaxed);
        inner.stats.range_reads.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Reads the records of `region` (one log, ascending offsets, close
    /// together) with one positioned read, decodes and checks each, appends
    /// them to `out`, and empties `region`. A region that cannot be read
    /// whole (a truncated log) is read record by record, so that each
    /// record's own fault is known.
    fn read_region(
        &self,
        ledger_id: u64,
        region: &mut Vec<(u64, Location)>,
        out: &mut RangeRead,
    ) -> Result<(), StorageError> {
        let Some((_, first)) = region.first().copied() else {
            return Ok(());
        };
        let (_, last) = *region.last().expect("not empty");
        let start = first.offset;
        let len = (last.offset + last.len as u64 - start) as usize;
        let logs = &self.inner.logs;
        match logs.read_region(first.log_id, start, len) {
            Ok(buf) => {
                self.inner.stats.range_read_regions.fetch_add(1, Ordering::Relaxed);
                for (id, l) in region.iter() {
                    let at = (l.offset - start) as usize;
                    let rec: Bytes = buf.slice(at..at + l.len as usize);
                    match decode_record(rec, ledger_id, *id) {
                        Ok(e) => out.entries.push(e),
                        Err(StorageError::CorruptEntry(..)) => out.corrupt.push(*id),
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(StorageError::LogRemoved(id)) => return Err(StorageError::LogRemoved(id)),
            Err(_) => {
                for (id, l) in region.iter() {
                    match logs.read(*l, ledger_id, *id) {
                        Ok(e) => out.entries.push(e),
                        Err(StorageError::CorruptEntry(..)) => out.corrupt.push(*id),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        region.clear();
        Ok(())
    }
}
