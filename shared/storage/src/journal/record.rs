//! Journal records: what the journal writes, and how a torn tail is told
//! apart from a record.
//!
//! ```text
//! +-----------+-------------+---------+-----------------+
//! | len: u32  | crc32c: u32 | kind:u8 | body (len-1 B)  |   all integers big-endian
//! +-----------+-------------+---------+-----------------+
//! ```
//! `len` counts kind and body; `crc32c` covers kind and body. Journal files are
//! preallocated with zeros, so a zero `len` is where the written part may end
//! ([`RecordEnd::Clean`]; replay checks that only zeros follow, else it is a
//! damaged length); a `len` past the end of the file, or a CRC mismatch, is a
//! torn write (the process or the machine died mid-append) or damage, which
//! replay tells apart by what follows. A record is never split across files.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes before a record's body: len, crc, kind.
pub const RECORD_HEADER_BYTES: usize = 9;

/// Body bytes of an entry record before the payload: ledger, entry, lac,
/// ledger length, digest.
const ENTRY_FIXED_BYTES: usize = 8 + 8 + 8 + 8 + 4;

const KIND_ENTRY: u8 = 1;
const KIND_FENCE: u8 = 2;

/// Whether `b` is a record kind this version writes (a cheap filter before
/// a CRC when looking for a record boundary in damaged bytes).
pub fn is_record_kind(b: u8) -> bool {
    b == KIND_ENTRY || b == KIND_FENCE
}

/// One journaled fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An added entry, with the writer's digest, exactly as it will be stored.
    Entry {
        /// Ledger id.
        ledger_id: u64,
        /// Entry id.
        entry_id: u64,
        /// The LAC the writer sent with it.
        last_add_confirmed: i64,
        /// The ledger's length up to and including it.
        ledger_length: u64,
        /// The writer's CRC32C (quire_proto::digest).
        crc32c: u32,
        /// The payload.
        payload: Bytes,
    },
    /// The ledger was fenced: no normal add is accepted from now on.
    Fence {
        /// Ledger id.
        ledger_id: u64,
    },
}

/// Why bytes at a position are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordEnd {
    /// Zero length: the preallocated, never-written part of the file, if
    /// only zeros follow (replay checks; otherwise a damaged length).
    Clean,
    /// A torn or corrupt record: cut the journal here.
    Torn(&'static str),
}

impl Record {
    /// Encoded size, header included.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_BYTES
            + match self {
                Record::Entry { payload, .. } => ENTRY_FIXED_BYTES + payload.len(),
                Record::Fence { .. } => 8,
            }
    }

    /// Appends the framed record to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        let start = out.len();
        out.put_u32(0); // len, patched below
        out.put_u32(0); // crc, patched below
        match self {
            Record::Entry { ledger_id, entry_id, last_add_confirmed, ledger_length, crc32c, payload } => {
                out.put_u8(KIND_ENTRY);
                out.put_u64(*ledger_id);
                out.put_u64(*entry_id);
                out.put_i64(*last_add_confirmed);
                out.put_u64(*ledger_length);
                out.put_u32(*crc32c);
                out.put_slice(payload);
            }
            Record::Fence { ledger_id } => {
                out.put_u8(KIND_FENCE);
                out.put_u64(*ledger_id);
            }
        }
        let body = &out[start + 8..];
        let len = body.len() as u32;
        let crc = crc32c::crc32c(body);
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    }

    /// Decodes the record at the start of `buf` (a slice of a journal file from
    /// a record boundary to the end of the file). Returns the record and its
    /// encoded length, or why there is none.
    pub fn decode(buf: &Bytes) -> Result<(Record, usize), RecordEnd> {
        if buf.len() < 4 {
            // Fewer than 4 bytes left: only a clean end if they are zeros.
            return if buf.iter().all(|b| *b == 0) {
                Err(RecordEnd::Clean)
            } else {
                Err(RecordEnd::Torn("short header"))
            };
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len == 0 {
            return Err(RecordEnd::Clean);
        }
        if buf.len() < 8 + len {
            return Err(RecordEnd::Torn("record runs past the end of the file"));
        }
        let crc = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let body = buf.slice(8..8 + len);
        if crc32c::crc32c(&body) != crc {
            return Err(RecordEnd::Torn("record CRC mismatch"));
        }
        let rec = match body[0] {
            KIND_ENTRY if body.len() > ENTRY_FIXED_BYTES => {
                let u64_at = |i: usize| u64::from_be_bytes(body[i..i + 8].try_into().expect("8 bytes"));
                Record::Entry {
                    ledger_id: u64_at(1),
                    entry_id: u64_at(9),
                    last_add_confirmed: u64_at(17) as i64,
                    ledger_length: u64_at(25),
                    crc32c: u32::from_be_bytes(body[33..37].try_into().expect("4 bytes")),
                    payload: body.slice(1 + ENTRY_FIXED_BYTES..),
                }
            }
            KIND_FENCE if body.len() == 9 => {
                Record::Fence { ledger_id: u64::from_be_bytes(body[1..9].try_into().expect("8 bytes")) }
            }
            // A valid CRC over an unknown or misshapen record: written by a newer
            // version, or corrupt in a way the CRC missed. Either way, stop here.
            _ => return Err(RecordEnd::Torn("unknown record kind or size")),
        };
        Ok((rec, 8 + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(payload: &'static [u8]) -> Record {
        Record::Entry {
            ledger_id: 7,
            entry_id: 9,
            last_add_confirmed: -1,
            ledger_length: 5,
            crc32c: 0xdead_beef,
            payload: Bytes::from_static(payload),
        }
    }

    #[test]
    fn records_round_trip() {
        for rec in [entry(b""), entry(b"hello"), Record::Fence { ledger_id: u64::MAX }] {
            let mut buf = BytesMut::new();
            rec.encode(&mut buf);
            assert_eq!(buf.len(), rec.encoded_len());
            buf.extend_from_slice(&[0; 16]);
            let (got, n) = Record::decode(&buf.freeze()).unwrap();
            assert_eq!(got, rec);
            assert_eq!(n, rec.encoded_len());
        }
    }

    #[test]
    fn zeros_are_a_clean_end_and_damage_is_torn() {
        assert_eq!(Record::decode(&Bytes::from_static(&[0; 32])), Err(RecordEnd::Clean));
        assert_eq!(Record::decode(&Bytes::new()), Err(RecordEnd::Clean));
        let mut buf = BytesMut::new();
        entry(b"payload").encode(&mut buf);
        let full = buf.freeze();
        // Every truncation of a record is torn, never a (different) record.
        for cut in 1..full.len() {
            let r = Record::decode(&full.slice(..cut));
            // Under 4 bytes of a length prefix that begins with zeros cannot be told
            // from the end of the file; either way it is no record.
            let ok = matches!(r, Err(RecordEnd::Torn(_))) || (cut < 4 && r == Err(RecordEnd::Clean));
            assert!(ok, "cut at {cut}: {r:?}");
        }
        // Every single flipped bit is caught.
        for i in 0..full.len() * 8 {
            let mut b = full.to_vec();
            b[i / 8] ^= 1 << (i % 8);
            let r = Record::decode(&Bytes::from(b));
            assert!(r.is_err(), "bit {i} flipped still decodes: {r:?}");
        }
    }
}
