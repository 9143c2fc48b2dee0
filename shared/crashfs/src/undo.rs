//! What an unsynced change to a file overwrote, and how a crash puts it back.
//!
//! Each open file keeps the writes and size changes made since its last
//! successful fsync or fdatasync, with the bytes each one overwrote. A sync
//! forgets them (they are durable); a crash undoes them, wholly or in part
//! ([`DataLoss`]). A failed sync keeps its writes as *lost* ranges: Linux may
//! mark the dirty pages clean after a writeback error, so a later sync that
//! succeeds does not bring them back ("fsyncgate"). Only a later write over the
//! same bytes does.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::rng::Rng;
use crate::DataLoss;

/// The unit a torn write is made of: each sector of an unsynced write is on
/// disk as it was before or as it was written, independently (FoundationDB's
/// simulated files, ALICE).
pub const SECTOR_BYTES: u64 = 512;

/// One unsynced change to a file.
#[derive(Debug, Clone)]
pub(crate) enum DataOp {
    /// `len` bytes written at `offset`; `old` is what was there (only the part
    /// below `size_before`: past it there was nothing).
    Write { offset: u64, len: u64, old: Vec<u8>, size_before: u64 },
    /// The size set (truncate, or a grow); `cut` is what a shrink removed.
    SetLen { size_before: u64, size_after: u64, cut: Vec<u8> },
}

impl DataOp {
    fn size_after(&self) -> u64 {
        match self {
            DataOp::Write { offset, len, size_before, .. } => (*size_before).max(offset + len),
            DataOp::SetLen { size_after, .. } => *size_after,
        }
    }

    fn size_before(&self) -> u64 {
        match self {
            DataOp::Write { size_before, .. } | DataOp::SetLen { size_before, .. } => *size_before,
        }
    }
}

/// Bytes a failed sync lost: what the disk holds there, whatever the page cache said.
#[derive(Debug, Clone)]
pub(crate) struct Lost {
    offset: u64,
    old: Vec<u8>,
}

/// A file's changes since its last sync.
#[derive(Debug, Default)]
pub(crate) struct FileLog {
    ops: Vec<DataOp>,
    lost: Vec<Lost>,
}

/// What one file's roll-back did, for the crash report.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Rolled {
    pub undone: u64,
    pub kept: u64,
    pub lost_ranges: u64,
}

impl FileLog {
    pub(crate) fn is_clean(&self) -> bool {
        self.ops.is_empty() && self.lost.is_empty()
    }

    pub(crate) fn pending(&self) -> usize {
        self.ops.len()
    }

    /// Records a write of `len` bytes at `offset` that is about to replace
    /// `old` (read from the file just before) in a file of `size_before` bytes.
    pub(crate) fn wrote(&mut self, offset: u64, len: u64, mut old: Vec<u8>, size_before: u64) {
        debug_assert!(old.len() as u64 <= len);
        self.take_lost(offset, len, &mut old);
        self.ops.push(DataOp::Write { offset, len, old, size_before });
    }

    /// Records a size change; `cut` is what a shrink removed, as the page
    /// cache held it. Where a failed sync lost bytes, the disk holds other
    /// ones: those are what undoing the shrink brings back, and the lost
    /// ranges end at the new size.
    pub(crate) fn set_len(&mut self, size_before: u64, size_after: u64, mut cut: Vec<u8>) {
        debug_assert_eq!(cut.len() as u64, size_before.saturating_sub(size_after));
        for l in &self.lost {
            let l_end = l.offset + l.old.len() as u64;
            for at in l.offset.max(size_after)..l_end.min(size_before) {
                cut[(at - size_after) as usize] = l.old[(at - l.offset) as usize];
            }
        }
        self.lost.retain_mut(|l| {
            let keep = (size_after.saturating_sub(l.offset) as usize).min(l.old.len());
            l.old.truncate(keep);
            keep > 0
        });
        self.ops.push(DataOp::SetLen { size_before, size_after, cut });
    }

    /// A sync succeeded: everything written so far is durable, except what an
    /// earlier failed sync lost.
    pub(crate) fn synced(&mut self) {
        self.ops.clear();
    }

    /// A sync failed: the kernel may have dropped the dirty pages, so the
    /// bytes these writes covered are, on disk, what the last good sync left
    /// there, and a later sync will not write them. Sizes are inode metadata:
    /// a write's growth stays pending as a size change (a later sync makes it
    /// durable, over lost bytes).
    pub(crate) fn sync_failed(&mut self, file: &File) -> io::Result<()> {
        let mut lost = Vec::new();
        for op in self.ops.iter().rev() {
            if let DataOp::Write { offset, len, .. } = op {
                lost.push(Lost { offset: *offset, old: self.durable_bytes(file, *offset, *len)? });
            }
        }
        self.lost.extend(lost);
        // A shrink's removed bytes were pending too: undoing it brings back
        // what the disk holds there.
        let mut cuts = Vec::new();
        for op in &self.ops {
            if let DataOp::SetLen { size_after, cut, .. } = op {
                cuts.push(if cut.is_empty() {
                    Vec::new()
                } else {
                    self.durable_bytes(file, *size_after, cut.len() as u64)?
                });
            }
        }
        let mut cuts = cuts.into_iter();
        for op in &mut self.ops {
            if let DataOp::SetLen { cut, .. } = op {
                *cut = cuts.next().unwrap_or_default();
            }
        }
        self.ops = std::mem::take(&mut self.ops)
            .into_iter()
            .map(|op| match op {
                DataOp::Write { size_before, .. } => {
                    let size_after = op.size_after();
                    DataOp::SetLen { size_before, size_after, cut: Vec::new() }
                }
                set_len => set_len,
            })
            .collect();
        Ok(())
    }

