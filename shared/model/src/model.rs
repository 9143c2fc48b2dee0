//! The model: the real state machines driven through every interleaving.
//!
//! Each action is one atomic step of one party: a request reaching its
//! bookie (which applies it and answers), an answer reaching its caller, a
//! message lost (its caller sees a failure, as a timeout), the writer adding,
//! publishing its LAC, changing its ensemble or closing (a CAS, then its
//! outcome arriving), a recoverer starting (the in_recovery mark), choosing
//! replacements, closing or crashing, and a bookie's disks replaced by
//! empty ones. What the writer's and the recoverers' shells do with their
//! machines' commands mirrors `shell/ledger_writer.rs` and
//! `shell/recover.rs`; the bookies are the simulator's, with the real
//! bookie's refusals (the seed-003 guard included).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quire_client::meta::{writer_conflict, Conflict, LedgerMeta, LedgerState, Segment};
use quire_client::recovery::{BookieRead, FenceAnswer, Recovery, RecoveryOptions, Step};
use quire_client::sim::bookie::{BookieReq, BookieResp, SimBookie};
use quire_client::writer::{AddError, Answer, Command, FailReason, Member, Writer, WriterOptions};

use crate::config::Config;
use crate::state::{Budget, Caller, CloseOutcome, Party, RecSide, RecWait, Reply, Sched, Shared, State, WriterSide};

/// The ledger every run writes.
pub const LEDGER: u64 = 1;

/// One atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// The writer adds its next entry.
    WriterAdd,
    /// Time passes for the idle writer: it publishes its LAC.
    WriterTick,
    /// The writer's ensemble change, replacing its failed positions with
    /// these bookies (empty: none is left; the change fails).
    WriterChange(Vec<usize>),
    /// The writer's close: its CAS.
    WriterClose,
    /// The close's outcome reaches the writer.
    WriterCloseAnswered,
    /// The writer's process dies.
    WriterCrash,
    /// The first request of a lane reaches its bookie, which applies it and answers.
    Deliver(Party, usize),
    /// The first request of a lane is lost: its caller times out.
    LoseRequest(Party, usize),
    /// The first answer of a lane from `bookie` to a party reaches it.
    Answer(usize, Party),
    /// That answer is lost: its caller times out (the bookie did apply it).
    LoseReply(usize, Party),
    /// Recoverer `i` starts a run (marks the ledger in recovery if open).
    RecStart(usize),
    /// Recoverer `i` chose these bookies for its write-back's failed positions.
    RecReplace(usize, Vec<usize>),
    /// Recoverer `i` stores its close.
    RecClose(usize),
    /// Recoverer `i`'s process dies.
    RecCrash(usize),
    /// Bookie `b`'s disks are replaced by empty ones (a new instance).
    ReplaceBookie(usize),
}

/// One step as the checker takes it: the action, and whether taking it
/// spends one of the schedule's preemptions (the party that ran last could
/// still have acted). Decided once, when the state's steps are listed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Move {
    /// The step.
    pub action: Action,
    /// Whether it preempts the party that ran last.
    pub preempts: bool,
}

impl std::fmt::Debug for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}{}", self.action, if self.preempts { "  <- preempts" } else { "" })
    }
}

impl Action {
    /// The party whose step this is: the writer's and each recoverer's own
    /// steps, their requests reaching bookies and their answers reaching
    /// them (`None`: the environment's, a bookie replaced).
    pub fn owner(&self) -> Option<Party> {
        match self {
            Action::WriterAdd
            | Action::WriterTick
            | Action::WriterChange(_)
            | Action::WriterClose
            | Action::WriterCloseAnswered
            | Action::WriterCrash => Some(Party::Writer),
            Action::Deliver(p, _) | Action::LoseRequest(p, _) | Action::Answer(_, p) | Action::LoseReply(_, p) => {
                Some(*p)
            }
            Action::RecStart(r) | Action::RecReplace(r, _) | Action::RecClose(r) | Action::RecCrash(r) => {
                Some(Party::Recoverer(*r))
            }
            Action::ReplaceBookie(_) => None,
        }
    }
}

/// The model of one configuration.
pub struct LedgerModel {
    /// What it explores.
    pub config: Config,
    /// The one instant the machines are given (time is modelled by losses).
    t0: Instant,
}

