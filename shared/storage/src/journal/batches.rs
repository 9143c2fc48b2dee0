//! Reading a version 4 segment back as batches, and judging each: landed
//! whole, synced then damaged, or torn by a crash before its sync
//! ([`super::sector`] says why the stamps can tell).

use bytes::Bytes;

use super::sector::{unstamp, Stamp, SECTOR_BYTES};
use super::segment::HEADER_BYTES;

/// How a batch was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// Every sector carries the batch's stamp (or one a few bits from it):
    /// it reached the disk whole, so a record in it that does not check
    /// was damaged after the sync.
    Whole,
    /// A sector is not the batch's own, but a later batch exists, and the
    /// writer starts a batch only after the one before is synced: this one
    /// was durable, and its bad sectors are damage.
    Damaged,
}

/// One batch of a segment.
#[derive(Debug, Clone)]
pub struct BatchRead {
    /// File offset of its first sector.
    pub base: u64,
    /// Its number in the segment's life.
    pub seq: u32,
    /// Its sectors' data, concatenated: records, the tail marker, zeros.
    pub data: Bytes,
    /// Whole or damaged.
    pub judged: Judged,
}

/// Where a segment's written part ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentEnd {
    /// No sector of a later batch follows: the written part ends at this
    /// offset (a batch of which no sector landed ends there too).
    Clean(u64),
    /// The batch starting at this offset has sectors that are not its own
    /// and none follows it: a crash tore it before its sync completed, so
    /// nothing in it was acknowledged.
    Torn(u64),
}

/// What [`read_batches`] found.
#[derive(Debug, Clone)]
pub struct SegmentRead {
    /// Batches in order.
    pub batches: Vec<BatchRead>,
    /// Offsets where whole batches are missing while later ones exist
    /// (damage: what they held is lost here).
    pub missing: Vec<u64>,
    /// Where the written part ends.
    pub end: SegmentEnd,
}

