//! Reading the journal back after a restart.

use std::path::Path;

use bytes::Bytes;

use super::record::{Record, RecordEnd};
use super::segment::{list_segments, segment_path, sync_dir};
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
}

/// Hands every record after `from` to `f`, in journal order.
///
/// A torn record at the end of the newest segment is a write the process or
/// machine did not finish: it was never acknowledged, and the file is cut there
/// (truncated and synced) so the next replay agrees. A torn record in an older
/// segment is corruption of acknowledged data and fails the replay: quire
/// refuses to start rather than silently drop what follows.
pub fn replay(
    dir: &Path,
    from: JournalPos,
    mut f: impl FnMut(JournalPos, Record),
) -> Result<ReplayOutcome, StorageError> {
    let ids = list_segments(dir).map_err(|e| StorageError::io(dir, e))?;
    let mut out = ReplayOutcome { end: from, last_segment: ids.last().copied(), ..Default::default() };
    for (i, id) in ids.iter().copied().enumerate() {
        if id < from.segment {
            continue;
        }
        let newest = i + 1 == ids.len();
        let path = segment_path(dir, id);
        let data = Bytes::from(std::fs::read(&path).map_err(|e| StorageError::io(&path, e))?);
        let mut offset = if id == from.segment { from.offset as usize } else { 0 };
        if offset > data.len() {
            return Err(StorageError::Corrupt(format!(
                "{}: checkpoint offset {offset} is past the end ({} bytes)",
                path.display(),
                data.len()
            )));
        }
        loop {
            match Record::decode(&data.slice(offset..)) {
                Ok((rec, n)) => {
                    offset += n;
                    let pos = JournalPos { segment: id, offset: offset as u64 };
                    out.records += 1;
                    out.end = pos;
                    f(pos, rec);
                }
                Err(RecordEnd::Clean) => break,
                Err(RecordEnd::Torn(why)) if newest => {
                    let at = JournalPos { segment: id, offset: offset as u64 };
                    tracing::warn!(segment = id, offset, reason = why, "cutting torn journal tail");
                    let file =
                        std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| StorageError::io(&path, e))?;
                    file.set_len(offset as u64).map_err(|e| StorageError::io(&path, e))?;
                    file.sync_all().map_err(|e| StorageError::io(&path, e))?;
                    sync_dir(dir).map_err(|e| StorageError::io(dir, e))?;
                    out.cut = Some((at, why));
                    break;
                }
                Err(RecordEnd::Torn(why)) => {
                    return Err(StorageError::Corrupt(format!(
                        "{} at offset {offset}: {why}, with newer segments after it",
                        path.display()
                    )));
                }
            }
        }
        if out.end.segment < id {
            out.end = JournalPos { segment: id, offset: offset as u64 };
        }
    }
    Ok(out)
}
