//! Recovery's decisions, as plain functions: when enough bookies are fenced,
//! and whether an entry past the LAC exists.
//!
//! The rules (BookKeeper's protocol, with its known holes closed):
//! - **Fencing reaches every write quorum.** Recovery fences (and reads the LAC
//!   from) at least Qw - Qa + 1 bookies of *every* write set. Any Qa bookies
//!   of a write set then include a fenced one, so no add from the old writer can
//!   be acknowledged afterwards.
//! - **One intact copy proves an entry.** Any copy whose digest holds is the
//!   entry (entries are immutable once written).
//! - **Absence needs Qw - Qa + 1 "no such entry" answers** from the entry's write
//!   set (BookKeeper #1067): fewer could all come from bookies outside the Qa
//!   that acknowledged it.
//! - **A corrupt copy is not an absence** (BookKeeper #2908), and neither is a
//!   bookie that did not answer.
//! - **When every bookie has answered and neither holds, recovery fails**
//!   rather than truncate (seed 004): closing the ledger short would lose an
//!   entry that may have been acknowledged.

use std::collections::BTreeSet;

use quire_proto::v1::Entry;

use crate::writer::Quorums;

/// One bookie's answer to a recovery read.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadAnswer {
    /// The entry (its digest is checked here, not trusted).
    Entry(Entry),
    /// The bookie has no such entry.
    NoSuchEntry,
    /// The bookie's copy failed its checksum.
    Corrupt,
    /// No answer that says anything (unreachable, timeout, other errors).
    Failed,
}

/// What the answers so far say about one entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// An intact copy: the entry exists with these bytes.
    Present(Entry),
    /// Enough bookies of its write set lack it: it was never acknowledged.
    Absent,
    /// Not decided yet: wait for the other bookies of the write set.
    Undecided,
    /// Every bookie answered and nothing is decided: recovery must fail.
    Unrecoverable {
        /// Definite absences seen.
        no_such_entry: usize,
        /// Corrupt copies seen.
        corrupt: usize,
        /// Non-answers.
        failed: usize,
    },
}

/// Judges one entry from the answers of the bookies of its write set
/// (`answers.len()` of the Qw have answered so far).
pub fn verdict(q: Quorums, answers: &[ReadAnswer]) -> Verdict {
    for a in answers {
        if let ReadAnswer::Entry(e) = a {
            if e.digest_ok() {
                return Verdict::Present(e.clone());
            }
        }
    }
    let count = |f: fn(&ReadAnswer) -> bool| answers.iter().filter(|a| f(a)).count();
    let no_such_entry = count(|a| matches!(a, ReadAnswer::NoSuchEntry));
    if no_such_entry > q.write - q.ack {
        return Verdict::Absent;
    }
    if answers.len() < q.write {
        return Verdict::Undecided;
    }
    Verdict::Unrecoverable {
        no_such_entry,
        corrupt: count(|a| matches!(a, ReadAnswer::Corrupt)) + count(|a| matches!(a, ReadAnswer::Entry(_))),
        failed: count(|a| matches!(a, ReadAnswer::Failed)),
    }
}

/// Whether the bookies at `fenced` positions cover every write set with at
/// least Qw - Qa + 1 members: then no later add can reach Qa unfenced bookies.
pub fn fence_covers_every_write_set(q: Quorums, fenced: &BTreeSet<usize>) -> bool {
    let needed = q.write - q.ack + 1;
    (0..q.ensemble as u64).all(|start| q.write_set(start).iter().filter(|p| fenced.contains(p)).count() >= needed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn q(e: usize, w: usize, a: usize) -> Quorums {
        Quorums::new(e, w, a).unwrap()
    }

    fn entry() -> Entry {
        Entry::sealed(1, 5, 4, Bytes::from_static(b"payload"))
    }

    #[test]
    fn one_intact_copy_proves_an_entry_and_a_damaged_one_does_not() {
        use ReadAnswer::*;
        assert_eq!(verdict(q(3, 3, 2), &[NoSuchEntry, Entry(entry())]), Verdict::Present(entry()));
        let mut bad = entry();
        bad.payload = Bytes::from_static(b"paylo4d");
        assert!(!matches!(verdict(q(3, 3, 2), &[Entry(bad)]), Verdict::Present(_)));
    }

    #[test]
    fn absence_needs_qw_minus_qa_plus_one_no_such_entry() {
        use ReadAnswer::*;
        // Qw=3, Qa=2: two absences needed; one could be the bookie outside the acking pair.
        assert_eq!(verdict(q(3, 3, 2), &[NoSuchEntry]), Verdict::Undecided);
        assert_eq!(verdict(q(3, 3, 2), &[NoSuchEntry, NoSuchEntry]), Verdict::Absent);
        // Qw=Qa: a single absence proves it was never acknowledged.
        assert_eq!(verdict(q(2, 2, 2), &[NoSuchEntry]), Verdict::Absent);
    }

    #[test]
    fn corrupt_or_silent_bookies_never_count_as_absence_and_recovery_fails_rather_than_guess() {
        use ReadAnswer::*;
        // #2908: one absence and one corrupt copy is not two absences.
        assert_eq!(verdict(q(3, 3, 2), &[NoSuchEntry, Corrupt]), Verdict::Undecided);
        assert_eq!(
            verdict(q(3, 3, 2), &[NoSuchEntry, Corrupt, Failed]),
            Verdict::Unrecoverable { no_such_entry: 1, corrupt: 1, failed: 1 }
        );
        // Seed 004: too few bookies answering is a failure, not an empty tail.
        assert_eq!(
            verdict(q(3, 3, 2), &[Failed, Failed, NoSuchEntry]),
            Verdict::Unrecoverable { no_such_entry: 1, corrupt: 0, failed: 2 }
        );
    }

    #[test]
    fn fencing_must_reach_every_write_set() {
        let qq = q(3, 3, 2); // needs 2 of every write set (all of them are {0,1,2})
        assert!(!fence_covers_every_write_set(qq, &BTreeSet::from([0])));
        assert!(fence_covers_every_write_set(qq, &BTreeSet::from([0, 2])));
        let qq = q(5, 3, 2); // write sets {0,1,2},{1,2,3},{2,3,4},{3,4,0},{4,0,1}: 2 of each
        assert!(!fence_covers_every_write_set(qq, &BTreeSet::from([0, 1, 2])), "{{2,3,4}} has one");
        assert!(fence_covers_every_write_set(qq, &BTreeSet::from([0, 1, 2, 3])));
        let qq = q(4, 2, 2); // Qw=Qa: one of each write set
        assert!(fence_covers_every_write_set(qq, &BTreeSet::from([0, 2])));
        assert!(!fence_covers_every_write_set(qq, &BTreeSet::from([0, 1])));
    }
}