fn bookie_id(b: usize) -> String {
    format!("b{b}")
}

fn bookie_index(id: &str) -> usize {
    id.strip_prefix('b').and_then(|n| n.parse().ok()).expect("model bookie ids are b<index>")
}

fn payload(entry_id: u64) -> Bytes {
    Bytes::from(vec![b'a' + entry_id as u8])
}

/// Every injective choice of `k` bookies out of `candidates`, in order.
fn choices(candidates: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, c) in candidates.iter().enumerate() {
        let rest: Vec<usize> = candidates.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, c)| *c).collect();
        for mut tail in choices(&rest, k - 1) {
            tail.insert(0, *c);
            out.push(tail);
        }
    }
    out
}

impl LedgerModel {
    /// A model of `config`.
    pub fn new(config: Config) -> LedgerModel {
        LedgerModel { config, t0: Instant::now() }
    }

    fn writer_options(&self, recovery: bool) -> WriterOptions {
        WriterOptions {
            max_pending: 64,
            add_timeout: Duration::from_secs(5),
            explicit_lac_interval: Duration::from_millis(100),
            recovery,
            visible_acks: false,
        }
    }

    fn member(s: &State, b: usize) -> Member {
        Member { bookie_id: bookie_id(b), instance_id: s.bookies[b].instance_id.clone() }
    }

    /// Bookies that could replace members of `current`: registered (all
    /// are), not in it, named by their instance now.
    fn candidates(current: &[Member], bookies: usize) -> Vec<usize> {
        (0..bookies).filter(|b| !current.iter().any(|m| m.bookie_id == bookie_id(*b))).collect()
    }

    fn replace(s: &State, current: &[Member], failed: &[usize], chosen: &[usize]) -> Vec<Member> {
        let mut members = current.to_vec();
        for (p, b) in failed.iter().zip(chosen) {
            members[*p] = Self::member(s, *b);
        }
        members
    }

    /// A CAS on the stored record: applied (the new record) or the record
    /// stored instead. The metadata service's own rules hold as asserts.
    #[allow(clippy::result_large_err)] // the stored record, as the real CAS answers
    fn cas(s: &mut State, expected: &LedgerMeta, mut next: LedgerMeta) -> Result<LedgerMeta, LedgerMeta> {
        if s.meta.version != expected.version {
            return Err((*s.meta).clone());
        }
        assert!(
            !(s.meta.state == LedgerState::Closed
                && (next.state != LedgerState::Closed || next.last_entry_id != s.meta.last_entry_id)),
            "a closed ledger was reopened or moved"
        );
        next.version = s.meta.version + 1;
        s.meta.set(next.clone());
        Ok(next)
    }

    // ---- the writer's shell -------------------------------------------------

    fn writer_cmds(&self, s: &mut State, cmds: Vec<Command>) {
        for c in cmds {
            match c {
                Command::Send { position, member, entry, recovery } => {
                    let bookie = bookie_index(&member.bookie_id);
                    let caller = Caller::WriterAdd { entry_id: entry.entry_id, position, member: member.clone() };
                    let req = BookieReq::Add { entry, expected_instance: member.instance_id, recovery };
                    s.request(Party::Writer, bookie, caller, req);
                }
                Command::SendLac { member, lac, .. } => {
                    let bookie = bookie_index(&member.bookie_id);
                    let req = BookieReq::WriteLac { ledger_id: LEDGER, lac };
                    s.request(Party::Writer, bookie, Caller::WriterLac, req);
                }
                Command::Acknowledge { entry_ids, .. } => {
                    for id in entry_ids {
                        if id != s.acked.len() as u64 && s.broken.is_none() {
                            s.broken = Some(format!("entry {id} acknowledged out of order"));
                        }
                        let bytes = s.submitted[&id].clone();
                        s.acked.get_mut().insert(id, bytes);
                    }
                }
                Command::ChangeEnsemble { failed, first_entry_id } => {
                    if let WriterSide::Running { change, .. } = s.writer.get_mut() {
                        *change = Some((failed, first_entry_id));
                    }
                }
                Command::CopyLost { .. } | Command::Fail { .. } => {}
            }
        }
    }

