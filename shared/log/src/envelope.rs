//! The bytes of one log record as its ledger entry holds them: a short
//! header, then the application's payload. The header carries the producer
//! id and sequence number of an idempotent append, so that the
//! de-duplication table can be rebuilt from the records themselves by
//! whoever takes the log over (issue #23 item 7), not held only in a
//! writer's memory; the time its writer took it (issue #47 item 4); and
//! its place in the batch it was appended with, so that every reader and
//! every takeover can tell a whole batch from a cut one (item 3).
//!
//! ```text
//! version: u8 = 2
//! producer id length: u8 (0: no producer, no sequence follows)
//! producer id: that many bytes of UTF-8
//! sequence: u64, big-endian (only with a producer id)
//! time: u64 milliseconds since the Unix epoch, big-endian
//! batch index: u16, big-endian (this record's place in its batch, from 0)
//! batch length: u16, big-endian (1 to 65 535 records)
//! payload: the rest
//! ```
//!
//! Version 1 (written before issue #47) is the same without time and
//! batch: it reads as time 0 and a batch of one.
//!
//! A record is one entry: its offset in the log is its entry's place. A
//! batch is its records' entries, one after another in one ledger: entry
//! `e` with index `i` and length `n` belongs to the batch of entries
//! `e - i ..= e - i + n - 1`, whole only when its last entry is.

/// The header version written.
pub const VERSION: u8 = 2;
/// The header version before record time and batches.
pub const VERSION_1: u8 = 1;
/// Longest producer id, in bytes.
pub const PRODUCER_ID_MAX_BYTES: usize = 64;
/// Longest header, in bytes.
pub const HEADER_MAX_BYTES: usize = 2 + PRODUCER_ID_MAX_BYTES + 8 + 8 + 4;
/// The most records one atomic batch holds.
pub const BATCH_RECORDS_MAX: usize = u16::MAX as usize;

/// Who appended a record, for de-duplication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced<'a> {
    /// The producer's id, chosen by the application (1 to 64 bytes).
    pub producer_id: &'a str,
    /// Its sequence number for this record.
    pub sequence: u64,
}

/// A record's place in the batch it was appended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPlace {
    /// From 0.
    pub index: u16,
    /// The batch's records (at least 1, more than `index`).
    pub len: u16,
}

impl BatchPlace {
    /// A record appended alone.
    pub const ALONE: BatchPlace = BatchPlace { index: 0, len: 1 };

    /// The last entry of the batch holding entry `entry_id` (which has this
    /// place): the batch is whole once that entry is in the ledger. None
    /// for a place no entry at `entry_id` can have (damage: its batch
    /// would start before entry 0, or end past the largest id).
    pub fn last_entry(self, entry_id: u64) -> Option<u64> {
        self.first_entry(entry_id)?.checked_add(u64::from(self.len) - 1).filter(|l| *l <= i64::MAX as u64)
    }

    /// The first entry of that batch (None: damage, as for `last_entry`).
    pub fn first_entry(self, entry_id: u64) -> Option<u64> {
        entry_id.checked_sub(u64::from(self.index))
    }
}

/// What a record's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// The idempotent append's producer and sequence, when it had one.
    pub produced: Option<Produced<'a>>,
    /// When its writer took it, in milliseconds since the Unix epoch (0:
    /// a version-1 record, written before records had a time).
    pub time_ms: u64,
    /// Its place in its batch.
    pub batch: BatchPlace,
}

impl<'a> Header<'a> {
    /// A record appended alone at `time_ms`.
    pub fn alone(produced: Option<Produced<'a>>, time_ms: u64) -> Header<'a> {
        Header { produced, time_ms, batch: BatchPlace::ALONE }
    }
}

/// A record decoded from its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its header.
    pub header: Header<'a>,
    /// The application's bytes.
    pub payload: &'a [u8],
}

/// Why an entry is not a log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Shorter than its header says.
    #[error("log record truncated: {0} bytes")]
    Truncated(usize),
    /// A version this build does not read.
    #[error("log record version {0} is unknown (this build reads {VERSION_1} and {VERSION})")]
    UnknownVersion(u8),
    /// The producer id is not UTF-8 or too long.
    #[error("log record producer id invalid: {0}")]
    BadProducer(String),
    /// A place in a batch no batch has.
    #[error("log record batch place invalid: record {index} of {len}")]
    BadBatch {
        /// The index read.
        index: u16,
        /// The length read.
        len: u16,
    },
}

