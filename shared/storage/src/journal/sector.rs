//! Version 4 journal layout: every 512-byte sector after the header carries
//! a stamp naming the batch (group commit) that wrote it, so that replay
//! can tell a batch torn by a power cut from one damaged after it was
//! synced (issue #45 finding 6).
//!
//! ```text
//! sector (512 B) = stamp (16 B) | data (496 B)
//! stamp          = tag: u32 | seq: u32 | idx: u32 | count: u32   big-endian
//! ```
//! - `tag` is derived from the segment life's nonce: a sector of a previous
//!   life (a reused spare) or a preallocated zero sector never carries it.
//! - `seq` numbers the batches of a segment's life from 1; `idx` is the
//!   sector's place in its batch, `count` the batch's sectors.
//! - A batch starts on a sector boundary and fills whole sectors: its
//!   records and tail marker, then zeros. No sector is written by two batches.
//!
//! Why this tells the two apart: the pages of one unsynced `pwrite` reach
//! the disk in any order, so after a power cut each sector of the batch in
//! flight holds either what it held before (no stamp of this batch) or the
//! whole new sector (its stamp). A bit flip after the sync leaves every
//! stamp of the batch in place (or within a few bits of it). So a batch
//! whose every sector carries its stamp landed whole, and a bad record in
//! it is damage; a batch with a sector that is not its own was torn, unless
//! a later batch exists, which the writer starts only after this one's
//! fdatasync succeeded: then it too is damage.

use bytes::{BufMut, BytesMut};

/// Bytes in a sector, the unit a torn write is made of.
pub const SECTOR_BYTES: usize = 512;
/// Bytes of a sector's stamp.
pub const STAMP_BYTES: usize = 16;
/// Bytes of a sector that carry records.
pub const SECTOR_DATA_BYTES: usize = SECTOR_BYTES - STAMP_BYTES;

/// Bit differences up to which a stamp still counts as the one expected:
/// a stamp flipped by a few bits after the sync is the batch's own sector
/// (damaged), while an old sector's stamp is zeros or another life's: its
/// tag is random, 16 bits away on average (with the rest alike, within 3
/// bits about once in 800 000; that misjudgement reports damage, never
/// takes a torn batch for a good one: its records' CRCs still fail).
const NEAR_BITS: u32 = 3;

/// What a sector's stamp says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The batch's number in the segment's life, from 1.
    pub seq: u32,
    /// The sector's place in the batch.
    pub idx: u32,
    /// The batch's sectors.
    pub count: u32,
}

/// The tag every stamp of the life sealed by `nonce` carries: at least 8
/// bits set, so that a preallocated sector's zeros are never near a stamp.
pub fn tag(nonce: u64) -> u32 {
    let folded = (nonce ^ (nonce >> 32)) as u32;
    let t = folded.rotate_left(13) ^ 0x5354_414d;
    if t.count_ones() < 8 {
        t ^ 0xa5a5_a5a5
    } else {
        t
    }
}

impl Stamp {
    /// The stamp's bytes for the life sealed by `nonce`.
    pub fn encode(self, nonce: u64) -> [u8; STAMP_BYTES] {
        let mut b = [0u8; STAMP_BYTES];
        b[0..4].copy_from_slice(&tag(nonce).to_be_bytes());
        b[4..8].copy_from_slice(&self.seq.to_be_bytes());
        b[8..12].copy_from_slice(&self.idx.to_be_bytes());
        b[12..16].copy_from_slice(&self.count.to_be_bytes());
        b
    }

    /// The stamp at the start of `sector`, if it is one of this life's.
    pub fn decode(sector: &[u8], nonce: u64) -> Option<Stamp> {
        let b = sector.get(..STAMP_BYTES)?;
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let s = Stamp { seq: u32_at(4), idx: u32_at(8), count: u32_at(12) };
        (u32_at(0) == tag(nonce) && s.seq > 0 && s.idx < s.count).then_some(s)
    }

    /// Whether `sector` starts with this stamp, or with bytes a few bits from it.
    pub fn near(self, sector: &[u8], nonce: u64) -> bool {
        let Some(b) = sector.get(..STAMP_BYTES) else { return false };
        let want = self.encode(nonce);
        let differ: u32 = b.iter().zip(want.iter()).map(|(x, y)| (x ^ y).count_ones()).sum();
        differ <= NEAR_BITS
    }
}