    /// The writer's ensemble change failed for good: it stops.
    fn writer_abort(&self, s: &mut State, reason: FailReason) {
        let cmds = match s.writer.get_mut() {
            WriterSide::Running { w, change, .. } => {
                *change = None;
                w.abort(reason)
            }
            WriterSide::Stopped { .. } => return,
        };
        self.writer_cmds(s, cmds);
    }

    fn writer_answer(&self, s: &mut State, entry_id: u64, position: usize, member: &Member, answer: Answer) {
        let cmds = match s.writer.get_mut() {
            WriterSide::Running { w, .. } => w.answer(entry_id, position, member, answer),
            WriterSide::Stopped { .. } => return,
        };
        self.writer_cmds(s, cmds);
    }

    // ---- a recoverer's shell ------------------------------------------------

    fn rec_steps(&self, s: &mut State, rec: usize, steps: Vec<Step>) {
        for step in steps {
            let RecSide::Running { run, .. } = &*s.recs[rec] else { return };
            let (run, party) = (*run, Party::Recoverer(rec));
            match step {
                Step::Fence { position, member } => {
                    let bookie = bookie_index(&member.bookie_id);
                    let caller = Caller::Fence { run, position };
                    s.request(party, bookie, caller, BookieReq::Fence { ledger_id: LEDGER });
                }
                Step::Read { entry_id, position, member } => {
                    let bookie = bookie_index(&member.bookie_id);
                    let caller = Caller::Read { run, entry_id, position };
                    let req = BookieReq::Read { ledger_id: LEDGER, entry_id, fence: true };
                    s.request(party, bookie, caller, req);
                }
                Step::Write(Command::Send { position, member, entry, recovery }) => {
                    let bookie = bookie_index(&member.bookie_id);
                    let caller = Caller::Write { run, entry_id: entry.entry_id, position, member: member.clone() };
                    let req = BookieReq::Add { entry, expected_instance: member.instance_id, recovery };
                    s.request(party, bookie, caller, req);
                }
                Step::Write(_) => {}
                Step::Replace { failed, first_entry_id, members } => {
                    if let RecSide::Running { wait, .. } = s.recs[rec].get_mut() {
                        *wait = Some(RecWait::Replace { failed, first_entry_id, members });
                    }
                }
                Step::Close { last_entry_id, length, ensembles } => {
                    // Guarantee 4, judged before the close is even tried.
                    if let Some((&max, _)) = s.acked.iter().next_back() {
                        if last_entry_id < max as i64 && s.broken.is_none() {
                            s.broken = Some(format!(
                                "recoverer {rec} would close at {last_entry_id} below acknowledged entry {max}"
                            ));
                        }
                    }
                    if let RecSide::Running { wait, r, .. } = s.recs[rec].get_mut() {
                        let base = r.base();
                        *wait = Some(RecWait::Close { last_entry_id, length, ensembles, base });
                    }
                }
                Step::Failed(_) => {
                    if let RecSide::Running { runs_left, .. } = *s.recs[rec] {
                        s.recs[rec].set(RecSide::Idle { runs_left });
                    }
                }
            }
        }
    }

    /// Runs `f` on recoverer `rec`'s machine if its run `run` is the live
    /// one, then executes the steps it returned.
    fn with_rec(&self, s: &mut State, rec: usize, run: u8, f: impl FnOnce(&mut Recovery, Instant) -> Vec<Step>) {
        if !matches!(&*s.recs[rec], RecSide::Running { run: live, .. } if *live == run) {
            return;
        }
        let steps = match s.recs[rec].get_mut() {
            RecSide::Running { r, .. } => f(r, self.t0),
            _ => return,
        };
        self.rec_steps(s, rec, steps);
    }

    /// An add's outcome as the writer machines take it.
    fn add_answer(resp: Option<BookieResp>) -> Answer {
        match resp {
            Some(BookieResp::Added { instance_id }) => Answer::Stored { instance_id },
            Some(BookieResp::LedgerFenced) => Answer::Fenced,
            Some(BookieResp::MetadataUnavailable) => Answer::Unavailable,
            _ => Answer::Failed,
        }
    }

