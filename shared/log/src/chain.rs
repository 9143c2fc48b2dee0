//! A log as a chain of ledgers (issue #23): the record the metadata service
//! holds for a log, and the edits a log writer makes to it, as plain
//! functions from one record to the intended next one (each written by CAS
//! on the record's version, like a ledger's metadata). [`check_edit`] is the
//! metadata service's side: which changes of a stored record it accepts.
//!
//! Offsets are dense from 0 and never repeat: a segment's first offset is one
//! past the previous segment's last record, and record `o` of the log is
//! entry `o - first_offset` of the segment holding it. Only the last segment
//! may be open (its end is unknown until its ledger is closed or recovered);
//! every other segment's end is fixed. A takeover raises the owner epoch,
//! seals the open segment at its recovered end, and opens a new one, so an
//! earlier owner's ledger never takes another record into the log's offsets
//! (its ledger is fenced by the recovery, which the shell does first).
//!
//! The invariants ([`LogRecord::check`]) follow Vanlightly's LedgerChaining
//! TLA+ model: every segment is listed in order, offsets are contiguous, at
//! most one segment (the last) is open, the trim point only grows and no
//! listed segment lies wholly below it.

use serde::{Deserialize, Serialize};

/// The largest offset a record may name (a segment's end, the trim
/// point). A segment's records are its ledger's entries, whose ids are
/// `i64`: no segment holds more than this many, and no offset arithmetic
/// on a checked record (`first + entries`, `end - 1`) wraps.
pub const OFFSET_MAX: u64 = i64::MAX as u64;

/// One ledger of a log and the offsets it holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogSegment {
    /// The ledger.
    pub ledger_id: u64,
    /// The offset of its entry 0.
    pub first_offset: u64,
    /// One past its last record's offset, once fixed (`None`: the open
    /// segment, whose ledger is still written).
    pub end_offset: Option<u64>,
    /// When its end was fixed, by the metadata leader's clock (0: open, or
    /// unknown): retention by age counts from it. The metadata service
    /// sets it; what a writer sends is ignored.
    pub sealed_at_ms: u64,
}

impl LogSegment {
    /// Whether `offset` lies in this segment (an open segment holds every
    /// offset from its first on; the caller bounds it by the LAC).
    fn holds(&self, offset: u64) -> bool {
        offset >= self.first_offset && self.end_offset.is_none_or(|end| offset < end)
    }
}

/// A log's record in the metadata service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogRecord {
    /// The log's name.
    pub name: String,
    /// The owner's epoch: raised by every takeover.
    pub epoch: u64,
    /// The owning process (a gateway or client id), for NotOwner answers.
    pub owner: String,
    /// The ledgers, oldest first.
    pub segments: Vec<LogSegment>,
    /// Offsets below this are trimmed: refused to readers, their ledgers
    /// deleted once wholly below it.
    pub trim_before: u64,
}

/// Where an offset is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Located {
    /// Entry `entry_id` of `ledger_id`.
    At {
        /// The ledger.
        ledger_id: u64,
        /// The entry.
        entry_id: u64,
    },
    /// Below the trim point (410 Trimmed): never answered with other records.
    Trimmed {
        /// The trim point.
        trim_before: u64,
    },
    /// Past the log's fixed end (a closed log, or no segment yet).
    Beyond,
}

/// An edit the record does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The edit needs an open last segment and there is none.
    #[error("log {0} has no open ledger")]
    NoOpenSegment(String),
    /// The edit was made for another epoch: a newer owner took the log.
    #[error("log {log} is owned at epoch {current}, not {expected}")]
    Fenced {
        /// The log.
        log: String,
        /// The epoch the edit was made for.
        expected: u64,
        /// The record's epoch.
        current: u64,
    },
    /// The next ledger is already listed.
    #[error("ledger {0} is already in the log")]
    LedgerListed(u64),
    /// The trim point would move back.
    #[error("the trim point is {current}; it cannot move back to {requested}")]
    TrimBackwards {
        /// The trim point.
        current: u64,
        /// The point asked for.
        requested: u64,
    },
    /// The trim point would pass the records the log holds.
    #[error("cannot trim before {requested}: the log ends at {end}")]
    TrimPastEnd {
        /// The point asked for.
        requested: u64,
        /// The log's fixed end.
        end: u64,
    },
    /// The record breaks an invariant (damage or a bug: never written).
    #[error("log record invalid: {0}")]
    Invalid(String),
}

