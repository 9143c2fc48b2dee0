//! One state of the modelled world: the real state machines (the ledger's
//! [`Writer`], each recoverer's [`Recovery`]), the bookies (the simulator's
//! [`SimBookie`], with the real bookie's refusals), the stored ledger
//! metadata, the messages in flight, and the oracle (what the writer was
//! told). Everything is `Hash + Eq` so that the checker can tell states it
//! has seen.
//!
//! A state is cloned for every step the checker tries and hashed for every
//! state it reaches, and a step changes one or two parts of it. So each part
//! is a [`Shared`]: an `Arc` (a clone copies a pointer; a step copies only
//! the part it changes) with its fingerprint cached (a state's hash is a
//! dozen words, not a walk over every machine's maps and strings).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use quire_client::meta::LedgerMeta;
use quire_client::recovery::Recovery;
use quire_client::sim::bookie::{BookieReq, BookieResp, SimBookie};
use quire_client::writer::{Member, Writer};

/// Who sent a request, and what its answer is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The writer's add of `entry_id` to `member` at `position`.
    WriterAdd {
        /// Entry.
        entry_id: u64,
        /// Ensemble position.
        position: usize,
        /// The member.
        member: Member,
    },
    /// The writer's explicit LAC.
    WriterLac,
    /// A recoverer (the lane's party) in its run `run` fencing position `position`.
    Fence {
        /// Its run (answers to an earlier, crashed run are dropped).
        run: u8,
        /// Position in the last ensemble.
        position: usize,
    },
    /// A recovery read.
    Read {
        /// Run.
        run: u8,
        /// Entry.
        entry_id: u64,
        /// Position in the entry's ensemble.
        position: usize,
    },
    /// A recovery add (write-back).
    Write {
        /// Run.
        run: u8,
        /// Entry.
        entry_id: u64,
        /// Position.
        position: usize,
        /// The member.
        member: Member,
    },
}

/// A party that sends requests: its requests to one bookie travel one QUIC
/// lane (the ledger id is the ordering key), so they reach the bookie in
/// the order sent, and the bookie runs them in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// The writer.
    Writer,
    /// Recoverer `i`.
    Recoverer(usize),
}

impl Party {
    /// Its row in [`State::lanes`] and [`State::replies`].
    pub fn index(self) -> usize {
        match self {
            Party::Writer => 0,
            Party::Recoverer(r) => 1 + r,
        }
    }

    /// The party of a row.
    pub fn of_index(i: usize) -> Party {
        if i == 0 {
            Party::Writer
        } else {
            Party::Recoverer(i - 1)
        }
    }
}

/// A request on its way to a bookie (the lane names the party that sent it).
pub type Request = (Caller, BookieReq);

/// An answer on its way back to its caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reply {
    /// Who asked.
    pub caller: Caller,
    /// What the bookie said.
    pub resp: BookieResp,
}

/// A CAS the writer made whose outcome it has not learnt yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CloseOutcome {
    /// Our close was stored (or the ledger was already closed where we close it).
    Closed(LedgerMeta),
    /// Someone else closed or recovered it.
    Fenced,
}

/// The writer and its shell.
// States are cloned whole at every step: boxing the large variant would add
// an allocation to each clone for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WriterSide {
    /// Writing.
    Running {
        /// The real state machine.
        w: Writer,
        /// The metadata as the writer last stored or read it.
        meta: LedgerMeta,
        /// An ensemble change the shell has to make: (failed positions, first entry).
        change: Option<(Vec<usize>, u64)>,
        /// The close's CAS was made; its outcome is on its way back.
        closing: Option<CloseOutcome>,
        /// Adds still to make.
        adds_left: u64,
    },
    /// Stopped (closed, fenced, failed or crashed): sends nothing more.
    Stopped {
        /// Whether it crashed (its answers are dropped) rather than finished.
        crashed: bool,
    },
}

/// A step of recovery that waits on the shell.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecWait {
    /// Replacements to choose for these positions of the write-back ensemble.
    Replace {
        /// Failed positions.
        failed: Vec<usize>,
        /// First entry of the new ensemble.
        first_entry_id: u64,
        /// The write-back ensemble now.
        members: Vec<Member>,
    },
    /// The close to store.
    Close {
        /// Tail.
        last_entry_id: i64,
        /// Length.
        length: u64,
        /// Recovery's ensembles.
        ensembles: BTreeMap<u64, Vec<Member>>,
        /// The base they start from.
        base: u64,
    },
}