    /// A caller (of `party`, whose lane it came back on) learns the outcome
    /// of its request (`None`: it timed out).
    fn answered(&self, s: &mut State, party: Party, caller: Caller, resp: Option<BookieResp>) {
        match (party, caller) {
            (Party::Writer, Caller::WriterAdd { entry_id, position, member }) => {
                self.writer_answer(s, entry_id, position, &member, Self::add_answer(resp));
            }
            (Party::Writer, Caller::WriterLac) => {
                if let (Some(BookieResp::LedgerFenced), WriterSide::Running { .. }) = (&resp, &*s.writer) {
                    let WriterSide::Running { w, .. } = s.writer.get_mut() else { unreachable!() };
                    let cmds = w.fenced();
                    self.writer_cmds(s, cmds);
                }
            }
            (Party::Recoverer(rec), Caller::Fence { run, position }) => {
                let answer = match resp {
                    Some(BookieResp::FenceDone { lac }) => FenceAnswer::Fenced { lac },
                    _ => FenceAnswer::Failed,
                };
                self.with_rec(s, rec, run, |r, now| r.fence_answered(position, answer, now));
            }
            (Party::Recoverer(rec), Caller::Read { run, entry_id, position }) => {
                let read = match resp {
                    Some(BookieResp::Entry(e)) => BookieRead::Entry(e),
                    Some(BookieResp::NoSuchEntry { instance_id }) => BookieRead::NoSuchEntry { instance_id },
                    Some(BookieResp::Corrupt) => BookieRead::Corrupt,
                    _ => BookieRead::Failed,
                };
                self.with_rec(s, rec, run, |r, now| r.read_answered(entry_id, position, read, now));
            }
            (Party::Recoverer(rec), Caller::Write { run, entry_id, position, member }) => {
                let answer = Self::add_answer(resp);
                self.with_rec(s, rec, run, |r, now| r.write_answered(entry_id, position, &member, answer, now));
            }
            (party, caller) => unreachable!("{caller:?} travels on the lanes of {party:?}"),
        }
    }

    /// Whether `caller` is still there to hear an answer.
    fn listening(s: &State, party: Party, caller: &Caller) -> bool {
        match (party, caller) {
            (Party::Writer, _) => matches!(*s.writer, WriterSide::Running { .. }),
            (
                Party::Recoverer(rec),
                Caller::Fence { run, .. } | Caller::Read { run, .. } | Caller::Write { run, .. },
            ) => matches!(&*s.recs[rec], RecSide::Running { run: live, .. } if live == run),
            (Party::Recoverer(_), Caller::WriterAdd { .. } | Caller::WriterLac) => false,
        }
    }

    // ---- the preemption-bounded schedule -------------------------------------

    /// Whether `action`, as `actions` lists it, would take a step.
    fn enabled(&self, s: &State, action: &Action) -> bool {
        match action {
            // Listed only when they can run.
            Action::Deliver(..)
            | Action::LoseRequest(..)
            | Action::Answer(..)
            | Action::LoseReply(..)
            | Action::RecCrash(_)
            | Action::WriterCrash
            | Action::ReplaceBookie(_) => true,
            _ => self.step(&mut s.clone(), action.clone()),
        }
    }

    /// Whether the party that ran last could still act among `listed`. A
    /// party that is gone (a crashed writer, a recoverer between runs) never
    /// could: switching away from it is free, so what it sent before it
    /// died may wait for ever at no cost; delivering it later, between
    /// another party's steps, is a preemption.
    fn current_can_act(&self, s: &State, listed: &[Action]) -> bool {
        let Some(current) = s.sched.current else { return false };
        let alive = match current {
            Party::Writer => matches!(*s.writer, WriterSide::Running { .. }),
            Party::Recoverer(r) => matches!(*s.recs[r], RecSide::Running { .. }),
        };
        alive && listed.iter().any(|a| a.owner() == Some(current) && self.enabled(s, a))
    }

    /// Answers nobody is left to hear are dropped: a state with them and
    /// one without are the same world.
    fn forget_unheard(s: &mut State) {
        for i in 0..s.replies.len() {
            let (party, _) = s.lane_of(i);
            if s.replies[i].iter().any(|r| !Self::listening(s, party, &r.caller)) {
                let mut q = std::mem::take(&mut s.replies[i]);
                q.get_mut().retain(|r| Self::listening(s, party, &r.caller));
                s.replies[i] = q;
            }
        }
    }

