//! The log guarantees (../shared/BRIEF.md guarantee 9, issue LOGS) as rules
//! over a history: the ledger-chaining invariants of Vanlightly's
//! LedgerChaining.tla seen from outside, through what log writers, cursor
//! readers and trims were told.
//!
//! | guarantee | rule |
//! |---|---|
//! | no acknowledged record is lost | every acknowledged append at or past the final trim point is in the final read at its offset, with its bytes ([`LogViolation::LostRecord`], [`LogViolation::ChangedRecord`]); a log with acknowledged appends has a final read ([`LogViolation::Unread`]) |
//! | none is duplicated | no record's bytes appear twice in the final read ([`LogViolation::Duplicated`]); every acknowledgement of one record (an idempotent retry) names one offset ([`LogViolation::RetryMoved`]); two acknowledged appends never share an offset ([`LogViolation::OffsetShared`]) |
//! | offsets are dense and never reused | the final read and every read answer consecutive offsets from where they start ([`LogViolation::Gap`]) |
//! | one owner at a time | every takeover gets a new epoch ([`LogViolation::EpochReused`]); no append invoked after a takeover to a newer epoch completed is acknowledged to an older one ([`LogViolation::AckAfterTakeover`]) |
//! | readers see what is kept | every record read is the acknowledged one at that offset, and at or past the final trim point the final read's ([`LogViolation::DirtyRead`]); a cursor reader's reads together cover every offset from the first it read to the last ([`LogViolation::Skipped`]) |
//! | trims hold | the final trim point is at or past every acknowledged trim ([`LogViolation::TrimLost`]) |
//! | a conditional append is written where it expects (issue #47) | acknowledged at its expected offset ([`LogViolation::ConditionBroken`]); two acknowledged at one offset are [`LogViolation::OffsetShared`], one lost is [`LogViolation::LostRecord`] |
//! | reads see their writes (issue #47) | a read that began after an append was acknowledged, and answered fewer records than it asked for, reached past that append's offset ([`LogViolation::StaleRead`]) |
//! | a batch is whole or absent (issue #47) | the final read holds all of a batch's records at consecutive offsets, or none (or those from its trim point on); no read that stopped at the log's end ends within a batch ([`LogViolation::TornBatch`]) |
//! | record time never goes back (issue #47) | in every read and the final read, each record's time is at least the one before it ([`LogViolation::TimeWentBack`]) |
//!
//! The trim point moves only forward, so a record below the final trim
//! point may be gone for a good reason; such records are judged by the
//! rules that need no final read (retries, shared offsets, epochs).

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{BatchOf, Event, Op, Outcome};

/// One broken log guarantee, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogViolation {
    /// An acknowledged append is not in the final read.
    LostRecord { log: String, offset: u64, digest: u64, final_end: u64 },
    /// An acknowledged append's offset holds other bytes.
    ChangedRecord { log: String, offset: u64, acked: u64, stored: u64 },
    /// A log with acknowledged appends was never read back.
    Unread { log: String, acked: usize },
    /// One record's bytes at two offsets: written twice.
    Duplicated { log: String, digest: u64, offsets: Vec<u64> },
    /// Acknowledgements of one record (retries) named different offsets.
    RetryMoved { log: String, digest: u64, offsets: Vec<u64> },
    /// Two different records acknowledged at one offset.
    OffsetShared { log: String, offset: u64, digests: Vec<u64> },
    /// A read (or the final read) skipped or repeated offsets.
    Gap { log: String, from: u64, expected: u64, got: u64, process: u32 },
    /// Two takeovers were given one epoch.
    EpochReused { log: String, epoch: u64, processes: Vec<u32> },
    /// An append of epoch `epoch`, invoked after the takeover to `newer`
    /// had completed, was acknowledged.
    AckAfterTakeover { log: String, epoch: u64, newer: u64, taken_over_us: u64, invoked_us: u64 },
    /// A reader saw bytes that are not the final read's at that offset.
    DirtyRead { log: String, offset: u64, read: u64, stored: Option<u64>, process: u32 },
    /// A reader's reads, taken together, skipped an offset between the
    /// first and the last it read (a cursor reader reads on from where it
    /// stands or from what it last acknowledged: never past a record).
    Skipped { log: String, offset: u64, process: u32 },
    /// An acknowledged trim point was undone.
    TrimLost { log: String, acked_before: u64, final_trim_before: u64 },
    /// A conditional append acknowledged at another offset than it expected.
    ConditionBroken { log: String, expected: u64, offset: u64 },
    /// A read that began after `offset` was acknowledged stopped short of
    /// it at `end` (fewer records than it asked for): it did not read its
    /// writes.
    StaleRead { log: String, from: u64, end: u64, offset: u64, acked_us: u64, invoked_us: u64, process: u32 },
    /// Part of a batch: `offsets` of its `len` records (by index order), in
    /// the final read or at the end of a read that stopped at the log's
    /// end; or its records at offsets that are not consecutive.
    TornBatch { log: String, batch: u64, len: u32, offsets: Vec<u64>, process: u32 },
    /// A record's time before the time of the record before it.
    TimeWentBack { log: String, offset: u64, time_ms: u64, before_ms: u64, process: u32 },
}

