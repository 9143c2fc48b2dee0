//! Compacting one entry log: its live entries are copied to the current
//! entry log (synced), then the index is switched to the copies in atomic
//! batches; the caller removes the old file only when every run moved.
//!
//! Crash at any step and nothing is lost:
//! - before a switch: the old runs still point at the old file, the copies
//!   are unreferenced bytes in a newer log (counted dead, compacted later);
//! - between switches: each run points at exactly one intact copy, old or new;
//! - after the last switch, before the unlink: the old file is referenced by
//!   nothing and the next pass removes it as dead.
//!
//! A switch applies only to runs still stored as they were read (the index
//! checks under its write lock), so a run changed meanwhile (its ledger
//! deleted, an entry re-added) keeps its newer state and the old file stays
//! until a later pass.

use bytes::Bytes;
use quire_proto::v1::Entry;

use crate::entrylog::{decode_record, EntryLogs};
use crate::error::StorageError;
use crate::failpoint;
use crate::gc::throttle::Throttle;
use crate::index::{LedgerIndex, RunInfo, RunMove};

/// Bytes read from the old log at once.
const READ_BYTES: u64 = 1024 * 1024;
/// Bytes of entries gathered per append (one fdatasync each).
const WRITE_BYTES: usize = 1024 * 1024;
/// Bytes of runs moved per index switch.
const SWITCH_BYTES: u64 = 4 * 1024 * 1024;

/// What compacting one log did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// Entries copied and switched to.
    pub entries_moved: u64,
    /// Bytes appended to the current log (copies, switched or not).
    pub bytes_written: u64,
    /// Every run moved: nothing references the old log.
    pub complete: bool,
}

struct Mover<'a> {
    logs: &'a EntryLogs,
    index: &'a dyn LedgerIndex,
    throttle: &'a mut Throttle,
    /// Moves gathered since the last switch.
    moves: Vec<RunMove>,
    moves_bytes: u64,
    /// Entries read and not yet appended: (index into `moves`, entry).
    pending: Vec<(usize, Entry)>,
    pending_bytes: usize,
    out: Compacted,
    appended_once: bool,
    switched_once: bool,
}

impl Mover<'_> {
    fn append_pending(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let entries: Vec<&Entry> = self.pending.iter().map(|(_, e)| e).collect();
        let locs = self.logs.append_batch(&entries)?;
        for ((mi, e), loc) in self.pending.drain(..).zip(locs) {
            self.out.bytes_written += loc.len as u64;
            self.moves[mi].moved.push((e.entry_id, loc));
        }
        self.throttle.pace(self.pending_bytes as u64);
        self.pending_bytes = 0;
        if !self.appended_once {
            self.appended_once = true;
            failpoint::hit("compaction.copied");
        }
        Ok(())
    }

    fn switch(&mut self) -> Result<(), StorageError> {
        self.append_pending()?;
        if self.moves.is_empty() {
            return Ok(());
        }
        let applied = self.index.replace_runs(&self.moves)?;
        for (m, ok) in self.moves.iter().zip(&applied) {
            if *ok {
                self.out.entries_moved += m.moved.len() as u64;
            } else {
                self.out.complete = false;
                tracing::info!(
                    ledger = m.old.ledger_id,
                    first_entry = m.old.first_entry,
                    "run changed during compaction; the old entry log stays for a later pass"
                );
            }
        }
        self.moves.clear();
        self.moves_bytes = 0;
        if !self.switched_once {
            self.switched_once = true;
            failpoint::hit("compaction.switched");
        }
        Ok(())
    }

    fn take_run(&mut self, log_id: u32, run: RunInfo) -> Result<(), StorageError> {
        // The move is registered first so that appends can file the new
        // locations under it; it is switched with the batch it ends in.
        let mi = self.moves.len();
        self.moves_bytes += run.bytes();
        self.moves.push(RunMove { old: run.clone(), moved: Vec::new() });
        let mut i = 0;
        while i < run.len() {
            // A slice of consecutive records, at most READ_BYTES (at least one record).
            let start = run.location(i).offset;
            let mut j = i + 1;
            while j < run.len() {
                let l = run.location(j);
                if l.offset + l.len as u64 - start > READ_BYTES {
                    break;
                }
                j += 1;
            }
            let last = run.location(j - 1);
            let len = last.offset + last.len as u64 - start;
            self.throttle.pace(len);
            let buf: Bytes = self.logs.read_region(log_id, start, len as usize)?;
            for k in i..j {
                let loc = run.location(k);
                let entry_id = run.first_entry + k as u64;
                // An entry a newer run supersedes (re-added by recovery or
                // re-replication) is not live here: its reads go elsewhere.
                // Only a location found elsewhere proves that; anything
                // else keeps the entry.
                if matches!(self.index.location(run.ledger_id, entry_id)?, Some(other) if other != loc) {
                    continue;
                }
                let at = (loc.offset - start) as usize;
                // A damaged live copy stops this log's compaction: moving it
                // would launder it, dropping it would lose it. The replica
                // check finds it and re-replication replaces it.
                let entry = decode_record(buf.slice(at..at + loc.len as usize), run.ledger_id, entry_id)?;
                self.pending_bytes += loc.len as usize;
                self.pending.push((mi, entry));
                if self.pending_bytes >= WRITE_BYTES {
                    self.append_pending()?;
                }
            }
            i = j;
        }
        if self.moves_bytes >= SWITCH_BYTES {
            self.switch()?;
        }
        Ok(())
    }
}

/// Moves the live entries of `log_id`, whose runs are `runs` (as read from
/// the index), to the current entry log and switches the index to them.
/// Paced by `throttle` (bytes read plus bytes written).
pub fn compact_log(
    logs: &EntryLogs,
    index: &dyn LedgerIndex,
    log_id: u32,
    mut runs: Vec<RunInfo>,
    throttle: &mut Throttle,
) -> Result<Compacted, StorageError> {
    assert!(runs.iter().all(|r| r.log_id == log_id), "runs of another log");
    assert!(log_id < logs.current_id(), "the current log is never compacted");
    // File order: sequential reads of the old file.
    runs.sort_by_key(|r| r.base);
    let mut m = Mover {
        logs,
        index,
        throttle,
        moves: Vec::new(),
        moves_bytes: 0,
        pending: Vec::new(),
        pending_bytes: 0,
        out: Compacted { complete: true, ..Compacted::default() },
        appended_once: false,
        switched_once: false,
    };
    for run in runs {
        m.take_run(log_id, run)?;
    }
    m.switch()?;
    Ok(m.out)
}
