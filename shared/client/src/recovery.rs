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
//! - **Recovery's ensemble changes reach the metadata only with its close.**
//!   A member that replaces a failed one during write-back holds none of the
//!   entries recovery found until the write-back reaches it. Named in the
//!   stored metadata before then (as quire once did, by CAS at each change),
//!   it would answer a later recovery "no such entry" for an entry below the
//!   tail this one proved, as the very instance the segment records, and
//!   that recovery would close the ledger short (issue #19, item 1). So the
//!   replacements live in this recovery's write-back writer and are stored
//!   in the one CAS that closes the ledger, once every entry up to the tail
//!   is on Qa members of its write set (as BookKeeper's ReadOnlyLedgerHandle
//!   keeps `newEnsemblesFromRecovery` until `closeRecovered`). A recovery
//!   that stops before its close leaves the metadata as it found it: every
//!   member named there holds what its segment says, and a later recovery
//!   reads the same copies this one did.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use quire_proto::v1::Entry;

use crate::meta::LedgerMeta;
use crate::writer::{self, Answer, FailReason, Member, Quorums, Writer, WriterOptions};

/// One bookie's answer to a recovery read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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

/// How a bookie answered a fence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FenceAnswer {
    /// Fenced; the bookie's LAC for the ledger.
    Fenced {
        /// Its LAC (-1: none).
        lac: i64,
    },
    /// No answer that says anything.
    Failed,
}

/// How a bookie answered a recovery read, before it is judged.
#[derive(Debug, Clone, PartialEq)]
pub enum BookieRead {
    /// It returned an entry.
    Entry(Entry),
    /// It has no such entry (or no such ledger); `instance_id` answered.
    NoSuchEntry {
        /// The answering instance.
        instance_id: String,
    },
    /// Its copy failed the CRC check.
    Corrupt,
    /// No answer that says anything.
    Failed,
}

/// What recovery asks its shell to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Fence the ledger on the member at `position` of the last ensemble.
    Fence {
        /// Position in the last ensemble.
        position: usize,
        /// The member.
        member: Member,
    },
    /// Read `entry_id` (fencing first: #2614) from `member`.
    Read {
        /// The entry.
        entry_id: u64,
        /// Position in the entry's ensemble.
        position: usize,
        /// The member.
        member: Member,
    },
    /// A write-back command from recovery's writer: a recovery add
    /// (`Send`). The writer's other commands become other steps or none.
    Write(writer::Command),
    /// Choose bookies for the `failed` positions of the write-back ensemble
    /// `members` (from `first_entry_id` on) and answer with
    /// [`Recovery::replaced`], or [`Recovery::write_aborted`] when there are
    /// none. **Never store them in the metadata**: they are stored with the
    /// close (module docs).
    Replace {
        /// The write-back ensemble's positions that failed.
        failed: Vec<usize>,
        /// The first entry the new ensemble holds.
        first_entry_id: u64,
        /// The write-back ensemble now.
        members: Vec<Member>,
    },
    /// Every entry up to `last_entry_id` is on Qa bookies: close the ledger
    /// there by CAS, with these ensembles: the stored record's segments
    /// before [`Recovery::base`], then these from there on (recovery's
    /// replacements are in them; re-replication of earlier segments since
    /// recovery started is in the stored record).
    Close {
        /// The true tail (-1: empty).
        last_entry_id: i64,
        /// Payload bytes.
        length: u64,
        /// Ensembles, including changes made during write-back.
        ensembles: BTreeMap<u64, Vec<Member>>,
    },
    /// Recovery cannot finish; the ledger stays in recovery, untouched.
    Failed(RecoveryError),
}

