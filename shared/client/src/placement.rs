//! Placement: which bookies form an ensemble, and which one replaces a failed
//! member, spreading every write quorum over racks.
//!
//! A write set is Qw *consecutive* ensemble positions, so the ensemble is laid
//! out by dealing bookies from the racks in turn: with at least Qw racks, every
//! window of Qw positions then spans Qw racks, and one rack's loss costs any
//! entry at most one copy. With fewer racks than `min_racks`, the policy does
//! the best the cluster allows (every rack in every window) rather than refuse.
//! Deterministic for a given seed, so the simulator can replay it.

use std::collections::{BTreeMap, BTreeSet};

use crate::writer::Member;

/// A bookie placement may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its id.
    pub bookie_id: String,
    /// The instance registered under that id now.
    pub instance_id: String,
    /// Its rack.
    pub rack: String,
    /// Only writable bookies are placed on.
    pub writable: bool,
    /// Free disk, the tie-breaker.
    pub free_bytes: u64,
}

/// Why no placement exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Fewer writable bookies than the ensemble needs.
    #[error("need {needed} writable bookies, {available} available")]
    NotEnoughBookies {
        /// Bookies the ensemble needs.
        needed: usize,
        /// Writable bookies not excluded.
        available: usize,
    },
}

fn mix(seed: u64, s: &str) -> u64 {
    // FNV-1a over the id, salted: a stable pseudo-random order per seed.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Chooses an ensemble of `e` bookies so that every window of `qw` consecutive
/// positions (cyclically: the write sets) spans as many distinct racks as
/// possible. How many bookies each rack gives is dealt round-robin (as even
/// as the racks allow); their order is a smooth weighted round-robin, which
/// spaces each rack's members evenly around the ensemble.
pub fn choose_ensemble(
    candidates: &[Candidate],
    e: usize,
    qw: usize,
    seed: u64,
) -> Result<Vec<String>, PlacementError> {
    debug_assert!(qw >= 1 && qw <= e.max(1));
    let mut racks: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in candidates.iter().filter(|c| c.writable) {
        racks.entry(c.rack.as_str()).or_default().push(c);
    }
    let available: usize = racks.values().map(Vec::len).sum();
    if available < e {
        return Err(PlacementError::NotEnoughBookies { needed: e, available });
    }
    // Within a rack: most free disk first, then the seed's order.
    for list in racks.values_mut() {
        list.sort_by_key(|c| (std::cmp::Reverse(c.free_bytes / (1 << 30)), mix(seed, &c.bookie_id)));
    }
    // Racks in the seed's order, largest first.
    let mut order: Vec<&str> = racks.keys().copied().collect();
    order.sort_by_key(|r| (std::cmp::Reverse(racks[r].len()), mix(seed, r)));
    // How many from each rack: one from each in turn.
    let mut counts = vec![0usize; order.len()];
    let mut dealt = 0;
    while dealt < e {
        for (i, r) in order.iter().enumerate() {
            if dealt < e && counts[i] < racks[r].len() {
                counts[i] += 1;
                dealt += 1;
            }
        }
    }
    // In which order: smooth weighted round-robin over the counts.
    let mut score = vec![0i64; order.len()];
    let mut taken = vec![0usize; order.len()];
    let mut out = Vec::with_capacity(e);
    for _ in 0..e {
        for (i, c) in counts.iter().enumerate() {
            score[i] += *c as i64;
        }
        let pick = (0..order.len())
            .filter(|&i| taken[i] < counts[i])
            .max_by_key(|&i| (score[i], std::cmp::Reverse(i)))
            .expect("counts add up to e");
        score[pick] -= e as i64;
        out.push(racks[order[pick]][taken[pick]].bookie_id.clone());
        taken[pick] += 1;
    }
    Ok(out)
}

/// The fewest distinct racks in any write set of an ensemble whose members
/// are in racks `racks` (in ensemble order).
pub fn min_racks_per_write_set(racks: &[String], qw: usize) -> usize {
    let e = racks.len();
    (0..e).map(|s| (0..qw).map(|i| racks[(s + i) % e].as_str()).collect::<BTreeSet<_>>().len()).min().unwrap_or(0)
}

/// Chooses a replacement for position `failed` of `ensemble`: a writable
/// bookie outside the ensemble (and outside `exclude`) that maximises the
/// distinct racks of the write sets containing that position.
pub fn choose_replacement(
    ensemble: &[String],
    failed: usize,
    qw: usize,
    candidates: &[Candidate],
    exclude: &BTreeSet<String>,
    seed: u64,
) -> Result<String, PlacementError> {
    let rack_of: BTreeMap<&str, &str> = candidates.iter().map(|c| (c.bookie_id.as_str(), c.rack.as_str())).collect();
    let e = ensemble.len();
    let windows: Vec<Vec<usize>> = (0..e)
        .map(|start| (0..qw).map(|i| (start + i) % e).collect::<Vec<_>>())
        .filter(|w| w.contains(&failed))
        .collect();
    let score = |c: &Candidate| -> usize {
        windows
            .iter()
            .map(|w| {
                let racks: BTreeSet<&str> = w
                    .iter()
                    .map(|p| {
                        if *p == failed {
                            c.rack.as_str()
                        } else {
                            rack_of.get(ensemble[*p].as_str()).copied().unwrap_or("?")
                        }
                    })
                    .collect();
                racks.len()
            })
            .sum()
    };
    let pool: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.writable && !ensemble.contains(&c.bookie_id) && !exclude.contains(&c.bookie_id))
        .collect();
    pool.iter()
        .max_by_key(|c| (score(c), c.free_bytes / (1 << 30), std::cmp::Reverse(mix(seed, &c.bookie_id))))
        .map(|c| c.bookie_id.clone())
        .ok_or(PlacementError::NotEnoughBookies { needed: 1, available: 0 })
}

