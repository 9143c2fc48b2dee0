//! Properties of the writer under any order of bookie answers: acknowledgements
//! leave in entry order without gaps, each only after Qa members of its write
//! set stored it, nothing is acknowledged after a fence, and without a fence
//! every entry is acknowledged once its write set stored it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use quire_client::writer::{Answer, Command, Member, Quorums, Writer, WriterOptions};

fn members(n: usize) -> Vec<Member> {
    (1..=n).map(|i| Member { bookie_id: format!("b{i}"), instance_id: format!("i{i}") }).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn acknowledgements_are_ordered_and_quorate(
        (e, qw, qa) in (1usize..6).prop_flat_map(|e| (Just(e), 1..=e)).prop_flat_map(|(e, w)| (Just(e), Just(w), 1..=w)),
        n in 1u64..30,
        order in proptest::collection::vec(any::<u32>(), 0..200),
        fence_at in proptest::option::of(0usize..200),
    ) {
        let t = Instant::now();
        let q = Quorums::new(e, qw, qa).unwrap();
        let ms = members(e);
        let opts = WriterOptions { max_pending: 1000, add_timeout: Duration::from_secs(60), ..WriterOptions::default() };
        let mut w = Writer::new(1, q, ms.clone(), opts);
        // Every (entry, position) send the writer asked for.
        let mut sends: Vec<(u64, usize)> = Vec::new();
        for _ in 0..n {
            let (id, cmds) = w.add(Bytes::from_static(b"p"), t).unwrap();
            for c in cmds {
                if let Command::Send { position, entry, .. } = c {
                    prop_assert_eq!(entry.entry_id, id);
                    prop_assert!(q.write_set(id).contains(&position));
                    sends.push((id, position));
                }
            }
        }
        let mut stored: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
        let mut acked: Vec<u64> = Vec::new();
        let mut fenced = false;
        // The answers in the drawn order; then, unless a fence came, every
        // answer still owed, so that each unfenced case must end with all
        // its entries acknowledged (a case that acknowledges nothing
        // checks nothing).
        for k in 0.. {
            if sends.is_empty() || (fenced && k >= order.len()) {
                break;
            }
            let pick = order.get(k).copied().unwrap_or(0);
            let (id, pos) = sends.swap_remove(pick as usize % sends.len());
            let answer = if Some(k) == fence_at { Answer::Fenced } else { Answer::Stored { instance_id: ms[pos].instance_id.clone() } };
            if matches!(answer, Answer::Fenced) {
                fenced = true;
            } else {
                stored.entry(id).or_default().insert(pos);
            }
            for c in w.answer(id, pos, &ms[pos], answer) {
                if let Command::Acknowledge { entry_ids, lac } = c {
                    prop_assert!(!fenced, "acknowledged after a fence");
                    for a in &entry_ids {
                        prop_assert_eq!(*a, acked.len() as u64, "out of order or gap");
                        prop_assert!(stored.get(a).map_or(0, |s| s.len()) >= qa, "acknowledged below Qa");
                        acked.push(*a);
                    }
                    prop_assert_eq!(lac, *acked.last().unwrap() as i64);
                }
            }
        }
        prop_assert_eq!(w.lac(), acked.last().map_or(-1, |a| *a as i64));
        if !fenced {
            prop_assert_eq!(acked.len() as u64, n, "every entry stored by its whole write set is acknowledged");
        }
    }
}
