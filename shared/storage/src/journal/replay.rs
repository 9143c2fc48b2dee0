//! Reading the journal back after a restart.

use std::path::Path;

use bytes::Bytes;

use super::batches::{read_batches, Judged, SegmentEnd};
use super::record::{is_record_kind, Format, Record, RecordEnd, RECORD_HEADER_BYTES};
use super::sector;
use super::segment::{format_of, list_segments, segment_path, sync_dir, HEADER_BYTES};
use super::JournalPos;
use crate::error::StorageError;

/// What replay found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Records handed to the callback.
    pub records: u64,
    /// The position after the last good record (where a checkpoint could go).
    pub end: JournalPos,
    /// The highest segment id present, if any.
    pub last_segment: Option<u64>,
    /// Where a torn tail was cut, and why.
    pub cut: Option<(JournalPos, &'static str)>,
    /// Damaged records skipped (where, and why): bytes that were written,
    /// synced and acknowledged, then changed on disk. What they held is
    /// lost on this bookie, which must get it back from its peers before it
    /// answers "no such entry" for anything (the data-integrity check).
    pub damaged: Vec<(JournalPos, &'static str)>,
}

/// Why a checkpoint whose segment is gone is reported as damage.
const MISSING_CHECKPOINT_SEGMENT: &str = "the checkpoint's journal segment is missing";

/// Why a zero length with written bytes after it is reported as damage.
const ZEROED_LENGTH: &str = "zero record length with written bytes after it";

/// After a bad record at `at`: where the next record that decodes starts,
/// if one does. A torn write is the last thing a segment holds, so a good
/// record after a bad one means the bad one was damaged after it was written
/// (bits flipped on the disk): corruption of acknowledged data, not a torn
/// tail. Cutting there would drop every acknowledged record after it,
/// silently (the fault suite's seed 139 lost an entry so).
/// A tail marker after it counts (the written part went on past the bad
/// record); a previous life's records in a reused file never do (sealed for
/// another segment).
fn next_good_record(data: &Bytes, at: usize, format: Format) -> Option<usize> {
    let good = |off: usize| matches!(Record::decode(&data.slice(off..), format), Ok(_) | Err(RecordEnd::Tail));
    // Bits flipped inside a record usually leave its length intact.
    if let Some(len) = data.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize) {
        let next = at + 8 + len;
        if len > 0 && next < data.len() && good(next) {
            return Some(next);
        }
    }
    // Otherwise look for one: a record is told from noise by its CRC, which
    // is only computed where the length fits and the kind byte is a kind.
    let end = data.len().saturating_sub(RECORD_HEADER_BYTES);
    (at + 1..end).find(|&off| {
        let len = u32::from_be_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]]) as usize;
        len > 0 && off + 8 + len <= data.len() && is_record_kind(data[off + 8]) && good(off)
    })
}

