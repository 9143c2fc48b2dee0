//! The index layout before blocks kept one sled record per run, keyed
//! `['r'][ledger][first id]`, valued `[log_id u32][base u64][end u32 * n]`.
//! A bookie of that version is moved to blocks when its index is opened,
//! before anything reads it; the move is one-way.
//!
//! Old runs are moved in key order, a chunk at a time, each chunk's old
//! records removed in the same sled batch that writes its blocks: a crash
//! leaves every run either old or moved, and the next open goes on from
//! the first old one. Key order mostly keeps the old look-up's rule (of two
//! runs covering an id, the one starting later wins); where a run's piece
//! lands on the first id of an earlier run's piece, the earlier piece's
//! tail is kept as a run of its own, and that tail, starting later, may
//! win over a third run covering the same ids, as a commit's kept tail
//! always could. Either location holds the entry: an entry's bytes never
//! change, and a read checks them. No run is dropped, so no entry loses a
//! location and garbage collection sees every log the runs referenced.

use crate::error::StorageError;

use super::run::Run;
use std::collections::BTreeMap;

use super::block::{block_of, Block};
use super::sled_index::{block_key, idx_err, load_block};

pub(super) const PREFIX_RUN: u8 = b'r';

/// Old runs moved per sled batch.
const CHUNK_RUNS: usize = 128;

/// Decodes an old run record; damage is refused with the key it was found at.
pub(super) fn decode_legacy(k: &[u8], v: &[u8]) -> Result<(u64, u64, Run), StorageError> {
    let bad =
        |what: &str| StorageError::Corrupt(format!("index run record {k:02x?} (the layout before blocks): {what}"));
    if k.len() != 17 || k[0] != PREFIX_RUN {
        return Err(bad("malformed key"));
    }
    if v.len() < 16 || !(v.len() - 12).is_multiple_of(4) {
        return Err(bad(&format!("{} bytes", v.len())));
    }
    let run = Run {
        log_id: u32::from_be_bytes(v[0..4].try_into().expect("4")),
        base: u64::from_be_bytes(v[4..12].try_into().expect("8")),
        ends: v[12..].chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("4"))).collect(),
    };
    run.check().map_err(|e| bad(&e.to_string()))?;
    let ledger = u64::from_be_bytes(k[1..9].try_into().expect("8"));
    let first = u64::from_be_bytes(k[9..17].try_into().expect("8"));
    if first.checked_add(run.len() as u64 - 1).is_none() {
        return Err(bad("runs past the last entry id"));
    }
    Ok((ledger, first, run))
}

/// Moves every old run record into blocks; `commit` makes it durable.
/// Returns the runs moved. A damaged old record stops the open with an
/// error naming it: dropping it would lose the only location of its
/// entries without a word.
pub(super) fn runs_to_blocks(
    tree: &sled::Tree,
    commit: &mut dyn FnMut() -> Result<(), StorageError>,
) -> Result<u64, StorageError> {
    let mut moved = 0u64;
    loop {
        let n = move_chunk(tree, CHUNK_RUNS)?;
        if n == 0 {
            break;
        }
        let before = moved;
        moved += n as u64;
        if before >> 20 != moved >> 20 {
            tracing::info!(runs = moved, "moving the index's run records into blocks");
        }
    }
    if moved > 0 {
        commit()?;
    }
    Ok(moved)
}

/// Moves the first `max` old runs (in key order) in one sled batch: their
/// records removed, the blocks they land in written. Returns how many.
pub(super) fn move_chunk(tree: &sled::Tree, max: usize) -> Result<usize, StorageError> {
    let mut b = sled::Batch::default();
    let mut runs = Vec::with_capacity(max);
    for kv in tree.scan_prefix([PREFIX_RUN]).take(max) {
        let (k, v) = kv.map_err(idx_err)?;
        runs.push(decode_legacy(&k, &v)?);
        b.remove(k);
    }
    let n = runs.len();
    if n == 0 {
        return Ok(0);
    }
    // One sled batch for the chunk: its old records go with the blocks
    // they land in, or neither does.
    for ((l, first), pieces) in by_block(runs) {
        b.insert(&block_key(l, first)[..], stored_with(tree, l, first, pieces)?.encode(first));
    }
    tree.apply_batch(b).map_err(idx_err)?;
    Ok(n)
}

/// New runs grouped by the block they fall in, each block's in increasing
/// first id (as `runs` and a key-order scan give them); a run crossing a
/// block boundary is split there.
fn by_block(new: Vec<(u64, u64, Run)>) -> BTreeMap<(u64, u64), Vec<(u64, Run)>> {
    let mut out: BTreeMap<(u64, u64), Vec<(u64, Run)>> = BTreeMap::new();
    for (l, first, run) in new {
        for (f, piece) in run.split_at_blocks(first) {
            out.entry((l, block_of(f))).or_default().push((f, piece));
        }
    }
    out
}