/// Checks a producer id before it is written.
pub fn validate_producer_id(id: &str) -> Result<(), EnvelopeError> {
    if id.is_empty() || id.len() > PRODUCER_ID_MAX_BYTES {
        return Err(EnvelopeError::BadProducer(format!("{} bytes (1 to {PRODUCER_ID_MAX_BYTES})", id.len())));
    }
    Ok(())
}

/// The length of the header of a record appended by `produced` (or by no
/// producer).
pub fn header_len(produced: Option<Produced<'_>>) -> usize {
    2 + produced.map_or(0, |p| p.producer_id.len() + 8) + 8 + 4
}

/// A record's entry: header and payload, in one allocation of exactly
/// its size.
pub fn encode(header: Header<'_>, payload: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
    let (bytes, n) = header_bytes(header)?;
    let mut e = Vec::with_capacity(n + payload.len());
    e.extend_from_slice(&bytes[..n]);
    e.extend_from_slice(payload);
    Ok(e)
}

/// A record's header alone, on the stack: its bytes are the first `.1`.
/// For a writer that puts header and payload into a buffer of its own.
pub fn header_bytes(header: Header<'_>) -> Result<([u8; HEADER_MAX_BYTES], usize), EnvelopeError> {
    let BatchPlace { index, len } = header.batch;
    if len == 0 || index >= len {
        return Err(EnvelopeError::BadBatch { index, len });
    }
    let mut out = [0u8; HEADER_MAX_BYTES];
    out[0] = VERSION;
    let mut at = 2;
    if let Some(p) = header.produced {
        validate_producer_id(p.producer_id)?;
        out[1] = p.producer_id.len() as u8;
        at += p.producer_id.len();
        out[2..at].copy_from_slice(p.producer_id.as_bytes());
        out[at..at + 8].copy_from_slice(&p.sequence.to_be_bytes());
        at += 8;
    }
    out[at..at + 8].copy_from_slice(&header.time_ms.to_be_bytes());
    out[at + 8..at + 10].copy_from_slice(&index.to_be_bytes());
    out[at + 10..at + 12].copy_from_slice(&len.to_be_bytes());
    Ok((out, at + 12))
}