/// Hands every record after `from` to `f`, in journal order.
///
/// A torn record at the end of the newest segment is a write the process or
/// machine did not finish: it was never acknowledged, and the file is cut there
/// (truncated and synced) so the next replay agrees. A bad record with good
/// ones after it, or anywhere in an older segment, is damage to acknowledged
/// data: it is skipped, replay goes on with what follows, and the outcome
/// lists it (`damaged`) so the bookie refills from its peers what it lost.
/// In a version 1 segment a damaged *last* record cannot be told from a torn
/// one and is cut; in version 2 the tail marker after it tells them apart.
pub fn replay(
    dir: &Path,
    from: JournalPos,
    mut f: impl FnMut(JournalPos, Record),
) -> Result<ReplayOutcome, StorageError> {
    let ids = list_segments(dir).map_err(|e| StorageError::io(dir, e))?;
    let mut out = ReplayOutcome { end: from, last_segment: ids.last().copied(), ..Default::default() };
    // A checkpoint names the segment the flush stopped in, and retirement
    // only takes segments before it: that segment must be here. Without it,
    // whatever it held past the checkpoint was acknowledged and is gone
    // (segment ids start at 1: 0 is no checkpoint).
    if from.segment != 0 && !ids.contains(&from.segment) {
        tracing::error!(segment = from.segment, "the journal segment holding the checkpoint is missing");
        out.damaged.push((from, MISSING_CHECKPOINT_SEGMENT));
    }
    for (i, id) in ids.iter().copied().enumerate() {
        if id < from.segment {
            continue;
        }
        let newest = i + 1 == ids.len();
        let path = segment_path(dir, id);
        let data = Bytes::from(std::fs::read(&path).map_err(|e| StorageError::io(&path, e))?);
        let format = format_of(&data, id);
        if let Format::V4 { nonce } = format {
            replay_stamped(dir, &path, id, &data, nonce, from, newest, &mut out, &mut f)?;
            continue;
        }
        let first = match format {
            Format::V1 => 0,
            Format::V2 { .. } | Format::V3 { .. } | Format::V4 { .. } => (HEADER_BYTES as usize).min(data.len()),
        };
        let mut offset = if id == from.segment { (from.offset as usize).max(first) } else { first };
        if offset > data.len() {
            return Err(StorageError::Corrupt(format!(
                "{}: checkpoint offset {offset} is past the end ({} bytes)",
                path.display(),
                data.len()
            )));
        }
        loop {
            match Record::decode(&data.slice(offset..), format) {
                Ok((rec, n)) => {
                    offset += n;
                    let pos = JournalPos { segment: id, offset: offset as u64 };
                    out.records += 1;
                    out.end = pos;
                    f(pos, rec);
                }
                // The tail marker after the last batch written (v2).
                Err(RecordEnd::Tail) => break,
                // Zeros to the end: the preallocated part nothing was written
                // to (v1), or the end of the file.
                Err(RecordEnd::Clean) if data[offset..].iter().all(|b| *b == 0) => break,
                // A zero length with written bytes after it is no end: the
                // length field itself was damaged (issue #19 item 2), and
                // what follows was acknowledged. Never a clean end.
                Err(RecordEnd::Clean) => match next_good_record(&data, offset, format) {
                    Some(next) => {
                        tracing::error!(
                            segment = id,
                            offset,
                            skipped_bytes = next - offset,
                            "zeroed journal record length, records after it: skipping it (what it held is lost here)"
                        );
                        out.damaged.push((JournalPos { segment: id, offset: offset as u64 }, ZEROED_LENGTH));
                        offset = next;
                    }
                    None => {
                        // Nothing after it decodes: the damaged record was the
                        // last, or a torn write left its later pages but not
                        // its first. Which, the bytes cannot tell: report it
                        // as damage (the bookie refills from its peers), and
                        // cut nothing, whatever the segment.
                        tracing::error!(
                            segment = id,
                            offset,
                            "zeroed journal record length with written bytes after it and no record: damage"
                        );
                        out.damaged.push((JournalPos { segment: id, offset: offset as u64 }, ZEROED_LENGTH));
                        break;
                    }
                },
                Err(RecordEnd::Torn(why)) => match next_good_record(&data, offset, format) {
                    Some(next) => {
                        tracing::error!(
                            segment = id,
                            offset,
                            skipped_bytes = next - offset,
                            reason = why,
                            "damaged journal record, acknowledged records after it: skipping it (what it held is lost here)"
                        );
                        out.damaged.push((JournalPos { segment: id, offset: offset as u64 }, why));
                        offset = next;
                    }
                    None if newest => {
                        let at = JournalPos { segment: id, offset: offset as u64 };
                        tracing::warn!(segment = id, offset, reason = why, "cutting torn journal tail");
                        cut_at(dir, &path, offset as u64)?;
                        out.cut = Some((at, why));
                        break;
                    }
                    None => {
                        // An older segment was complete when the next one
                        // began: damage, and the rest of it is unreadable.
                        tracing::error!(
                            segment = id,
                            offset,
                            reason = why,
                            "damaged journal segment: the rest of it is lost here"
                        );
                        out.damaged.push((JournalPos { segment: id, offset: offset as u64 }, why));
                        break;
                    }
                },
            }
        }
        if out.end.segment < id {
            out.end = JournalPos { segment: id, offset: offset as u64 };
        }
    }
    Ok(out)
}

/// Truncates segment `path` at `offset` and makes the cut durable (file and
/// directory), so that the next replay agrees without cutting again.
fn cut_at(dir: &Path, path: &Path, offset: u64) -> Result<(), StorageError> {
    let file = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| StorageError::io(path, e))?;
    file.set_len(offset).map_err(|e| StorageError::io(path, e))?;
    file.sync_all().map_err(|e| StorageError::io(path, e))?;
    sync_dir(dir).map_err(|e| StorageError::io(dir, e))
}