/// One recovering client.
#[allow(clippy::large_enum_variant)] // as WriterSide
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RecSide {
    /// Not recovering now; may start `runs_left` more times.
    Idle {
        /// Runs left.
        runs_left: u8,
    },
    /// Recovering.
    Running {
        /// The real state machine.
        r: Box<Recovery>,
        /// The stored metadata this run started from (and, with
        /// `store_replacements_eagerly`, every replacement it stored since).
        meta: LedgerMeta,
        /// This run's number.
        run: u8,
        /// What it waits on, if anything.
        wait: Option<RecWait>,
        /// Runs left after this one.
        runs_left: u8,
    },
    /// Saw the ledger closed (by itself or another): done.
    Done,
}

/// The fault budget still unspent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Timeouts (lost requests or answers).
    pub timeouts: u8,
    /// Bookie replacements.
    pub replacements: u8,
    /// Recoverer crashes.
    pub recoverer_crashes: u8,
}

/// Who the preemption-bounded search is running, and how many preemptions
/// it may still spend (constant when the search is unbounded).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sched {
    /// The party that took the last step (`None` before the first).
    pub current: Option<Party>,
    /// Preemptions left.
    pub preemptions_left: u8,
}

/// A part of the state: shared between the states that did not change it,
/// with its fingerprint computed once. [`Shared::get_mut`] copies it if
/// another state shares it and marks the fingerprint stale;
/// [`State::seal`] recomputes it after the step.
pub struct Shared<T> {
    value: Arc<T>,
    fingerprint: u64,
    stale: bool,
}

impl<T: Hash> Shared<T> {
    /// A part holding `value`.
    pub fn new(value: T) -> Shared<T> {
        let fingerprint = fingerprint(&value);
        Shared { value: Arc::new(value), fingerprint, stale: false }
    }

    /// The value, to change (copied first if another state shares it).
    pub fn get_mut(&mut self) -> &mut T
    where
        T: Clone,
    {
        self.stale = true;
        Arc::make_mut(&mut self.value)
    }

    /// Replaces the value.
    pub fn set(&mut self, value: T) {
        *self = Shared::new(value);
    }

    /// The fingerprint of the value now.
    pub fn fingerprint(&self) -> u64 {
        if self.stale {
            fingerprint(&*self.value)
        } else {
            self.fingerprint
        }
    }

    fn seal(&mut self) {
        if self.stale {
            self.fingerprint = fingerprint(&*self.value);
            self.stale = false;
        }
    }
}

impl<T: Hash + Default> Default for Shared<T> {
    fn default() -> Self {
        Shared::new(T::default())
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared { value: Arc::clone(&self.value), fingerprint: self.fingerprint, stale: self.stale }
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Hash> Hash for Shared<T> {
    /// The value's fingerprint: equal values write the same word, whether
    /// or not it was cached.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.fingerprint());
    }
}

impl<T: Hash + PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.value, &other.value)
            || (self.fingerprint() == other.fingerprint() && *self.value == *other.value)
    }
}

impl<T: Hash + Eq> Eq for Shared<T> {}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value.fmt(f)
    }
}

/// The world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Bookies, by index (ids "b0", "b1", ...).
    pub bookies: Vec<Shared<SimBookie>>,
    /// The stored ledger metadata (linearizable, CAS on its version).
    pub meta: Shared<LedgerMeta>,
    /// Requests in flight, one lane per (party, bookie) at
    /// `party.index() * bookies + bookie`, in the order sent.
    pub lanes: Vec<Shared<Vec<Request>>>,
    /// Answers in flight, one lane per (bookie, party) at the same index,
    /// in the order the bookie answered (it applies its requests in order
    /// and each at once, so it answers them in order too). Lanes from
    /// different bookies arrive in any order.
    pub replies: Vec<Shared<Vec<Reply>>>,
    /// The writer.
    pub writer: Shared<WriterSide>,
    /// The recoverers.
    pub recs: Vec<Shared<RecSide>>,
    /// The oracle: every entry acknowledged to the writer, with its bytes.
    pub acked: Shared<BTreeMap<u64, Bytes>>,
    /// Every entry id's bytes as the writer made it.
    pub submitted: Shared<BTreeMap<u64, Bytes>>,
    /// Ghost state: every (instance, entry) that ever stored a copy, even on
    /// a disk replaced since (for "every committed entry reached Qa").
    pub ever_stored: Shared<BTreeSet<(String, u64)>>,
    /// Instances created so far (names the next one).
    pub instances: u8,
    /// Faults left.
    pub budget: Budget,
    /// A rule the transitions found broken (acknowledged out of order, a
    /// close attempted below an acknowledged entry...), for the properties.
    pub broken: Option<String>,
    /// The preemption-bounded search's schedule.
    pub sched: Sched,
}