/// What the log rules counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCounts {
    pub takeovers: usize,
    pub acked_appends: usize,
    pub unknown_appends: usize,
    /// Conditional appends (issue #47) acknowledged, and refused (412).
    pub conditional_acked: usize,
    pub conditional_refused: usize,
    /// Records read by readers.
    pub records_read: usize,
    pub trims: usize,
    pub logs_final: usize,
    /// Records in the final reads.
    pub records_final: usize,
    /// Atomic batches acknowledged (issue #47).
    pub batches_acked: usize,
}

/// Consecutive offsets from `from`: the first that is not, as (expected, got).
fn first_gap(from: u64, records: &[(u64, u64)]) -> Option<(u64, u64)> {
    records.iter().enumerate().map(|(i, r)| (from + i as u64, r.0)).find(|(want, got)| want != got)
}

/// The records of `records` (offset, digest) that belong to a batch, by
/// batch: (offset, place) in the order read.
fn by_batch(records: &[(u64, u64)], batches: &BTreeMap<u64, BatchOf>) -> BTreeMap<u64, (BatchOf, Vec<(u64, u32)>)> {
    let mut out: BTreeMap<u64, (BatchOf, Vec<(u64, u32)>)> = BTreeMap::new();
    for &(offset, digest) in records {
        if let Some(b) = batches.get(&digest) {
            out.entry(b.id).or_insert_with(|| (*b, Vec::new())).1.push((offset, b.index));
        }
    }
    out
}

/// Whether a batch's records as read sit at consecutive offsets in index
/// order (each at its batch's first offset plus its index).
fn consecutive(present: &[(u64, u32)]) -> bool {
    let base = |&(o, i): &(u64, u32)| o.checked_sub(u64::from(i));
    present.first().map(base).is_none_or(|b| b.is_some() && present.iter().all(|p| base(p) == b))
}

/// The first record of a read whose time is before the one before it.
fn time_back(log: &str, records: &[(u64, u64)], times: &[u64], process: u32) -> Option<LogViolation> {
    let pairs: Vec<(u64, u64)> = records.iter().map(|r| r.0).zip(times.iter().copied()).collect();
    pairs.windows(2).find(|w| w[1].1 < w[0].1).map(|w| LogViolation::TimeWentBack {
        log: log.to_string(),
        offset: w[1].0,
        time_ms: w[1].1,
        before_ms: w[0].1,
        process,
    })
}

/// A batch seen in part: its records as read, (offset, index).
fn torn(log: &str, batch: u64, b: BatchOf, present: &[(u64, u32)], process: u32) -> LogViolation {
    LogViolation::TornBatch {
        log: log.to_string(),
        batch,
        len: b.len,
        offsets: present.iter().map(|p| p.0).collect(),
        process,
    }
}