    /// What the disk holds at `offset..offset + len` as of the last good
    /// sync: the file now, with every pending change undone over the range
    /// (zeros past the size it then had).
    fn durable_bytes(&self, file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; len as usize];
        let size = file.metadata()?.len();
        if offset < size {
            let have = (size - offset).min(len) as usize;
            file.read_exact_at(&mut out[..have], offset)?;
        }
        let end = offset + len;
        // Overlays `bytes` (at `at`, zeros past its end up to `to`) on the range.
        let mut overlay = |at: u64, to: u64, bytes: &[u8]| {
            let (from, upto) = (at.max(offset), to.min(end));
            for p in from..upto {
                out[(p - offset) as usize] = *bytes.get((p - at) as usize).unwrap_or(&0);
            }
        };
        for op in self.ops.iter().rev() {
            match op {
                DataOp::Write { offset: o, len: l, old, size_before } => {
                    overlay(*o, o + l, old);
                    overlay(*size_before, u64::MAX, &[]);
                }
                DataOp::SetLen { size_before, size_after, cut } => {
                    overlay(*size_after, *size_before, cut);
                    overlay(*size_before, u64::MAX, &[]);
                }
            }
        }
        Ok(out)
    }

    /// A write over lost bytes dirties them again, so the next sync writes
    /// them; until it does, the disk still holds the lost range's old bytes,
    /// which become what this write replaced.
    fn take_lost(&mut self, offset: u64, len: u64, old: &mut [u8]) {
        if self.lost.is_empty() {
            return;
        }
        let end = offset + len;
        let mut kept = Vec::with_capacity(self.lost.len());
        // Oldest last in `lost`: apply in order so the oldest bytes win.
        for l in self.lost.drain(..) {
            let l_end = l.offset + l.old.len() as u64;
            if l_end <= offset || l.offset >= end {
                kept.push(l);
                continue;
            }
            let (from, to) = (l.offset.max(offset), l_end.min(end));
            for at in from..to {
                let i = (at - offset) as usize;
                if i < old.len() {
                    old[i] = l.old[(at - l.offset) as usize];
                }
            }
            if l.offset < offset {
                kept.push(Lost { offset: l.offset, old: l.old[..(offset - l.offset) as usize].to_vec() });
            }
            if l_end > end {
                kept.push(Lost { offset: end, old: l.old[(end - l.offset) as usize..].to_vec() });
            }
        }
        self.lost = kept;
    }

    /// Puts back into `file` what a power cut may have lost, as `mode` says.
    pub(crate) fn roll_back(&self, file: &File, mode: DataLoss, rng: &mut Rng) -> io::Result<Rolled> {
        let mut rolled = Rolled::default();
        let n = self.ops.len();
        match mode {
            DataLoss::Drop => {
                for op in self.ops.iter().rev() {
                    undo(file, op)?;
                }
                rolled.undone = n as u64;
            }
            DataLoss::Prefix => {
                let keep = rng.below(n as u64 + 1) as usize;
                for op in self.ops[keep..].iter().rev() {
                    undo(file, op)?;
                }
                rolled.kept = keep as u64;
                rolled.undone = (n - keep) as u64;
            }
            DataLoss::Torn => {
                // Any size the file had since its last sync may be what the inode says.
                let mut sizes: Vec<u64> = self.ops.iter().map(DataOp::size_after).collect();
                if let Some(first) = self.ops.first() {
                    sizes.push(first.size_before());
                }
                // Newest first, each sector goes back one change at a time until
                // a coin says stop: it is then as it was after some change (or
                // before them all), as a disk writing whole sectors leaves it.
                let mut settled = std::collections::HashSet::new();
                for op in self.ops.iter().rev() {
                    let (offset, len, old): (u64, u64, &[u8]) = match op {
                        DataOp::Write { offset, len, old, .. } => (*offset, *len, old),
                        DataOp::SetLen { size_before, size_after, cut } => {
                            let from = (*size_before).min(*size_after);
                            (from, size_before.max(size_after) - from, cut)
                        }
                    };
                    let end = offset + len;
                    let mut at = offset;
                    while at < end {
                        let sector = at / SECTOR_BYTES;
                        let to = ((sector + 1) * SECTOR_BYTES).min(end);
                        if settled.contains(&sector) {
                        } else if rng.coin() {
                            settled.insert(sector);
                            rolled.kept += 1;
                        } else {
                            rolled.undone += 1;
                            let from = (at - offset) as usize;
                            let upto = (to - offset) as usize;
                            let mut bytes = vec![0u8; upto - from];
                            if from < old.len() {
                                let have = upto.min(old.len());
                                bytes[..have - from].copy_from_slice(&old[from..have]);
                            }
                            file.write_all_at(&bytes, at)?;
                        }
                        at = to;
                    }
                }
                if !sizes.is_empty() {
                    file.set_len(sizes[rng.below(sizes.len() as u64) as usize])?;
                }
            }
        }
        let size = file.metadata()?.len();
        for l in &self.lost {
            if l.offset >= size {
                continue;
            }
            let upto = ((size - l.offset) as usize).min(l.old.len());
            file.write_all_at(&l.old[..upto], l.offset)?;
            rolled.lost_ranges += 1;
        }
        Ok(rolled)
    }
}

fn undo(file: &File, op: &DataOp) -> io::Result<()> {
    match op {
        DataOp::Write { offset, old, size_before, .. } => {
            file.write_all_at(old, *offset)?;
            file.set_len(*size_before)
        }
        DataOp::SetLen { size_before, size_after, cut } => {
            file.set_len(*size_before)?;
            file.write_all_at(cut, *size_after)
        }
    }
}
