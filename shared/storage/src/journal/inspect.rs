//! Where each record of a segment lies in its file: for tests and the
//! fault suite's nemesis, which damage chosen records on the disk. A
//! version 4 record's bytes are not contiguous in the file (a stamp starts
//! every sector), so damage is aimed through [`RecordSpan::file_offset`].

use bytes::Bytes;

use super::batches::read_batches;
use super::record::{Format, Record};
use super::sector;
use super::segment::{format_of, HEADER_BYTES};

/// One record as it lies in its segment's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    /// The file offset just after it: the position its completion gave.
    pub end: u64,
    /// Its encoded length (header included).
    pub len: usize,
    /// Version 4: the file offset of its batch's first sector; else 0.
    base: u64,
    /// Its first byte: in the batch's record bytes (version 4), or the file.
    at: usize,
    stamped: bool,
}

impl RecordSpan {
    /// The file offset of the record's `i`-th byte (0: its length field's first).
    pub fn file_offset(&self, i: usize) -> u64 {
        assert!(i < self.len, "byte {i} of a record of {} bytes", self.len);
        if self.stamped {
            sector::byte_offset(self.base, self.at + i)
        } else {
            (self.at + i) as u64
        }
    }
}

/// The records of segment `id` whose file holds `data`, in order, as far as
/// each batch (or, before version 4, the segment) decodes.
pub fn record_spans(data: &[u8], id: u64) -> Vec<RecordSpan> {
    let format = format_of(data, id);
    let mut out = Vec::new();
    match format {
        Format::V4 { nonce } => {
            for b in read_batches(data, nonce).batches {
                let mut at = 0;
                while let Ok((_, n)) = Record::decode(&b.data.slice(at..), format) {
                    let end = sector::end_offset(b.base, at + n);
                    out.push(RecordSpan { end, len: n, base: b.base, at, stamped: true });
                    at += n;
                }
            }
        }
        _ => {
            let data = Bytes::copy_from_slice(data);
            let mut at = if format == Format::V1 { 0 } else { (HEADER_BYTES as usize).min(data.len()) };
            while let Ok((_, n)) = Record::decode(&data.slice(at..), format) {
                out.push(RecordSpan { end: (at + n) as u64, len: n, base: 0, at, stamped: false });
                at += n;
            }
        }
    }
    out
}
