//! An index block: the runs of one ledger whose entries fall in one aligned
//! range of `BLOCK_ENTRIES` ids, stored as one sled record.
//!
//! Why blocks: a bookie holding 100 000 open ledgers written round-robin
//! sees less than one entry per ledger in a flush, so each entry is a run
//! of its own. One sled record per run held about 45 bytes of memory per
//! record beyond sled's cache (607 MiB for ten million entries); the same
//! writes as one record per ledger block held 80 MiB (issue #46, the
//! `index_memory` bench in docs/benchmarks.md). No run crosses a block, so
//! an entry's location is in exactly one record: a look-up reads one key.
//!
//! Record layout, runs in increasing first id, none overlapping another's
//! first id: per run `[first - block u8][log_id u32][base u64][n u8][end u32 * n]`,
//! big-endian. A record that starts with `DAMAGED` (no run's first byte
//! can: it is under 64) is a block rebuilt over a damaged record: the ids
//! none of its runs covers had locations that were lost, and a look-up of
//! one answers `Corrupt`, never "absent" (an absent entry is one this
//! bookie never had; recovery counts such answers).

use std::collections::BTreeMap;

use crate::error::StorageError;

use super::run::Run;
use super::Location;

/// Entry ids per block (a power of two).
pub(crate) const BLOCK_ENTRIES: u64 = 64;

/// The first id of the block holding entry `e`.
pub(crate) fn block_of(e: u64) -> u64 {
    e & !(BLOCK_ENTRIES - 1)
}

/// The runs of one block, by first id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) runs: BTreeMap<u64, Run>,
    /// Rebuilt over a damaged record: ids no run covers are lost, not absent.
    pub(crate) damaged: bool,
}

const RUN_HEADER_BYTES: usize = 1 + 4 + 8 + 1;

/// The first byte of a block rebuilt over a damaged record.
const DAMAGED: u8 = 0xff;

