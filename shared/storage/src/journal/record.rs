//! Journal records: what the journal writes, and how a torn tail is told
//! apart from a record.
//!
//! ```text
//! +-----------+-------------+---------+-----------------+
//! | len: u32  | crc32c: u32 | kind:u8 | body (len-1 B)  |   all integers big-endian
//! +-----------+-------------+---------+-----------------+
//! ```
//! `len` counts kind and body; `crc32c` covers kind and body, and is sealed
//! with the segment's [`Format`]: in versions 3 and 4 the body starts with
//! the segment life's random nonce and the CRC starts from it, so neither
//! the records a reused file still holds from its previous life nor bytes
//! inside a payload ever pass for this segment's (version 2 sealed with the
//! segment id, which anyone can predict). Every batch ends in a tail marker
//! ([`RecordEnd::Tail`]). In version 4 (all written now) a batch fills
//! whole sectors, each stamped with the batch ([`super::sector`]), and the
//! marker stays; in versions 2 and 3 the next batch overwrote it.
//!
//! Version 1 segments (no header, written before reuse existed) are
//! preallocated with zeros, so a zero `len` is where their written part may
//! end ([`RecordEnd::Clean`]; replay checks that only zeros follow, else it is
//! a damaged length). A `len` past the end, or a CRC mismatch, is a torn
//! write or damage: version 4's stamps tell which ([`super::batches`]);
//! before it, replay guessed from what follows. A record is never split
//! across files.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes before a record's body: len, crc, kind.
pub const RECORD_HEADER_BYTES: usize = 9;

/// Body bytes of an entry record before the payload: ledger, entry, lac,
/// ledger length, digest.
const ENTRY_FIXED_BYTES: usize = 8 + 8 + 8 + 8 + 4;

const KIND_ENTRY: u8 = 1;
const KIND_FENCE: u8 = 2;
/// The kind byte of a tail marker (version 2; length 1, no payload).
pub const KIND_TAIL: u8 = 3;

/// Encoded size of the tail marker that follows every written batch.
pub const TAIL_BYTES: usize = RECORD_HEADER_BYTES;

/// Whether `b` is a record kind this version writes (a cheap filter before
/// a CRC when looking for a record boundary in damaged bytes).
pub fn is_record_kind(b: u8) -> bool {
    b == KIND_ENTRY || b == KIND_FENCE || b == KIND_TAIL
}

/// How a segment's records are sealed and where its written part ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// No header; plain CRC32C; the written part ends at zeros.
    V1,
    /// A header; the CRC starts from `salt` (the segment id's low 32 bits);
    /// the written part ends at a tail marker.
    V2 {
        /// The CRC's initial value.
        salt: u32,
    },
    /// As version 2, but sealed with a random 64-bit `nonce` drawn when the
    /// segment (or a spare's new life) begins: in its header and in every
    /// record after the kind byte, covered by the CRC (which starts from the
    /// nonce's folded halves). Nothing outside the journal knows it, so no
    /// payload can carry bytes that pass for a record of this segment: not
    /// when replay scans past a torn or damaged record, not ever (issue #45
    /// finding 2: version 2's seal, the segment id, anyone can predict).
    V3 {
        /// The segment life's secret.
        nonce: u64,
    },
    /// Records as version 3; every sector of the file after the header
    /// carries a stamp of the batch that wrote it, and each batch fills
    /// whole sectors (its tail marker kept, not overwritten): replay tells
    /// a batch torn by a power cut from damage ([`super::sector`]).
    V4 {
        /// The segment life's secret.
        nonce: u64,
    },
}

impl Format {
    /// The version 2 format of segment `id`. Ids below 2^32 give distinct
    /// salts, and distinct initial values give distinct CRCs of the same
    /// bytes (CRC is affine in its initial value): a record of one segment
    /// never checks out in another.
    pub fn v2(segment_id: u64) -> Format {
        Format::V2 { salt: segment_id as u32 }
    }

    /// The nonce records are sealed with (versions 3 and 4).
    pub fn nonce(self) -> Option<u64> {
        match self {
            Format::V3 { nonce } | Format::V4 { nonce } => Some(nonce),
            Format::V1 | Format::V2 { .. } => None,
        }
    }