/// Checks the log operations of a history (events in any order).
pub fn check_logs(events: &[Event]) -> (LogCounts, Vec<LogViolation>) {
    let mut n = LogCounts::default();
    let mut v = Vec::new();
    // log -> (trim point, offset -> digest)
    let mut finals: BTreeMap<&str, (u64, BTreeMap<u64, u64>)> = BTreeMap::new();
    // (log, epoch) -> processes that took it
    let mut epochs: BTreeMap<(&str, u64), Vec<u32>> = BTreeMap::new();
    // log -> (completed, epoch) of takeovers
    let mut takeovers: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    // (log, digest) -> offsets acknowledged; (log, offset) -> digests
    let mut by_digest: BTreeMap<(&str, u64), BTreeSet<u64>> = BTreeMap::new();
    let mut by_offset: BTreeMap<(&str, u64), BTreeSet<u64>> = BTreeMap::new();
    let mut trims: BTreeMap<&str, u64> = BTreeMap::new();
    // Every batched record's place, by its digest (whatever its outcome:
    // an unanswered batch may be in the log, whole).
    let mut batches: BTreeMap<u64, BatchOf> = BTreeMap::new();
    for e in events {
        if let Op::LogAppend { digest, batch: Some(b), .. } = &e.op {
            batches.insert(*digest, *b);
            if e.outcome == Outcome::Ok && b.index == 0 {
                n.batches_acked += 1;
            }
        }
    }

    for e in events {
        match (&e.op, e.outcome) {
            (Op::LogOpen { log, epoch: Some(epoch) }, Outcome::Ok) => {
                n.takeovers += 1;
                epochs.entry((log, *epoch)).or_default().push(e.process);
                takeovers.entry(log).or_default().push((e.completed_us, *epoch));
            }
            (Op::LogAppend { log, offset: Some(offset), digest, expected, .. }, Outcome::Ok) => {
                n.acked_appends += 1;
                n.conditional_acked += usize::from(expected.is_some());
                if let Some(expected) = expected.filter(|x| x != offset) {
                    v.push(LogViolation::ConditionBroken { log: log.clone(), expected, offset: *offset });
                }
                by_digest.entry((log, *digest)).or_default().insert(*offset);
                by_offset.entry((log, *offset)).or_default().insert(*digest);
            }
            (Op::LogAppend { .. }, Outcome::Unknown) => n.unknown_appends += 1,
            (Op::LogAppend { expected: Some(_), .. }, Outcome::Fail) => n.conditional_refused += 1,
            (Op::LogRead { log, from, limit, records, times }, Outcome::Ok) => {
                n.records_read += records.len();
                if let Some((expected, got)) = first_gap(*from, records) {
                    v.push(LogViolation::Gap { log: log.clone(), from: *from, expected, got, process: e.process });
                }
                v.extend(time_back(log, records, times, e.process));
                // A read that stopped at the log's end (fewer records than
                // asked for) never ends within a batch; a read's batch is at
                // consecutive offsets. (One that started within a batch began
                // at a cursor's position: a page of a whole batch.)
                let at_end = *limit > 0 && records.len() < *limit;
                for (id, (b, present)) in by_batch(records, &batches) {
                    let last = present.last().expect("a batch read has a record");
                    let cut_at_end = at_end && records.last().map(|r| r.0) == Some(last.0) && last.1 + 1 < b.len;
                    if !consecutive(&present) || cut_at_end {
                        v.push(torn(log, id, b, &present, e.process));
                    }
                }
            }
            (Op::LogTrim { log, before }, Outcome::Ok) => {
                n.trims += 1;
                let t = trims.entry(log).or_default();
                *t = (*t).max(*before);
            }
            (Op::LogFinal { log, trim_before, records, times }, Outcome::Ok) => {
                n.logs_final += 1;
                n.records_final += records.len();
                v.extend(time_back(log, records, times, e.process));
                for (id, (b, present)) in by_batch(records, &batches) {
                    // Whole, or cut only by the trim point: its last records,
                    // from the trim point on.
                    let whole = present.len() == b.len as usize;
                    let trimmed = present
                        .first()
                        .is_some_and(|&(o, i)| o == *trim_before && i as usize + present.len() == b.len as usize);
                    if !consecutive(&present) || !(whole || trimmed) {
                        v.push(torn(log, id, b, &present, e.process));
                    }
                }
                if let Some((expected, got)) = first_gap(*trim_before, records) {
                    v.push(LogViolation::Gap {
                        log: log.clone(),
                        from: *trim_before,
                        expected,
                        got,
                        process: e.process,
                    });
                }
                let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
                for &(offset, digest) in records {
                    seen.entry(digest).or_default().push(offset);
                }
                for (digest, offsets) in seen.into_iter().filter(|(_, o)| o.len() > 1) {
                    v.push(LogViolation::Duplicated { log: log.clone(), digest, offsets });
                }
                finals.insert(log, (*trim_before, records.iter().copied().collect()));
            }
            _ => {}
        }
    }

    for ((log, epoch), processes) in &epochs {
        if processes.len() > 1 {
            v.push(LogViolation::EpochReused { log: log.to_string(), epoch: *epoch, processes: processes.clone() });
        }
    }
    for ((log, digest), offsets) in &by_digest {
        if offsets.len() > 1 {
            v.push(LogViolation::RetryMoved {
                log: log.to_string(),
                digest: *digest,
                offsets: offsets.iter().copied().collect(),
            });
        }
    }
    for ((log, offset), digests) in &by_offset {
        if digests.len() > 1 {
            v.push(LogViolation::OffsetShared {
                log: log.to_string(),
                offset: *offset,
                digests: digests.iter().copied().collect(),
            });
        }
    }

    // Acknowledged records are kept, at their offset, with their bytes.
    let mut acked_per_log: BTreeMap<&str, usize> = BTreeMap::new();
    for ((log, offset), digests) in &by_offset {
        *acked_per_log.entry(log).or_default() += 1;
        let Some((trim, records)) = finals.get(log) else { continue };
        if offset < trim {
            continue;
        }
        for &d in digests {
            match records.get(offset) {
                None => v.push(LogViolation::LostRecord {
                    log: log.to_string(),
                    offset: *offset,
                    digest: d,
                    final_end: records.keys().next_back().map_or(*trim, |o| o + 1),
                }),
                Some(&stored) if stored != d => {
                    v.push(LogViolation::ChangedRecord { log: log.to_string(), offset: *offset, acked: d, stored })
                }
                Some(_) => {}
            }
        }
    }
    for (log, acked) in acked_per_log {
        if !finals.contains_key(log) {
            v.push(LogViolation::Unread { log: log.to_string(), acked });
        }
    }
    for (log, before) in &trims {
        if let Some((trim, _)) = finals.get(log) {
            if trim < before {
                v.push(LogViolation::TrimLost {
                    log: log.to_string(),
                    acked_before: *before,
                    final_trim_before: *trim,
                });
            }
        }
    }

    // Fencing across owners: once a takeover to a newer epoch completed,
    // an older owner's append invoked later is never acknowledged.
    for e in events {
        let (Op::LogAppend { log, epoch, offset: Some(_), .. }, Outcome::Ok) = (&e.op, e.outcome) else { continue };
        let newer = takeovers
            .get(log.as_str())
            .into_iter()
            .flatten()
            .filter(|&&(at, ep)| ep > *epoch && at < e.invoked_us)
            .min_by_key(|&&(at, _)| at);
        if let Some(&(at, ep)) = newer {
            v.push(LogViolation::AckAfterTakeover {
                log: log.clone(),
                epoch: *epoch,
                newer: ep,
                taken_over_us: at,
                invoked_us: e.invoked_us,
            });
        }
    }

    // Readers see the kept (and the acknowledged) records, and a reader
    // misses none.
    let mut read_by: BTreeMap<(&str, u32), BTreeSet<u64>> = BTreeMap::new();
    for e in events {
        let (Op::LogRead { log, records, .. }, Outcome::Ok) = (&e.op, e.outcome) else { continue };
        read_by.entry((log, e.process)).or_default().extend(records.iter().map(|r| r.0));
        let kept = finals.get(log.as_str());
        for &(offset, d) in records {
            let truth = match kept {
                Some((trim, stored)) if offset >= *trim => Some(stored.get(&offset).copied()),
                _ => by_offset.get(&(log.as_str(), offset)).and_then(|ds| ds.iter().next()).map(|&a| Some(a)),
            };
            if let Some(stored) = truth.filter(|t| *t != Some(d)) {
                v.push(LogViolation::DirtyRead { log: log.clone(), offset, read: d, stored, process: e.process });
            }
        }
    }
    // Read your writes: the highest offset acknowledged before each
    // instant, per log (appends by completion time, a running maximum).
    let mut acks: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for e in events {
        if let (Op::LogAppend { log, offset: Some(offset), .. }, Outcome::Ok) = (&e.op, e.outcome) {
            acks.entry(log).or_default().push((e.completed_us, *offset));
        }
    }
    for a in acks.values_mut() {
        a.sort_unstable();
        let mut max = 0;
        for (_, o) in a.iter_mut() {
            max = max.max(*o);
            *o = max;
        }
    }
    for e in events {
        let (Op::LogRead { log, from, limit, records, .. }, Outcome::Ok) = (&e.op, e.outcome) else { continue };
        if *limit == 0 || records.len() >= *limit {
            continue;
        }
        let Some(a) = acks.get(log.as_str()) else { continue };
        let before = a.partition_point(|&(at, _)| at < e.invoked_us);
        let Some(&(acked_us, offset)) = before.checked_sub(1).map(|i| &a[i]) else { continue };
        let end = records.last().map_or(*from, |r| r.0 + 1);
        if offset >= *from && offset >= end {
            v.push(LogViolation::StaleRead {
                log: log.clone(),
                from: *from,
                end,
                offset,
                acked_us,
                invoked_us: e.invoked_us,
                process: e.process,
            });
        }
    }
    for ((log, process), offsets) in &read_by {
        let (Some(&lo), Some(&hi)) = (offsets.first(), offsets.last()) else { continue };
        if let Some(offset) = (lo..=hi).find(|o| !offsets.contains(o)) {
            v.push(LogViolation::Skipped { log: log.to_string(), offset, process: *process });
        }
    }
    v.sort_by_key(|x| format!("{x:?}"));
    v.dedup();
    (n, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(process: u32, at: u64, outcome: Outcome, op: Op) -> Event {
        Event { process, invoked_us: at, completed_us: at + 5, outcome, op, error: None }
    }
    fn open(process: u32, at: u64, epoch: u64) -> Event {
        ev(process, at, Outcome::Ok, Op::LogOpen { log: "l".into(), epoch: Some(epoch) })
    }
    fn append(process: u32, at: u64, epoch: u64, offset: u64, digest: u64) -> Event {
        ev(
            process,
            at,
            Outcome::Ok,
            Op::LogAppend { log: "l".into(), epoch, offset: Some(offset), digest, expected: None, batch: None },
        )
    }
    fn read(at: u64, from: u64, records: &[(u64, u64)]) -> Event {
        // Cut at its limit: the other rules' histories say nothing of
        // freshness (stale_read below does).
        ev(
            7,
            at,
            Outcome::Ok,
            Op::LogRead { log: "l".into(), from, limit: records.len(), records: records.to_vec(), times: vec![] },
        )
    }
    fn stale_read(at: u64, from: u64, records: &[(u64, u64)]) -> Event {
        ev(
            7,
            at,
            Outcome::Ok,
            Op::LogRead { log: "l".into(), from, limit: 10, records: records.to_vec(), times: vec![] },
        )
    }
    fn fin(trim_before: u64, records: &[(u64, u64)]) -> Event {
        ev(
            9,
            10_000,
            Outcome::Ok,
            Op::LogFinal { log: "l".into(), trim_before, records: records.to_vec(), times: vec![] },
        )
    }

    /// Two owners in turn, a retry answered with its first offset, a
    /// fenced append, a read, a trim and a final read that agree.
    fn clean() -> Vec<Event> {
        vec![
            open(1, 0, 1),
            append(1, 10, 1, 0, 100),
            append(1, 20, 1, 1, 101),
            // In flight at the takeover, of unknown outcome; kept.
            ev(
                1,
                30,
                Outcome::Unknown,
                Op::LogAppend { log: "l".into(), epoch: 1, offset: None, digest: 102, expected: None, batch: None },
            ),
            open(2, 40, 2),
            // The old owner is refused once the new one holds.
            ev(
                1,
                50,
                Outcome::Fail,
                Op::LogAppend { log: "l".into(), epoch: 1, offset: None, digest: 103, expected: None, batch: None },
            ),
            // Its retry of 102 through a new takeover: the first offset.
            open(1, 60, 3),
            append(1, 70, 3, 2, 102),
            append(1, 80, 3, 3, 103),
            read(90, 1, &[(1, 101), (2, 102), (3, 103)]),
            ev(3, 95, Outcome::Ok, Op::LogTrim { log: "l".into(), before: 1 }),
            fin(1, &[(1, 101), (2, 102), (3, 103)]),
        ]
    }

    fn violations(h: &[Event]) -> Vec<LogViolation> {
        check_logs(h).1
    }

    #[test]
    fn a_clean_history_passes() {
        let (n, v) = check_logs(&clean());
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((n.takeovers, n.acked_appends, n.unknown_appends, n.records_read), (3, 4, 1, 3));
        assert_eq!((n.trims, n.logs_final, n.records_final), (1, 1, 3));
    }

    #[test]
    fn an_acknowledged_record_missing_or_changed_is_named() {
        let mut h = clean();
        h.pop();
        h.push(fin(1, &[(1, 101), (2, 102)]));
        assert!(violations(&h).iter().any(|x| matches!(x, LogViolation::LostRecord { offset: 3, .. })));
        h.pop();
        h.push(fin(1, &[(1, 101), (2, 999), (3, 103)]));
        let v = violations(&h);
        assert!(
            v.contains(&LogViolation::ChangedRecord { log: "l".into(), offset: 2, acked: 102, stored: 999 }),
            "{v:?}"
        );
        // And the reader that saw 102 there read what was not kept.
        assert!(v.iter().any(|x| matches!(x, LogViolation::DirtyRead { offset: 2, read: 102, .. })), "{v:?}");
    }

    #[test]
    fn a_record_below_the_final_trim_point_may_be_gone() {
        let mut h = clean();
        h.pop();
        h.push(fin(3, &[(3, 103)]));
        assert!(violations(&h).is_empty(), "{:?}", violations(&h));
    }

    #[test]
    fn a_record_written_twice_or_a_retry_given_a_new_offset_is_named() {
        let mut h = clean();
        h.pop();
        h.push(fin(1, &[(1, 101), (2, 102), (3, 103), (4, 102)]));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::Duplicated { log: "l".into(), digest: 102, offsets: vec![2, 4] }), "{v:?}");
        let mut h = clean();
        h.push(append(1, 85, 3, 4, 102));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::RetryMoved { log: "l".into(), digest: 102, offsets: vec![2, 4] }), "{v:?}");
    }

    #[test]
    fn two_records_at_one_offset_are_named() {
        let mut h = clean();
        h.push(append(2, 45, 2, 3, 555));
        let v = violations(&h);
        assert!(
            v.contains(&LogViolation::OffsetShared { log: "l".into(), offset: 3, digests: vec![103, 555] }),
            "{v:?}"
        );
    }

    #[test]
    fn a_gap_in_a_read_or_the_final_read_is_named() {
        let mut h = clean();
        h.push(read(91, 1, &[(1, 101), (3, 103)]));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::Gap { log: "l".into(), from: 1, expected: 2, got: 3, process: 7 }), "{v:?}");
        let mut h = clean();
        h.pop();
        h.push(fin(0, &[(1, 101), (2, 102), (3, 103)]));
        let v = violations(&h);
        assert!(v.iter().any(|x| matches!(x, LogViolation::Gap { expected: 0, got: 1, process: 9, .. })), "{v:?}");
    }

    #[test]
    fn an_older_owner_acknowledged_after_a_newer_took_over_is_named() {
        // Invoked at 50, after epoch 2's takeover completed at 45.
        let mut h = clean();
        h.pop();
        h.push(append(1, 50, 1, 4, 104));
        h.push(fin(1, &[(1, 101), (2, 102), (3, 103), (4, 104)]));
        let v = violations(&h);
        assert!(
            v.contains(&LogViolation::AckAfterTakeover {
                log: "l".into(),
                epoch: 1,
                newer: 2,
                taken_over_us: 45,
                invoked_us: 50
            }),
            "{v:?}"
        );
        // Invoked before the takeover completed: in flight, and may land.
        let mut h = clean();
        h.pop();
        h.push(append(1, 41, 1, 4, 104));
        h.push(fin(1, &[(1, 101), (2, 102), (3, 103), (4, 104)]));
        assert!(violations(&h).is_empty(), "{:?}", violations(&h));
    }

    #[test]
    fn a_read_that_disagrees_with_an_acknowledgement_below_the_trim_point_is_dirty() {
        let mut h = clean();
        h.push(read(92, 0, &[(0, 555)]));
        let v = violations(&h);
        assert_eq!(
            v,
            vec![LogViolation::DirtyRead { log: "l".into(), offset: 0, read: 555, stored: Some(100), process: 7 }]
        );
    }

    #[test]
    fn a_reader_that_skips_a_record_between_its_reads_is_named() {
        let mut h = clean();
        h.push(read(92, 5, &[(5, 1)]));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::Skipped { log: "l".into(), offset: 4, process: 7 }), "{v:?}");
    }

    #[test]
    fn an_epoch_given_twice_and_a_trim_undone_are_named() {
        let mut h = clean();
        h.push(open(2, 65, 3));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::EpochReused { log: "l".into(), epoch: 3, processes: vec![1, 2] }), "{v:?}");
        let mut h = clean();
        h.push(ev(3, 96, Outcome::Ok, Op::LogTrim { log: "l".into(), before: 2 }));
        let v = violations(&h);
        assert!(
            v.contains(&LogViolation::TrimLost { log: "l".into(), acked_before: 2, final_trim_before: 1 }),
            "{v:?}"
        );
    }

    /// Issue #47: a read that began after offset 3 was acknowledged (at
    /// 85) and stopped short of it is stale; one that began before, or
    /// that was cut by its own limit, is not.
    #[test]
    fn a_read_that_misses_an_append_acknowledged_before_it_began_is_named() {
        let mut h = clean();
        h.push(stale_read(86, 1, &[(1, 101), (2, 102)]));
        let v = violations(&h);
        let stale = LogViolation::StaleRead {
            log: "l".into(),
            from: 1,
            end: 3,
            offset: 3,
            acked_us: 85,
            invoked_us: 86,
            process: 7,
        };
        assert!(v.contains(&stale), "{v:?}");
        let mut h = clean();
        h.push(stale_read(84, 1, &[(1, 101), (2, 102)]));
        let cut = ev(
            7,
            86,
            Outcome::Ok,
            Op::LogRead { log: "l".into(), from: 1, limit: 2, records: vec![(1, 101), (2, 102)], times: vec![] },
        );
        h.push(cut);
        assert_eq!(violations(&h), vec![], "begun before the ack, or cut at its limit");
    }

    #[test]
    fn a_conditional_append_acknowledged_elsewhere_than_expected_is_named() {
        let mut h = clean();
        h.push(ev(
            1,
            81,
            Outcome::Ok,
            Op::LogAppend { log: "l".into(), epoch: 3, offset: Some(3), digest: 103, expected: Some(2), batch: None },
        ));
        let v = violations(&h);
        assert!(v.contains(&LogViolation::ConditionBroken { log: "l".into(), expected: 2, offset: 3 }), "{v:?}");
    }

    #[test]
    fn acknowledged_appends_with_no_final_read_are_unread() {
        let mut h = clean();
        h.pop();
        let v = violations(&h);
        assert_eq!(v, vec![LogViolation::Unread { log: "l".into(), acked: 4 }]);
    }

    /// A batch of three (digests 200..203) acknowledged at 4..7 after the
    /// clean history; `cut` of its records at the end of a read that
    /// stopped at the log's end, and in the final read.
    fn with_batch(read: &[(u64, u64)], fin_records: &[(u64, u64)], trim: u64) -> Vec<LogViolation> {
        let mut h = clean();
        h.pop();
        for i in 0..3u64 {
            let batch = Some(BatchOf { id: 200, index: i as u32, len: 3 });
            let op = Op::LogAppend {
                log: "l".into(),
                epoch: 3,
                offset: Some(4 + i),
                digest: 200 + i,
                expected: None,
                batch,
            };
            h.push(ev(1, 85, Outcome::Ok, op));
        }
        h.push(ev(
            7,
            95,
            Outcome::Ok,
            Op::LogRead { log: "l".into(), from: 4, limit: 10, records: read.to_vec(), times: vec![] },
        ));
        let mut all = vec![(0, 100), (1, 101), (2, 102), (3, 103)];
        all.extend_from_slice(fin_records);
        let all: Vec<_> = all.into_iter().filter(|r| r.0 >= trim).collect();
        h.push(fin(trim, &all));
        violations(&h)
    }

    #[test]
    fn a_batch_seen_in_part_is_named() {
        let whole = [(4, 200), (5, 201), (6, 202)];
        assert_eq!(with_batch(&whole, &whole, 2), vec![], "whole everywhere");
        assert_eq!(with_batch(&whole, &whole[1..], 5), vec![], "its first record below the final trim point");
        let torn = LogViolation::TornBatch { log: "l".into(), batch: 200, len: 3, offsets: vec![4, 5], process: 7 };
        assert!(with_batch(&whole[..2], &whole, 2).contains(&torn), "a read that stopped within it");
        let v = with_batch(&whole, &whole[..2], 2);
        assert!(v.iter().any(|x| matches!(x, LogViolation::TornBatch { process: 9, .. })), "a prefix kept: {v:?}");
        assert!(v.iter().any(|x| matches!(x, LogViolation::LostRecord { offset: 6, .. })), "{v:?}");
        let moved = [(4, 200), (5, 202)];
        let v = with_batch(&moved, &whole, 2);
        assert!(v.iter().any(|x| matches!(x, LogViolation::TornBatch { process: 7, .. })), "not consecutive: {v:?}");
    }

    #[test]
    fn a_time_before_the_one_before_it_is_named() {
        let mut h = clean();
        let op = Op::LogRead {
            log: "l".into(),
            from: 1,
            limit: 3,
            records: vec![(1, 101), (2, 102), (3, 103)],
            times: vec![5, 9, 7],
        };
        h.push(ev(7, 91, Outcome::Ok, op));
        let v = violations(&h);
        assert!(
            v.contains(&LogViolation::TimeWentBack {
                log: "l".into(),
                offset: 3,
                time_ms: 7,
                before_ms: 9,
                process: 7
            }),
            "{v:?}"
        );
        let mut h = clean();
        let Op::LogFinal { times, .. } = &mut h.last_mut().unwrap().op else { panic!("the final read is last") };
        *times = vec![1, 1, 2, 3];
        assert_eq!(violations(&h), vec![], "equal times are fine");
    }
}