/// Why recovery stopped short. Never a reason to truncate: the caller
/// retries later, when more bookies answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// Too few bookies answered the fence to shut the old writer out.
    #[error("fenced positions {fenced:?} do not cover every write quorum with Qw-Qa+1 bookies")]
    FenceIncomplete {
        /// Positions that did answer.
        fenced: Vec<usize>,
    },
    /// Every bookie of an entry's write set answered and nothing is decided
    /// (seed 004: fail rather than guess).
    #[error(
        "entry {entry_id}: {no_such_entry} absent, {corrupt} corrupt, {failed} silent: cannot tell whether it was acknowledged"
    )]
    Unrecoverable {
        /// The entry.
        entry_id: u64,
        /// Definite absences.
        no_such_entry: usize,
        /// Corrupt copies.
        corrupt: usize,
        /// Non-answers (or answers from a replaced bookie instance).
        failed: usize,
    },
    /// Writing the recovered entries back failed.
    #[error("writing recovered entries back failed: {0:?}")]
    WriteBack(FailReason),
}

/// Recovery options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecoveryOptions {
    /// Entries read ahead in parallel.
    pub read_window: usize,
    /// The write-back writer's options (`recovery` is forced on).
    pub writer: WriterOptions,
}

impl Default for RecoveryOptions {
    fn default() -> Self {
        RecoveryOptions { read_window: 16, writer: WriterOptions::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Fencing,
    Reading,
    WritingBack,
    Done,
}

/// Recovery of one ledger ("open with recovery"), after the shell has marked
/// it in_recovery by CAS: fence the last ensemble, find the true tail by
/// reading forward from the LAC, write the entries past the LAC back with
/// recovery adds, then close at the tail.
///
/// Entries before the last ensemble's first entry need neither reading nor
/// writing back: an ensemble change starts at the first unacknowledged entry,
/// so everything before it had Qa copies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Recovery {
    ledger_id: u64,
    quorums: Quorums,
    meta: LedgerMeta,
    opts: RecoveryOptions,
    phase: Phase,
    fence_answers: BTreeMap<usize, FenceAnswer>,
    /// The fence covers every write set: no add of the old writer can
    /// reach Qa from here on (stays true once set, failure included).
    fenced: bool,
    lac: i64,
    /// First entry that may be unacknowledged.
    start: u64,
    /// Answers per entry being read.
    reads: BTreeMap<u64, Vec<ReadAnswer>>,
    /// Entries proven present.
    found: BTreeMap<u64, Entry>,
    /// Entries proven absent (the lowest bounds the tail).
    first_absent: Option<u64>,
    /// Next entry to issue reads for.
    next_read: u64,
    /// Ledger length up to `start - 1`, once known.
    anchor_length: Option<u64>,
    writer: Option<Writer>,
    /// Next found entry to hand to the writer.
    next_write: u64,
}

impl Recovery {
    /// Starts recovery of `meta` (already marked in_recovery): fences the last ensemble.
    pub fn new(meta: LedgerMeta, opts: RecoveryOptions) -> (Recovery, Vec<Step>) {
        let members = meta.last_segment().members.clone();
        let r = Recovery {
            ledger_id: meta.ledger_id,
            quorums: meta.quorums,
            meta,
            opts: RecoveryOptions { writer: WriterOptions { recovery: true, ..opts.writer.clone() }, ..opts },
            phase: Phase::Fencing,
            fence_answers: BTreeMap::new(),
            fenced: false,
            lac: -1,
            start: 0,
            reads: BTreeMap::new(),
            found: BTreeMap::new(),
            first_absent: None,
            next_read: 0,
            anchor_length: None,
            writer: None,
            next_write: 0,
        };
        let steps =
            members.into_iter().enumerate().map(|(position, member)| Step::Fence { position, member }).collect();
        (r, steps)
    }