impl State {
    fn lane(&self, party: Party, bookie: usize) -> usize {
        party.index() * self.bookies.len() + bookie
    }

    /// The (party, bookie) of a lane index.
    pub fn lane_of(&self, index: usize) -> (Party, usize) {
        (Party::of_index(index / self.bookies.len()), index % self.bookies.len())
    }

    /// Puts a request on its lane.
    pub fn request(&mut self, party: Party, bookie: usize, caller: Caller, req: BookieReq) {
        let i = self.lane(party, bookie);
        self.lanes[i].get_mut().push((caller, req));
    }

    /// Puts an answer on its lane back.
    pub fn reply(&mut self, bookie: usize, party: Party, reply: Reply) {
        let i = self.lane(party, bookie);
        self.replies[i].get_mut().push(reply);
    }

    /// Takes the first answer of a lane back.
    pub fn take_reply(&mut self, bookie: usize, party: Party) -> Option<Reply> {
        let i = self.lane(party, bookie);
        if self.replies[i].is_empty() {
            return None;
        }
        Some(self.replies[i].get_mut().remove(0))
    }

    /// Takes the first request of a lane.
    pub fn take_request(&mut self, party: Party, bookie: usize) -> Option<Request> {
        let i = self.lane(party, bookie);
        if self.lanes[i].is_empty() {
            return None;
        }
        Some(self.lanes[i].get_mut().remove(0))
    }

    /// Recomputes the fingerprints of the parts a step changed.
    pub fn seal(&mut self) {
        self.bookies.iter_mut().for_each(Shared::seal);
        self.meta.seal();
        self.lanes.iter_mut().for_each(Shared::seal);
        self.replies.iter_mut().for_each(Shared::seal);
        self.writer.seal();
        self.recs.iter_mut().for_each(Shared::seal);
        self.acked.seal();
        self.submitted.seal();
        self.ever_stored.seal();
    }
}

/// A hash with fixed keys (aHash, as stateright's own fingerprints): the
/// same in every run.
pub fn fingerprint<T: Hash>(t: &T) -> u64 {
    const SEEDS: [u64; 4] =
        [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89];
    ahash::RandomState::with_seeds(SEEDS[0], SEEDS[1], SEEDS[2], SEEDS[3]).hash_one(t)
}

impl Party {
    fn swapped(self, a: usize, b: usize) -> Party {
        match self {
            Party::Recoverer(r) if r == a => Party::Recoverer(b),
            Party::Recoverer(r) if r == b => Party::Recoverer(a),
            p => p,
        }
    }
}

impl State {
    /// The same world with recoverers `a` and `b` trading places: the
    /// recoverers run the same code, so the two are the same state up to
    /// their names (symmetry reduction). Messages name no recoverer (their
    /// lane does), so trading places is trading rows.
    pub fn with_recoverers_swapped(&self, a: usize, b: usize) -> State {
        let mut s = self.clone();
        s.recs.swap(a, b);
        s.sched.current = self.sched.current.map(|p| p.swapped(a, b));
        let n = self.bookies.len();
        let (ra, rb) = (Party::Recoverer(a).index() * n, Party::Recoverer(b).index() * n);
        for bookie in 0..n {
            s.lanes.swap(ra + bookie, rb + bookie);
            s.replies.swap(ra + bookie, rb + bookie);
        }
        s
    }
}

impl stateright::Representative for State {
    /// Of the orderings of the recoverers, the one whose recoverers (or,
    /// when they are alike, whose whole world) hash smallest.
    fn representative(&self) -> Self {
        if self.recs.len() != 2 {
            return self.clone();
        }
        // Most states tell the two apart by the recoverers alone: ordering
        // by them costs two cached fingerprints, not a hash of the world.
        // (Any state symmetric to this one is a sound representative; the
        // ordering only decides how often two symmetric states meet as one.)
        if self.recs[0] != self.recs[1] {
            return if self.recs[1].fingerprint() < self.recs[0].fingerprint() {
                self.with_recoverers_swapped(0, 1)
            } else {
                self.clone()
            };
        }
        let other = self.with_recoverers_swapped(0, 1);
        if fingerprint(&other) < fingerprint(self) {
            other
        } else {
            self.clone()
        }
    }
}