impl LogRecord {
    /// A new log owned by `owner` at epoch 1, writing to `first_ledger`.
    pub fn new(name: impl Into<String>, owner: impl Into<String>, first_ledger: u64) -> LogRecord {
        LogRecord {
            name: name.into(),
            epoch: 1,
            owner: owner.into(),
            segments: vec![LogSegment { ledger_id: first_ledger, first_offset: 0, end_offset: None, sealed_at_ms: 0 }],
            trim_before: 0,
        }
    }

    /// The open segment, if any.
    pub fn open_segment(&self) -> Option<&LogSegment> {
        self.segments.last().filter(|s| s.end_offset.is_none())
    }

    /// The first offset past every fixed segment: where the open segment
    /// starts, or the log's end when none is open.
    pub fn fixed_end(&self) -> u64 {
        match self.segments.last() {
            Some(LogSegment { end_offset: Some(end), .. }) => *end,
            Some(s) => s.first_offset,
            None => self.trim_before,
        }
    }

    /// The offset of entry `entry_id` of ledger `ledger_id`, if the log lists
    /// that ledger and (once its end is fixed) the entry is within it.
    pub fn offset_of(&self, ledger_id: u64, entry_id: u64) -> Option<u64> {
        let s = self.segments.iter().find(|s| s.ledger_id == ledger_id)?;
        let offset = s.first_offset.checked_add(entry_id)?;
        s.holds(offset).then_some(offset)
    }

    /// Where `offset` is.
    pub fn locate(&self, offset: u64) -> Located {
        if offset < self.trim_before {
            return Located::Trimmed { trim_before: self.trim_before };
        }
        // Segments are sorted by first offset: the last one starting at or
        // before `offset` is the only one that can hold it.
        let i = self.segments.partition_point(|s| s.first_offset <= offset);
        match i.checked_sub(1).map(|i| &self.segments[i]) {
            Some(s) if s.holds(offset) => Located::At { ledger_id: s.ledger_id, entry_id: offset - s.first_offset },
            _ => Located::Beyond,
        }
    }

    fn same_epoch(&self, epoch: u64) -> Result<(), ChainError> {
        if epoch != self.epoch {
            return Err(ChainError::Fenced { log: self.name.clone(), expected: epoch, current: self.epoch });
        }
        Ok(())
    }

    fn seal_open(&mut self, last_entry_id: i64) -> Result<(), ChainError> {
        let s = self
            .segments
            .last_mut()
            .filter(|s| s.end_offset.is_none())
            .ok_or_else(|| ChainError::NoOpenSegment(self.name.clone()))?;
        // In i128: a ledger's count (last entry id + 1) reaches 2^63, which
        // no i64 holds; an end past OFFSET_MAX is refused by check().
        let entries = u64::try_from((i128::from(last_entry_id) + 1).max(0)).expect("at most 2^63");
        let end = s.first_offset.checked_add(entries).ok_or_else(|| {
            ChainError::Invalid(format!(
                "log {}: {entries} records from {} pass the largest offset",
                self.name, s.first_offset
            ))
        })?;
        s.end_offset = Some(end);
        Ok(())
    }

    fn open_next(&mut self, ledger_id: u64) -> Result<(), ChainError> {
        if self.segments.iter().any(|s| s.ledger_id == ledger_id) {
            return Err(ChainError::LedgerListed(ledger_id));
        }
        let first_offset = self.fixed_end();
        self.segments.push(LogSegment { ledger_id, first_offset, end_offset: None, sealed_at_ms: 0 });
        Ok(())
    }

    /// Rollover by the owner at `epoch`: the open segment's ledger was closed
    /// at `last_entry_id` (-1: empty) and `next_ledger` takes the following
    /// offsets. The returned record is what the owner writes by CAS.
    pub fn roll(&self, epoch: u64, last_entry_id: i64, next_ledger: u64) -> Result<LogRecord, ChainError> {
        self.same_epoch(epoch)?;
        let mut next = self.clone();
        next.seal_open(last_entry_id)?;
        next.open_next(next_ledger)?;
        next.check()?;
        Ok(next)
    }

