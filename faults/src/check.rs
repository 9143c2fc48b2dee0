//! The guarantees of ../shared/BRIEF.md as rules over a history. Each rule
//! looks only at recorded events, so a violation names the events that show
//! it and a history file can be re-checked after the run.
//!
//! | guarantee | rule |
//! |---|---|
//! | 1. an acknowledged entry is durable and readable | every acknowledged add is in its ledger's final read, with its bytes ([`Violation::LostAck`], [`Violation::ChangedAck`]); a ledger with acknowledged adds recovers ([`Violation::Unrecoverable`]) |
//! | 2. no read past the LAC; readers agree | no reader is given bytes past the LAC it held ([`Violation::ReadPastLac`]); every entry a reader saw is in the final ledger with the same bytes ([`Violation::DirtyRead`]); two reads of one entry agree ([`Violation::DivergentReads`]); two acknowledged adds never share an entry id ([`Violation::DuplicateEntryId`]) |
//! | 1. what is committed stays readable | a reader holding a LAC at or past an entry is never told "no such entry" ([`Violation::AbsentAtOrBelowLac`]) |
//! | 3. no acknowledgement after fencing | no add invoked after a recovery's fence took hold (its completion when the moment is unknown) is acknowledged ([`Violation::AckAfterFence`]); none beyond the recovered end ([`Violation::AckBeyondRecovery`]); no add invoked after the ledger was seen closed in the metadata, by anyone, a worker's recovery included, is acknowledged ([`Violation::AckAfterClose`]), none past the closed end ([`Violation::AckBeyondClose`]) |
//! | 4. recovery never truncates acknowledged entries | the recovered end is at or past every acknowledged entry ([`Violation::AckBeyondRecovery`]); every recovery of a ledger, concurrent ones too, and its final read agree on its end ([`Violation::RecoveriesDisagree`]) |
//! | 6. autorecovery restores Qw copies | no entry short of copies after healing ([`Violation::UnderReplicated`]) |
//! | 9. a log keeps every acknowledged record once, densely, under one owner | [`crate::logs`] ([`Violation::Log`]) |
//!
//! A read that returned bytes is "dirty" when those bytes are not the final
//! ledger's: either the entry is past the recovered end (it was read past the
//! LAC, and the writer's add never counted) or the bytes differ. Reads of
//! ledgers that have no final read are compared only with acknowledged adds.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{Event, Op, Outcome};
use crate::logs::{check_logs, LogCounts, LogViolation};

/// One broken guarantee, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged add is missing from its ledger after recovery.
    LostAck { ledger: u64, entry: u64, final_last_entry: i64 },
    /// An acknowledged add's entry holds other bytes after recovery.
    ChangedAck { ledger: u64, entry: u64, acked: u64, recovered: u64 },
    /// A ledger with acknowledged adds has no successful final read.
    Unrecoverable { ledger: u64, acked_entries: usize },
    /// A reader saw bytes the final ledger does not hold at that entry.
    DirtyRead { ledger: u64, entry: u64, read: u64, recovered: Option<u64>, process: u32, at_us: u64 },
    /// A reader was given bytes for an entry past the LAC it held
    /// (guarantee 2: a reader never sees past the LAC).
    ReadPastLac { ledger: u64, entry: u64, lac: i64, process: u32, at_us: u64 },
    /// A reader holding a LAC at or past an entry was told "no such
    /// entry": a committed entry was not readable (guarantee 1).
    AbsentAtOrBelowLac { ledger: u64, entry: u64, lac: i64, process: u32, at_us: u64 },
    /// Readers saw different bytes for one entry.
    DivergentReads { ledger: u64, entry: u64, digests: Vec<u64> },
    /// Two acknowledged adds were given the same entry id with different bytes.
    DuplicateEntryId { ledger: u64, entry: u64, digests: Vec<u64> },
    /// An add invoked after a recovery's fence took hold was acknowledged.
    AckAfterFence { ledger: u64, entry: Option<u64>, handle: u64, fenced_at_us: u64, invoked_us: u64 },
    /// An add invoked after its ledger was seen closed (by anyone: a
    /// worker's recovery too) was acknowledged.
    AckAfterClose { ledger: u64, entry: Option<u64>, handle: u64, closed_seen_us: u64, invoked_us: u64 },
    /// An acknowledged add lies past the end its ledger was closed at.
    AckBeyondClose { ledger: u64, entry: u64, closed_last_entry: i64 },
    /// An acknowledged add lies past the end recovery settled on.
    AckBeyondRecovery { ledger: u64, entry: u64, recovered_last_entry: i64 },
    /// Recoveries of one ledger (or a recovery and the final read) ended it
    /// at different entries: a close is final, so one of them was wrong.
    RecoveriesDisagree { ledger: u64, ends: Vec<i64> },
    /// After healing, entries with fewer than Qw good copies.
    UnderReplicated { ledger: u64, write_quorum: u32, short: Vec<(u64, u32)> },
    /// A log guarantee broke (see [`crate::logs`]).
    Log(LogViolation),
}