    /// Whether recovery has finished (closed or failed).
    pub fn finished(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Whether the fence has covered every write set with Qw - Qa + 1
    /// bookies: from the answer that made it so, the old writer can have no
    /// add acknowledged that it invoked later (guarantee 3 is judged from
    /// this moment, not from the close).
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// The LAC the fence answers gave.
    pub fn fenced_lac(&self) -> i64 {
        self.lac
    }

    /// The first entry of the last segment recovery started from: the
    /// ensembles from here on are recovery's own (its close stores them).
    pub fn base(&self) -> u64 {
        self.meta.last_segment().first_entry_id
    }

    fn fail(&mut self, e: RecoveryError) -> Vec<Step> {
        self.phase = Phase::Done;
        vec![Step::Failed(e)]
    }

    /// A bookie answered the fence.
    pub fn fence_answered(&mut self, position: usize, answer: FenceAnswer, now: Instant) -> Vec<Step> {
        if !matches!(self.phase, Phase::Fencing) {
            return Vec::new();
        }
        self.fence_answers.insert(position, answer);
        let fenced: BTreeSet<usize> = self
            .fence_answers
            .iter()
            .filter(|(_, a)| matches!(a, FenceAnswer::Fenced { .. }))
            .map(|(p, _)| *p)
            .collect();
        if fence_covers_every_write_set(self.quorums, &fenced) {
            self.fenced = true;
            self.lac = self
                .fence_answers
                .values()
                .filter_map(|a| match a {
                    FenceAnswer::Fenced { lac } => Some(*lac),
                    FenceAnswer::Failed => None,
                })
                .max()
                .unwrap_or(-1);
            let last_first = self.meta.last_segment().first_entry_id as i64;
            self.start = (self.lac.max(last_first - 1) + 1) as u64;
            self.next_read = self.start;
            self.phase = Phase::Reading;
            let mut steps = Vec::new();
            if self.start == 0 {
                self.anchor_length = Some(0);
            } else {
                // The entry before `start` is acknowledged: read it for the
                // ledger length up to there (from any one copy).
                steps.extend(self.issue_read(self.start - 1));
            }
            steps.extend(self.fill_window());
            steps.extend(self.advance(now));
            return steps;
        }
        if self.fence_answers.len() == self.quorums.ensemble {
            return self.fail(RecoveryError::FenceIncomplete { fenced: fenced.into_iter().collect() });
        }
        Vec::new()
    }

    fn issue_read(&mut self, entry_id: u64) -> Vec<Step> {
        self.reads.insert(entry_id, Vec::new());
        let members = self.meta.segment_of(entry_id).members.clone();
        self.quorums
            .write_set(entry_id)
            .into_iter()
            .map(|position| Step::Read { entry_id, position, member: members[position].clone() })
            .collect()
    }

    fn fill_window(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        let window = self.opts.read_window.max(1) as u64;
        while self.first_absent.is_none_or(|a| self.next_read < a)
            && self.reads.keys().filter(|e| **e >= self.start).count() < window as usize
        {
            let e = self.next_read;
            self.next_read += 1;
            steps.extend(self.issue_read(e));
        }
        steps
    }

    /// A bookie answered a recovery read of `entry_id`.
    pub fn read_answered(&mut self, entry_id: u64, position: usize, read: BookieRead, now: Instant) -> Vec<Step> {
        if !matches!(self.phase, Phase::Reading) || !self.reads.contains_key(&entry_id) {
            return Vec::new();
        }
        let member = &self.meta.segment_of(entry_id).members[position];
        let answer = match read {
            BookieRead::Entry(e) if e.ledger_id == self.ledger_id && e.entry_id == entry_id => ReadAnswer::Entry(e),
            BookieRead::Entry(_) => ReadAnswer::Corrupt,
            // A replaced bookie (another instance than the one that joined
            // the ensemble) never held the entry: its absence proves nothing.
            BookieRead::NoSuchEntry { instance_id }
                if member.instance_id.is_empty() || instance_id == member.instance_id =>
            {
                ReadAnswer::NoSuchEntry
            }
            BookieRead::NoSuchEntry { .. } | BookieRead::Failed => ReadAnswer::Failed,
            BookieRead::Corrupt => ReadAnswer::Corrupt,
        };
        let answers = self.reads.get_mut(&entry_id).expect("checked");
        answers.push(answer);
        let v = verdict(self.quorums, answers);
        let anchor = self.start > 0 && entry_id == self.start - 1;
        match v {
            Verdict::Undecided => return Vec::new(),
            Verdict::Present(e) => {
                self.reads.remove(&entry_id);
                if anchor {
                    self.anchor_length = Some(e.ledger_length);
                } else {
                    self.found.insert(entry_id, e);
                }
            }
            Verdict::Absent if !anchor => {
                self.reads.remove(&entry_id);
                self.first_absent = Some(self.first_absent.map_or(entry_id, |a| a.min(entry_id)));
                // Reads past the first absence no longer matter.
                let cut = self.first_absent.expect("just set");
                self.reads.retain(|e, _| *e < cut);
                self.found.retain(|e, _| *e < cut);
            }
            Verdict::Absent => {
                // The anchor is acknowledged: its absence from enough bookies
                // means copies were lost. Nothing can be decided safely.
                return self.fail(RecoveryError::Unrecoverable { entry_id, no_such_entry: 0, corrupt: 0, failed: 0 });
            }
            Verdict::Unrecoverable { no_such_entry, corrupt, failed } => {
                return self.fail(RecoveryError::Unrecoverable { entry_id, no_such_entry, corrupt, failed });
            }
        }
        let mut steps = self.fill_window();
        steps.extend(self.advance(now));
        steps
    }

    /// Moves on to write-back once the tail is known and every entry up to
    /// it is found; hands found entries to the writer as it has room.
    fn advance(&mut self, now: Instant) -> Vec<Step> {
        if matches!(self.phase, Phase::Reading) {
            let Some(absent) = self.first_absent else { return Vec::new() };
            let complete = self.anchor_length.is_some() && (self.start..absent).all(|e| self.found.contains_key(&e));
            if !complete {
                return Vec::new();
            }
            let lac = self.start as i64 - 1;
            let length = self.anchor_length.expect("checked");
            self.writer = Some(Writer::resume(
                self.ledger_id,
                self.quorums,
                self.meta.ensembles(),
                lac,
                length,
                self.opts.writer.clone(),
            ));
            self.next_write = self.start;
            self.phase = Phase::WritingBack;
        }
        if !matches!(self.phase, Phase::WritingBack) {
            return Vec::new();
        }
        let tail = self.first_absent.expect("known in write-back") as i64 - 1;
        let w = self.writer.as_mut().expect("write-back has a writer");
        let mut cmds = Vec::new();
        while (self.next_write as i64) <= tail {
            let entry = self.found[&self.next_write].clone();
            match w.add_recovered(entry, now) {
                Ok(c) => cmds.extend(c),
                Err(writer::AddError::Backpressure(_)) => break,
                Err(writer::AddError::Done(r)) => return self.fail(RecoveryError::WriteBack(r)),
            }
            self.next_write += 1;
        }
        let mut steps = match self.steps_of(cmds) {
            Ok(steps) => steps,
            Err(reason) => return self.fail(RecoveryError::WriteBack(reason)),
        };
        let w = self.writer.as_ref().expect("write-back has a writer");
        if w.lac() == tail {
            self.phase = Phase::Done;
            steps.push(Step::Close { last_entry_id: tail, length: w.length(), ensembles: w.ensembles() });
        }
        steps
    }

    /// The write-back writer's commands as recovery's steps: its ensemble
    /// changes become [`Step::Replace`] (chosen, never stored before the close).
    fn steps_of(&self, cmds: Vec<writer::Command>) -> Result<Vec<Step>, FailReason> {
        let mut steps = Vec::new();
        for c in cmds {
            match c {
                writer::Command::Acknowledge { .. } => {}
                writer::Command::Fail { reason, .. } => return Err(reason),
                writer::Command::ChangeEnsemble { failed, first_entry_id } => {
                    let w = self.writer.as_ref().expect("write-back has a writer");
                    let (_, members) = w.ensembles().pop_last().expect("a ledger has an ensemble");
                    steps.push(Step::Replace { failed, first_entry_id, members });
                }
                other => steps.push(Step::Write(other)),
            }
        }
        Ok(steps)
    }

    fn on_writer_commands(&mut self, cmds: Vec<writer::Command>, now: Instant) -> Vec<Step> {
        let mut steps = match self.steps_of(cmds) {
            Ok(steps) => steps,
            Err(reason) => return self.fail(RecoveryError::WriteBack(reason)),
        };
        steps.extend(self.advance(now));
        steps
    }

    /// A bookie answered a recovery add.
    pub fn write_answered(
        &mut self,
        entry_id: u64,
        position: usize,
        member: &Member,
        answer: Answer,
        now: Instant,
    ) -> Vec<Step> {
        let Some(w) = self.writer.as_mut().filter(|_| matches!(self.phase, Phase::WritingBack)) else {
            return Vec::new();
        };
        let cmds = w.answer(entry_id, position, member, answer);
        self.on_writer_commands(cmds, now)
    }

    /// The replacements a [`Step::Replace`] asked for were chosen: `members`
    /// is the write-back ensemble from `first_entry_id` on. Held here (and in
    /// the metadata only with the close).
    pub fn replaced(&mut self, first_entry_id: u64, members: Vec<Member>, now: Instant) -> Vec<Step> {
        let Some(w) = self.writer.as_mut().filter(|_| matches!(self.phase, Phase::WritingBack)) else {
            return Vec::new();
        };
        let cmds = w.ensemble_changed(first_entry_id, members, now);
        self.on_writer_commands(cmds, now)
    }

    /// No replacement could be chosen (or the ledger was taken over).
    pub fn write_aborted(&mut self, reason: FailReason) -> Vec<Step> {
        if matches!(self.phase, Phase::Done) {
            return Vec::new();
        }
        self.fail(RecoveryError::WriteBack(reason))
    }

    /// Time passes (write-back timeouts).
    pub fn tick(&mut self, now: Instant) -> Vec<Step> {
        let Some(w) = self.writer.as_mut().filter(|_| matches!(self.phase, Phase::WritingBack)) else {
            return Vec::new();
        };
        let cmds = w.tick(now);
        self.on_writer_commands(cmds, now)
    }
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

    mod machine {
        use super::super::*;
        use crate::meta::LedgerMeta;
        use bytes::Bytes;
        use quire_proto::v1;
        use std::time::Instant;

        fn meta(e: u32, w: u32, a: u32) -> LedgerMeta {
            LedgerMeta::from_proto(v1::LedgerMetadata {
                ledger_id: 1,
                state: v1::LedgerState::InRecovery as i32,
                ensemble_size: e,
                write_quorum: w,
                ack_quorum: a,
                ensembles: vec![v1::EnsembleSegment {
                    first_entry_id: 0,
                    bookie_ids: (0..e).map(|i| format!("b{i}")).collect(),
                    instance_ids: (0..e).map(|i| format!("i{i}")).collect(),
                }],
                last_entry_id: -1,
                version: 2,
                ..Default::default()
            })
            .unwrap()
        }

        fn entry(id: u64) -> Entry {
            Entry::sealed_at(1, id, id as i64 - 1, (id + 1) * 10, Bytes::from(vec![id as u8; 10]))
        }

        fn reads(steps: &[Step]) -> Vec<(u64, usize)> {
            steps
                .iter()
                .filter_map(|s| match s {
                    Step::Read { entry_id, position, .. } => Some((*entry_id, *position)),
                    _ => None,
                })
                .collect()
        }

        fn none(i: usize) -> BookieRead {
            BookieRead::NoSuchEntry { instance_id: format!("i{i}") }
        }

        #[test]
        fn finds_the_tail_writes_it_back_and_closes_there() {
            let t = Instant::now();
            let m = meta(3, 3, 2);
            let members = m.last_segment().members.clone();
            let (mut r, fences) = Recovery::new(m, RecoveryOptions { read_window: 2, ..Default::default() });
            assert_eq!(fences.len(), 3);
            assert!(r.fence_answered(0, FenceAnswer::Fenced { lac: 3 }, t).is_empty(), "one fence covers nothing");
            assert!(!r.fenced(), "Qw - Qa + 1 = 2 of the write set are needed");
            let steps = r.fence_answered(2, FenceAnswer::Fenced { lac: 4 }, t);
            assert!(r.fenced());
            // Anchor 4 (for the length) and a window of two: 5 and 6, each from all three.
            let rs = reads(&steps);
            assert_eq!(rs.iter().filter(|(e, _)| *e == 4).count(), 3);
            assert_eq!(rs.iter().filter(|(e, _)| *e == 5).count(), 3);
            assert_eq!(rs.iter().filter(|(e, _)| *e == 6).count(), 3);
            assert!(!rs.iter().any(|(e, _)| *e == 7));
            r.read_answered(4, 0, BookieRead::Entry(entry(4)), t);
            // Entry 5 on one bookie only (written, never acknowledged); 6 nowhere.
            r.read_answered(5, 1, none(1), t);
            let more = r.read_answered(5, 0, BookieRead::Entry(entry(5)), t);
            assert_eq!(reads(&more).iter().filter(|(e, _)| *e == 7).count(), 3, "the window slides");
            assert!(r.read_answered(6, 0, none(0), t).is_empty());
            let wb = r.read_answered(6, 2, none(2), t);
            let sends: Vec<_> = wb
                .iter()
                .filter_map(|s| match s {
                    Step::Write(writer::Command::Send { entry, recovery: true, position, .. }) => {
                        Some((entry.entry_id, *position))
                    }
                    _ => None,
                })
                .collect();
            let mut sends = sends;
            sends.sort();
            assert_eq!(sends, vec![(5, 0), (5, 1), (5, 2)]);
            assert!(r.write_answered(5, 0, &members[0], Answer::Stored { instance_id: "i0".into() }, t).is_empty());
            let done = r.write_answered(5, 1, &members[1], Answer::Stored { instance_id: "i1".into() }, t);
            assert!(matches!(&done[..], [Step::Close { last_entry_id: 5, length: 60, .. }]), "{done:?}");
            assert!(r.finished());
        }

        /// Issue #19 item 1: a member that replaces a failed one during
        /// write-back is chosen (`Replace`), never stored before the close,
        /// and the close carries it with the ensembles recovery started from.
        #[test]
        fn a_write_back_replacement_is_stored_only_with_the_close() {
            let t = Instant::now();
            let m = meta(3, 2, 2);
            let members = m.last_segment().members.clone();
            let (mut r, _) = Recovery::new(m, RecoveryOptions { read_window: 1, ..Default::default() });
            assert_eq!(r.base(), 0);
            r.fence_answered(0, FenceAnswer::Fenced { lac: 4 }, t);
            let steps = r.fence_answered(1, FenceAnswer::Fenced { lac: 4 }, t);
            assert_eq!(reads(&steps), vec![(4, 1), (4, 2), (5, 2), (5, 0)]);
            r.read_answered(4, 1, BookieRead::Entry(entry(4)), t);
            let steps = r.read_answered(5, 0, BookieRead::Entry(entry(5)), t);
            assert_eq!(reads(&steps), vec![(6, 0), (6, 1)]);
            let wb = r.read_answered(6, 0, none(0), t);
            assert!(
                wb.iter().all(|s| matches!(s, Step::Write(writer::Command::Send { recovery: true, .. }))),
                "{wb:?}"
            );
            // C (position 2) fails the write-back of 5: a replacement is asked for.
            r.write_answered(5, 0, &members[0], Answer::Stored { instance_id: "i0".into() }, t);
            let out = r.write_answered(5, 2, &members[2], Answer::Failed, t);
            let [Step::Replace { failed, first_entry_id: 5, members: now }] = &out[..] else {
                panic!("expected one Replace from 5, got {out:?}")
            };
            assert_eq!((failed.as_slice(), now), (&[2usize][..], &members));
            let d = Member { bookie_id: "b3".into(), instance_id: "i3".into() };
            let mut next = members.clone();
            next[2] = d.clone();
            let resent = r.replaced(5, next.clone(), t);
            assert!(
                resent.iter().any(|s| matches!(s, Step::Write(writer::Command::Send { member, entry, .. })
                    if *member == d && entry.entry_id == 5)),
                "{resent:?}"
            );
            let done = r.write_answered(5, 2, &d, Answer::Stored { instance_id: "i3".into() }, t);
            let [Step::Close { last_entry_id: 5, ensembles, .. }] = &done[..] else { panic!("{done:?}") };
            assert_eq!(ensembles, &BTreeMap::from([(0, members.clone()), (5, next.clone())]));
        }

        #[test]
        fn too_few_fences_fail_instead_of_going_on() {
            let t = Instant::now();
            let (mut r, _) = Recovery::new(meta(3, 3, 2), RecoveryOptions::default());
            r.fence_answered(0, FenceAnswer::Fenced { lac: 3 }, t);
            r.fence_answered(1, FenceAnswer::Failed, t);
            let out = r.fence_answered(2, FenceAnswer::Failed, t);
            assert_eq!(out, vec![Step::Failed(RecoveryError::FenceIncomplete { fenced: vec![0] })]);
            assert!(!r.fenced(), "a fence that covered too little is not a fence");
        }

        #[test]
        fn a_replaced_bookie_saying_no_such_entry_is_no_evidence() {
            // Seed 003 meets seed 004: E=Qw=Qa=2. Entry 0 was acknowledged by both
            // original bookies; both were replaced by fresh instances.
            let t = Instant::now();
            let (mut r, _) = Recovery::new(meta(2, 2, 2), RecoveryOptions::default());
            r.fence_answered(0, FenceAnswer::Fenced { lac: -1 }, t);
            r.fence_answered(1, FenceAnswer::Fenced { lac: -1 }, t);
            let fresh = |_| BookieRead::NoSuchEntry { instance_id: "fresh".into() };
            assert!(r.read_answered(0, 0, fresh(0), t).is_empty());
            let out = r.read_answered(0, 1, fresh(1), t);
            assert_eq!(
                out,
                vec![Step::Failed(RecoveryError::Unrecoverable {
                    entry_id: 0,
                    no_such_entry: 0,
                    corrupt: 0,
                    failed: 2
                })],
                "closing at -1 would lose an acknowledged entry"
            );
        }

        #[test]
        fn an_empty_ledger_closes_at_minus_one() {
            let t = Instant::now();
            let (mut r, _) = Recovery::new(meta(3, 2, 2), RecoveryOptions { read_window: 1, ..Default::default() });
            r.fence_answered(0, FenceAnswer::Fenced { lac: -1 }, t);
            // Qw-Qa+1 = 1 of each write set {0,1} {1,2} {2,0}: positions 0 and 1 do.
            let out = r.fence_answered(1, FenceAnswer::Fenced { lac: -1 }, t);
            assert_eq!(reads(&out), vec![(0, 0), (0, 1)]);
            assert!(r.fence_answered(2, FenceAnswer::Fenced { lac: -1 }, t).is_empty());
            let out = r.read_answered(0, 1, none(1), t);
            assert!(matches!(&out[..], [Step::Close { last_entry_id: -1, length: 0, .. }]), "{out:?}");
        }
    }
}