/// Sectors a batch of `len` record bytes fills.
pub fn sectors_for(len: usize) -> usize {
    len.div_ceil(SECTOR_DATA_BYTES).max(1)
}

/// Appends batch `seq`'s records (`logical`: records and tail marker, as
/// encoded) to `out` as whole stamped sectors, zero-padded.
pub fn stamp_batch(logical: &[u8], seq: u32, nonce: u64, out: &mut BytesMut) {
    let count = sectors_for(logical.len());
    out.reserve(count * SECTOR_BYTES);
    for idx in 0..count {
        let stamp = Stamp { seq, idx: idx as u32, count: count as u32 };
        out.put_slice(&stamp.encode(nonce));
        let from = (idx * SECTOR_DATA_BYTES).min(logical.len());
        let to = ((idx + 1) * SECTOR_DATA_BYTES).min(logical.len());
        out.put_slice(&logical[from..to]);
        out.put_bytes(0, SECTOR_DATA_BYTES - (to - from));
    }
}

/// The file offset just after the first `len` (> 0) record bytes of a batch
/// whose first sector starts at `base`.
pub fn end_offset(base: u64, len: usize) -> u64 {
    debug_assert!(len > 0);
    let last = len - 1;
    base + ((last / SECTOR_DATA_BYTES) * SECTOR_BYTES + STAMP_BYTES + last % SECTOR_DATA_BYTES + 1) as u64
}

/// The file offset of record byte `at` of a batch whose first sector starts at `base`.
pub fn byte_offset(base: u64, at: usize) -> u64 {
    base + ((at / SECTOR_DATA_BYTES) * SECTOR_BYTES + STAMP_BYTES + at % SECTOR_DATA_BYTES) as u64
}

/// The data part of each of `sectors` (whole sectors), concatenated.
pub fn unstamp(sectors: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sectors.len() / SECTOR_BYTES * SECTOR_DATA_BYTES);
    for s in sectors.chunks_exact(SECTOR_BYTES) {
        out.extend_from_slice(&s[STAMP_BYTES..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_fills_whole_stamped_sectors_and_offsets_map_back() {
        let nonce = 0x0123_4567_89ab_cdef;
        for len in [1usize, 17, 495, 496, 497, 992, 5000] {
            let logical: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            let mut out = BytesMut::new();
            stamp_batch(&logical, 7, nonce, &mut out);
            assert_eq!(out.len() % SECTOR_BYTES, 0);
            let count = out.len() / SECTOR_BYTES;
            assert_eq!(count, sectors_for(len));
            for (idx, s) in out.chunks(SECTOR_BYTES).enumerate() {
                assert_eq!(Stamp::decode(s, nonce), Some(Stamp { seq: 7, idx: idx as u32, count: count as u32 }));
                assert_eq!(Stamp::decode(s, nonce ^ 1 << 40), None, "another life's tag");
            }
            assert_eq!(&unstamp(&out)[..len], &logical[..]);
            let base = 4096u64;
            for at in [0, len / 2, len - 1] {
                assert_eq!(out[(byte_offset(base, at) - base) as usize], logical[at], "byte {at} of {len}");
                assert_eq!(end_offset(base, at + 1), byte_offset(base, at) + 1);
            }
        }
    }

    #[test]
    fn zeros_are_no_stamp_and_a_few_flipped_bits_are_still_near() {
        let nonce = 42;
        assert_eq!(Stamp::decode(&[0u8; SECTOR_BYTES], nonce), None);
        let s = Stamp { seq: 3, idx: 1, count: 4 };
        let mut b = s.encode(nonce).to_vec();
        b[1] ^= 0x81;
        b[13] ^= 0x10;
        assert_eq!(Stamp::decode(&b, nonce), None);
        assert!(s.near(&b, nonce));
        assert!(!s.near(&[0u8; STAMP_BYTES], nonce));
        assert!(!s.near(&Stamp { seq: 3, idx: 1, count: 4 }.encode(nonce ^ 0xffff_0000_0000), nonce));
    }
}
