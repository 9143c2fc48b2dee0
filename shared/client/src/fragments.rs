//! Fragments: which entries of a ledger one bookie is meant to hold, and
//! which of them autorecovery may repair now.
//!
//! A fragment is one ensemble position of one segment: the entries from the
//! segment's first entry to its last whose write set includes that position.
//! A closed ledger's fragments are all final. An open (or recovering)
//! ledger's last segment belongs to its writer (it is still growing, and
//! holes in it are the writer's or recovery's to fill): only the earlier
//! segments, whose ends the ensemble changes fixed, are repairable.

use crate::meta::{LedgerMeta, LedgerState};
use crate::writer::{Member, Quorums};

/// One ensemble position of one segment, with its entry range (inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// Index of the segment in the ledger's metadata.
    pub segment: usize,
    /// The position in the segment's ensemble.
    pub position: usize,
    /// The member there.
    pub member: Member,
    /// First entry of the segment.
    pub first_entry_id: u64,
    /// Last entry of the segment (inclusive).
    pub last_entry_id: u64,
}

impl Fragment {
    /// The entries this fragment's bookie holds: those of the range whose
    /// write set includes its position.
    pub fn entries<'a>(&'a self, q: &'a Quorums) -> impl Iterator<Item = u64> + 'a {
        (self.first_entry_id..=self.last_entry_id).filter(move |e| q.write_mask(*e) & (1u64 << self.position) != 0)
    }
}

/// The fragments of `bookie_id` that may be repaired now, and whether the
/// bookie also sits in the writer's last segment of an open ledger (which
/// only the writer's ensemble change, or recovery, can move it out of).
pub fn repairable(meta: &LedgerMeta, bookie_id: &str) -> (Vec<Fragment>, bool) {
    let closed = meta.state == LedgerState::Closed;
    let n = meta.segments.len();
    let mut out = Vec::new();
    let mut in_writers_segment = false;
    for (i, seg) in meta.segments.iter().enumerate() {
        let last = if i + 1 < n {
            // An earlier segment ends where the next begins (an empty one ends before it starts).
            match meta.segments[i + 1].first_entry_id.checked_sub(1) {
                Some(l) => l as i64,
                None => -1,
            }
        } else if closed {
            meta.last_entry_id
        } else {
            if seg.members.iter().any(|m| m.bookie_id == bookie_id) {
                in_writers_segment = true;
            }
            continue;
        };
        // A closed ledger's segments end at its last entry at the latest.
        let last = if closed { last.min(meta.last_entry_id) } else { last };
        if last < seg.first_entry_id as i64 {
            continue;
        }
        for (p, m) in seg.members.iter().enumerate() {
            if m.bookie_id == bookie_id {
                out.push(Fragment {
                    segment: i,
                    position: p,
                    member: m.clone(),
                    first_entry_id: seg.first_entry_id,
                    last_entry_id: last as u64,
                });
            }
        }
    }
    (out, in_writers_segment)
}

/// The metadata with `fragment`'s member replaced by `by` (a re-replication),
/// if the fragment's position still holds the member it was planned for.
pub fn with_member_replaced(meta: &LedgerMeta, fragment: &Fragment, by: Member) -> Option<LedgerMeta> {
    let seg = meta.segments.get(fragment.segment)?;
    if seg.first_entry_id != fragment.first_entry_id || seg.members.get(fragment.position)? != &fragment.member {
        return None;
    }
    let mut next = meta.clone();
    next.segments[fragment.segment].members[fragment.position] = by;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::Segment;

    fn member(id: &str) -> Member {
        Member { bookie_id: id.into(), instance_id: format!("i-{id}") }
    }

    fn ledger(state: LedgerState, segments: &[(u64, [&str; 3])], last: i64) -> LedgerMeta {
        let p = quire_proto::v1::LedgerMetadata {
            ledger_id: 7,
            state: match state {
                LedgerState::Open => quire_proto::v1::LedgerState::Open,
                LedgerState::InRecovery => quire_proto::v1::LedgerState::InRecovery,
                LedgerState::Closed => quire_proto::v1::LedgerState::Closed,
            } as i32,
            ensemble_size: 3,
            write_quorum: 2,
            ack_quorum: 2,
            ensembles: vec![quire_proto::v1::EnsembleSegment {
                first_entry_id: 0,
                bookie_ids: vec!["a".into(), "b".into(), "c".into()],
                instance_ids: vec![],
            }],
            last_entry_id: last,
            version: 1,
            digest_type: "crc32c".into(),
            ..Default::default()
        };
        let mut m = LedgerMeta::from_proto(p).unwrap();
        m.segments = segments
            .iter()
            .map(|(first, ids)| Segment { first_entry_id: *first, members: ids.iter().map(|i| member(i)).collect() })
            .collect();
        m
    }

    #[test]
    fn a_closed_ledgers_fragments_end_at_its_last_entry_and_follow_the_stripes() {
        let m = ledger(LedgerState::Closed, &[(0, ["a", "b", "c"]), (10, ["a", "d", "c"])], 14);
        let (f, blocked) = repairable(&m, "a");
        assert!(!blocked);
        assert_eq!(f.len(), 2);
        assert_eq!((f[0].first_entry_id, f[0].last_entry_id, f[0].position), (0, 9, 0));
        assert_eq!((f[1].first_entry_id, f[1].last_entry_id), (10, 14));
        let q = Quorums::new(3, 2, 2).unwrap();
        // E=3 Qw=2: position 0 holds entries whose write set {e%3, e%3+1} includes 0.
        assert_eq!(f[0].entries(&q).collect::<Vec<_>>(), vec![0, 2, 3, 5, 6, 8, 9]);
        let (f, _) = repairable(&m, "b");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].last_entry_id, 9);
        assert!(repairable(&m, "z").0.is_empty());
    }

    #[test]
    fn an_open_ledgers_last_segment_is_the_writers() {
        let m = ledger(LedgerState::Open, &[(0, ["a", "b", "c"]), (10, ["a", "d", "c"])], -1);
        let (f, blocked) = repairable(&m, "a");
        assert!(blocked, "a is in the writer's segment");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].last_entry_id, 9);
        let (f, blocked) = repairable(&m, "b");
        assert!(!blocked);
        assert_eq!(f.len(), 1);
        let (f, blocked) = repairable(&m, "d");
        assert!(blocked && f.is_empty());
        // An empty earlier segment (replaced at once) has no fragment.
        let m = ledger(LedgerState::Open, &[(0, ["a", "b", "c"]), (0, ["d", "b", "c"]), (5, ["d", "b", "e"])], -1);
        let (f, _) = repairable(&m, "a");
        assert!(f.is_empty());
        // A closed ledger whose last segment never held an entry.
        let m = ledger(LedgerState::Closed, &[(0, ["a", "b", "c"]), (10, ["d", "b", "c"])], 9);
        assert!(repairable(&m, "d").0.is_empty());
        assert_eq!(repairable(&m, "a").0.len(), 1);
    }

    #[test]
    fn a_replacement_applies_only_where_the_planned_member_still_is() {
        let m = ledger(LedgerState::Closed, &[(0, ["a", "b", "c"])], 3);
        let (f, _) = repairable(&m, "b");
        let next = with_member_replaced(&m, &f[0], member("x")).unwrap();
        assert_eq!(next.segments[0].members[1].bookie_id, "x");
        // Someone else replaced b already.
        assert!(with_member_replaced(&next, &f[0], member("y")).is_none());
    }
}