    fn crc(self, body: &[u8]) -> u32 {
        match self {
            Format::V1 => crc32c::crc32c(body),
            Format::V2 { salt } => crc32c::crc32c_append(salt, body),
            Format::V3 { nonce } | Format::V4 { nonce } => crc32c::crc32c_append((nonce ^ (nonce >> 32)) as u32, body),
        }
    }

    /// Bytes every record carries after its kind byte: the nonce (versions 3 and 4).
    pub fn seal_bytes(self) -> usize {
        if self.nonce().is_some() {
            8
        } else {
            0
        }
    }

    /// Encoded size of the tail marker.
    pub fn tail_bytes(self) -> usize {
        TAIL_BYTES + self.seal_bytes()
    }

    fn put_seal(self, out: &mut BytesMut) {
        if let Some(nonce) = self.nonce() {
            out.put_u64(nonce);
        }
    }
}

/// Appends the tail marker (version 2): where replay finds the written part
/// of the segment to end. The next batch is written over it.
pub fn encode_tail(out: &mut BytesMut, format: Format) {
    let start = out.len();
    out.put_u32((1 + format.seal_bytes()) as u32);
    out.put_u32(0); // crc, patched below
    out.put_u8(KIND_TAIL);
    format.put_seal(out);
    let crc = format.crc(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// Re-seals every record in `buf` (whole records, as encoded) for `format`:
/// a batch encoded for one segment that is written to the next.
pub fn reseal(buf: &mut [u8], format: Format) {
    let mut at = 0;
    while at + RECORD_HEADER_BYTES <= buf.len() {
        let len = u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        let end = at + 8 + len;
        assert!(len > 0 && end <= buf.len(), "reseal: {at} does not start a whole record");
        if let Some(nonce) = format.nonce() {
            assert!(len >= 9, "reseal: a version 3 or 4 record carries its nonce");
            buf[at + 9..at + 17].copy_from_slice(&nonce.to_be_bytes());
        }
        let crc = format.crc(&buf[at + 8..end]);
        buf[at + 4..at + 8].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
    assert_eq!(at, buf.len(), "reseal: trailing bytes are not a record");
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
    /// Version 1, zero length: the preallocated, never-written part of the
    /// file, if only zeros follow (replay checks; otherwise a damaged
    /// length). Either version: the end of the file.
    Clean,
    /// Version 2: the tail marker after the last written batch.
    Tail,
    /// A torn or corrupt record: cut the journal here.
    Torn(&'static str),
}

impl Record {
    /// Encoded size in `format`, header and seal included.
    pub fn encoded_len_in(&self, format: Format) -> usize {
        self.encoded_len() + format.seal_bytes()
    }

    /// Encoded size in versions 1 and 2, header included.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_BYTES
            + match self {
                Record::Entry { payload, .. } => ENTRY_FIXED_BYTES + payload.len(),
                Record::Fence { .. } => 8,
            }
    }

    /// Appends the framed record to `out`, sealed for `format`.
    pub fn encode(&self, out: &mut BytesMut, format: Format) {
        out.reserve(self.encoded_len_in(format));
        let start = out.len();
        out.put_u32(0); // len, patched below
        out.put_u32(0); // crc, patched below
        match self {
            Record::Entry { ledger_id, entry_id, last_add_confirmed, ledger_length, crc32c, payload } => {
                out.put_u8(KIND_ENTRY);
                format.put_seal(out);
                out.put_u64(*ledger_id);
                out.put_u64(*entry_id);
                out.put_i64(*last_add_confirmed);
                out.put_u64(*ledger_length);
                out.put_u32(*crc32c);
                out.put_slice(payload);
            }
            Record::Fence { ledger_id } => {
                out.put_u8(KIND_FENCE);
                format.put_seal(out);
                out.put_u64(*ledger_id);
            }
        }
        let body = &out[start + 8..];
        let len = body.len() as u32;
        let crc = format.crc(body);
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    }

    /// Decodes the record at the start of `buf` (a slice of a journal file from
    /// a record boundary to the end of the file) sealed for `format`. Returns
    /// the record and its encoded length, or why there is none.
    pub fn decode(buf: &Bytes, format: Format) -> Result<(Record, usize), RecordEnd> {
        if buf.is_empty() {
            return Err(RecordEnd::Clean);
        }
        if buf.len() < 4 {
            // Fewer than 4 bytes left: only a clean end if they are zeros (v1).
            return if format == Format::V1 && buf.iter().all(|b| *b == 0) {
                Err(RecordEnd::Clean)
            } else {
                Err(RecordEnd::Torn("short header"))
            };
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len == 0 {
            return match format {
                Format::V1 => Err(RecordEnd::Clean),
                // Version 2 ends at a tail marker, never at zeros: zeros here
                // are a torn write or a damaged length.
                Format::V2 { .. } | Format::V3 { .. } | Format::V4 { .. } => Err(RecordEnd::Torn("zero record length")),
            };
        }
        if buf.len() < 8 + len {
            return Err(RecordEnd::Torn("record runs past the end of the file"));
        }
        let crc = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let sealed = buf.slice(8..8 + len);
        if format.crc(&sealed) != crc {
            return Err(RecordEnd::Torn("record CRC mismatch"));
        }
        if let Some(nonce) = format.nonce() {
            // The CRC matched by chance, or the bytes hold another life's nonce.
            if sealed.len() < 9 || sealed[1..9] != nonce.to_be_bytes() {
                return Err(RecordEnd::Torn("record sealed for another segment"));
            }
        }
        // The fields start after the kind byte and the seal.
        let o = 1 + format.seal_bytes();
        let body = sealed;
        let rec = match body[0] {
            KIND_TAIL if body.len() == o && format != Format::V1 => return Err(RecordEnd::Tail),
            KIND_ENTRY if body.len() > o - 1 + ENTRY_FIXED_BYTES => {
                let u64_at = |i: usize| u64::from_be_bytes(body[o + i..o + i + 8].try_into().expect("8 bytes"));
                Record::Entry {
                    ledger_id: u64_at(0),
                    entry_id: u64_at(8),
                    last_add_confirmed: u64_at(16) as i64,
                    ledger_length: u64_at(24),
                    crc32c: u32::from_be_bytes(body[o + 32..o + 36].try_into().expect("4 bytes")),
                    payload: body.slice(o + ENTRY_FIXED_BYTES..),
                }
            }
            KIND_FENCE if body.len() == o + 8 => {
                Record::Fence { ledger_id: u64::from_be_bytes(body[o..o + 8].try_into().expect("8 bytes")) }
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

    const FORMATS: [Format; 5] = [
        Format::V1,
        Format::V2 { salt: 1 },
        Format::V2 { salt: 0xffff_fffe },
        Format::V3 { nonce: 0x0123_4567_89ab_cdef },
        Format::V3 { nonce: 1 },
    ];

    #[test]
    fn records_round_trip() {
        for f in FORMATS {
            for rec in [entry(b""), entry(b"hello"), Record::Fence { ledger_id: u64::MAX }] {
                let mut buf = BytesMut::new();
                rec.encode(&mut buf, f);
                assert_eq!(buf.len(), rec.encoded_len_in(f));
                buf.extend_from_slice(&[0; 16]);
                let (got, n) = Record::decode(&buf.freeze(), f).unwrap();
                assert_eq!(got, rec);
                assert_eq!(n, rec.encoded_len_in(f));
            }
        }
    }

    #[test]
    fn zeros_are_a_clean_end_and_damage_is_torn() {
        assert_eq!(Record::decode(&Bytes::from_static(&[0; 32]), Format::V1), Err(RecordEnd::Clean));
        assert_eq!(Record::decode(&Bytes::new(), Format::V1), Err(RecordEnd::Clean));
        for f in FORMATS {
            let mut buf = BytesMut::new();
            entry(b"payload").encode(&mut buf, f);
            let full = buf.freeze();
            // Every truncation of a record is torn, never a (different) record.
            for cut in 1..full.len() {
                let r = Record::decode(&full.slice(..cut), f);
                // Under 4 bytes of a length prefix that begins with zeros cannot be told
                // from the end of a v1 file; either way it is no record.
                let ok = matches!(r, Err(RecordEnd::Torn(_))) || (cut < 4 && r == Err(RecordEnd::Clean));
                assert!(ok, "{f:?} cut at {cut}: {r:?}");
            }
            // Every single flipped bit is caught.
            for i in 0..full.len() * 8 {
                let mut b = full.to_vec();
                b[i / 8] ^= 1 << (i % 8);
                let r = Record::decode(&Bytes::from(b), f);
                assert!(r.is_err(), "{f:?} bit {i} flipped still decodes: {r:?}");
            }
        }
    }

    /// A reused segment file still holds its previous life's records: sealed
    /// for another segment, none of them, nor its tail markers, passes.
    #[test]
    fn a_record_sealed_for_one_segment_is_torn_in_any_other() {
        for (a, b) in [(1u64, 2u64), (7, 8), (1, u32::MAX as u64), (0x1_0000, 0x2_0000)] {
            for rec in [entry(b""), entry(b"x"), Record::Fence { ledger_id: 3 }] {
                let mut buf = BytesMut::new();
                rec.encode(&mut buf, Format::v2(a));
                let r = Record::decode(&buf.clone().freeze(), Format::v2(b));
                assert_eq!(r, Err(RecordEnd::Torn("record CRC mismatch")), "{a} read as {b}");
                assert!(Record::decode(&buf.freeze(), Format::V1).is_err(), "{a} read as v1");
            }
            let mut tail = BytesMut::new();
            encode_tail(&mut tail, Format::v2(a));
            assert_eq!(tail.len(), TAIL_BYTES);
            assert_eq!(Record::decode(&tail.clone().freeze(), Format::v2(a)), Err(RecordEnd::Tail));
            assert!(matches!(Record::decode(&tail.freeze(), Format::v2(b)), Err(RecordEnd::Torn(_))));
        }
        // Version 2 has no clean end at zeros: a tail marker ends it.
        assert!(matches!(Record::decode(&Bytes::from_static(&[0; 32]), Format::v2(1)), Err(RecordEnd::Torn(_))));
    }

    /// Version 3: a record (or tail marker) of one nonce never passes for
    /// another's, even where the CRC seeds collide (nonces whose folded
    /// halves are equal): the nonce itself is checked.
    #[test]
    fn a_version_3_record_is_torn_under_any_other_nonce() {
        let a = Format::V3 { nonce: 0x1111_2222_3333_4444 };
        // Same CRC seed (folded halves equal), different nonce.
        let b = Format::V3 { nonce: 0x0000_0000_2222_6666 ^ 0x1111_2222_3333_4444 ^ 0x0000_0000_1111_2222 };
        for other in [b, Format::V3 { nonce: 0x1111_2222_3333_4445 }, Format::v2(0x3333_4444), Format::V1] {
            for rec in [entry(b""), entry(b"x"), Record::Fence { ledger_id: 3 }] {
                let mut buf = BytesMut::new();
                rec.encode(&mut buf, a);
                assert!(Record::decode(&buf.freeze(), other).is_err(), "{a:?} read as {other:?}");
            }
            let mut tail = BytesMut::new();
            encode_tail(&mut tail, a);
            assert_eq!(tail.len(), a.tail_bytes());
            assert_eq!(Record::decode(&tail.clone().freeze(), a), Err(RecordEnd::Tail));
            assert!(Record::decode(&tail.freeze(), other).is_err());
        }
    }

    #[test]
    fn reseal_moves_a_version_3_batch_to_another_nonce() {
        let recs = [entry(b"a"), Record::Fence { ledger_id: 9 }, entry(b"bcd")];
        let (a, b) = (Format::V3 { nonce: 4 }, Format::V3 { nonce: u64::MAX - 4 });
        let mut buf = BytesMut::new();
        for r in &recs {
            r.encode(&mut buf, a);
        }
        reseal(&mut buf, b);
        let all = buf.freeze();
        let mut at = 0;
        for r in &recs {
            let (got, n) = Record::decode(&all.slice(at..), b).unwrap();
            assert_eq!(&got, r);
            assert!(Record::decode(&all.slice(at..), a).is_err());
            at += n;
        }
        assert_eq!(at, all.len());
    }

    #[test]
    fn reseal_moves_a_batch_to_another_segment() {
        let recs = [entry(b"a"), Record::Fence { ledger_id: 9 }, entry(b"bcd")];
        let mut buf = BytesMut::new();
        for r in &recs {
            r.encode(&mut buf, Format::v2(4));
        }
        reseal(&mut buf, Format::v2(5));
        let all = buf.freeze();
        let mut at = 0;
        for r in &recs {
            let (got, n) = Record::decode(&all.slice(at..), Format::v2(5)).unwrap();
            assert_eq!(&got, r);
            at += n;
        }
        assert_eq!(at, all.len());
    }
}