/// The stored block `(l, b)` with `pieces` put into it (`Block::put`).
fn stored_with(tree: &sled::Tree, l: u64, b: u64, pieces: Vec<(u64, Run)>) -> Result<Block, StorageError> {
    let mut block = load_block(tree, l, b)?.unwrap_or_default();
    block.put(pieces);
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{LedgerIndex, Location, SledIndex};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn legacy_key(l: u64, first: u64) -> [u8; 17] {
        let mut k = [0u8; 17];
        k[0] = PREFIX_RUN;
        k[1..9].copy_from_slice(&l.to_be_bytes());
        k[9..17].copy_from_slice(&first.to_be_bytes());
        k
    }

    fn legacy_value(r: &Run) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&r.log_id.to_be_bytes());
        v.extend_from_slice(&r.base.to_be_bytes());
        for e in &r.ends {
            v.extend_from_slice(&e.to_be_bytes());
        }
        v
    }

    /// Every location the earlier layout held for an entry: those of the
    /// runs covering it.
    fn legacy_locations(runs: &BTreeMap<(u64, u64), Run>, l: u64, e: u64) -> Vec<Location> {
        runs.range((l, 0)..=(l, e))
            .filter(|((_, f), r)| e - f < r.len() as u64)
            .map(|((_, f), r)| r.location((e - f) as usize))
            .collect()
    }

    fn legacy_state() -> impl Strategy<Value = BTreeMap<(u64, u64), Run>> {
        let run =
            (0u64..3, 0u64..400, 1usize..150, 1u32..5, 0u64..1_000_000).prop_map(|(l, first, n, log_id, base)| {
                ((l, first), Run { log_id, base, ends: (1..=n as u32).map(|i| 13 * i).collect() })
            });
        prop::collection::vec(run, 1..40).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// An index of the earlier layout, moved to blocks, finds every
        /// entry it held at a location it held for it, also when a crash
        /// stopped an earlier move after `done` runs and the next open
        /// finished it; and every run's bytes stay referenced (for GC).
        #[test]
        fn an_index_moved_to_blocks_finds_what_the_run_records_did(state in legacy_state(), done in 0usize..40) {
            let t = tempfile::tempdir().unwrap();
            {
                // (Through the index, whose close waits for sled to let go
                // of the directory; a dropped sled::Db may still hold it.)
                let idx = SledIndex::open(t.path()).unwrap();
                for ((l, f), r) in &state {
                    idx.damage(&legacy_key(*l, *f), &legacy_value(r));
                }
                idx.move_legacy(done);
                idx.close().unwrap();
            }
            let idx = SledIndex::open(t.path()).unwrap();
            for l in 0..3 {
                for e in 0..600 {
                    let held = legacy_locations(&state, l, e);
                    match idx.location(l, e).unwrap() {
                        Some(loc) => prop_assert!(held.contains(&loc), "ledger {} entry {}: {:?} not among {:?}", l, e, loc, held),
                        None => prop_assert!(held.is_empty(), "ledger {} entry {}: lost", l, e),
                    }
                }
                let last = state.iter().filter(|((sl, _), _)| *sl == l).map(|((_, f), r)| f + r.len() as u64 - 1).max();
                prop_assert_eq!(idx.last_entry(l).unwrap(), last);
            }
            prop_assert_eq!(idx.records_with_prefix(PREFIX_RUN), 0, "no run record left behind");
            // Garbage collection counts a log's live bytes from the runs: a
            // log the old runs referenced stays referenced.
            let mut logs = std::collections::BTreeSet::new();
            idx.for_each_run(&mut |r| { logs.insert(r.log_id); }).unwrap();
            let before: std::collections::BTreeSet<u32> = state.values().map(|r| r.log_id).collect();
            prop_assert_eq!(logs, before);
        }
    }

    #[test]
    fn a_damaged_run_record_stops_the_open_and_names_it() {
        let t = tempfile::tempdir().unwrap();
        {
            let idx = SledIndex::open(t.path()).unwrap();
            let r = Run { log_id: 1, base: 16, ends: vec![10, 5] };
            idx.damage(&legacy_key(7, 0), &legacy_value(&r));
            idx.close().unwrap();
        }
        let err = SledIndex::open(t.path()).err().expect("a damaged record refused");
        assert!(matches!(err, StorageError::Corrupt(ref s) if s.contains("layout before blocks")), "{err}");
    }
}