    // ---- the actions ---------------------------------------------------------

    fn step(&self, s: &mut State, action: Action) -> bool {
        match action {
            Action::WriterAdd => {
                let WriterSide::Running { w, adds_left, closing, .. } = s.writer.get_mut() else { return false };
                if *adds_left == 0 || closing.is_some() || w.done().is_some() {
                    return false;
                }
                let id = w.next_entry_id();
                let cmds = match w.add(payload(id), self.t0) {
                    Ok((_, cmds)) => cmds,
                    Err(AddError::Backpressure(_) | AddError::Done(_)) => return false,
                };
                *adds_left -= 1;
                s.submitted.get_mut().insert(id, payload(id));
                self.writer_cmds(s, cmds);
            }
            Action::WriterTick => {
                let WriterSide::Running { w, .. } = s.writer.get_mut() else { return false };
                if w.pending() > 0 {
                    return false; // late adds are modelled by lost messages
                }
                let cmds = w.tick(self.t0 + Duration::from_secs(3600));
                if cmds.is_empty() {
                    return false;
                }
                self.writer_cmds(s, cmds);
            }
            Action::WriterChange(chosen) => {
                let stored = (*s.meta).clone();
                let WriterSide::Running { meta, change, .. } = &*s.writer else { return false };
                let Some((failed, first)) = change.clone() else { return false };
                // As change_ensemble: a ledger closed or recovered meanwhile fences the writer.
                let mut base = meta.clone();
                if stored.version != base.version {
                    match writer_conflict(&base, &stored) {
                        Conflict::Fenced => {
                            self.writer_abort(s, FailReason::Fenced);
                            return true;
                        }
                        Conflict::Retry(_) => base = stored.clone(),
                    }
                }
                let current = base.last_segment().members.clone();
                if chosen.len() < failed.len() {
                    if Self::candidates(&current, s.bookies.len()).len() >= failed.len() {
                        return false; // there is a replacement: the shell keeps trying
                    }
                    self.writer_abort(s, FailReason::NotEnoughBookies);
                    return true;
                }
                let members = Self::replace(s, &current, &failed, &chosen);
                let intended = base.with_ensemble(first, members);
                match Self::cas(s, &base, intended) {
                    Ok(m) => {
                        let WriterSide::Running { w, meta, change, .. } = s.writer.get_mut() else { unreachable!() };
                        *meta = m.clone();
                        *change = None;
                        let seg = m.last_segment().clone();
                        let cmds = w.ensemble_changed(seg.first_entry_id, seg.members, self.t0);
                        self.writer_cmds(s, cmds);
                    }
                    Err(now) => match writer_conflict(&base, &now) {
                        Conflict::Fenced => self.writer_abort(s, FailReason::Fenced),
                        Conflict::Retry(_) => {
                            if let WriterSide::Running { meta, .. } = s.writer.get_mut() {
                                *meta = now;
                            }
                        }
                    },
                }
            }
            Action::WriterClose => {
                let WriterSide::Running { w, meta, change, closing, adds_left } = s.writer.get_mut() else {
                    return false;
                };
                if *adds_left > 0 || closing.is_some() || change.is_some() || w.pending() > 0 || w.changing() {
                    return false;
                }
                if w.may_close().is_err() {
                    return false;
                }
                w.start_closing();
                let (lac, length) = (w.lac(), w.length());
                let mut intended = meta.clone();
                intended.state = LedgerState::Closed;
                intended.last_entry_id = lac;
                intended.length = length;
                let expected = meta.clone();
                let outcome = match Self::cas(s, &expected, intended) {
                    Ok(m) => CloseOutcome::Closed(m),
                    Err(now) if now.state == LedgerState::Closed && now.last_entry_id == lac => {
                        CloseOutcome::Closed(now)
                    }
                    Err(now) => match writer_conflict(&expected, &now) {
                        Conflict::Fenced => CloseOutcome::Fenced,
                        Conflict::Retry(_) => {
                            // Retried on top: the next WriterClose.
                            let WriterSide::Running { meta, .. } = s.writer.get_mut() else { unreachable!() };
                            *meta = now;
                            return true;
                        }
                    },
                };
                let WriterSide::Running { closing, .. } = s.writer.get_mut() else { unreachable!() };
                *closing = Some(outcome);
            }
            Action::WriterCloseAnswered => {
                let WriterSide::Running { w, meta, closing, .. } = s.writer.get_mut() else { return false };
                let Some(outcome) = closing.clone() else { return false };
                if !w.is_closing() {
                    return false;
                }
                let cmds = match outcome {
                    CloseOutcome::Closed(m) => {
                        *meta = m;
                        w.closed()
                    }
                    CloseOutcome::Fenced => w.close(),
                };
                self.writer_cmds(s, cmds);
            }
            Action::WriterCrash => {
                let WriterSide::Running { w, .. } = &*s.writer else { return false };
                if !self.config.writer_crash || w.done().is_some() {
                    return false;
                }
                s.writer.set(WriterSide::Stopped { crashed: true });
            }
            Action::Deliver(party, bookie) => {
                let Some((caller, req)) = s.take_request(party, bookie) else { return false };
                let open = s.meta.state == LedgerState::Open;
                let stored_entry = match &req {
                    BookieReq::Add { entry, .. } => Some(entry.entry_id),
                    _ => None,
                };
                let resp = s.bookies[bookie].get_mut().handle(req, |_| Some(open));
                if let (BookieResp::Added { instance_id }, Some(e)) = (&resp, stored_entry) {
                    s.ever_stored.get_mut().insert((instance_id.clone(), e));
                }
                if Self::listening(s, party, &caller) {
                    s.reply(bookie, party, Reply { caller, resp });
                }
            }
            Action::LoseRequest(party, bookie) => {
                if s.budget.timeouts == 0 {
                    return false;
                }
                let Some((caller, _)) = s.take_request(party, bookie) else { return false };
                s.budget.timeouts -= 1;
                self.answered(s, party, caller, None);
            }
            Action::Answer(bookie, party) => {
                let Some(Reply { caller, resp }) = s.take_reply(bookie, party) else { return false };
                self.answered(s, party, caller, Some(resp));
            }
            Action::LoseReply(bookie, party) => {
                if s.budget.timeouts == 0 {
                    return false;
                }
                let Some(Reply { caller, .. }) = s.take_reply(bookie, party) else { return false };
                s.budget.timeouts -= 1;
                self.answered(s, party, caller, None);
            }
            Action::RecStart(rec) => {
                let RecSide::Idle { runs_left } = *s.recs[rec] else { return false };
                if runs_left == 0 {
                    return false;
                }
                let stored = match s.meta.state {
                    LedgerState::Closed => {
                        s.recs[rec].set(RecSide::Done);
                        return true;
                    }
                    LedgerState::Open => {
                        let mut next = (*s.meta).clone();
                        next.state = LedgerState::InRecovery;
                        let expected = (*s.meta).clone();
                        Self::cas(s, &expected, next).expect("the mark reads and writes at once")
                    }
                    LedgerState::InRecovery => (*s.meta).clone(),
                };
                let opts = RecoveryOptions { read_window: self.config.read_window, writer: self.writer_options(true) };
                let (r, steps) = Recovery::new(stored.clone(), opts);
                let run = self.config.runs_per_recoverer - runs_left;
                s.recs[rec].set(RecSide::Running {
                    r: Box::new(r),
                    meta: stored,
                    run,
                    wait: None,
                    runs_left: runs_left - 1,
                });
                self.rec_steps(s, rec, steps);
            }
            Action::RecReplace(rec, chosen) => {
                let closed = s.meta.state == LedgerState::Closed;
                let eager = self.config.store_replacements_eagerly;
                let RecSide::Running { wait, run, .. } = &*s.recs[rec] else { return false };
                let Some(RecWait::Replace { failed, first_entry_id, members }) = wait.clone() else { return false };
                let run = *run;
                if let RecSide::Running { wait, .. } = s.recs[rec].get_mut() {
                    *wait = None;
                }
                if closed {
                    self.with_rec(s, rec, run, |r, _| r.write_aborted(FailReason::Fenced));
                    return true;
                }
                if chosen.len() < failed.len() {
                    if Self::candidates(&members, s.bookies.len()).len() >= failed.len() {
                        return false;
                    }
                    self.with_rec(s, rec, run, |r, _| r.write_aborted(FailReason::NotEnoughBookies));
                    return true;
                }
                let next = Self::replace(s, &members, &failed, &chosen);
                if eager {
                    // The shell before the fix: change_ensemble by CAS at once.
                    let RecSide::Running { meta, .. } = &*s.recs[rec] else { unreachable!() };
                    let expected = meta.clone();
                    let intended = expected.with_ensemble(first_entry_id, next.clone());
                    match Self::cas(s, &expected, intended) {
                        Ok(m) => {
                            if let RecSide::Running { meta, .. } = s.recs[rec].get_mut() {
                                *meta = m;
                            }
                        }
                        Err(_) => {
                            self.with_rec(s, rec, run, |r, _| r.write_aborted(FailReason::Fenced));
                            return true;
                        }
                    }
                }
                self.with_rec(s, rec, run, |r, now| r.replaced(first_entry_id, next, now));
            }
            Action::RecClose(rec) => {
                let RecSide::Running { wait, meta, runs_left, .. } = &*s.recs[rec] else { return false };
                let Some(RecWait::Close { last_entry_id, length, ensembles, base }) = wait.clone() else {
                    return false;
                };
                let (found, runs_left) = (meta.clone(), *runs_left);
                let intended = found.closed_by_recovery(base, &ensembles, last_entry_id, length);
                match Self::cas(s, &found, intended) {
                    Ok(_) => s.recs[rec].set(RecSide::Done),
                    Err(now) if now.state == LedgerState::Closed => s.recs[rec].set(RecSide::Done),
                    Err(now) => match writer_conflict(&found, &now) {
                        Conflict::Retry(_) => {
                            if let RecSide::Running { meta, .. } = s.recs[rec].get_mut() {
                                *meta = now;
                            }
                        }
                        Conflict::Fenced => s.recs[rec].set(RecSide::Idle { runs_left }),
                    },
                }
            }
            Action::RecCrash(rec) => {
                let RecSide::Running { runs_left, .. } = *s.recs[rec] else { return false };
                if s.budget.recoverer_crashes == 0 {
                    return false;
                }
                s.budget.recoverer_crashes -= 1;
                s.recs[rec].set(RecSide::Idle { runs_left });
            }
            Action::ReplaceBookie(b) => {
                // A bookie that never saw the ledger loses nothing with its disks.
                if s.budget.replacements == 0 || !s.bookies[b].knows(LEDGER) {
                    return false;
                }
                s.budget.replacements -= 1;
                s.instances += 1;
                let instance = format!("i{}", s.instances);
                s.bookies[b].get_mut().replace(instance);
            }
        }
        true
    }
}

