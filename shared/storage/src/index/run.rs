//! A run: entries of one ledger with consecutive ids, stored back to back in
//! one entry log. The unit the index records and garbage collection moves.

use crate::entrylog::RECORD_MAX_BYTES;
use crate::error::StorageError;

use super::block::{block_of, BLOCK_ENTRIES};
use super::Location;

/// Entries `first..first + ends.len()` (the first id is kept beside it)
/// stored back to back in `log_id` from `base`; entry i ends at
/// `base + ends[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) log_id: u32,
    pub(crate) base: u64,
    pub(crate) ends: Vec<u32>,
}

impl Run {
    /// Every length and offset a run yields is checked here, once, when it
    /// is decoded: no record longer than `RECORD_MAX_BYTES`, no offset past
    /// `u64::MAX`, so that [`Run::location`] cannot overflow and no caller
    /// allocates for a length that damage produced.
    pub(crate) fn check(&self) -> Result<(), StorageError> {
        let Some(&last) = self.ends.last() else {
            return Err(StorageError::Corrupt("index run with no entry".into()));
        };
        if self.ends.windows(2).any(|w| w[1] <= w[0]) {
            return Err(StorageError::Corrupt("index run with unordered offsets".into()));
        }
        let too_long = self.ends.first().is_some_and(|&e| e > RECORD_MAX_BYTES)
            || self.ends.windows(2).any(|w| w[1] - w[0] > RECORD_MAX_BYTES);
        if too_long {
            return Err(StorageError::Corrupt(format!("index run with a record longer than {RECORD_MAX_BYTES} bytes")));
        }
        if self.base.checked_add(u64::from(last)).is_none() {
            return Err(StorageError::Corrupt("index run past the end of any file".into()));
        }
        Ok(())
    }

    /// The location of the i-th entry of the run.
    pub(crate) fn location(&self, i: usize) -> Location {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Location { log_id: self.log_id, offset: self.base + start as u64, len: self.ends[i] - start }
    }

    /// Entries in the run (never zero once checked).
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The run from its i-th entry on, as a run of its own.
    pub(crate) fn tail(&self, i: usize) -> Run {
        let cut = self.ends[i - 1];
        Run {
            log_id: self.log_id,
            base: self.base + cut as u64,
            ends: self.ends[i..].iter().map(|e| e - cut).collect(),
        }
    }

    /// Splits a run starting at `first` where it crosses a block boundary:
    /// (first id, run) pieces, each within one block.
    pub(crate) fn split_at_blocks(self, first: u64) -> Vec<(u64, Run)> {
        let mut out = Vec::new();
        let (mut at, mut run) = (first, self);
        loop {
            let room = (block_of(at).saturating_add(BLOCK_ENTRIES - 1) - at + 1) as usize;
            if run.len() <= room {
                out.push((at, run));
                return out;
            }
            let rest = run.tail(room);
            run.ends.truncate(room);
            out.push((at, run));
            at += room as u64;
            run = rest;
        }
    }
}

/// Groups (ledger, entry, location) into runs of consecutive ids laid out
/// back to back, none crossing a block boundary: (ledger, first id, run).
pub(crate) fn runs(locations: &[(u64, u64, Location)]) -> Vec<(u64, u64, Run)> {
    let mut out: Vec<(u64, u64, Run)> = Vec::new();
    for (l, e, loc) in locations {
        if let Some((rl, first, run)) = out.last_mut() {
            let next_id = first.checked_add(run.ends.len() as u64);
            let end = run.base + *run.ends.last().expect("runs are never empty") as u64;
            // An entry of another log may lie before the run's base: only
            // one that follows the run's end is measured from it (a debug
            // build's overflow check found the subtraction wrapping).
            let rel_end = (loc.offset + loc.len as u64).checked_sub(run.base);
            if let Some(rel_end) = rel_end.filter(|r| *r <= u32::MAX as u64) {
                if *rl == *l
                    && Some(*e) == next_id
                    && block_of(*e) == block_of(*first)
                    && loc.log_id == run.log_id
                    && loc.offset == end
                {
                    run.ends.push(rel_end as u32);
                    continue;
                }
            }
        }
        out.push((*l, *e, Run { log_id: loc.log_id, base: loc.offset, ends: vec![loc.len] }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn laid_out(ids: std::ops::Range<u64>) -> Vec<(u64, u64, Location)> {
        ids.enumerate().map(|(i, e)| (3, e, Location { log_id: 1, offset: 16 + 10 * i as u64, len: 10 })).collect()
    }

    #[test]
    fn runs_never_cross_a_block_and_keep_every_location() {
        for ids in [0..1, 0..64, 0..65, 60..200, u64::MAX - 70..u64::MAX] {
            let locs = laid_out(ids.clone());
            let rs = runs(&locs);
            let mut seen = Vec::new();
            for (l, first, run) in &rs {
                assert_eq!(*l, 3);
                run.check().unwrap();
                let last = first + run.len() as u64 - 1;
                assert_eq!(block_of(*first), block_of(last), "{ids:?}: a run crosses a block");
                for i in 0..run.len() {
                    seen.push((3, first + i as u64, run.location(i)));
                }
            }
            assert_eq!(seen, locs, "{ids:?}");
            let pieces: usize = (block_of(ids.end - 1) - block_of(ids.start)) as usize / BLOCK_ENTRIES as usize + 1;
            assert_eq!(rs.len(), pieces, "{ids:?}: one run per block touched");
        }
    }

    #[test]
    fn splitting_a_long_run_at_blocks_keeps_its_locations() {
        let run = Run { log_id: 4, base: 100, ends: (1..=300).map(|i| 7 * i).collect() };
        let pieces = run.clone().split_at_blocks(40);
        assert_eq!(
            pieces.iter().map(|(f, r)| (*f, r.len())).collect::<Vec<_>>(),
            vec![(40, 24), (64, 64), (128, 64), (192, 64), (256, 64), (320, 20)]
        );
        let mut i = 0;
        for (_, p) in &pieces {
            for j in 0..p.len() {
                assert_eq!(p.location(j), run.location(i));
                i += 1;
            }
        }
    }
}
