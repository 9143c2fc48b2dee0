//! Planning a batch read over a striped ensemble (no I/O).
//!
//! Entry `e` lives on the `Qw` positions from `e mod E` on, so which
//! positions hold an id depends only on its remainder by `E`: a set of ids
//! is a range plus a set of remainders (a stripe), and a bookie can be asked
//! for exactly its share of a range in one request (ReadEntries).
//!
//! A range is cut into at most one part per position (fewer for a small
//! range, whose requests would cost more than they bring); each part goes
//! whole to its own position (the *primary*: it holds that part back to back
//! in its entry log, one sequential read), and the ids of the part the
//! primary does not hold (with `E > Qw`) go, a stripe each, to the first
//! position that does. Every id of the range is then asked of exactly one
//! position of its write set, and the load is spread over the ensemble (for
//! small ranges, over successive ranges by rotation). A position that failed is
//! avoided: [`cover`] asks the others for what it was asked.

use crate::writer::Quorums;

/// One request of a plan: ask `position` for the ids of `first..=last` in
/// the stripe (`modulus` 0: all of them; else those whose remainder by
/// `modulus` is a set bit of `residues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Ensemble position asked.
    pub position: usize,
    /// First id.
    pub first: u64,
    /// Last id (inclusive).
    pub last: u64,
    /// 0 for every id, else the ensemble size.
    pub modulus: u32,
    /// The remainders wanted, a bit each (with `modulus` > 0).
    pub residues: u64,
}

impl Ask {
    /// Whether `entry_id` is one this ask wants.
    pub fn wants(&self, entry_id: u64) -> bool {
        (self.first..=self.last).contains(&entry_id)
            && (self.modulus == 0 || (self.residues >> (entry_id % self.modulus as u64)) & 1 == 1)
    }

    /// The remainders (by E) this ask wants, a bit each.
    fn residue_mask(&self, ensemble: usize) -> u64 {
        if self.modulus == 0 {
            all_residues(ensemble)
        } else {
            self.residues
        }
    }
}

fn all_residues(ensemble: usize) -> u64 {
    if ensemble >= 64 {
        u64::MAX
    } else {
        (1u64 << ensemble) - 1
    }
}

/// The remainders (by E) whose ids `position` holds, a bit each: the
/// stripe a fragment of that position is.
pub fn held_by(q: &Quorums, position: usize) -> u64 {
    (0..q.ensemble).filter(|r| (q.write_mask(*r as u64) >> position) & 1 == 1).fold(0, |m, r| m | 1u64 << r)
}

/// Plans `first..=last` (one segment, read with quorums `q`) in at most
/// `parts` contiguous parts (at most E), avoiding the positions set in
/// `avoid`; `rotate` turns which part each position gets (vary it between
/// ranges so no position is always first). Ids no position outside `avoid`
/// holds are in no ask. Fewer parts mean fewer requests for a small range:
/// with one, a range no striping splits is one request to one bookie.
pub fn plan(q: &Quorums, first: u64, last: u64, parts: usize, rotate: usize, avoid: u64) -> Vec<Ask> {
    assert!(first <= last, "plan of an empty range {first}..={last}");
    let e = q.ensemble;
    let span = last - first; // ids - 1, no overflow at u64::MAX
    let parts = (e as u64).min(parts.max(1) as u64).min(span.saturating_add(1)) as usize;
    let per = (span / parts as u64).saturating_add(1);
    let mut asks = Vec::new();
    let mut at = first;
    for k in 0..parts {
        let end = if k + 1 == parts { last } else { last.min(at.saturating_add(per - 1)) };
        // The primary: the part's own position, or the next one not avoided.
        if let Some(p) = (0..e).map(|i| (k + rotate + i) % e).find(|p| (avoid >> p) & 1 == 0) {
            asks.push(Ask { position: p, first: at, last: end, modulus: 0, residues: 0 });
            let rest = all_residues(e) & !held_by(q, p);
            asks.extend(cover(q, at, end, rest, avoid));
        }
        if end == last {
            break;
        }
        at = end + 1;
    }
    asks
}

/// Asks for the ids of `first..=last` whose remainder by E is in `residues`,
/// each of the first position of its write set not in `avoid`, one ask per
/// position asked. Remainders every holder of which is avoided are left out.
pub fn cover(q: &Quorums, first: u64, last: u64, residues: u64, avoid: u64) -> Vec<Ask> {
    let mut by_position = vec![0u64; q.ensemble];
    for r in 0..q.ensemble {
        if (residues >> r) & 1 == 0 {
            continue;
        }
        let holder = q.write_set(r as u64).into_iter().find(|p| (avoid >> p) & 1 == 0);
        if let Some(p) = holder {
            by_position[p] |= 1u64 << r;
        }
    }
    by_position
        .into_iter()
        .enumerate()
        .filter(|(_, m)| *m != 0)
        .map(|(position, residues)| Ask { position, first, last, modulus: q.ensemble as u32, residues })
        .collect()
}