/// What was checked and what broke.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Ledgers created, and creations that failed or never answered.
    pub creates: usize,
    pub failed_creates: usize,
    pub acked_adds: usize,
    pub unknown_adds: usize,
    /// Reads answered (bytes or "no such entry"), and of them the absences.
    pub reads: usize,
    pub absent_reads: usize,
    pub recoveries: usize,
    /// Of them, those whose fence moment is known (judged from it).
    pub fence_times: usize,
    /// Ledgers seen closed in the metadata while their writer still wrote.
    pub closes_seen: usize,
    pub ledgers_final: usize,
    /// What the log rules counted.
    pub logs: LogCounts,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks a history (events in any order).
pub fn check(events: &[Event]) -> Report {
    let mut r = Report::default();
    // (ledger, entry) -> digests of acknowledged adds
    let mut acked: BTreeMap<(u64, u64), BTreeSet<u64>> = BTreeMap::new();
    // ledger -> (last entry, entry -> digest)
    let mut finals: BTreeMap<u64, (i64, BTreeMap<u64, u64>)> = BTreeMap::new();
    // (ledger, entry) -> digests read, with the first read of each
    let mut reads: BTreeMap<(u64, u64), BTreeMap<u64, (u32, u64)>> = BTreeMap::new();
    // ledger -> (fenced by, last entry) of successful recoveries: the
    // moment the fence took hold when the recoverer said, else completion
    let mut recoveries: BTreeMap<u64, Vec<(u64, i64)>> = BTreeMap::new();

    for e in events {
        match (&e.op, e.outcome) {
            (Op::Create { ledger: Some(_) }, Outcome::Ok) => r.creates += 1,
            (Op::Create { .. }, _) => r.failed_creates += 1,
            (Op::Add { ledger, entry: Some(entry), digest, .. }, Outcome::Ok) => {
                r.acked_adds += 1;
                acked.entry((*ledger, *entry)).or_default().insert(*digest);
            }
            (Op::Add { .. }, Outcome::Unknown) => r.unknown_adds += 1,
            (Op::Read { ledger, entry, digest: Some(d), lac }, Outcome::Ok) => {
                r.reads += 1;
                reads.entry((*ledger, *entry)).or_default().entry(*d).or_insert((e.process, e.completed_us));
                if let Some(lac) = *lac {
                    if *entry as i64 > lac {
                        r.violations.push(Violation::ReadPastLac {
                            ledger: *ledger,
                            entry: *entry,
                            lac,
                            process: e.process,
                            at_us: e.completed_us,
                        });
                    }
                }
            }
            (Op::Read { ledger, entry, digest: None, lac }, Outcome::Ok) => {
                r.reads += 1;
                r.absent_reads += 1;
                // A reader that holds a LAC at or past the entry knows it is
                // committed: "no such entry" is a lost entry, not a lagging
                // view. (Past its LAC, absence is the answer by design: reads
                // stop at the LAC, and an entry acknowledged a moment ago is
                // in no bookie's LAC until the writer's next add carries it.)
                if let Some(lac) = lac.filter(|&lac| *entry as i64 <= lac) {
                    r.violations.push(Violation::AbsentAtOrBelowLac {
                        ledger: *ledger,
                        entry: *entry,
                        lac,
                        process: e.process,
                        at_us: e.completed_us,
                    });
                }
            }
            (Op::Recover { ledger, last_entry, fenced_us }, Outcome::Ok) => {
                r.recoveries += 1;
                if fenced_us.is_some() {
                    r.fence_times += 1;
                }
                let at = fenced_us.unwrap_or(e.completed_us).min(e.completed_us);
                recoveries.entry(*ledger).or_default().push((at, *last_entry));
            }
            (Op::Final { ledger, last_entry, entries }, Outcome::Ok) => {
                r.ledgers_final += 1;
                finals.insert(*ledger, (*last_entry, entries.iter().copied().collect()));
            }
            (Op::Replicas { ledger, write_quorum, short }, Outcome::Ok) if !short.is_empty() => {
                r.violations.push(Violation::UnderReplicated {
                    ledger: *ledger,
                    write_quorum: *write_quorum,
                    short: short.clone(),
                });
            }
            _ => {}
        }
    }

    // Two acknowledged adds, one entry id.
    for ((ledger, entry), ds) in &acked {
        if ds.len() > 1 {
            r.violations.push(Violation::DuplicateEntryId {
                ledger: *ledger,
                entry: *entry,
                digests: ds.iter().copied().collect(),
            });
        }
    }

    // Acknowledged adds survive recovery, bytes and all.
    let mut acked_per_ledger: BTreeMap<u64, usize> = BTreeMap::new();
    for ((ledger, entry), ds) in &acked {
        *acked_per_ledger.entry(*ledger).or_default() += 1;
        let Some((last, entries)) = finals.get(ledger) else { continue };
        let want = *ds.iter().next().expect("non-empty");
        match entries.get(entry) {
            None => r.violations.push(Violation::LostAck { ledger: *ledger, entry: *entry, final_last_entry: *last }),
            Some(&got) if got != want => {
                r.violations.push(Violation::ChangedAck { ledger: *ledger, entry: *entry, acked: want, recovered: got })
            }
            Some(_) => {}
        }
    }
    for (ledger, n) in &acked_per_ledger {
        if !finals.contains_key(ledger) {
            r.violations.push(Violation::Unrecoverable { ledger: *ledger, acked_entries: *n });
        }
    }

    // Readers agree with each other and with the final ledger.
    for ((ledger, entry), seen) in &reads {
        if seen.len() > 1 {
            r.violations.push(Violation::DivergentReads {
                ledger: *ledger,
                entry: *entry,
                digests: seen.keys().copied().collect(),
            });
        }
        let truth = match finals.get(ledger) {
            Some((_, entries)) => Some(entries.get(entry).copied()),
            None => acked.get(&(*ledger, *entry)).map(|ds| ds.iter().next().copied()),
        };
        if let Some(recovered) = truth {
            for (&d, &(process, at_us)) in seen {
                if Some(d) != recovered {
                    r.violations.push(Violation::DirtyRead {
                        ledger: *ledger,
                        entry: *entry,
                        read: d,
                        recovered,
                        process,
                        at_us,
                    });
                }
            }
        }
    }

    // A ledger is closed once: every recovery's end and the final read's agree.
    for (ledger, recs) in &recoveries {
        let mut ends: BTreeSet<i64> = recs.iter().map(|&(_, last)| last).collect();
        if let Some((last, _)) = finals.get(ledger) {
            ends.insert(*last);
        }
        if ends.len() > 1 {
            r.violations.push(Violation::RecoveriesDisagree { ledger: *ledger, ends: ends.into_iter().collect() });
        }
    }

    // Seals: a recovery's fence (the harness's own recoveries, from the
    // moment the fence took hold when known, else from completion) and a
    // close seen in the metadata (whoever closed: a worker's recovery is
    // seen only as this). After a seal, no add invoked later is acknowledged, and none
    // acknowledged lies past the sealed end.
    let mut seals: BTreeMap<u64, Vec<(u64, i64, bool)>> = BTreeMap::new();
    for (ledger, recs) in &recoveries {
        seals.entry(*ledger).or_default().extend(recs.iter().map(|&(at, last)| (at, last, true)));
    }
    for e in events {
        if let (Op::Closed { ledger, last_entry }, Outcome::Ok) = (&e.op, e.outcome) {
            r.closes_seen += 1;
            seals.entry(*ledger).or_default().push((e.completed_us, *last_entry, false));
        }
    }
    for e in events {
        let (Op::Add { ledger, handle, entry, .. }, Outcome::Ok) = (&e.op, e.outcome) else { continue };
        let (ledger, handle, entry, invoked_us) = (*ledger, *handle, *entry, e.invoked_us);
        for &(at_us, last, by_recovery) in seals.get(&ledger).into_iter().flatten() {
            if invoked_us > at_us {
                r.violations.push(if by_recovery {
                    Violation::AckAfterFence { ledger, entry, handle, fenced_at_us: at_us, invoked_us }
                } else {
                    Violation::AckAfterClose { ledger, entry, handle, closed_seen_us: at_us, invoked_us }
                });
            }
            if let Some(entry) = entry.filter(|&e| e as i64 > last) {
                r.violations.push(if by_recovery {
                    Violation::AckBeyondRecovery { ledger, entry, recovered_last_entry: last }
                } else {
                    Violation::AckBeyondClose { ledger, entry, closed_last_entry: last }
                });
            }
        }
    }
    let (counts, log_violations) = check_logs(events);
    r.logs = counts;
    r.violations.extend(log_violations.into_iter().map(Violation::Log));
    r.violations.sort_by_key(|v| format!("{v:?}"));
    r.violations.dedup();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(process: u32, at: u64, outcome: Outcome, op: Op) -> Event {
        Event { process, invoked_us: at, completed_us: at + 5, outcome, op, error: None }
    }
    fn add(at: u64, entry: u64, digest: u64) -> Event {
        ev(1, at, Outcome::Ok, Op::Add { ledger: 1, handle: 1, entry: Some(entry), digest })
    }
    fn read(at: u64, entry: u64, digest: u64) -> Event {
        ev(2, at, Outcome::Ok, Op::Read { ledger: 1, entry, digest: Some(digest), lac: None })
    }
    fn fin(entries: &[(u64, u64)]) -> Event {
        let last = entries.last().map_or(-1, |e| e.0 as i64);
        ev(9, 1000, Outcome::Ok, Op::Final { ledger: 1, last_entry: last, entries: entries.to_vec() })
    }

    /// Writes, reads behind the LAC, a recovery and a final read that agree.
    fn clean() -> Vec<Event> {
        vec![
            add(10, 0, 100),
            add(20, 1, 101),
            read(30, 0, 100),
            // An add with no answer that recovery kept: fine.
            ev(1, 40, Outcome::Unknown, Op::Add { ledger: 1, handle: 1, entry: None, digest: 102 }),
            ev(3, 50, Outcome::Ok, Op::Recover { ledger: 1, last_entry: 2, fenced_us: None }),
            // The old handle is refused after the fence.
            ev(1, 60, Outcome::Fail, Op::Add { ledger: 1, handle: 1, entry: None, digest: 103 }),
            read(70, 2, 102),
            fin(&[(0, 100), (1, 101), (2, 102)]),
            ev(9, 1100, Outcome::Ok, Op::Replicas { ledger: 1, write_quorum: 3, short: vec![] }),
        ]
    }

    #[test]
    fn two_recoveries_that_end_a_ledger_at_different_entries_disagree() {
        let mut h = clean();
        h.push(ev(4, 55, Outcome::Ok, Op::Recover { ledger: 1, last_entry: 2, fenced_us: None }));
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        h.push(ev(5, 56, Outcome::Ok, Op::Recover { ledger: 1, last_entry: 3, fenced_us: None }));
        let v = check(&h).violations;
        assert!(v.contains(&Violation::RecoveriesDisagree { ledger: 1, ends: vec![2, 3] }), "{v:?}");
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check(&clean());
        assert!(r.ok(), "{:?}", r.violations);
        assert_eq!((r.acked_adds, r.unknown_adds, r.reads, r.recoveries, r.ledgers_final), (2, 1, 2, 1, 1));
        assert_eq!((r.creates, r.failed_creates, r.absent_reads), (0, 0, 0));
    }

    #[test]
    fn an_acknowledged_entry_missing_after_recovery_is_lost() {
        let mut h = clean();
        h.retain(|e| !matches!(e.op, Op::Final { .. } | Op::Recover { .. } | Op::Read { .. }));
        h.push(fin(&[(0, 100)]));
        assert_eq!(check(&h).violations, vec![Violation::LostAck { ledger: 1, entry: 1, final_last_entry: 0 }]);
    }

    #[test]
    fn an_acknowledged_entry_with_other_bytes_is_changed() {
        let mut h = clean();
        h.retain(|e| !matches!(e.op, Op::Final { .. }));
        h.push(fin(&[(0, 100), (1, 666), (2, 102)]));
        assert!(check(&h).violations.contains(&Violation::ChangedAck {
            ledger: 1,
            entry: 1,
            acked: 101,
            recovered: 666
        }));
    }

    #[test]
    fn a_ledger_with_acknowledged_adds_and_no_final_read_is_unrecoverable() {
        let mut h = clean();
        h.retain(|e| !matches!(e.op, Op::Final { .. }));
        assert!(check(&h).violations.contains(&Violation::Unrecoverable { ledger: 1, acked_entries: 2 }));
    }

    #[test]
    fn a_read_of_an_entry_recovery_did_not_keep_is_dirty() {
        // The reader saw entry 2 (never acknowledged); recovery ended at 1:
        // the read went past the LAC.
        let mut h = vec![add(10, 0, 100), add(20, 1, 101), read(30, 2, 102)];
        h.push(fin(&[(0, 100), (1, 101)]));
        let v = check(&h).violations;
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(matches!(v[0], Violation::DirtyRead { entry: 2, read: 102, recovered: None, .. }), "{v:?}");
    }

    #[test]
    fn readers_that_disagree_are_divergent() {
        let mut h = clean();
        h.push(ev(4, 80, Outcome::Ok, Op::Read { ledger: 1, entry: 0, digest: Some(555), lac: None }));
        let v = check(&h).violations;
        assert!(v.contains(&Violation::DivergentReads { ledger: 1, entry: 0, digests: vec![100, 555] }), "{v:?}");
        assert!(v.iter().any(|x| matches!(x, Violation::DirtyRead { read: 555, process: 4, .. })), "{v:?}");
    }

    #[test]
    fn reads_without_a_final_read_are_held_to_the_acknowledged_bytes() {
        let h = vec![add(10, 0, 100), read(30, 0, 7)];
        let v = check(&h).violations;
        assert!(v.iter().any(|x| matches!(x, Violation::DirtyRead { read: 7, recovered: Some(100), .. })), "{v:?}");
    }

    #[test]
    fn an_add_acknowledged_after_the_fence_breaks_fencing() {
        // Seed 003's shape: the old writer is told "success" after recovery
        // closed the ledger (its bookie was replaced by an empty one).
        let mut h = clean();
        h.push(ev(1, 65, Outcome::Ok, Op::Add { ledger: 1, handle: 1, entry: Some(3), digest: 104 }));
        let v = check(&h).violations;
        assert!(
            v.contains(&Violation::AckAfterFence {
                ledger: 1,
                entry: Some(3),
                handle: 1,
                fenced_at_us: 55,
                invoked_us: 65
            }),
            "{v:?}"
        );
        assert!(v.contains(&Violation::AckBeyondRecovery { ledger: 1, entry: 3, recovered_last_entry: 2 }), "{v:?}");
        assert!(v.contains(&Violation::LostAck { ledger: 1, entry: 3, final_last_entry: 2 }), "{v:?}");
    }

    #[test]
    fn an_add_acknowledged_after_the_fence_took_hold_is_caught_before_recovery_completes() {
        // The fence held at 40; recovery closed at 205. An add invoked at
        // 30 may be acknowledged (it raced the fence); one invoked at 60
        // may not, though recovery had not completed yet.
        let mut h = vec![add(10, 0, 100), add(30, 1, 101)];
        h.push(Event {
            invoked_us: 20,
            ..ev(3, 200, Outcome::Ok, Op::Recover { ledger: 1, last_entry: 2, fenced_us: Some(40) })
        });
        h.push(fin(&[(0, 100), (1, 101), (2, 102)]));
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        assert_eq!(check(&h).fence_times, 1);
        h.push(ev(1, 60, Outcome::Ok, Op::Add { ledger: 1, handle: 1, entry: Some(2), digest: 102 }));
        let v = check(&h).violations;
        assert_eq!(
            v,
            vec![Violation::AckAfterFence { ledger: 1, entry: Some(2), handle: 1, fenced_at_us: 40, invoked_us: 60 }]
        );
    }

    #[test]
    fn recovery_that_truncates_an_acknowledged_entry_is_caught_without_a_late_add() {
        // Seed 004's shape: recovery settles below what was acknowledged.
        let mut h = vec![add(10, 0, 100), add(20, 1, 101)];
        h.push(ev(3, 50, Outcome::Ok, Op::Recover { ledger: 1, last_entry: 0, fenced_us: None }));
        h.push(fin(&[(0, 100)]));
        let v = check(&h).violations;
        assert!(v.contains(&Violation::AckBeyondRecovery { ledger: 1, entry: 1, recovered_last_entry: 0 }), "{v:?}");
        assert!(v.contains(&Violation::LostAck { ledger: 1, entry: 1, final_last_entry: 0 }), "{v:?}");
    }

    #[test]
    fn two_acknowledged_adds_with_one_entry_id_are_duplicates() {
        let mut h = clean();
        h.push(ev(5, 25, Outcome::Ok, Op::Add { ledger: 1, handle: 2, entry: Some(1), digest: 999 }));
        let v = check(&h).violations;
        assert!(v.contains(&Violation::DuplicateEntryId { ledger: 1, entry: 1, digests: vec![101, 999] }), "{v:?}");
    }

    #[test]
    fn entries_short_of_copies_after_healing_are_under_replicated() {
        let mut h = clean();
        h.push(ev(9, 1200, Outcome::Ok, Op::Replicas { ledger: 1, write_quorum: 3, short: vec![(1, 2)] }));
        assert_eq!(
            check(&h).violations,
            vec![Violation::UnderReplicated { ledger: 1, write_quorum: 3, short: vec![(1, 2)] }]
        );
    }

    #[test]
    fn a_read_past_the_lac_the_reader_held_is_caught() {
        let mut h = clean();
        h.push(ev(4, 80, Outcome::Ok, Op::Read { ledger: 1, entry: 2, digest: Some(102), lac: Some(2) }));
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        h.push(ev(4, 90, Outcome::Ok, Op::Read { ledger: 1, entry: 2, digest: Some(102), lac: Some(1) }));
        let v = check(&h).violations;
        assert_eq!(v, vec![Violation::ReadPastLac { ledger: 1, entry: 2, lac: 1, process: 4, at_us: 95 }]);
    }

    #[test]
    fn a_committed_entry_answered_absent_is_caught_and_past_the_lac_is_not() {
        let mut h = clean();
        // Entry 1 was acknowledged at 25, but the bookies' LAC (the
        // reader's) was still 0: past it, "no such entry" is by design.
        h.push(ev(4, 26, Outcome::Ok, Op::Read { ledger: 1, entry: 1, digest: None, lac: Some(0) }));
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        // At or below the LAC the reader held, it is a committed entry lost.
        h.push(ev(4, 27, Outcome::Ok, Op::Read { ledger: 1, entry: 1, digest: None, lac: Some(1) }));
        let v = check(&h).violations;
        assert_eq!(v, vec![Violation::AbsentAtOrBelowLac { ledger: 1, entry: 1, lac: 1, process: 4, at_us: 32 }]);
    }

    #[test]
    fn an_add_acknowledged_after_its_ledger_was_seen_closed_is_caught() {
        // A worker closed the ledger at entry 1 (seen at 45): an add invoked
        // at 50 and acknowledged as entry 2 broke the seal.
        let mut h = vec![add(10, 0, 100), add(20, 1, 101), fin(&[(0, 100), (1, 101)])];
        h.push(ev(7, 40, Outcome::Ok, Op::Closed { ledger: 1, last_entry: 1 }));
        assert!(check(&h).ok(), "{:?}", check(&h).violations);
        h.push(ev(1, 50, Outcome::Ok, Op::Add { ledger: 1, handle: 1, entry: Some(2), digest: 102 }));
        let v = check(&h).violations;
        assert!(
            v.contains(&Violation::AckAfterClose {
                ledger: 1,
                entry: Some(2),
                handle: 1,
                closed_seen_us: 45,
                invoked_us: 50
            }),
            "{v:?}"
        );
        assert!(v.contains(&Violation::AckBeyondClose { ledger: 1, entry: 2, closed_last_entry: 1 }), "{v:?}");
    }

    #[test]
    fn creations_and_absences_are_counted() {
        let mut h = clean();
        h.push(ev(1, 1, Outcome::Ok, Op::Create { ledger: Some(1) }));
        h.push(ev(1, 2, Outcome::Unknown, Op::Create { ledger: None }));
        h.push(ev(1, 3, Outcome::Fail, Op::Create { ledger: None }));
        h.push(ev(2, 80, Outcome::Ok, Op::Read { ledger: 1, entry: 7, digest: None, lac: Some(2) }));
        let r = check(&h);
        assert_eq!((r.creates, r.failed_creates, r.reads, r.absent_reads), (1, 2, 3, 1));
    }

    #[test]
    fn unknown_and_refused_adds_constrain_nothing() {
        // Neither kept nor dropped by recovery is held against the cluster.
        let h = vec![
            add(10, 0, 100),
            ev(1, 20, Outcome::Unknown, Op::Add { ledger: 1, handle: 1, entry: None, digest: 101 }),
            ev(1, 30, Outcome::Fail, Op::Add { ledger: 1, handle: 1, entry: None, digest: 102 }),
            fin(&[(0, 100)]),
        ];
        assert!(check(&h).ok());
    }
}