/// Reads the batches of a version 4 segment whose bytes are `file` and
/// whose life is sealed by `nonce`.
pub fn read_batches(file: &[u8], nonce: u64) -> SegmentRead {
    let first = HEADER_BYTES as usize;
    let n = file.len().saturating_sub(first) / SECTOR_BYTES;
    let sector = |k: usize| &file[first + k * SECTOR_BYTES..first + (k + 1) * SECTOR_BYTES];
    let offset = |k: usize| (first + k * SECTOR_BYTES) as u64;
    let stamps: Vec<Option<Stamp>> = (0..n).map(|k| Stamp::decode(sector(k), nonce)).collect();
    // The highest batch number at or after each sector: whether a later
    // batch exists is what tells damage from a torn write.
    let mut later = vec![0u32; n + 1];
    for k in (0..n).rev() {
        later[k] = later[k + 1].max(stamps[k].map_or(0, |s| s.seq));
    }
    let mut out = SegmentRead { batches: Vec::new(), missing: Vec::new(), end: SegmentEnd::Clean(offset(n)) };
    let (mut k, mut seq) = (0usize, 1u32);
    while k < n {
        let count = match stamps[k] {
            Some(s) if s.seq == seq && s.idx == 0 => s.count as usize,
            _ if later[k] < seq => {
                // Nothing of this batch or a later one: the written part ends.
                out.end = SegmentEnd::Clean(offset(k));
                return out;
            }
            _ => {
                // Sector k is not this batch's first: the first sector of one
                // that follows is what says where it is, and what it is.
                let (j, s) = (k..n)
                    .find_map(|j| stamps[j].filter(|s| s.seq >= seq).map(|s| (j, s)))
                    .expect("later[k] >= seq: a sector of this batch or a later one exists");
                let start = j.saturating_sub(s.idx as usize);
                if s.seq == seq && start == k {
                    s.count as usize
                } else if later[j + 1].max(s.seq) > seq {
                    // This batch (or more) is missing, and a later one exists.
                    out.missing.push(offset(k));
                    k = start.max(k + 1);
                    seq = s.seq;
                    continue;
                } else {
                    out.end = SegmentEnd::Torn(offset(k));
                    return out;
                }
            }
        };
        let end = k + count;
        let own = end <= n
            && (k..end).all(|i| {
                let want = Stamp { seq, idx: (i - k) as u32, count: count as u32 };
                stamps[i] == Some(want) || want.near(sector(i), nonce)
            });
        let judged = if own {
            Judged::Whole
        } else if later[end.min(n)] > seq {
            Judged::Damaged
        } else {
            out.end = SegmentEnd::Torn(offset(k));
            return out;
        };
        let to = end.min(n);
        let data = Bytes::from(unstamp(&file[first + k * SECTOR_BYTES..first + to * SECTOR_BYTES]));
        out.batches.push(BatchRead { base: offset(k), seq, data, judged });
        k = to;
        seq += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::sector::{stamp_batch, SECTOR_DATA_BYTES, STAMP_BYTES};
    use bytes::BytesMut;

    const NONCE: u64 = 0xfeed_0000_beef_0001;

    /// A segment of batches of the given record bytes, then `tail` bytes.
    fn segment(batches: &[usize], tail: &[u8]) -> (Vec<u8>, Vec<u64>) {
        let mut file = vec![0u8; HEADER_BYTES as usize];
        let mut bases = Vec::new();
        for (i, len) in batches.iter().enumerate() {
            bases.push(file.len() as u64);
            let mut b = BytesMut::new();
            stamp_batch(&vec![i as u8 + 1; *len], i as u32 + 1, NONCE, &mut b);
            file.extend_from_slice(&b);
        }
        file.extend_from_slice(tail);
        (file, bases)
    }

    fn sector_at(file: &mut [u8], base: u64, idx: usize) -> &mut [u8] {
        let at = base as usize + idx * SECTOR_BYTES;
        &mut file[at..at + SECTOR_BYTES]
    }

    #[test]
    fn whole_batches_end_cleanly_at_zeros_or_another_life() {
        let mut other = BytesMut::new();
        stamp_batch(&[9u8; 2000], 1, NONCE ^ 0xabcdef, &mut other);
        for tail in [vec![0u8; 4096], other.to_vec(), vec![]] {
            let (file, bases) = segment(&[10, 1200, 496], &tail);
            let r = read_batches(&file, NONCE);
            assert_eq!(r.batches.len(), 3);
            assert!(r.batches.iter().all(|b| b.judged == Judged::Whole));
            assert_eq!(r.batches.iter().map(|b| b.base).collect::<Vec<_>>(), bases);
            assert_eq!(&r.batches[1].data[..1200], &[2u8; 1200][..]);
            let end = bases[2] + SECTOR_BYTES as u64;
            assert_eq!(r.end, SegmentEnd::Clean(end));
            assert!(r.missing.is_empty());
        }
    }

    /// Each sector of the last batch old (zeros, or another life's) in turn:
    /// torn, cut at the batch's start. The same sector damaged in a batch
    /// that has a later one: damage.
    #[test]
    fn an_old_sector_tears_the_last_batch_and_damages_an_earlier_one() {
        let mut other = BytesMut::new();
        stamp_batch(&[9u8; 4000], 1, NONCE ^ 0x77, &mut other);
        for old in [vec![0u8; SECTOR_BYTES], other[SECTOR_BYTES..2 * SECTOR_BYTES].to_vec()] {
            for idx in 0..4 {
                let (mut file, bases) = segment(&[100, 4 * SECTOR_DATA_BYTES], &[]);
                sector_at(&mut file, bases[1], idx).copy_from_slice(&old);
                let r = read_batches(&file, NONCE);
                assert_eq!(r.end, SegmentEnd::Torn(bases[1]), "sector {idx} of the last batch");
                assert_eq!(r.batches.len(), 1);
                let (mut file, bases) = segment(&[4 * SECTOR_DATA_BYTES, 100], &[]);
                sector_at(&mut file, bases[0], idx).copy_from_slice(&old);
                let r = read_batches(&file, NONCE);
                // Even its first sector gone: where it was, the next one says.
                assert_eq!(r.batches[0].judged, Judged::Damaged, "sector {idx}: {r:?}");
                assert_eq!(r.batches.len(), 2);
                assert_eq!(r.batches[1].base, bases[1]);
                assert_eq!(r.end, SegmentEnd::Clean(file.len() as u64));
            }
        }
    }

    /// Bits flipped after the sync, in the data or in a stamp, leave the last
    /// batch whole: its bad record is damage, never a torn tail.
    #[test]
    fn flipped_bits_leave_the_last_batch_whole() {
        for (idx, byte) in [(0usize, 3usize), (1, 200), (2, 9), (3, STAMP_BYTES + 5)] {
            let (mut file, bases) = segment(&[100, 4 * SECTOR_DATA_BYTES], &[]);
            sector_at(&mut file, bases[1], idx)[byte] ^= 0x24;
            let r = read_batches(&file, NONCE);
            assert_eq!(r.batches.len(), 2, "sector {idx} byte {byte}");
            assert_eq!(r.batches[1].judged, Judged::Whole);
            assert_eq!(r.end, SegmentEnd::Clean(file.len() as u64));
        }
    }

    /// A batch wholly missing (zeroed) between two that are not: damage, and
    /// the later batch is still read.
    #[test]
    fn a_missing_batch_with_a_later_one_is_damage() {
        let (mut file, bases) = segment(&[100, 100, 100], &[]);
        sector_at(&mut file, bases[1], 0).fill(0);
        let r = read_batches(&file, NONCE);
        assert_eq!(r.missing, vec![bases[1]]);
        assert_eq!(r.batches.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![1, 3]);
        // The same batch last: nothing of it landed, a clean end.
        let (mut file, bases) = segment(&[100, 100], &[]);
        sector_at(&mut file, bases[1], 0).fill(0);
        let r = read_batches(&file, NONCE);
        assert_eq!(r.end, SegmentEnd::Clean(bases[1]));
        assert!(r.missing.is_empty());
    }
}