/// The current ensemble with every `failed` position replaced, each by a
/// bookie chosen with [`choose_replacement`]; failed members are never chosen
/// back (a bookie that just failed, or answered as another instance, is not a
/// replacement for itself).
pub fn replace_members(
    current: &[Member],
    failed: &[usize],
    qw: usize,
    candidates: &[Candidate],
    seed: u64,
) -> Result<Vec<Member>, PlacementError> {
    let exclude: BTreeSet<String> = failed.iter().map(|p| current[*p].bookie_id.clone()).collect();
    let mut ids: Vec<String> = current.iter().map(|m| m.bookie_id.clone()).collect();
    let mut members = current.to_vec();
    for &pos in failed {
        let id = choose_replacement(&ids, pos, qw, candidates, &exclude, seed)?;
        let c = candidates.iter().find(|c| c.bookie_id == id).expect("chosen from the candidates");
        members[pos] = Member { bookie_id: id.clone(), instance_id: c.instance_id.clone() };
        ids[pos] = id;
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(racks: &[(&str, usize)]) -> Vec<Candidate> {
        let mut v = Vec::new();
        for (r, n) in racks {
            for i in 0..*n {
                v.push(Candidate {
                    bookie_id: format!("{r}-{i}"),
                    instance_id: format!("i-{r}-{i}"),
                    rack: r.to_string(),
                    writable: true,
                    free_bytes: 1 << 40,
                });
            }
        }
        v
    }

    fn racks_of(ids: &[String], c: &[Candidate]) -> Vec<String> {
        ids.iter().map(|id| c.iter().find(|x| &x.bookie_id == id).unwrap().rack.clone()).collect()
    }

    fn min_window_racks(racks: &[String], qw: usize) -> usize {
        let e = racks.len();
        (0..e).map(|s| (0..qw).map(|i| racks[(s + i) % e].as_str()).collect::<BTreeSet<_>>().len()).min().unwrap()
    }

    #[test]
    fn every_write_quorum_spans_distinct_racks_when_there_are_enough() {
        let c = cands(&[("r1", 3), ("r2", 3), ("r3", 3)]);
        for seed in 0..20 {
            let ens = choose_ensemble(&c, 6, 3, seed).unwrap();
            assert_eq!(ens.iter().collect::<BTreeSet<_>>().len(), 6, "distinct bookies");
            assert_eq!(min_window_racks(&racks_of(&ens, &c), 3), 3, "seed {seed}: {ens:?}");
        }
        // Fewer racks than Qw: every window still uses every rack there is.
        let c = cands(&[("r1", 4), ("r2", 4)]);
        let ens = choose_ensemble(&c, 4, 3, 1).unwrap();
        assert_eq!(min_window_racks(&racks_of(&ens, &c), 3), 2);
    }

    #[test]
    fn uneven_racks_still_spread_every_write_set() {
        // Dealing round-robin would give r1,r2,r3,r1,r1: a write set all in r1.
        let c = cands(&[("r1", 4), ("r2", 1), ("r3", 1)]);
        for seed in 0..20 {
            let ens = choose_ensemble(&c, 5, 3, seed).unwrap();
            assert!(min_window_racks(&racks_of(&ens, &c), 3) >= 2, "seed {seed}: {ens:?}");
            assert_eq!(min_racks_per_write_set(&racks_of(&ens, &c), 3), min_window_racks(&racks_of(&ens, &c), 3));
        }
    }

    #[test]
    fn read_only_bookies_are_not_placed_on_and_shortage_is_an_error() {
        let mut c = cands(&[("r1", 2), ("r2", 1)]);
        c[0].writable = false;
        assert_eq!(choose_ensemble(&c, 3, 2, 0), Err(PlacementError::NotEnoughBookies { needed: 3, available: 2 }));
        let ens = choose_ensemble(&c, 2, 2, 0).unwrap();
        assert!(!ens.contains(&c[0].bookie_id));
    }

    #[test]
    fn a_replacement_is_new_to_the_ensemble_and_keeps_racks_apart() {
        let c = cands(&[("r1", 2), ("r2", 2), ("r3", 2)]);
        let ens = vec!["r1-0".to_string(), "r2-0".to_string(), "r3-0".to_string()];
        // Replacing r2-0: r2-1 keeps all three racks apart; r1-1 or r3-1 would not.
        let r = choose_replacement(&ens, 1, 3, &c, &BTreeSet::new(), 7).unwrap();
        assert_eq!(r, "r2-1");
        let excluded = BTreeSet::from(["r2-1".to_string()]);
        let r = choose_replacement(&ens, 1, 3, &c, &excluded, 7).unwrap();
        assert!(!ens.contains(&r) && r != "r2-1");
        // Nobody outside the ensemble: no replacement, rather than a duplicate.
        let members: Vec<Candidate> = c.iter().filter(|x| ens.contains(&x.bookie_id)).cloned().collect();
        let none = choose_replacement(&ens, 1, 3, &members, &BTreeSet::new(), 7);
        assert!(none.is_err(), "{none:?}");
    }

    #[test]
    fn replacing_members_never_picks_a_failed_one_back() {
        let c = cands(&[("r1", 2), ("r2", 2), ("r3", 1)]);
        let cur: Vec<Member> = ["r1-0", "r2-0", "r3-0"]
            .iter()
            .map(|b| Member { bookie_id: b.to_string(), instance_id: format!("i-{b}") })
            .collect();
        let next = replace_members(&cur, &[1, 2], 3, &c, 3).unwrap();
        assert_eq!(next[0], cur[0]);
        assert!(next[1].bookie_id != "r2-0" && next[2].bookie_id != "r3-0" && next[1] != next[2]);
        assert_eq!(next[1].instance_id, format!("i-{}", next[1].bookie_id), "the registered instance");
        assert!(replace_members(&cur, &[0, 1, 2], 3, &c, 3).is_err(), "two spares for three places");
    }
}