    /// Takeover by `owner`: the open segment's ledger (if any) was fenced
    /// and recovered at `recovered_last_entry_id`, the epoch rises, and
    /// `next_ledger` takes the following offsets. The previous owner's
    /// edits (made for the old epoch) are refused from then on.
    pub fn take_over(
        &self,
        owner: impl Into<String>,
        recovered_last_entry_id: i64,
        next_ledger: u64,
    ) -> Result<LogRecord, ChainError> {
        let mut next = self.clone();
        if next.open_segment().is_some() {
            next.seal_open(recovered_last_entry_id)?;
        }
        next.open_next(next_ledger)?;
        next.epoch += 1;
        next.owner = owner.into();
        next.check()?;
        Ok(next)
    }

    /// Moves the trim point to `before` (never back, never past the fixed
    /// end: records of the open segment may not all be acknowledged yet).
    /// Returns the edited record and the ledgers it no longer lists (wholly
    /// below the trim point), which the caller deletes after the CAS.
    pub fn trim(&self, before: u64) -> Result<(LogRecord, Vec<u64>), ChainError> {
        if before < self.trim_before {
            return Err(ChainError::TrimBackwards { current: self.trim_before, requested: before });
        }
        let end = self.fixed_end();
        if before > end {
            return Err(ChainError::TrimPastEnd { requested: before, end });
        }
        let mut next = self.clone();
        next.trim_before = before;
        let (gone, kept): (Vec<LogSegment>, Vec<LogSegment>) =
            next.segments.into_iter().partition(|s| s.end_offset.is_some_and(|end| end <= before));
        next.segments = kept;
        next.check()?;
        Ok((next, gone.into_iter().map(|s| s.ledger_id).collect()))
    }

    /// The invariants every written record keeps.
    pub fn check(&self) -> Result<(), ChainError> {
        let bad = |why: String| Err(ChainError::Invalid(format!("log {}: {why}", self.name)));
        if self.epoch == 0 {
            return bad("epoch 0".into());
        }
        // Bounds first: the checks below (and the service's, on every
        // replica) may then add and subtract offsets freely.
        let past = |o: u64| o > OFFSET_MAX;
        if past(self.trim_before)
            || self.segments.iter().any(|s| past(s.first_offset) || s.end_offset.is_some_and(past))
        {
            return bad(format!("an offset past {OFFSET_MAX}"));
        }
        // A set, not a scan of the segments before: the metadata service
        // runs this in Raft's apply, on records of up to 65,536 segments.
        let mut seen = std::collections::HashSet::with_capacity(self.segments.len());
        for (i, s) in self.segments.iter().enumerate() {
            let last = i + 1 == self.segments.len();
            match s.end_offset {
                None if !last => return bad(format!("ledger {} is open but not the last", s.ledger_id)),
                Some(end) if end < s.first_offset => {
                    return bad(format!("ledger {} ends at {end} before it starts at {}", s.ledger_id, s.first_offset))
                }
                _ => {}
            }
            if let Some(next) = self.segments.get(i + 1) {
                if s.end_offset != Some(next.first_offset) {
                    return bad(format!(
                        "ledger {} ends at {:?} but ledger {} starts at {}",
                        s.ledger_id, s.end_offset, next.ledger_id, next.first_offset
                    ));
                }
            }
            if !seen.insert(s.ledger_id) {
                return bad(format!("ledger {} listed twice", s.ledger_id));
            }
        }
        if self.trim_before > self.fixed_end() {
            return bad(format!("trimmed before {} past the fixed end {}", self.trim_before, self.fixed_end()));
        }
        if let Some(first) = self.segments.first() {
            // (An empty ledger holds no offsets: listed at the trim point,
            // it hides nothing; trim() drops it with the others.)
            if first.end_offset.is_some_and(|end| end <= self.trim_before && end > first.first_offset) {
                return bad(format!("ledger {} lies wholly below the trim point", first.ledger_id));
            }
            if first.first_offset > self.trim_before {
                return bad(format!("offsets {}..{} are in no ledger", self.trim_before, first.first_offset));
            }
        }
        Ok(())
    }
}