/// `n` bytes off the front of `rest`, or Truncated (of an entry of `total` bytes).
fn take<'a>(rest: &mut &'a [u8], n: usize, total: usize) -> Result<&'a [u8], EnvelopeError> {
    if rest.len() < n {
        return Err(EnvelopeError::Truncated(total));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

/// Reads a record from its entry (never panics, whatever the bytes).
pub fn decode(entry: &[u8]) -> Result<Record<'_>, EnvelopeError> {
    let total = entry.len();
    let mut rest = entry;
    let version = take(&mut rest, 1, total)?[0];
    if version != VERSION && version != VERSION_1 {
        return Err(EnvelopeError::UnknownVersion(version));
    }
    let id_len = take(&mut rest, 1, total)?[0] as usize;
    let produced = if id_len == 0 {
        None
    } else {
        if id_len > PRODUCER_ID_MAX_BYTES {
            return Err(EnvelopeError::BadProducer(format!("{id_len} bytes")));
        }
        let id = take(&mut rest, id_len, total)?;
        let seq = take(&mut rest, 8, total)?;
        let producer_id = std::str::from_utf8(id).map_err(|e| EnvelopeError::BadProducer(e.to_string()))?;
        Some(Produced { producer_id, sequence: u64::from_be_bytes(seq.try_into().expect("8 bytes")) })
    };
    if version == VERSION_1 {
        return Ok(Record { header: Header::alone(produced, 0), payload: rest });
    }
    let time_ms = u64::from_be_bytes(take(&mut rest, 8, total)?.try_into().expect("8 bytes"));
    let index = u16::from_be_bytes(take(&mut rest, 2, total)?.try_into().expect("2 bytes"));
    let len = u16::from_be_bytes(take(&mut rest, 2, total)?.try_into().expect("2 bytes"));
    if len == 0 || index >= len {
        return Err(EnvelopeError::BadBatch { index, len });
    }
    Ok(Record { header: Header { produced, time_ms, batch: BatchPlace { index, len } }, payload: rest })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let h = Header::alone(None, 0x0102_0304_0506_0708);
        let e = encode(h, b"hello").unwrap();
        assert_eq!(e, [&[VERSION, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 1][..], b"hello"].concat());
        assert_eq!(decode(&e).unwrap(), Record { header: h, payload: b"hello" });
        let p = Produced { producer_id: "orders-7", sequence: 42 };
        let h = Header { produced: Some(p), time_ms: 7, batch: BatchPlace { index: 3, len: 9 } };
        let e = encode(h, b"").unwrap();
        assert_eq!(e.len(), header_len(Some(p)));
        assert_eq!(decode(&e).unwrap(), Record { header: h, payload: b"" });
    }

    #[test]
    fn a_version_1_record_reads_as_time_0_alone() {
        let mut e = vec![VERSION_1, 2, b'a', b'b'];
        e.extend_from_slice(&5u64.to_be_bytes());
        e.extend_from_slice(b"x");
        let r = decode(&e).unwrap();
        let p = Produced { producer_id: "ab", sequence: 5 };
        assert_eq!(r, Record { header: Header::alone(Some(p), 0), payload: b"x" });
        assert_eq!(decode(&[VERSION_1, 0]).unwrap(), Record { header: Header::alone(None, 0), payload: b"" });
    }

    #[test]
    fn a_batch_place_names_its_batch() {
        let b = BatchPlace { index: 2, len: 5 };
        assert_eq!((b.first_entry(12), b.last_entry(12)), (Some(10), Some(14)));
        assert_eq!((BatchPlace::ALONE.first_entry(3), BatchPlace::ALONE.last_entry(3)), (Some(3), Some(3)));
        assert_eq!((b.first_entry(1), b.last_entry(1)), (None, None), "a batch before entry 0: damage");
        assert_eq!(b.last_entry(i64::MAX as u64), None, "a batch past the largest entry id: damage");
    }

    #[test]
    fn bad_entries_are_errors_not_panics() {
        assert_eq!(decode(&[]), Err(EnvelopeError::Truncated(0)));
        assert_eq!(decode(&[VERSION]), Err(EnvelopeError::Truncated(1)));
        assert_eq!(decode(&[9, 0]), Err(EnvelopeError::UnknownVersion(9)));
        assert!(matches!(decode(&[VERSION, 3, b'a', b'b', b'c', 0]), Err(EnvelopeError::Truncated(6))));
        assert!(matches!(decode(&[VERSION, 200]), Err(EnvelopeError::BadProducer(_))));
        assert_eq!(decode(&[VERSION, 0, 0, 0, 0]), Err(EnvelopeError::Truncated(5)), "no time");
        let mut e = encode(Header::alone(Some(Produced { producer_id: "ab", sequence: 1 }), 1), b"x").unwrap();
        e[2] = 0xff;
        assert!(matches!(decode(&e), Err(EnvelopeError::BadProducer(_))));
        let mut e = encode(Header::alone(None, 1), b"").unwrap();
        e[11] = 1; // index 1 of 1
        assert_eq!(decode(&e), Err(EnvelopeError::BadBatch { index: 1, len: 1 }));
        e[11] = 0;
        e[13] = 0; // length 0
        assert_eq!(decode(&e), Err(EnvelopeError::BadBatch { index: 0, len: 0 }));
        assert!(encode(Header::alone(Some(Produced { producer_id: "", sequence: 1 }), 0), b"").is_err());
        assert!(encode(Header::alone(Some(Produced { producer_id: &"x".repeat(65), sequence: 1 }), 0), b"").is_err());
        assert!(encode(Header { produced: None, time_ms: 0, batch: BatchPlace { index: 2, len: 2 } }, b"").is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(r) = decode(&bytes) {
                if bytes[0] == VERSION {
                    let again = encode(r.header, r.payload).unwrap();
                    prop_assert_eq!(again, bytes);
                }
            }
        }
    }
}