impl Block {
    /// Decodes the record of the block starting at `first`; anything a
    /// damaged record could hold is refused with `Corrupt`.
    pub(crate) fn decode(first: u64, v: &[u8]) -> Result<Block, StorageError> {
        if block_of(first) != first {
            return Err(StorageError::Corrupt(format!("index block key {first} is not a block's first id")));
        }
        let mut runs = BTreeMap::new();
        let (damaged, mut rest) = match v.first() {
            Some(&DAMAGED) => (true, &v[1..]),
            _ => (false, v),
        };
        let mut prev: Option<u64> = None;
        while !rest.is_empty() {
            if rest.len() < RUN_HEADER_BYTES {
                return Err(StorageError::Corrupt(format!(
                    "index block {first}: a run header cut at {} bytes",
                    rest.len()
                )));
            }
            let delta = u64::from(rest[0]);
            let log_id = u32::from_be_bytes(rest[1..5].try_into().expect("4"));
            let base = u64::from_be_bytes(rest[5..13].try_into().expect("8"));
            let n = rest[13] as usize;
            rest = &rest[RUN_HEADER_BYTES..];
            if n == 0 || delta + n as u64 > BLOCK_ENTRIES || rest.len() < 4 * n {
                return Err(StorageError::Corrupt(format!("index block {first}: a run of {n} entries at {delta}")));
            }
            if prev.is_some_and(|p| p >= delta) {
                return Err(StorageError::Corrupt(format!("index block {first}: runs out of order")));
            }
            prev = Some(delta);
            let ends = rest[..4 * n].chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("4"))).collect();
            rest = &rest[4 * n..];
            let run = Run { log_id, base, ends };
            run.check()?;
            runs.insert(first + delta, run);
        }
        if runs.is_empty() && !damaged {
            return Err(StorageError::Corrupt(format!("index block {first} with no run")));
        }
        Ok(Block { runs, damaged })
    }

    /// The record for the block starting at `first`.
    pub(crate) fn encode(&self, first: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(1 + self.runs.values().map(|r| RUN_HEADER_BYTES + 4 * r.len()).sum::<usize>());
        if self.damaged {
            v.push(DAMAGED);
        }
        for (f, run) in &self.runs {
            debug_assert!(block_of(*f) == first && run.len() as u64 + (f - first) <= BLOCK_ENTRIES);
            v.push((f - first) as u8);
            v.extend_from_slice(&run.log_id.to_be_bytes());
            v.extend_from_slice(&run.base.to_be_bytes());
            v.push(run.len() as u8);
            for e in &run.ends {
                v.extend_from_slice(&e.to_be_bytes());
            }
        }
        v
    }

    /// Where entry `e` is: the run starting latest of those covering it.
    pub(crate) fn find(&self, e: u64) -> Option<Location> {
        self.runs.range(..=e).rev().find(|(f, r)| e - **f < r.len() as u64).map(|(f, r)| r.location((e - f) as usize))
    }

    /// Where entry `e` is, for a read: `Corrupt` for an id whose location
    /// was lost with a damaged record.
    pub(crate) fn look_up(&self, e: u64) -> Result<Option<Location>, StorageError> {
        match self.find(e) {
            None if self.damaged => Err(StorageError::Corrupt(format!(
                "the index block holding entry {e} was damaged: its location is lost"
            ))),
            found => Ok(found),
        }
    }

    /// The highest id any run covers.
    pub(crate) fn last_entry(&self) -> Option<u64> {
        self.runs.iter().map(|(f, r)| f + (r.len() as u64 - 1)).max()
    }

    /// Stores new runs (within this block, distinct first ids, in order).
    /// A new run replaces a stored run at the same first id; where the
    /// stored one covered more entries (a re-add of the head of a run, as
    /// recovery's write-back does, split over two flushes), its tail stays
    /// as a run of its own from the first id no other run starts at.
    /// Without it the tail's entries would lose their only location until
    /// (unless) their re-adds are stored too.
    pub(crate) fn put(&mut self, new: Vec<(u64, Run)>) {
        let mut replaced = Vec::new();
        for (first, run) in new {
            let n = run.len();
            if let Some(old) = self.runs.insert(first, run) {
                if old.len() > n {
                    replaced.push((first, n, old));
                }
            }
        }
        for (first, shorter, old) in replaced {
            let mut i = shorter;
            while i < old.len() {
                match self.runs.get(&(first + i as u64)) {
                    // A run starts there: it covers from there on for its length.
                    Some(r) => i += r.len(),
                    None => {
                        self.runs.insert(first + i as u64, old.tail(i));
                        break;
                    }
                }
            }
        }
    }

    /// The (id, location) of every entry this block holds in `lo..=hi`, in id order.
    pub(crate) fn paint(&self, lo: u64, hi: u64, out: &mut Vec<(u64, Location)>) -> Result<(), StorageError> {
        let mut e = lo;
        while e <= hi {
            if let Some(loc) = self.look_up(e)? {
                out.push((e, loc));
            }
            if e == u64::MAX {
                break;
            }
            e += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(log_id: u32, base: u64, n: usize) -> Run {
        Run { log_id, base, ends: (1..=n as u32).map(|i| 10 * i).collect() }
    }

    #[test]
    fn a_block_round_trips_and_finds_the_run_starting_latest() {
        let mut b = Block::default();
        b.put(vec![(64, run(1, 16, 64))]);
        b.put(vec![(70, run(2, 16, 3))]);
        let bytes = b.encode(64);
        let back = Block::decode(64, &bytes).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.find(71), Some(Location { log_id: 2, offset: 26, len: 10 }));
        assert_eq!(back.find(73), Some(Location { log_id: 1, offset: 16 + 90, len: 10 }));
        assert_eq!(back.find(63), None);
        assert_eq!(back.last_entry(), Some(127));
    }

    #[test]
    fn a_block_rebuilt_over_damage_answers_corrupt_for_what_it_lost() {
        let mut b = Block { damaged: true, ..Default::default() };
        assert_eq!(Block::decode(0, &b.encode(0)).unwrap(), b, "no run yet");
        b.put(vec![(3, run(1, 16, 2))]);
        let back = Block::decode(0, &b.encode(0)).unwrap();
        assert!(back.damaged);
        assert_eq!(back.look_up(4).unwrap(), Some(Location { log_id: 1, offset: 26, len: 10 }));
        assert!(matches!(back.look_up(1), Err(StorageError::Corrupt(_))), "lost, not absent");
        assert!(matches!(back.look_up(9), Err(StorageError::Corrupt(_))));
        assert_eq!(Block::default().look_up(1).unwrap(), None, "an undamaged block: absent");
    }

    #[test]
    fn a_shorter_run_over_a_longer_keeps_its_tail() {
        let mut b = Block::default();
        b.put(vec![(10, run(1, 16, 10))]);
        b.put(vec![(10, run(2, 16, 5))]);
        assert_eq!(b.find(12).unwrap().log_id, 2);
        assert_eq!(b.find(17), Some(Location { log_id: 1, offset: 16 + 70, len: 10 }));
        // The tail skips over a run that already starts inside it.
        let mut c = Block::default();
        c.put(vec![(0, run(1, 16, 10)), (4, run(3, 16, 2))]);
        c.put(vec![(0, run(2, 16, 3))]);
        assert_eq!(c.find(3).unwrap().log_id, 1, "the tail from the first id no run starts at");
        assert_eq!(c.find(5).unwrap().log_id, 3);
        assert_eq!(c.find(9), Some(Location { log_id: 1, offset: 16 + 90, len: 10 }));
    }

    proptest! {
        /// Whatever bytes a block record holds, decoding answers with a
        /// block whose every location is in bounds, or with Corrupt.
        #[test]
        fn damaged_block_bytes_are_refused_not_trusted(bytes in prop::collection::vec(any::<u8>(), 0..200), first in any::<u64>()) {
            if let Ok(b) = Block::decode(block_of(first), &bytes) {
                for (f, r) in &b.runs {
                    prop_assert_eq!(block_of(*f), block_of(first));
                    for i in 0..r.len() {
                        let loc = r.location(i);
                        prop_assert!(loc.offset.checked_add(u64::from(loc.len)).is_some());
                    }
                }
                prop_assert_eq!(Block::decode(block_of(first), &b.encode(block_of(first))).unwrap(), b);
            }
        }
    }
}