/// What an accepted edit of a record changed, for the checks the record
/// alone cannot make (the metadata service makes them against its ledgers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    /// Segments whose end the edit fixed: the ledger and how many entries it
    /// holds in the log (its ledger must be closed at exactly that many, or,
    /// in a takeover, up to one batch more: a batch its recovery cut).
    pub sealed: Vec<(u64, u64)>,
    /// Ledgers the edit added (each must exist and be open, so that nothing
    /// was written to it before the log listed it).
    pub opened: Vec<u64>,
    /// Ledgers the edit no longer lists (wholly below the new trim point):
    /// deleted with it.
    pub dropped: Vec<u64>,
}

/// Whether `new` may replace the stored record `old`, and what it changes.
/// The rules that make offsets stable: a listed segment keeps its ledger
/// and first offset, a fixed end never moves, only the open segment is
/// sealed, new segments only follow the old ones, a segment leaves the list
/// only wholly below the trim point, the trim point and the epoch never go
/// back, and the owner changes only with the epoch (a takeover).
pub fn check_edit(old: &LogRecord, new: &LogRecord) -> Result<Edit, ChainError> {
    new.check()?;
    let bad = |why: String| Err(ChainError::Invalid(format!("log {}: {why}", old.name)));
    if new.name != old.name {
        return bad(format!("renamed to {}", new.name));
    }
    if new.epoch < old.epoch {
        return Err(ChainError::Fenced { log: old.name.clone(), expected: new.epoch, current: old.epoch });
    }
    if new.epoch == old.epoch && new.owner != old.owner {
        return bad(format!("owner {} replaced by {} without a new epoch", old.owner, new.owner));
    }
    if new.trim_before < old.trim_before {
        return Err(ChainError::TrimBackwards { current: old.trim_before, requested: new.trim_before });
    }
    // Never past what was fixed before the edit: records of the open
    // segment may not all be acknowledged yet.
    if new.trim_before > old.fixed_end().max(old.trim_before) {
        return Err(ChainError::TrimPastEnd { requested: new.trim_before, end: old.fixed_end() });
    }
    let mut edit = Edit::default();
    let mut kept = 0;
    for s in &old.segments {
        let Some(n) = new.segments.get(kept).filter(|n| n.ledger_id == s.ledger_id) else {
            // Only a fixed segment wholly below the new trim point may go.
            if s.end_offset.is_some_and(|end| end <= new.trim_before) && kept == 0 {
                edit.dropped.push(s.ledger_id);
                continue;
            }
            return bad(format!("ledger {} left the list above the trim point", s.ledger_id));
        };
        if n.first_offset != s.first_offset {
            return bad(format!("ledger {} moved from offset {} to {}", s.ledger_id, s.first_offset, n.first_offset));
        }
        match (s.end_offset, n.end_offset) {
            (Some(a), Some(b)) if a != b => return bad(format!("ledger {} end moved from {a} to {b}", s.ledger_id)),
            (Some(_), None) => return bad(format!("ledger {} reopened", s.ledger_id)),
            (None, Some(end)) => edit.sealed.push((s.ledger_id, end - s.first_offset)),
            _ => {}
        }
        kept += 1;
    }
    // Offsets are never given twice: what follows the kept segments starts
    // where the old record's fixed offsets ended (check() keeps the rest
    // contiguous), even when every old segment was trimmed away.
    if kept == 0 {
        if let Some(first) = new.segments.first() {
            if first.first_offset != old.fixed_end() {
                return bad(format!(
                    "ledger {} starts at {}, not at the end {}",
                    first.ledger_id,
                    first.first_offset,
                    old.fixed_end()
                ));
            }
        }
    }
    let old_ids: std::collections::HashSet<u64> = old.segments.iter().map(|s| s.ledger_id).collect();
    for n in &new.segments[kept..] {
        if old_ids.contains(&n.ledger_id) {
            return bad(format!("ledger {} listed again", n.ledger_id));
        }
        match n.end_offset {
            // A segment added already sealed holds nothing (a takeover that
            // found an empty ledger may list it so, but need not).
            Some(end) if end != n.first_offset => {
                return bad(format!("ledger {} added with records at {}..{end}", n.ledger_id, n.first_offset))
            }
            Some(_) => edit.sealed.push((n.ledger_id, 0)),
            None => edit.opened.push(n.ledger_id),
        }
    }
    // A new owner seals the earlier owner's open segment in the same edit
    // (at the end its recovery found): the earlier writer's ledger never
    // takes another record into the log's offsets.
    if new.epoch > old.epoch {
        if let Some(open) = old.open_segment() {
            if !edit.sealed.iter().any(|(id, _)| *id == open.ledger_id) {
                return bad(format!("a new epoch leaves ledger {} open", open.ledger_id));
            }
        }
    }
    Ok(edit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offsets_run_on_across_a_rollover_and_a_takeover() {
        let log = LogRecord::new("orders", "gw-1", 10);
        assert_eq!(log.locate(0), Located::At { ledger_id: 10, entry_id: 0 });
        let log = log.roll(1, 4, 11).unwrap(); // ledger 10 held offsets 0..5
        assert_eq!(log.locate(4), Located::At { ledger_id: 10, entry_id: 4 });
        assert_eq!(log.locate(5), Located::At { ledger_id: 11, entry_id: 0 });
        assert_eq!(log.offset_of(11, 2), Some(7));
        // gw-2 takes over: ledger 11 recovered at entry 2 (offsets 5..8).
        let log = log.take_over("gw-2", 2, 12).unwrap();
        assert_eq!((log.epoch, log.owner.as_str()), (2, "gw-2"));
        assert_eq!(log.locate(7), Located::At { ledger_id: 11, entry_id: 2 });
        assert_eq!(log.locate(8), Located::At { ledger_id: 12, entry_id: 0 });
        assert_eq!(log.offset_of(11, 3), None, "past the recovered end");
        // The previous owner's rollover is refused.
        assert!(matches!(log.roll(1, 9, 13), Err(ChainError::Fenced { expected: 1, current: 2, .. })));
    }

    #[test]
    fn trim_drops_whole_ledgers_only_and_never_moves_back() {
        let log = LogRecord::new("l", "o", 1).roll(1, 9, 2).unwrap().roll(1, 9, 3).unwrap();
        // 1: 0..10, 2: 10..20, 3: 20.. (open)
        let (t, gone) = log.trim(15).unwrap();
        assert_eq!(gone, vec![1]);
        assert_eq!(t.locate(14), Located::Trimmed { trim_before: 15 });
        assert_eq!(t.locate(15), Located::At { ledger_id: 2, entry_id: 5 });
        assert!(matches!(t.trim(14), Err(ChainError::TrimBackwards { .. })));
        assert!(matches!(t.trim(21), Err(ChainError::TrimPastEnd { end: 20, .. })));
        let (t, gone) = t.trim(20).unwrap();
        assert_eq!(gone, vec![2]);
        assert_eq!(t.segments.len(), 1);
    }

    #[test]
    fn an_empty_ledger_holds_no_offsets_and_breaks_nothing() {
        let log = LogRecord::new("l", "o", 1).roll(1, -1, 2).unwrap();
        assert_eq!(log.locate(0), Located::At { ledger_id: 2, entry_id: 0 });
        assert_eq!(log.offset_of(1, 0), None);
        let log = log.take_over("p", -1, 3).unwrap();
        assert_eq!(log.locate(0), Located::At { ledger_id: 3, entry_id: 0 });
        assert!(log.roll(2, 0, 3).is_err(), "a listed ledger is not listed again");
    }

    /// Offsets stay at or below OFFSET_MAX (entry ids are i64): a record
    /// naming one past it is refused, and a seal whose count would pass it
    /// (or overflow on the way) is an error, never a wrapped offset.
    #[test]
    fn offsets_past_the_largest_are_refused_and_never_wrap() {
        let r = LogRecord::new("l", "o", 1);
        assert!(r.roll(1, i64::MAX, 2).is_err(), "2^63 records from 0 end past OFFSET_MAX");
        assert!(r.take_over("p", i64::MAX, 2).is_err());
        let mut big = r.roll(1, i64::MAX - 1, 2).unwrap();
        assert_eq!(big.fixed_end(), OFFSET_MAX, "exactly at the bound is a record");
        assert!(big.roll(1, 0, 3).is_err(), "one more record passes it");
        assert!(big.roll(1, i64::MAX, 3).is_err(), "and a huge count does not wrap to a small end");
        big.trim_before = OFFSET_MAX + 1;
        assert!(matches!(big.check(), Err(ChainError::Invalid(_))));
        let mut r2 = LogRecord::new("l", "o", 1);
        r2.segments[0].end_offset = Some(u64::MAX);
        assert!(matches!(r2.check(), Err(ChainError::Invalid(_))));
        assert!(check_edit(&LogRecord::new("l", "o", 1), &r2).is_err());
    }

    #[test]
    fn check_refuses_broken_records() {
        let mut r = LogRecord::new("l", "o", 1).roll(1, 4, 2).unwrap();
        r.segments[1].first_offset = 6;
        assert!(matches!(r.check(), Err(ChainError::Invalid(_))), "a gap");
        let mut r = LogRecord::new("l", "o", 1).roll(1, 4, 2).unwrap();
        r.segments[0].end_offset = None;
        assert!(r.check().is_err(), "two open");
        let mut r = LogRecord::new("l", "o", 1);
        r.trim_before = 3;
        r.segments[0].first_offset = 5;
        assert!(r.check().is_err(), "offsets in no ledger");
    }

    #[test]
    fn check_edit_names_what_changed_and_refuses_what_moves_offsets() {
        let a = LogRecord::new("l", "o", 1);
        let b = a.roll(1, 4, 2).unwrap();
        assert_eq!(check_edit(&a, &b).unwrap(), Edit { sealed: vec![(1, 5)], opened: vec![2], dropped: vec![] });
        let c = b.take_over("p", 2, 3).unwrap();
        assert_eq!(check_edit(&b, &c).unwrap().sealed, vec![(2, 3)]);
        let (d, gone) = c.trim(5).unwrap();
        assert_eq!(check_edit(&c, &d).unwrap().dropped, gone);
        // Going back to an older record is refused, whatever changed.
        assert!(check_edit(&c, &b).is_err(), "the epoch went back");
        assert!(check_edit(&d, &c).is_err(), "the trim point went back");
        assert!(check_edit(&b, &a).is_err(), "a sealed ledger reopened");
        // Same epoch, another owner: only a takeover may change the owner.
        let mut stolen = b.clone();
        stolen.owner = "thief".into();
        assert!(check_edit(&b, &stolen).is_err());
        // A fixed end never moves, even within a valid record.
        let mut longer = c.clone();
        longer.segments[1].end_offset = Some(9);
        longer.segments[2].first_offset = 9;
        assert!(longer.check().is_ok() && check_edit(&c, &longer).is_err());
        // A ledger leaves the list only wholly below the trim point.
        let mut dropped = c.clone();
        dropped.segments.remove(0);
        dropped.trim_before = 0;
        assert!(check_edit(&c, &dropped).is_err());
        // Not past the fixed end, on either side of the edit.
        let mut far = c.clone();
        far.trim_before = 50;
        assert!(check_edit(&c, &far).is_err(), "trimmed past the end");
        // A new epoch must seal the open segment.
        let mut unsealed = b.clone();
        unsealed.epoch = 2;
        unsealed.owner = "p".into();
        assert!(check_edit(&b, &unsealed).is_err());
        // Offsets are not given again once every old segment is trimmed.
        let (empty, _) =
            LogRecord::new("l", "o", 1).roll(1, 4, 2).unwrap().take_over("p", -1, 3).unwrap().trim(5).unwrap();
        let mut again = empty.clone();
        again.segments = vec![LogSegment { ledger_id: 9, first_offset: 0, end_offset: None, sealed_at_ms: 0 }];
        again.trim_before = 5;
        assert!(check_edit(&empty, &again).is_err(), "{:?}", check_edit(&empty, &again));
        // A ledger added with records in it is refused.
        let mut stuffed = b.clone();
        stuffed.segments[1].end_offset = Some(8);
        stuffed.segments.push(LogSegment { ledger_id: 10, first_offset: 8, end_offset: None, sealed_at_ms: 0 });
        stuffed.segments[1].ledger_id = 9;
        assert!(stuffed.check().is_ok() && check_edit(&a, &stuffed).is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// The owner appends this many records (acknowledged).
        Append(u8),
        /// The owner appends this many more it never sees acknowledged.
        AppendUnacked(u8),
        /// Rollover to a fresh ledger.
        Roll,
        /// Another owner takes over; recovery finds `k` of the unacknowledged tail.
        TakeOver(u8),
        /// Trim up to a fraction of the fixed end.
        Trim(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..20).prop_map(Op::Append),
            1 => (1u8..5).prop_map(Op::AppendUnacked),
            2 => Just(Op::Roll),
            2 => (0u8..5).prop_map(Op::TakeOver),
            1 => (0u8..=100).prop_map(Op::Trim),
        ]
    }

    proptest! {
        /// Over any run of appends, rollovers, takeovers and trims: every
        /// record is valid, every acknowledged record keeps its offset and
        /// its place (ledger, entry) until trimmed, no offset is given twice,
        /// and the trim point only grows.
        #[test]
        fn acknowledged_records_keep_their_offsets(ops in proptest::collection::vec(op(), 1..60)) {
            let mut log = LogRecord::new("p", "o-1", 1);
            let mut next_ledger = 2u64;
            // Entries written to the open ledger: acknowledged, then not.
            let (mut acked, mut unacked) = (0u64, 0u64);
            // offset -> (ledger, entry) of every acknowledged record.
            let mut placed: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
            for op in ops {
                let before_op = log.clone();
                let open = log.open_segment().cloned().expect("an open ledger");
                match op {
                    Op::Append(n) => {
                        // Acknowledged in entry order: the LAC passing these
                        // passes every unacknowledged entry before them too.
                        let total = acked + unacked + n as u64;
                        for e in acked..total {
                            let offset = log.offset_of(open.ledger_id, e).expect("an open ledger takes entries");
                            prop_assert!(placed.insert(offset, (open.ledger_id, e)).is_none(), "offset {} given twice", offset);
                        }
                        acked = total;
                        unacked = 0;
                    }
                    Op::AppendUnacked(n) => unacked += n as u64,
                    Op::Roll => {
                        // The writer closes at its LAC: what was never acknowledged is not in the log.
                        log = log.roll(log.epoch, acked as i64 - 1, next_ledger).unwrap();
                        next_ledger += 1;
                        acked = 0;
                        unacked = 0;
                    }
                    Op::TakeOver(k) => {
                        // Recovery keeps every acknowledged entry and maybe some of the rest.
                        let recovered = acked + (k as u64).min(unacked);
                        for e in acked..recovered {
                            let offset = open.first_offset + e;
                            prop_assert!(placed.insert(offset, (open.ledger_id, e)).is_none());
                        }
                        let old_epoch = log.epoch;
                        log = log.take_over(format!("o-{}", old_epoch + 1), recovered as i64 - 1, next_ledger).unwrap();
                        prop_assert!(log.roll(old_epoch, 0, next_ledger + 100).is_err(), "the old owner is fenced");
                        next_ledger += 1;
                        acked = 0;
                        unacked = 0;
                    }
                    Op::Trim(pct) => {
                        let before = log.trim_before + (log.fixed_end() - log.trim_before) * pct as u64 / 100;
                        let (t, gone) = log.trim(before).unwrap();
                        prop_assert!(t.trim_before >= log.trim_before);
                        for g in gone {
                            prop_assert!(!t.segments.iter().any(|s| s.ledger_id == g));
                        }
                        log = t;
                    }
                }
                prop_assert!(log.check().is_ok(), "{:?}", log.check());
                // The metadata service accepts every edit a writer makes.
                prop_assert!(check_edit(&before_op, &log).is_ok(), "{:?}", check_edit(&before_op, &log));
                for (offset, (ledger_id, entry_id)) in &placed {
                    let want = if *offset < log.trim_before {
                        Located::Trimmed { trim_before: log.trim_before }
                    } else {
                        Located::At { ledger_id: *ledger_id, entry_id: *entry_id }
                    };
                    prop_assert_eq!(log.locate(*offset), want, "offset {}", offset);
                }
            }
        }
    }
}
