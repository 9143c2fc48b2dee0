//! One state of the modelled world: the real state machines (the ledger's
//! [`Writer`], each recoverer's [`Recovery`]), the bookies (the simulator's
//! [`SimBookie`], with the real bookie's refusals), the stored ledger
//! metadata, the messages in flight, and the oracle (what the writer was
//! told). Everything is `Hash + Eq` so that the checker can tell states it
//! has seen.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

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
    /// Recoverer `rec` (its run `run`) fencing position `position`.
    Fence {
        /// Recoverer.
        rec: usize,
        /// Its run (answers to an earlier, crashed run are dropped).
        run: u8,
        /// Position in the last ensemble.
        position: usize,
    },
    /// A recovery read.
    Read {
        /// Recoverer.
        rec: usize,
        /// Run.
        run: u8,
        /// Entry.
        entry_id: u64,
        /// Position in the entry's ensemble.
        position: usize,
    },
    /// A recovery add (write-back).
    Write {
        /// Recoverer.
        rec: usize,
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

impl Caller {
    /// The party that sent the request.
    pub fn party(&self) -> Party {
        match self {
            Caller::WriterAdd { .. } | Caller::WriterLac => Party::Writer,
            Caller::Fence { rec, .. } | Caller::Read { rec, .. } | Caller::Write { rec, .. } => Party::Recoverer(*rec),
        }
    }
}

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

/// The world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Bookies, by index (ids "b0", "b1", ...).
    pub bookies: Vec<SimBookie>,
    /// The stored ledger metadata (linearizable, CAS on its version).
    pub meta: LedgerMeta,
    /// Requests in flight, per (party, bookie) lane, in the order sent.
    pub lanes: BTreeMap<(Party, usize), Vec<(Caller, BookieReq)>>,
    /// Answers in flight, per (bookie, party) lane, in the order the bookie
    /// answered (one lane: the bookie applies its requests in order and each
    /// at once, so it answers them in order too). Lanes from different
    /// bookies arrive in any order.
    pub replies: BTreeMap<(usize, Party), Vec<Reply>>,
    /// The writer.
    pub writer: WriterSide,
    /// The recoverers.
    pub recs: Vec<RecSide>,
    /// The oracle: every entry acknowledged to the writer, with its bytes.
    pub acked: BTreeMap<u64, Bytes>,
    /// Every entry id's bytes as the writer made it.
    pub submitted: BTreeMap<u64, Bytes>,
    /// Ghost state: every (instance, entry) that ever stored a copy, even on
    /// a disk replaced since (for "every committed entry reached Qa").
    pub ever_stored: BTreeSet<(String, u64)>,
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
    /// Puts a request on its lane.
    pub fn request(&mut self, bookie: usize, caller: Caller, req: BookieReq) {
        self.lanes.entry((caller.party(), bookie)).or_default().push((caller, req));
    }

    /// Puts an answer on its lane back.
    pub fn reply(&mut self, bookie: usize, reply: Reply) {
        self.replies.entry((bookie, reply.caller.party())).or_default().push(reply);
    }

    /// Takes the first answer of a lane back.
    pub fn take_reply(&mut self, lane: (usize, Party)) -> Option<Reply> {
        let q = self.replies.get_mut(&lane)?;
        let first = q.remove(0);
        if q.is_empty() {
            self.replies.remove(&lane);
        }
        Some(first)
    }

    /// Takes the first request of a lane.
    pub fn take_request(&mut self, lane: (Party, usize)) -> Option<(Caller, BookieReq)> {
        let q = self.lanes.get_mut(&lane)?;
        let first = q.remove(0);
        if q.is_empty() {
            self.lanes.remove(&lane);
        }
        Some(first)
    }
}

/// A hash with fixed keys (SipHash with zero keys): the same in every run.
pub fn fingerprint<T: Hash>(t: &T) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    t.hash(&mut h);
    h.finish()
}

impl Caller {
    /// The same caller with recoverers `a` and `b` swapped.
    fn swapped(&self, a: usize, b: usize) -> Caller {
        let sw = |r: usize| {
            if r == a {
                b
            } else if r == b {
                a
            } else {
                r
            }
        };
        let mut c = self.clone();
        match &mut c {
            Caller::Fence { rec, .. } | Caller::Read { rec, .. } | Caller::Write { rec, .. } => *rec = sw(*rec),
            Caller::WriterAdd { .. } | Caller::WriterLac => {}
        }
        c
    }
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
    /// their names (symmetry reduction).
    pub fn with_recoverers_swapped(&self, a: usize, b: usize) -> State {
        let mut s = self.clone();
        s.recs.swap(a, b);
        s.sched.current = self.sched.current.map(|p| p.swapped(a, b));
        s.lanes = self
            .lanes
            .iter()
            .map(|((p, bk), q)| ((p.swapped(a, b), *bk), q.iter().map(|(c, r)| (c.swapped(a, b), r.clone())).collect()))
            .collect();
        s.replies = self
            .replies
            .iter()
            .map(|((bk, p), q)| {
                (
                    (*bk, p.swapped(a, b)),
                    q.iter().map(|r| Reply { caller: r.caller.swapped(a, b), resp: r.resp.clone() }).collect(),
                )
            })
            .collect();
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
        // by them costs two small hashes, not a copy and two hashes of the
        // world. (Any state symmetric to this one is a sound
        // representative; the ordering only decides how often two
        // symmetric states meet as one.)
        if self.recs[0] != self.recs[1] {
            return if fingerprint(&self.recs[1]) < fingerprint(&self.recs[0]) {
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