/// What is left to ask after `ask` failed at `from` (its ids from there on),
/// avoiding the positions in `avoid` (the failed one among them).
pub fn retry(q: &Quorums, ask: &Ask, from: u64, avoid: u64) -> Vec<Ask> {
    if from > ask.last {
        return Vec::new();
    }
    cover(q, from, ask.last, ask.residue_mask(q.ensemble), avoid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The positions asked for `id` that hold it. (A primary is asked for its
    /// whole part, the ids it does not hold included: it answers what it has.)
    fn askers(q: &Quorums, asks: &[Ask], id: u64) -> Vec<usize> {
        let ws = q.write_set(id);
        asks.iter().filter(|a| a.wants(id) && ws.contains(&a.position)).map(|a| a.position).collect()
    }

    #[test]
    fn without_striping_each_position_reads_one_part_whole() {
        let q = Quorums::new(3, 3, 2).unwrap();
        let asks = plan(&q, 0, 299, 3, 0, 0);
        assert_eq!(
            asks,
            vec![
                Ask { position: 0, first: 0, last: 99, modulus: 0, residues: 0 },
                Ask { position: 1, first: 100, last: 199, modulus: 0, residues: 0 },
                Ask { position: 2, first: 200, last: 299, modulus: 0, residues: 0 },
            ]
        );
    }

    #[test]
    fn a_range_in_one_part_is_one_ask_without_striping_and_a_cover_with_it() {
        let q = Quorums::new(3, 3, 2).unwrap();
        assert_eq!(plan(&q, 0, 99, 1, 1, 0), vec![Ask { position: 1, first: 0, last: 99, modulus: 0, residues: 0 }]);
        // E=3 Qw=2: position 0 lacks ids 1 mod 3, which position 1 holds.
        let q = Quorums::new(3, 2, 2).unwrap();
        assert_eq!(
            plan(&q, 0, 99, 1, 0, 0),
            vec![
                Ask { position: 0, first: 0, last: 99, modulus: 0, residues: 0 },
                Ask { position: 1, first: 0, last: 99, modulus: 3, residues: 0b010 },
            ]
        );
    }

    #[test]
    fn with_striping_what_a_primary_lacks_goes_to_a_holder() {
        // E=3 Qw=2: position 0 holds ids 0 and 2 mod 3; ids 1 mod 3 are on 1 and 2.
        let q = Quorums::new(3, 2, 2).unwrap();
        let asks = plan(&q, 0, 8, 3, 0, 0);
        assert_eq!(asks[0], Ask { position: 0, first: 0, last: 2, modulus: 0, residues: 0 });
        assert_eq!(asks[1], Ask { position: 1, first: 0, last: 2, modulus: 3, residues: 0b010 });
        // A failed position is avoided: its part goes to the next, and the stripe
        // it lacks to the other holder.
        let asks = plan(&q, 0, 8, 3, 0, 0b001);
        assert!(asks.iter().all(|a| a.position != 0));
        let retried = retry(&q, &Ask { position: 0, first: 0, last: 8, modulus: 0, residues: 0 }, 4, 0b001);
        assert!(retried.iter().all(|a| a.position != 0 && a.first == 4));
    }

    proptest! {
        /// Every id of the range is asked of exactly one position, one of its
        /// write set and outside `avoid`; an id nobody outside `avoid` holds is
        /// asked of nobody.
        #[test]
        fn every_id_is_asked_once_of_a_replica_that_holds_it(
            (e, w) in (1usize..=8).prop_flat_map(|e| (Just(e), 1..=e)),
            first in prop_oneof![0u64..1000, (u64::MAX - 1000)..=u64::MAX],
            len in 0u64..200,
            parts in 1usize..=8,
            rotate in 0usize..16,
            avoid in 0u64..256,
        ) {
            let q = Quorums::new(e, w, 1).unwrap();
            let last = first.saturating_add(len);
            let avoid = avoid & all_residues(e);
            let asks = plan(&q, first, last, parts, rotate, avoid);
            prop_assert!(asks.iter().filter(|a| a.modulus == 0).count() <= parts.min(e), "more primaries than parts");
            for id in (first..=last).take(300) {
                let holders: Vec<usize> = q.write_set(id).into_iter().filter(|p| (avoid >> p) & 1 == 0).collect();
                let asked = askers(&q, &asks, id);
                prop_assert_eq!(asked.len(), usize::from(!holders.is_empty()), "id {} asked of {:?}", id, asked);
                prop_assert!(asked.iter().all(|p| holders.contains(p)), "id {id} asked of {asked:?}, held by {holders:?}");
                // Only a primary is asked for ids it does not hold, and never a stripe.
                let stray = asks.iter().filter(|a| a.wants(id) && !q.write_set(id).contains(&a.position));
                prop_assert!(stray.clone().all(|a| a.modulus == 0), "a stripe asked of a non-holder");
            }
            // A retry of any ask from any point covers what is left of it the same way.
            for a in &asks {
                let from = a.first + (a.last - a.first) / 2;
                let more = avoid | 1 << a.position;
                let again = retry(&q, a, from, more);
                for id in (from..=a.last).filter(|i| a.wants(*i)).take(100) {
                    let holders: Vec<usize> = q.write_set(id).into_iter().filter(|p| (more >> p) & 1 == 0).collect();
                    let asked = askers(&q, &again, id);
                    prop_assert_eq!(asked.len(), usize::from(!holders.is_empty()));
                    prop_assert!(asked.iter().all(|p| holders.contains(p)));
                }
            }
        }
    }
}