impl stateright::Model for LedgerModel {
    type State = State;
    type Action = Move;

    fn init_states(&self) -> Vec<State> {
        let c = &self.config;
        let bookies: Vec<SimBookie> =
            (0..c.bookies).map(|b| SimBookie::new(bookie_id(b), format!("i{b}"), "r".into())).collect();
        let members: Vec<Member> =
            (0..c.quorums.ensemble).map(|b| Member { bookie_id: bookie_id(b), instance_id: format!("i{b}") }).collect();
        let meta = LedgerMeta {
            ledger_id: LEDGER,
            state: LedgerState::Open,
            quorums: c.quorums,
            segments: vec![Segment { first_entry_id: 0, members: members.clone() }],
            last_entry_id: -1,
            length: 0,
            custom: Default::default(),
            created_at_ms: 0,
            version: 1,
            digest_type: "crc32c".into(),
        };
        let w = Writer::new(LEDGER, c.quorums, members, self.writer_options(false));
        let lanes = (1 + c.recoverers) * c.bookies;
        vec![State {
            bookies: bookies.into_iter().map(Shared::new).collect(),
            meta: Shared::new(meta.clone()),
            lanes: vec![Shared::new(Vec::new()); lanes],
            replies: vec![Shared::new(Vec::new()); lanes],
            writer: Shared::new(WriterSide::Running { w, meta, change: None, closing: None, adds_left: c.entries }),
            recs: vec![Shared::new(RecSide::Idle { runs_left: c.runs_per_recoverer }); c.recoverers],
            acked: Shared::new(BTreeMap::new()),
            submitted: Shared::new(BTreeMap::new()),
            ever_stored: Shared::new(Default::default()),
            instances: c.bookies as u8,
            budget: Budget {
                timeouts: c.timeouts,
                replacements: c.replacements,
                recoverer_crashes: c.recoverer_crashes,
            },
            broken: None,
            sched: Sched { current: None, preemptions_left: c.preemptions.unwrap_or(0) },
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Move>) {
        if s.broken.is_some() {
            return;
        }
        let mut listed = Vec::new();
        self.listed_actions(s, &mut listed);
        if self.config.preemptions.is_none() {
            out.extend(listed.into_iter().map(|action| Move { action, preempts: false }));
            return;
        }
        let can_act = self.current_can_act(s, &listed);
        let current = s.sched.current;
        for action in listed {
            let owner = action.owner();
            let preempts = can_act && owner.is_some() && owner != current;
            if !preempts || s.sched.preemptions_left > 0 {
                out.push(Move { action, preempts });
            }
        }
    }

    fn next_state(&self, s: &State, m: Move) -> Option<State> {
        let mut next = s.clone();
        let owner = m.action.owner();
        if m.preempts {
            next.sched.preemptions_left = next.sched.preemptions_left.checked_sub(1)?;
        }
        if !self.step(&mut next, m.action) {
            return None;
        }
        Self::forget_unheard(&mut next);
        if self.config.preemptions.is_some() && owner.is_some() {
            next.sched.current = owner;
        }
        next.seal();
        Some(next)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        if self.config.stop_at_first_violation {
            crate::properties::first_violation()
        } else {
            crate::properties::all()
        }
    }
}

impl LedgerModel {
    /// Every step the state allows, before the schedule's bound.
    fn listed_actions(&self, s: &State, out: &mut Vec<Action>) {
        if let WriterSide::Running { w, meta, change, closing, .. } = &*s.writer {
            out.push(Action::WriterAdd);
            out.push(Action::WriterTick);
            if let Some((failed, _)) = change {
                let current = &meta.last_segment().members;
                let cands = Self::candidates(current, s.bookies.len());
                if cands.len() >= failed.len() {
                    out.extend(choices(&cands, failed.len()).into_iter().map(Action::WriterChange));
                } else {
                    out.push(Action::WriterChange(Vec::new()));
                }
            }
            match closing {
                None => out.push(Action::WriterClose),
                Some(_) if w.is_closing() => out.push(Action::WriterCloseAnswered),
                Some(_) => {}
            }
            if self.config.writer_crash && w.done().is_none() {
                out.push(Action::WriterCrash);
            }
        }
        for i in (0..s.lanes.len()).filter(|i| !s.lanes[*i].is_empty()) {
            let (party, bookie) = s.lane_of(i);
            out.push(Action::Deliver(party, bookie));
            if s.budget.timeouts > 0 {
                out.push(Action::LoseRequest(party, bookie));
            }
        }
        for i in (0..s.replies.len()).filter(|i| !s.replies[*i].is_empty()) {
            let (party, bookie) = s.lane_of(i);
            out.push(Action::Answer(bookie, party));
            if s.budget.timeouts > 0 {
                out.push(Action::LoseReply(bookie, party));
            }
        }
        for (rec, side) in s.recs.iter().enumerate() {
            match &**side {
                RecSide::Idle { runs_left } if *runs_left > 0 => out.push(Action::RecStart(rec)),
                RecSide::Running { wait, .. } => {
                    match wait {
                        Some(RecWait::Replace { failed, members, .. }) => {
                            let cands = Self::candidates(members, s.bookies.len());
                            if cands.len() >= failed.len() {
                                out.extend(
                                    choices(&cands, failed.len()).into_iter().map(|c| Action::RecReplace(rec, c)),
                                );
                            } else {
                                out.push(Action::RecReplace(rec, Vec::new()));
                            }
                        }
                        Some(RecWait::Close { .. }) => out.push(Action::RecClose(rec)),
                        None => {}
                    }
                    if s.budget.recoverer_crashes > 0 {
                        out.push(Action::RecCrash(rec));
                    }
                }
                _ => {}
            }
        }
        if s.budget.replacements > 0 {
            out.extend((0..s.bookies.len()).filter(|b| s.bookies[*b].knows(LEDGER)).map(Action::ReplaceBookie));
        }
    }
}