/// Why a batch that a later one proves synced, but whose sectors are not
/// all its own, is reported.
const DAMAGED_BATCH: &str = "journal batch with sectors not its own, and a later batch after it";

/// Why whole batches missing before a later one are reported.
const MISSING_BATCH: &str = "journal batch missing, and a later batch after it";

/// Why a torn batch before the checkpoint is reported (a checkpoint covers
/// only synced records, so this is damage, and nothing is cut).
const TORN_BEFORE_CHECKPOINT: &str = "journal batch torn before the checkpoint";

/// Replays a version 4 segment: batch by batch, as [`read_batches`] judges
/// them. A batch that reached the disk whole, or that a later batch proves
/// synced, holds acknowledged records: a bad record in it is damage
/// (skipped, reported, the rest read). A torn batch at the end of the
/// newest segment was never acknowledged: the file is cut at its start.
/// Records at or before `from` are read (a batch is judged whole) but not
/// handed on, and damage there is not reported (the index holds them).
#[allow(clippy::too_many_arguments)]
fn replay_stamped(
    dir: &Path,
    path: &Path,
    id: u64,
    data: &[u8],
    nonce: u64,
    from: JournalPos,
    newest: bool,
    out: &mut ReplayOutcome,
    f: &mut impl FnMut(JournalPos, Record),
) -> Result<(), StorageError> {
    let format = Format::V4 { nonce };
    let from_offset = if id == from.segment { from.offset } else { 0 };
    let read = read_batches(data, nonce);
    let damage = |out: &mut ReplayOutcome, at: u64, why: &'static str| {
        if at >= from_offset {
            tracing::error!(
                segment = id,
                offset = at,
                reason = why,
                "damaged journal record: what it held is lost here"
            );
            out.damaged.push((JournalPos { segment: id, offset: at }, why));
        }
    };
    for at in &read.missing {
        damage(out, *at, MISSING_BATCH);
    }
    // Where the last record read ends: a bad record is reported there, the
    // position a completion gave the record before it.
    let mut last_end = HEADER_BYTES;
    for batch in &read.batches {
        if batch.judged == Judged::Damaged {
            damage(out, batch.base, DAMAGED_BATCH);
        }
        let mut off = 0usize;
        loop {
            let at = last_end;
            match Record::decode(&batch.data.slice(off..), format) {
                Ok((rec, n)) => {
                    off += n;
                    let pos = JournalPos { segment: id, offset: sector::end_offset(batch.base, off) };
                    last_end = pos.offset;
                    if pos.offset > from_offset {
                        out.records += 1;
                        out.end = pos;
                        f(pos, rec);
                    }
                }
                Err(RecordEnd::Tail) => break,
                Err(_) if batch.data[off..].iter().all(|b| *b == 0) => {
                    // Zeros to the batch's end: its tail marker (and maybe
                    // records before it) zeroed on the disk.
                    if batch.judged == Judged::Whole {
                        damage(out, at, "journal batch without its tail marker");
                    }
                    break;
                }
                Err(end) => {
                    let why = match end {
                        RecordEnd::Torn(why) => why,
                        RecordEnd::Clean | RecordEnd::Tail => "record ends early",
                    };
                    // The batch is whole (or proven synced): this is damage.
                    damage(out, at, why);
                    match next_good_record(&batch.data, off, format) {
                        Some(next) => {
                            off = next;
                            last_end = sector::end_offset(batch.base, off);
                        }
                        None => break,
                    }
                }
            }
        }
    }
    let stopped_at;
    match read.end {
        SegmentEnd::Clean(at) => stopped_at = at,
        SegmentEnd::Torn(at) if newest && at >= from_offset => {
            let pos = JournalPos { segment: id, offset: at };
            tracing::warn!(segment = id, offset = at, "cutting a journal batch torn by a crash before its sync");
            cut_at(dir, path, at)?;
            out.cut = Some((pos, "batch torn by a crash before its sync"));
            stopped_at = at;
        }
        SegmentEnd::Torn(at) if newest => {
            damage(out, from_offset, TORN_BEFORE_CHECKPOINT);
            stopped_at = at;
        }
        SegmentEnd::Torn(at) => {
            // An older segment was whole when the next one began.
            damage(out, at, "damaged journal batch in a segment before the newest");
            stopped_at = at;
        }
    }
    if out.end.segment < id {
        out.end = JournalPos { segment: id, offset: stopped_at.max(from_offset) };
    }
    Ok(())
}
