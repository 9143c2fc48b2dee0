//! The simulated world: one ledger, its writer, one to three recovering
//! clients that may run at once (the gateway's recover, a worker, an
//! application) and a reader, bookies and the metadata store, a network that
//! delays, drops and partitions, and a clock that only moves from event to
//! event. Everything random comes from the seed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::meta::{writer_conflict, Conflict, LedgerMeta, LedgerState, Segment};
use crate::placement::{choose_ensemble, replace_members};
use crate::recovery::{BookieRead, FenceAnswer, Recovery, RecoveryError, RecoveryOptions, Step};
use crate::sim::bookie::{BookieReq, BookieResp, SimBookie};
use crate::sim::metastore::{candidates, CasError, Registered, SimMeta};
use crate::sim::rng::Rng;
use crate::writer::{self, AddError, Answer, FailReason, Member, Quorums, Writer, WriterOptions};

/// Microseconds of simulated time.
pub type Time = u64;

const MS: Time = 1000;

/// Who sends a request (partitions are per client and bookie).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Client {
    /// The ledger's writer.
    Writer,
    /// A recovering client (by index).
    Recovery(usize),
    /// A tailing reader.
    Reader,
}

#[derive(Debug, Clone)]
enum Caller {
    WriterAdd { entry_id: u64, position: usize, member: Member },
    WriterLac { position: usize, member: Member, lac: i64 },
    Fence { r: usize, gen: u64, position: usize },
    RecRead { r: usize, gen: u64, entry_id: u64, position: usize },
    RecWrite { r: usize, gen: u64, entry_id: u64, position: usize, member: Member },
    ReaderLac,
    ReaderRead { entry_id: u64, rest: Vec<String> },
}

impl Caller {
    fn client(&self) -> Client {
        match self {
            Caller::WriterAdd { .. } | Caller::WriterLac { .. } => Client::Writer,
            Caller::Fence { r, .. } | Caller::RecRead { r, .. } | Caller::RecWrite { r, .. } => Client::Recovery(*r),
            Caller::ReaderLac | Caller::ReaderRead { .. } => Client::Reader,
        }
    }
}

#[derive(Debug, Clone)]
enum MetaOp {
    /// `sent`: the last attempt's intended record when its reply was lost
    /// (the shell settles an unknown outcome against it).
    WriterChange {
        failed: Vec<usize>,
        first: u64,
        deadline: Time,
        sent: Option<Box<LedgerMeta>>,
    },
    RecoveryMark {
        r: usize,
        gen: u64,
    },
    RecoveryReplace {
        r: usize,
        gen: u64,
        failed: Vec<usize>,
        first: u64,
        members: Vec<Member>,
        deadline: Time,
    },
    /// `basis`: the record the close compares against, carried by the
    /// request (it lands even after its client stopped).
    RecoveryClose {
        r: usize,
        gen: u64,
        basis: Box<LedgerMeta>,
        base: u64,
        last: i64,
        length: u64,
        ensembles: BTreeMap<u64, Vec<Member>>,
    },
}

#[derive(Debug, Clone)]
enum Fault {
    Crash(usize),
    Restart(usize),
    Replace(usize),
    Partition(Client, usize, Time),
    Heal(Client, usize),
    MetaDown(Time),
    MetaUp,
    Corrupt(usize),
    WriterCrash,
    /// A recovering client stops where it is (crash, lost claim, deadline);
    /// what it already sent still lands. It starts over later.
    RecovererCrash(usize),
    /// A bookie loses its data but keeps its instance (index lost, files
    /// restored from an old copy): its ledger is in limbo until refilled.
    LoseData(usize),
}

#[derive(Debug, Clone)]
enum Ev {
    Apply {
        bookie: usize,
        incarnation: u64,
        req_id: u64,
        req: BookieReq,
    },
    Respond {
        req_id: u64,
        resp: BookieResp,
    },
    Timeout {
        req_id: u64,
    },
    WriterAdd,
    WriterTick,
    Meta(MetaOp),
    RecoveryStart {
        r: usize,
    },
    RecoveryTick {
        r: usize,
        gen: u64,
    },
    /// A bookie's data-integrity check looks at its ledger in limbo.
    IntegrityTick {
        bookie: usize,
    },
    ReaderTick,
    Fault(Fault),
}

/// What a run found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

struct Pending {
    caller: Caller,
}

/// One run's settings, drawn from the seed.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Quorums.
    pub quorums: Quorums,
    /// Bookies.
    pub bookies: usize,
    /// Adds the writer submits.
    pub adds: u64,
    /// Probability a message is lost.
    pub loss: f64,
    /// Disk-losing faults allowed (replacements, corruptions): Qa - 1, so an
    /// acknowledged entry always keeps one copy.
    pub loss_budget: usize,
    /// Faults are injected until this time.
    pub safety_until: Time,
    /// Recovering clients.
    pub recoverers: usize,
    /// Probability a recovering client stops at each step it takes.
    pub recoverer_crash: f64,
    /// Probability the reply to an applied compare-and-set is lost.
    pub cas_reply_loss: f64,
    /// Probability a recovering client stops at each point where stopping
    /// leaves the most behind: right after its mark, after fencing, after a
    /// write-back replacement, before its close.
    pub aimed_stop: f64,
    /// Probability a bookie crashes the moment a recovery starts writing
    /// back to it (a fault aimed at the write-back: its replacement path).
    pub writeback_crash: f64,
    /// A deliberately broken recovery, to show the checkers catch it: the
    /// write-back's replacements are stored by CAS as they are made (the
    /// code before issue #19 item 1). Never on in a real run.
    pub store_replacements_early: bool,
    /// The writer answers adds only once visible (issue #47: read your
    /// writes), on odd seeds (drawn from the seed, not the scenario's
    /// random stream, so that earlier seeds replay as they ran).
    pub visible_acks: bool,
}

/// Counters from a run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Adds acknowledged to the writer.
    pub acked: u64,
    /// Ensemble changes by the writer.
    pub ensemble_changes: u64,
    /// Adds a bookie answered METADATA_UNAVAILABLE (its unknown-ledger
    /// check met a metadata outage): asked again, never a failure.
    pub unavailable: u64,
    /// Recovery attempts that failed (and were retried).
    pub recovery_failures: u64,
    /// Recovery attempts started.
    pub recoveries: u64,
    /// Attempts that overlapped another recoverer's.
    pub overlapping_recoveries: u64,
    /// Recovering clients stopped mid-way.
    pub recoverer_crashes: u64,
    /// Compare-and-sets applied whose reply was lost.
    pub cas_replies_lost: u64,
    /// Reads answered LEDGER_IN_LIMBO.
    pub limbo_answers: u64,
    /// The closed ledger's last entry.
    pub last_entry_id: i64,
    /// Requests sent to bookies.
    pub messages: u64,
    /// Reads by the tailing reader that returned an entry.
    pub reads: u64,
    /// Faults injected.
    pub faults: u64,
    /// The writer ended fenced.
    pub writer_fenced: bool,
    /// Copies of acknowledged entries the writer sent and no member confirmed.
    pub lost_copies: u64,
}

/// The world.
pub struct World {
    rng: Rng,
    now: Time,
    origin: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    events: BTreeMap<usize, Ev>,
    next_event: usize,
    /// Bookies by index (ids "b1"...).
    pub bookies: Vec<SimBookie>,
    registry: BTreeMap<String, (Registered, Option<Time>)>,
    /// The metadata store.
    pub meta: SimMeta,
    pending: BTreeMap<u64, Pending>,
    next_req: u64,
    partitions: BTreeSet<(Client, usize)>,
    scenario: Scenario,
    ledger_id: u64,
    // The writer.
    writer: Option<Writer>,
    writer_meta: Option<LedgerMeta>,
    writer_alive: bool,
    submitted: BTreeMap<u64, Bytes>,
    adds_left: u64,
    // Recovering clients; generations are unique across them.
    recs: Vec<Recoverer>,
    rec_gen: u64,
    // The oracle.
    acked: BTreeMap<u64, Bytes>,
    losses: usize,
    healing: bool,
    /// Counters.
    pub stats: Stats,
    log: Vec<String>,
}

/// One recovering client.
#[derive(Debug, Default)]
struct Recoverer {
    /// Its current attempt (answers to an older one are dropped).
    gen: u64,
    rec: Option<Recovery>,
    /// The record its attempt started from.
    meta: Option<LedgerMeta>,
    running: bool,
    /// Its attempt has written back (the aimed crash comes once).
    wrote_back: bool,
    /// The points of its attempt where an aimed stop was tried already.
    passed: BTreeSet<&'static str>,
}

impl World {
    /// A world for `seed`.
    pub fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let shapes = [(3, 3, 2), (3, 2, 2), (2, 2, 2), (4, 3, 2), (5, 3, 2), (3, 3, 3), (4, 2, 1), (5, 5, 3)];
        let (e, w, a) = *rng.pick(&shapes);
        let quorums = Quorums::new(e, w, a).expect("valid shapes");
        let loss_budget = a - 1;
        let bookies = e + 1 + loss_budget + rng.range(0, 2) as usize;
        let scenario = Scenario {
            quorums,
            bookies,
            adds: rng.range(20, 300),
            loss: *rng.pick(&[0.0, 0.0, 0.01, 0.05]),
            loss_budget,
            safety_until: rng.range(200, 1500) * MS,
            recoverers: rng.range(1, 4) as usize,
            recoverer_crash: *rng.pick(&[0.0, 0.02, 0.05, 0.1]),
            cas_reply_loss: *rng.pick(&[0.0, 0.0, 0.1, 0.3]),
            writeback_crash: *rng.pick(&[0.0, 0.3, 0.7]),
            aimed_stop: *rng.pick(&[0.0, 0.1, 0.3]),
            store_replacements_early: false,
            visible_acks: seed % 2 == 1,
        };
        let racks = ["r1", "r2", "r3"];
        let mut world = World {
            origin: Instant::now(),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            next_event: 0,
            bookies: Vec::new(),
            registry: BTreeMap::new(),
            meta: SimMeta::new(),
            pending: BTreeMap::new(),
            next_req: 0,
            partitions: BTreeSet::new(),
            ledger_id: 1,
            writer: None,
            writer_meta: None,
            writer_alive: true,
            submitted: BTreeMap::new(),
            adds_left: scenario.adds,
            recs: (0..scenario.recoverers).map(|_| Recoverer::default()).collect(),
            rec_gen: 0,
            acked: BTreeMap::new(),
            losses: 0,
            healing: false,
            stats: Stats { last_entry_id: -1, ..Stats::default() },
            log: Vec::new(),
            scenario,
            rng,
        };
        for i in 0..bookies {
            let id = format!("b{}", i + 1);
            let inst = world.new_instance();
            let rack = racks[i % racks.len()].to_string();
            world.registry.insert(id.clone(), (Registered { instance_id: inst.clone(), rack: rack.clone() }, None));
            world.bookies.push(SimBookie::new(id, inst, rack));
        }
        world
    }

    /// A world for `seed`, its scenario changed by `tweak` (tests that show
    /// the checkers catch a broken protocol).
    pub fn new_with(seed: u64, tweak: impl FnOnce(&mut Scenario)) -> World {
        let mut w = World::new(seed);
        tweak(&mut w.scenario);
        w.recs = (0..w.scenario.recoverers.max(1)).map(|_| Recoverer::default()).collect();
        w
    }

    /// The scenario drawn from the seed.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// The last lines of the event log (for a failing seed's report).
    pub fn log_tail(&self, n: usize) -> String {
        self.log[self.log.len().saturating_sub(n)..].join("\n")
    }

    fn note(&mut self, s: String) {
        self.log.push(format!("{:>9.3}ms {s}", self.now as f64 / 1000.0));
    }

    fn new_instance(&mut self) -> String {
        format!("i{:016x}", self.rng.next_u64())
    }

    fn instant(&self) -> Instant {
        self.origin + Duration::from_micros(self.now)
    }

    fn at(&mut self, t: Time, ev: Ev) {
        self.seq += 1;
        let k = self.next_event;
        self.next_event += 1;
        self.events.insert(k, ev);
        self.queue.push(Reverse((t, self.seq, k)));
    }

    fn after(&mut self, d: Time, ev: Ev) {
        self.at(self.now + d, ev);
    }

    /// With visible acknowledgements: the shell's end of a turn (no add
    /// queued here: the simulated application adds on its own schedule)
    /// sends a LAC that nothing carries; and what the writer counts
    /// visible is, on the bookies: no set of E - Qa + 1 members that a
    /// reader may hear (the instance the ensemble names, not in limbo)
    /// holds a lower LAC, unless the last ensemble's first entry covers it.
    fn after_writer_answer(&mut self) -> Result<(), Violation> {
        if !self.scenario.visible_acks || !self.writer_alive {
            return Ok(());
        }
        let cmds = self.writer.as_mut().expect("writer").publish_lac_now();
        self.writer_commands(cmds)?;
        let w = self.writer.as_ref().expect("writer");
        let visible = w.lac_visible();
        // A closed ledger's readers read its end from the metadata.
        if self.meta.ledgers.get(&self.ledger_id).is_some_and(|l| l.state == LedgerState::Closed) {
            return Ok(());
        }
        let Some(meta) = &self.writer_meta else { return Ok(()) };
        let seg = meta.last_segment();
        if visible < seg.first_entry_id as i64 {
            return Ok(());
        }
        let (mut heard, mut knowing) = (0usize, 0usize);
        for m in &seg.members {
            let b = &self.bookies[self.bookie_index(&m.bookie_id)];
            let Some(lac) = b.readable_lac(self.ledger_id).filter(|_| b.instance_id == m.instance_id) else { continue };
            heard += 1;
            if lac >= visible {
                knowing += 1;
            }
        }
        let needed = self.scenario.quorums.ensemble - self.scenario.quorums.ack + 1;
        if heard >= needed && heard - knowing >= needed {
            return Err(Violation(format!(
                "ReadYourWrites: LAC {visible} counted visible, but {} of the {heard} readable members hold less",
                heard - knowing
            )));
        }
        Ok(())
    }

    fn bookie_index(&self, id: &str) -> usize {
        self.bookies.iter().position(|b| b.id == id).expect("a known bookie")
    }

    fn live_candidates(&self) -> Vec<crate::placement::Candidate> {
        let live: BTreeMap<String, Registered> = self
            .registry
            .iter()
            .filter(|(_, (_, exp))| exp.is_none_or(|t| t > self.now))
            .map(|(k, (r, _))| (k.clone(), r.clone()))
            .collect();
        candidates(&live)
    }

    fn send(&mut self, caller: Caller, bookie_id: &str, req: BookieReq) {
        let bookie = self.bookie_index(bookie_id);
        self.next_req += 1;
        let req_id = self.next_req;
        self.stats.messages += 1;
        let client = caller.client();
        self.pending.insert(req_id, Pending { caller });
        self.after(100 * MS, Ev::Timeout { req_id });
        if self.partitions.contains(&(client, bookie)) || self.rng.chance(self.scenario.loss) {
            return;
        }
        // Network there, then the bookie's fsync (for what it must make durable).
        let fsync = match req {
            BookieReq::Add { .. } | BookieReq::Fence { .. } | BookieReq::Read { fence: true, .. } => {
                self.rng.range(200, 3000)
            }
            _ => 0,
        };
        let d = self.rng.range(50, 1000) + fsync;
        let incarnation = self.bookies[bookie].incarnation;
        self.after(d, Ev::Apply { bookie, incarnation, req_id, req });
    }

    /// Runs the whole scenario: safety phase with faults, then healing and a
    /// final recovery, then the checks.
    pub fn run(&mut self) -> Result<(), Violation> {
        self.start()?;
        self.schedule_faults();
        let end = self.scenario.safety_until + 30_000 * MS;
        while let Some(Reverse((t, _, k))) = self.queue.pop() {
            if t > end {
                break;
            }
            self.now = t;
            let ev = self.events.remove(&k).expect("queued events exist");
            self.step(ev)?;
            if !self.healing && self.now >= self.scenario.safety_until {
                self.heal();
            }
            if self.healing
                && self.meta.ledgers[&self.ledger_id].state == LedgerState::Closed
                && self.recs.iter().all(|r| !r.running)
                && self.bookies.iter().all(|b| !b.in_limbo(self.ledger_id))
            {
                break;
            }
        }
        self.check_final()
    }

    fn start(&mut self) -> Result<(), Violation> {
        let q = self.scenario.quorums;
        let cands = self.live_candidates();
        let seed = self.rng.next_u64();
        let ids =
            choose_ensemble(&cands, q.ensemble, q.write, seed).map_err(|e| Violation(format!("placement: {e}")))?;
        let members: Vec<Member> = ids
            .iter()
            .map(|id| Member { bookie_id: id.clone(), instance_id: self.registry[id].0.instance_id.clone() })
            .collect();
        let meta = LedgerMeta {
            ledger_id: self.ledger_id,
            state: LedgerState::Open,
            quorums: q,
            segments: vec![Segment { first_entry_id: 0, members: members.clone() }],
            last_entry_id: -1,
            length: 0,
            custom: Default::default(),
            created_at_ms: 0,
            version: 1,
            digest_type: "crc32c".into(),
        };
        self.meta.create(meta.clone());
        let opts = WriterOptions {
            max_pending: 64,
            add_timeout: Duration::from_millis(150),
            explicit_lac_interval: Duration::from_millis(20),
            recovery: false,
            visible_acks: self.scenario.visible_acks,
        };
        self.writer = Some(Writer::new(self.ledger_id, q, members, opts));
        self.writer_meta = Some(meta);
        self.note(format!("ledger {:?} on {:?}", q, ids));
        self.after(0, Ev::WriterAdd);
        self.after(5 * MS, Ev::WriterTick);
        self.after(10 * MS, Ev::ReaderTick);
        Ok(())
    }

    fn schedule_faults(&mut self) {
        let until = self.scenario.safety_until;
        let n = self.rng.range(0, 8);
        let mut budget = self.scenario.loss_budget;
        for _ in 0..n {
            let t = self.rng.range(0, until);
            let b = self.rng.range(0, self.scenario.bookies as u64) as usize;
            let f = match self.rng.range(0, 9) {
                0 | 1 => Fault::Crash(b),
                2 if budget > 0 => {
                    budget -= 1;
                    Fault::Replace(b)
                }
                3 => {
                    let r = self.rng.range(0, self.recs.len() as u64) as usize;
                    let c = *self.rng.pick(&[Client::Writer, Client::Recovery(r), Client::Reader]);
                    Fault::Partition(c, b, self.rng.range(20, 400) * MS)
                }
                4 => Fault::MetaDown(self.rng.range(10, 300) * MS),
                5 if budget > 0 => {
                    budget -= 1;
                    Fault::Corrupt(b)
                }
                6 if budget > 0 => {
                    budget -= 1;
                    Fault::LoseData(b)
                }
                7 => Fault::RecovererCrash(self.rng.range(0, self.recs.len() as u64) as usize),
                _ => Fault::Crash(b),
            };
            self.at(t, Ev::Fault(f));
        }
        if self.rng.chance(0.3) {
            let t = self.rng.range(0, until);
            self.at(t, Ev::Fault(Fault::WriterCrash));
        }
        // Each recovering client starts up to twice, at any time: several
        // may overlap, and one may start while another is half-way.
        for r in 0..self.recs.len() {
            for _ in 0..self.rng.range(0, 3) {
                if self.rng.chance(0.6) {
                    let t = self.rng.range(0, until);
                    self.at(t, Ev::RecoveryStart { r });
                }
            }
        }
    }

    /// The liveness phase: every fault ends, the writer stops, recovery runs
    /// until the ledger is closed.
    fn heal(&mut self) {
        self.healing = true;
        self.note("heal: faults end, writer stops, recovery until closed".into());

        self.scenario.loss = 0.0;
        self.partitions.clear();
        self.meta.available = true;
        for i in 0..self.bookies.len() {
            if !self.bookies[i].up {
                self.restart(i);
            }
        }
        self.writer_alive = false;
        if self.recs.iter().all(|r| !r.running) {
            self.after(MS, Ev::RecoveryStart { r: 0 });
        }
    }

    fn restart(&mut self, i: usize) {
        self.bookies[i].up = true;
        let b = &self.bookies[i];
        self.registry
            .insert(b.id.clone(), (Registered { instance_id: b.instance_id.clone(), rack: b.rack.clone() }, None));
    }

    fn step(&mut self, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Apply { bookie, incarnation, req_id, req } => {
                let b = &self.bookies[bookie];
                if !b.up || b.incarnation != incarnation {
                    return Ok(()); // crashed before it was durable: lost, never answered
                }
                let meta = &self.meta;
                let resp = self.bookies[bookie].handle(req, |l| meta.ledger_open(l));
                let client = self.pending.get(&req_id).map(|p| p.caller.client());
                let cut = client.is_some_and(|c| self.partitions.contains(&(c, bookie)));
                if !cut && !self.rng.chance(self.scenario.loss) {
                    let d = self.rng.range(50, 1000);
                    self.after(d, Ev::Respond { req_id, resp });
                }
            }
            Ev::Respond { req_id, resp } => {
                if let Some(p) = self.pending.remove(&req_id) {
                    self.answer(p, Some(resp))?;
                }
            }
            Ev::Timeout { req_id } => {
                if let Some(p) = self.pending.remove(&req_id) {
                    self.answer(p, None)?;
                }
            }
            Ev::WriterAdd => self.writer_add()?,
            Ev::WriterTick => {
                if self.writer_alive {
                    let now = self.instant();
                    let w = self.writer.as_mut().expect("writer");
                    // The shell arms no timer while the writer wants no tick:
                    // such a tick must be a no-op, whenever it comes.
                    let idle = (!w.wants_tick()).then(|| w.clone());
                    let cmds = w.tick(now);
                    if let Some(before) = idle {
                        if !cmds.is_empty() || before != *w {
                            return Err(Violation(format!("a tick of a writer that wanted none acted: {cmds:?}")));
                        }
                    }
                    self.writer_commands(cmds)?;
                    self.after(5 * MS, Ev::WriterTick);
                }
            }
            Ev::Meta(op) => self.meta_op(op)?,
            Ev::RecoveryStart { r } => {
                if !self.recs[r].running {
                    self.rec_gen += 1;
                    let gen = self.rec_gen;
                    self.stats.recoveries += 1;
                    if self.recs.iter().any(|x| x.running) {
                        self.stats.overlapping_recoveries += 1;
                    }
                    let me = &mut self.recs[r];
                    (me.running, me.gen, me.rec, me.meta, me.wrote_back) = (true, gen, None, None, false);
                    me.passed.clear();
                    self.note(format!("recovery {gen} (client {r}) starts"));
                    let d = self.rng.range(500, 3000);
                    self.after(d, Ev::Meta(MetaOp::RecoveryMark { r, gen }));
                }
            }
            Ev::RecoveryTick { r, gen } => {
                if self.current(r, gen) {
                    let now = self.instant();
                    let steps = self.recs[r].rec.as_mut().expect("checked").tick(now);
                    self.recovery_steps(r, gen, steps)?;
                    self.after(10 * MS, Ev::RecoveryTick { r, gen });
                }
            }
            Ev::IntegrityTick { bookie } => self.integrity_tick(bookie),
            Ev::ReaderTick => self.reader_tick(),
            Ev::Fault(f) => self.fault(f),
        }
        Ok(())
    }

    fn fault(&mut self, f: Fault) {
        if self.healing {
            return;
        }
        self.stats.faults += 1;
        self.note(format!("fault {f:?}"));
        match f {
            Fault::Crash(i) => {
                if self.bookies[i].up {
                    self.bookies[i].up = false;
                    self.bookies[i].incarnation += 1;
                    let lease_end = self.now + 300 * MS;
                    if let Some(r) = self.registry.get_mut(&self.bookies[i].id) {
                        r.1 = Some(lease_end);
                    }
                    let d = self.rng.range(20, 600) * MS;
                    self.after(d, Ev::Fault(Fault::Restart(i)));
                }
            }
            Fault::Restart(i) => {
                if !self.bookies[i].up {
                    self.restart(i);
                }
            }
            Fault::Replace(i) => {
                let inst = self.new_instance();
                self.bookies[i].replace(inst);
                self.losses += 1;
                self.restart(i);
            }
            Fault::Partition(c, b, d) => {
                self.partitions.insert((c, b));
                self.after(d, Ev::Fault(Fault::Heal(c, b)));
            }
            Fault::Heal(c, b) => {
                self.partitions.remove(&(c, b));
            }
            Fault::MetaDown(d) => {
                self.meta.available = false;
                self.after(d, Ev::Fault(Fault::MetaUp));
            }
            Fault::MetaUp => self.meta.available = true,
            Fault::Corrupt(i) => {
                let stored = self.bookies[i].stored(self.ledger_id);
                if !stored.is_empty() {
                    let e = *self.rng.pick(&stored);
                    self.bookies[i].corrupt(self.ledger_id, e);
                    self.losses += 1;
                }
            }
            Fault::WriterCrash => self.writer_alive = false,
            Fault::RecovererCrash(r) => self.recoverer_stops(r),
            Fault::LoseData(i) => {
                // In limbo only if the metadata names this instance for the
                // ledger (the real check lists the ledgers naming it).
                let b = &self.bookies[i];
                let named = self.meta.ledgers[&self.ledger_id]
                    .segments
                    .iter()
                    .any(|s| s.members.iter().any(|m| m.bookie_id == b.id && m.instance_id == b.instance_id));
                self.bookies[i].lose_data(named.then_some(self.ledger_id));
                self.bookies[i].incarnation += 1;
                self.losses += 1;
                if named {
                    self.after(20 * MS, Ev::IntegrityTick { bookie: i });
                }
            }
        }
    }

    /// At `point` of client `r`'s attempt (each tried once per attempt), it
    /// stops with the scenario's aimed probability; true when it stopped.
    fn aimed_stop(&mut self, r: usize, point: &'static str) -> bool {
        if self.healing || !self.recs[r].passed.insert(point) || !self.rng.chance(self.scenario.aimed_stop) {
            return false;
        }
        self.note(format!("recovery {}: stops {point}", self.recs[r].gen));
        self.recoverer_stops(r);
        true
    }

    /// Whether `gen` is recovering client `r`'s attempt in progress.
    fn current(&self, r: usize, gen: u64) -> bool {
        self.recs[r].gen == gen && self.recs[r].rec.is_some()
    }

    /// Recovering client `r` stops where it is; a later attempt starts over
    /// (as a worker whose claim lapsed, or an application retrying).
    fn recoverer_stops(&mut self, r: usize) {
        if !self.recs[r].running || self.healing {
            return;
        }
        self.stats.recoverer_crashes += 1;
        self.note(format!("recovery {} (client {r}) stops half-way", self.recs[r].gen));
        let me = &mut self.recs[r];
        (me.running, me.rec, me.meta) = (false, None, None);
        me.gen = 0;
        let d = self.rng.range(50, 500) * MS;
        self.after(d, Ev::RecoveryStart { r });
    }

    /// The data-integrity check of bookie `i`, for the ledger in limbo: a
    /// closed ledger is fenced again and refilled from the other copies of
    /// the fragments naming this instance, then released; an open one whose
    /// writer is idle is marked, and a recovering client is started (the
    /// worker that takes the mark).
    fn integrity_tick(&mut self, i: usize) {
        let l = self.ledger_id;
        if !self.bookies[i].in_limbo(l) {
            return;
        }
        if !self.bookies[i].up {
            self.after(20 * MS, Ev::IntegrityTick { bookie: i });
            return;
        }
        let Some(Some(meta)) = self.meta.get(l) else {
            self.after(20 * MS, Ev::IntegrityTick { bookie: i });
            return;
        };
        if meta.state != LedgerState::Closed {
            if self.recs.iter().all(|r| !r.running) {
                let r = self.rng.range(0, self.recs.len() as u64) as usize;
                let d = self.rng.range(50, 300) * MS;
                self.after(d, Ev::RecoveryStart { r });
            }
            self.after(100 * MS, Ev::IntegrityTick { bookie: i });
            return;
        }
        let (id, inst) = (self.bookies[i].id.clone(), self.bookies[i].instance_id.clone());
        let mut missing = false;
        for e in 0..=meta.last_entry_id.max(-1) {
            let e = e as u64;
            let seg = meta.segment_of(e);
            let ws = meta.quorums.write_set(e);
            if !ws.iter().any(|&p| seg.members[p].bookie_id == id && seg.members[p].instance_id == inst) {
                continue;
            }
            if self.bookies[i].entry(l, e).is_some_and(|x| x.digest_ok()) {
                continue;
            }
            let copy = ws.iter().find_map(|&p| {
                let m = &seg.members[p];
                let b = &self.bookies[self.bookie_index(&m.bookie_id)];
                (b.up && b.instance_id == m.instance_id)
                    .then(|| b.entry(l, e).filter(|x| x.digest_ok()).cloned())
                    .flatten()
            });
            match copy {
                Some(x) => self.bookies[i].refill(x),
                None => missing = true,
            }
        }
        if missing {
            self.after(100 * MS, Ev::IntegrityTick { bookie: i });
        } else {
            self.bookies[i].release(l, true);
            self.note(format!("{id}: refilled, fenced again, out of limbo"));
        }
    }

    fn writer_add(&mut self) -> Result<(), Violation> {
        if !self.writer_alive || self.adds_left == 0 {
            return Ok(());
        }
        let w = self.writer.as_mut().expect("writer");
        let id = w.next_entry_id();
        let payload = Bytes::from(format!("ledger-1-entry-{id}-{:x}", self.rng.next_u64()));
        let now = self.origin + Duration::from_micros(self.now);
        match w.add(payload.clone(), now) {
            Ok((eid, cmds)) => {
                debug_assert_eq!(eid, id);
                self.submitted.insert(eid, payload);
                self.adds_left -= 1;
                self.writer_commands(cmds)?;
                let d = self.rng.range(0, 3 * MS);
                self.after(d, Ev::WriterAdd);
            }
            Err(AddError::Backpressure(_)) => self.after(5 * MS, Ev::WriterAdd),
            Err(AddError::Done(_)) => {}
        }
        Ok(())
    }

    fn writer_commands(&mut self, cmds: Vec<writer::Command>) -> Result<(), Violation> {
        for c in cmds {
            match c {
                writer::Command::Send { position, member, entry, recovery } => {
                    let caller = Caller::WriterAdd { entry_id: entry.entry_id, position, member: member.clone() };
                    let req = BookieReq::Add { entry, expected_instance: member.instance_id.clone(), recovery };
                    self.send(caller, &member.bookie_id, req);
                }
                writer::Command::SendLac { position, member, lac } => {
                    let bookie = member.bookie_id.clone();
                    self.send(
                        Caller::WriterLac { position, member, lac },
                        &bookie,
                        BookieReq::WriteLac { ledger_id: self.ledger_id, lac },
                    );
                }
                writer::Command::Acknowledge { entry_ids, lac } => {
                    let stored = &self.meta.ledgers[&self.ledger_id];
                    for id in entry_ids {
                        // Guarantee 3: nothing is acknowledged past a close.
                        if stored.state == LedgerState::Closed && id as i64 > stored.last_entry_id {
                            return Err(Violation(format!(
                                "NoDivergenceBetweenClientAndMetaData: entry {id} acknowledged after the ledger was closed at {}",
                                stored.last_entry_id
                            )));
                        }
                        if id != self.acked.len() as u64 {
                            return Err(Violation(format!("acknowledged {id} out of order")));
                        }
                        self.acked.insert(id, self.submitted[&id].clone());
                    }
                    self.stats.acked = self.acked.len() as u64;
                    debug_assert_eq!(lac, self.acked.len() as i64 - 1);
                }
                writer::Command::ChangeEnsemble { failed, first_entry_id } => {
                    self.note(format!("writer: change ensemble {failed:?} from {first_entry_id}"));
                    let deadline = self.now + 2000 * MS;
                    let d = self.rng.range(500, 3000);
                    let op = MetaOp::WriterChange { failed, first: first_entry_id, deadline, sent: None };
                    self.after(d, Ev::Meta(op));
                }
                writer::Command::CopyLost { entry_id, member, .. } => {
                    self.stats.lost_copies += 1;
                    self.note(format!("writer: copy of {entry_id} on {} not confirmed", member.bookie_id));
                }
                writer::Command::Fail { reason, entry_ids } => {
                    self.note(format!("writer failed {reason:?} ({} pending)", entry_ids.len()));
                    if reason == FailReason::Fenced {
                        self.stats.writer_fenced = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// A compare-and-set; with the scenario's probability the reply to an
    /// applied one is lost, and the caller sees an unknown outcome.
    fn cas(&mut self, expected_version: u64, next: LedgerMeta) -> Result<LedgerMeta, CasError> {
        let r = self.meta.cas(expected_version, next);
        if r.is_ok() && self.rng.chance(self.scenario.cas_reply_loss) {
            self.stats.cas_replies_lost += 1;
            self.note("metadata: a CAS applied, its reply lost".into());
            return Err(CasError::Unavailable);
        }
        r
    }

    /// One ensemble-change attempt, as the shell does it: check for a fence,
    /// choose replacements, compare-and-set; `Err` retries later, with the
    /// record it sent when that attempt's outcome is unknown (`sent`: the
    /// previous attempt's, settled first, as the shell does).
    fn change(
        &mut self,
        mut meta: LedgerMeta,
        failed: &[usize],
        first: u64,
        sent: Option<&LedgerMeta>,
    ) -> Result<Result<LedgerMeta, FailReason>, Option<Box<LedgerMeta>>> {
        let Some(Some(stored)) = self.meta.get(self.ledger_id) else { return Err(sent.cloned().map(Box::new)) };
        if let Some(sent) = sent {
            if stored.version > meta.version && stored.state == sent.state && stored.segments == sent.segments {
                return Ok(Ok(stored));
            }
        }
        if stored.version != meta.version {
            match writer_conflict(&meta, &stored) {
                Conflict::Fenced => return Ok(Err(FailReason::Fenced)),
                Conflict::Retry(_) => meta = stored,
            }
        }
        let seed = self.rng.next_u64();
        let cands = self.live_candidates();
        let members = replace_members(&meta.last_segment().members, failed, meta.quorums.write, &cands, seed)
            .map_err(|_| None)?;
        let intended = meta.with_ensemble(first, members);
        match self.cas(meta.version, intended.clone()) {
            Ok(m) => Ok(Ok(m)),
            Err(CasError::Unavailable) => Err(Some(Box::new(intended))),
            Err(CasError::Conflict(stored)) => match writer_conflict(&meta, &stored) {
                Conflict::Fenced => Ok(Err(FailReason::Fenced)),
                Conflict::Retry(_) => Err(None),
            },
        }
    }

    fn meta_op(&mut self, op: MetaOp) -> Result<(), Violation> {
        let now = self.instant();
        match op {
            MetaOp::WriterChange { failed, first, deadline, sent } => {
                if !self.writer_alive {
                    return Ok(());
                }
                let meta = self.writer_meta.clone().expect("writer meta");
                match self.change(meta, &failed, first, sent.as_deref()) {
                    Ok(Ok(m)) => {
                        self.stats.ensemble_changes += 1;
                        let seg = m.last_segment().clone();
                        self.note(format!("writer: ensemble from {} is {:?}", seg.first_entry_id, ids(&seg.members)));
                        self.writer_meta = Some(m);
                        let cmds = self.writer.as_mut().expect("writer").ensemble_changed(
                            seg.first_entry_id,
                            seg.members,
                            now,
                        );
                        self.writer_commands(cmds)?;
                    }
                    Ok(Err(reason)) => {
                        let cmds = self.writer.as_mut().expect("writer").abort(reason);
                        self.writer_commands(cmds)?;
                    }
                    Err(sent) if self.now < deadline => {
                        self.after(50 * MS, Ev::Meta(MetaOp::WriterChange { failed, first, deadline, sent }))
                    }
                    Err(_) => {
                        let cmds = self.writer.as_mut().expect("writer").abort(FailReason::NotEnoughBookies);
                        self.writer_commands(cmds)?;
                    }
                }
            }
            MetaOp::RecoveryMark { r, gen } => {
                if self.recs[r].gen != gen || !self.recs[r].running {
                    return Ok(());
                }
                let Some(Some(stored)) = self.meta.get(self.ledger_id) else {
                    self.after(50 * MS, Ev::Meta(MetaOp::RecoveryMark { r, gen }));
                    return Ok(());
                };
                match stored.state {
                    LedgerState::Closed => {
                        self.recs[r].running = false;
                        self.note(format!("recovery {gen}: already closed"));
                    }
                    LedgerState::Open => {
                        let mut next = stored.clone();
                        next.state = LedgerState::InRecovery;
                        let _ = self.cas(stored.version, next);
                        let d = self.rng.range(500, 3000);
                        self.after(d, Ev::Meta(MetaOp::RecoveryMark { r, gen }));
                    }
                    LedgerState::InRecovery => {
                        if self.aimed_stop(r, "after its mark") {
                            return Ok(());
                        }
                        let opts = RecoveryOptions {
                            read_window: self.rng.range(1, 8) as usize,
                            writer: WriterOptions {
                                max_pending: 16,
                                add_timeout: Duration::from_millis(150),
                                explicit_lac_interval: Duration::from_millis(20),
                                recovery: true,
                                visible_acks: false,
                            },
                        };
                        self.note(format!("recovery {gen}: fencing {:?}", ids(&stored.last_segment().members)));
                        let (rec, steps) = Recovery::new(stored.clone(), opts);
                        self.recs[r].rec = Some(rec);
                        self.recs[r].meta = Some(stored);
                        self.recovery_steps(r, gen, steps)?;
                        self.after(10 * MS, Ev::RecoveryTick { r, gen });
                    }
                }
            }
            MetaOp::RecoveryReplace { r, gen, failed, first, members, deadline } => {
                if !self.current(r, gen) {
                    return Ok(());
                }
                // As the shell does: replacements chosen from the registry,
                // held by the recovery, stored only with its close.
                let seed = self.rng.next_u64();
                let cands = self.live_candidates();
                let chosen = match self.meta.get(self.ledger_id) {
                    Some(Some(_)) => replace_members(&members, &failed, self.scenario.quorums.write, &cands, seed).ok(),
                    _ => None,
                };
                if let (Some(m), true) = (&chosen, self.scenario.store_replacements_early) {
                    // The broken protocol: the replacement stored by CAS now.
                    let meta = self.recs[r].meta.clone().expect("recovery meta");
                    if let Ok(stored) = self.meta.cas(meta.version, meta.with_ensemble(first, m.clone())) {
                        self.recs[r].meta = Some(stored);
                    }
                }
                let steps = match chosen {
                    Some(m) => {
                        self.note(format!("recovery {gen}: write-back ensemble from {first} is {:?}", ids(&m)));
                        let steps = self.recs[r].rec.as_mut().expect("checked").replaced(first, m, now);
                        if self.aimed_stop(r, "after a write-back replacement") {
                            return Ok(());
                        }
                        steps
                    }
                    None if self.now < deadline => {
                        let op = MetaOp::RecoveryReplace { r, gen, failed, first, members, deadline };
                        self.after(50 * MS, Ev::Meta(op));
                        Vec::new()
                    }
                    None => self.recs[r].rec.as_mut().expect("checked").write_aborted(FailReason::NotEnoughBookies),
                };
                self.recovery_steps(r, gen, steps)?;
            }
            MetaOp::RecoveryClose { r, gen, basis, base, last, length, ensembles } => {
                // The request was sent: it lands even if its client has
                // stopped since. Only the reaction needs the client.
                let next = basis.closed_by_recovery(base, &ensembles, last, length);
                let res = self.cas(basis.version, next);
                if let Ok(m) = &res {
                    self.note(format!("recovery {gen}: closed at {last}"));
                    self.stats.last_entry_id = m.last_entry_id;
                    self.check_closed()?;
                }
                if !self.current(r, gen) {
                    return Ok(());
                }
                match res {
                    Ok(_) => self.finish_recovery(r),
                    Err(CasError::Unavailable) => {
                        let op = MetaOp::RecoveryClose { r, gen, basis, base, last, length, ensembles };
                        self.after(50 * MS, Ev::Meta(op))
                    }
                    Err(CasError::Conflict(stored)) if stored.state == LedgerState::Closed => {
                        self.stats.last_entry_id = stored.last_entry_id;
                        self.finish_recovery(r)
                    }
                    Err(CasError::Conflict(_)) => self.recovery_failed(r, RecoveryError::WriteBack(FailReason::Fenced)),
                }
            }
        }
        Ok(())
    }

    /// NoDivergenceBetweenClientAndMetaData (Vanlightly's TLA+ invariant),
    /// the moment the ledger is closed: no entry the writer was told was
    /// stored lies past the close.
    fn check_closed(&self) -> Result<(), Violation> {
        let stored = &self.meta.ledgers[&self.ledger_id];
        let max_acked = self.acked.len() as i64 - 1;
        if stored.state == LedgerState::Closed && stored.last_entry_id < max_acked {
            return Err(Violation(format!(
                "NoDivergenceBetweenClientAndMetaData: closed at {} below acknowledged entry {max_acked}",
                stored.last_entry_id
            )));
        }
        Ok(())
    }

    fn finish_recovery(&mut self, r: usize) {
        let me = &mut self.recs[r];
        (me.running, me.rec, me.meta) = (false, None, None);
    }

    fn recovery_failed(&mut self, r: usize, e: RecoveryError) {
        self.stats.recovery_failures += 1;
        self.note(format!("recovery {} failed: {e}", self.recs[r].gen));
        self.finish_recovery(r);
        // Retried later, as the replication worker would.
        let d = self.rng.range(50, 300) * MS;
        self.after(d, Ev::RecoveryStart { r });
    }

    fn recovery_steps(&mut self, r: usize, gen: u64, steps: Vec<Step>) -> Result<(), Violation> {
        let l = self.ledger_id;
        // A recovering client may stop at any step: after the mark, after
        // fencing, mid-read, after a write-back replacement, before the close.
        if !steps.is_empty() && !self.healing && self.rng.chance(self.scenario.recoverer_crash) {
            self.recoverer_stops(r);
            return Ok(());
        }
        for s in steps {
            if !self.current(r, gen) {
                break;
            }
            match s {
                Step::Fence { position, member } => {
                    self.send(Caller::Fence { r, gen, position }, &member.bookie_id, BookieReq::Fence { ledger_id: l })
                }
                Step::Read { entry_id, position, member } => {
                    if self.aimed_stop(r, "after fencing") {
                        break;
                    }
                    self.send(
                        Caller::RecRead { r, gen, entry_id, position },
                        &member.bookie_id,
                        BookieReq::Read { ledger_id: l, entry_id, fence: true },
                    )
                }
                Step::Write(writer::Command::Send { position, member, entry, recovery }) => {
                    if !self.recs[r].wrote_back {
                        self.recs[r].wrote_back = true;
                        if !self.healing && self.rng.chance(self.scenario.writeback_crash) {
                            let b = self.bookie_index(&member.bookie_id);
                            self.at(self.now, Ev::Fault(Fault::Crash(b)));
                        }
                    }
                    let caller =
                        Caller::RecWrite { r, gen, entry_id: entry.entry_id, position, member: member.clone() };
                    let req = BookieReq::Add { entry, expected_instance: member.instance_id.clone(), recovery };
                    self.send(caller, &member.bookie_id, req);
                }
                Step::Replace { failed, first_entry_id, members } => {
                    let deadline = self.now + 2000 * MS;
                    let d = self.rng.range(500, 3000);
                    let op = MetaOp::RecoveryReplace { r, gen, failed, first: first_entry_id, members, deadline };
                    self.after(d, Ev::Meta(op));
                }
                Step::Write(_) => {}
                Step::Close { last_entry_id, length, ensembles } => {
                    // The recovered tail is never below an acknowledged
                    // entry (checked before the close is even attempted),
                    // unless the record the recovery started from is stale:
                    // its close cannot apply then, and what it read may
                    // come from bookies the close that happened since
                    // released (seed 530037: one that lost its data, out of
                    // limbo once the ledger was closed without it).
                    let basis = self.recs[r].meta.as_ref().map(|m| m.version);
                    let current = basis == Some(self.meta.ledgers[&l].version);
                    if let Some((&max, _)) = self.acked.iter().next_back().filter(|_| current) {
                        if last_entry_id < max as i64 {
                            return Err(Violation(format!(
                                "RecoveredTailNotBelowAcked: recovery would close at {last_entry_id} below acknowledged entry {max}"
                            )));
                        }
                    }
                    if self.aimed_stop(r, "before its close") {
                        break;
                    }
                    let d = self.rng.range(500, 3000);
                    let me = &self.recs[r];
                    let base = me.rec.as_ref().expect("a recovery closes").base();
                    let basis = Box::new(me.meta.clone().expect("recovery meta"));
                    let op = MetaOp::RecoveryClose { r, gen, basis, base, last: last_entry_id, length, ensembles };
                    self.after(d, Ev::Meta(op));
                }
                Step::Failed(e) => self.recovery_failed(r, e),
            }
        }
        Ok(())
    }

    fn answer(&mut self, p: Pending, resp: Option<BookieResp>) -> Result<(), Violation> {
        let now = self.instant();
        match p.caller {
            Caller::WriterAdd { entry_id, position, member } => {
                if !self.writer_alive {
                    return Ok(());
                }
                let a = match resp {
                    Some(BookieResp::Added { instance_id }) => Answer::Stored { instance_id },
                    Some(BookieResp::LedgerFenced) => Answer::Fenced,
                    Some(BookieResp::MetadataUnavailable) => {
                        self.stats.unavailable += 1;
                        Answer::Unavailable
                    }
                    _ => Answer::Failed,
                };
                let cmds = self.writer.as_mut().expect("writer").answer(entry_id, position, &member, a);
                self.writer_commands(cmds)?;
                self.after_writer_answer()?;
            }
            Caller::WriterLac { position, member, lac } => {
                if !self.writer_alive {
                    return Ok(());
                }
                let w = self.writer.as_mut().expect("writer");
                let cmds = match resp {
                    Some(BookieResp::LedgerFenced) => w.fenced(),
                    Some(BookieResp::Added { instance_id }) => {
                        w.lac_answered(position, &member, lac, &Answer::Stored { instance_id });
                        Vec::new()
                    }
                    _ => {
                        w.lac_answered(position, &member, lac, &Answer::Failed);
                        Vec::new()
                    }
                };
                self.writer_commands(cmds)?;
                self.after_writer_answer()?;
            }
            Caller::Fence { r, gen, position } => {
                if self.current(r, gen) {
                    let a = match resp {
                        Some(BookieResp::FenceDone { lac }) => FenceAnswer::Fenced { lac },
                        _ => FenceAnswer::Failed,
                    };
                    let steps = self.recs[r].rec.as_mut().expect("checked").fence_answered(position, a, now);
                    self.recovery_steps(r, gen, steps)?;
                }
            }
            Caller::RecRead { r, gen, entry_id, position } => {
                if self.current(r, gen) {
                    let a = match resp {
                        Some(BookieResp::Entry(e)) => BookieRead::Entry(e),
                        Some(BookieResp::NoSuchEntry { instance_id }) => BookieRead::NoSuchEntry { instance_id },
                        Some(BookieResp::Corrupt) => BookieRead::Corrupt,
                        Some(BookieResp::Limbo) => {
                            self.stats.limbo_answers += 1;
                            BookieRead::Failed
                        }
                        _ => BookieRead::Failed,
                    };
                    let steps = self.recs[r].rec.as_mut().expect("checked").read_answered(entry_id, position, a, now);
                    self.recovery_steps(r, gen, steps)?;
                }
            }
            Caller::RecWrite { r, gen, entry_id, position, member } => {
                if self.current(r, gen) {
                    let a = match resp {
                        Some(BookieResp::Added { instance_id }) => Answer::Stored { instance_id },
                        Some(BookieResp::LedgerFenced) => Answer::Fenced,
                        Some(BookieResp::MetadataUnavailable) => Answer::Unavailable,
                        _ => Answer::Failed,
                    };
                    let steps =
                        self.recs[r].rec.as_mut().expect("checked").write_answered(entry_id, position, &member, a, now);
                    self.recovery_steps(r, gen, steps)?;
                }
            }
            Caller::ReaderLac => {
                if let Some(BookieResp::Lac(lac)) = resp {
                    let max = self.acked.len() as i64 - 1;
                    if lac > max {
                        return Err(Violation(format!("a bookie reports LAC {lac} but only {max} is acknowledged")));
                    }
                    if lac >= 0 {
                        let e = self.rng.range(0, lac as u64 + 1);
                        self.reader_read(e, None);
                    }
                }
            }
            Caller::ReaderRead { entry_id, rest } => match resp {
                Some(BookieResp::Entry(e)) => {
                    self.stats.reads += 1;
                    // Guarantee 2: the bytes acknowledged, from any replica.
                    match self.acked.get(&entry_id) {
                        Some(want) if *want == e.payload => {}
                        other => {
                            return Err(Violation(format!(
                                "reader got entry {entry_id} = {:?}, acknowledged {:?}",
                                e.payload, other
                            )))
                        }
                    }
                }
                _ => self.reader_read(entry_id, Some(rest)),
            },
        }
        Ok(())
    }

    fn reader_tick(&mut self) {
        if self.healing {
            return;
        }
        let meta = self.meta.ledgers[&self.ledger_id].clone();
        let members = &meta.last_segment().members;
        let m = self.rng.pick(members).bookie_id.clone();
        self.send(Caller::ReaderLac, &m, BookieReq::ReadLac { ledger_id: self.ledger_id });
        let d = self.rng.range(5, 50) * MS;
        self.after(d, Ev::ReaderTick);
    }

    fn reader_read(&mut self, entry_id: u64, rest: Option<Vec<String>>) {
        let rest = rest.unwrap_or_else(|| {
            let meta = &self.meta.ledgers[&self.ledger_id];
            let seg = meta.segment_of(entry_id);
            meta.quorums.write_set(entry_id).into_iter().map(|p| seg.members[p].bookie_id.clone()).collect()
        });
        if let Some((first, others)) = rest.split_first() {
            let caller = Caller::ReaderRead { entry_id, rest: others.to_vec() };
            let first = first.clone();
            self.send(caller, &first, BookieReq::Read { ledger_id: self.ledger_id, entry_id, fence: false });
        }
    }

    /// After healing, Vanlightly's TLA+ invariants (bookkeeper-tlaplus) over
    /// the final state, and liveness: the ledger is closed.
    fn check_final(&mut self) -> Result<(), Violation> {
        let meta = self.meta.ledgers[&self.ledger_id].clone();
        if meta.state != LedgerState::Closed {
            return Err(Violation(format!(
                "liveness: not closed after healing ({:?}, {} recovery failures)",
                meta.state, self.stats.recovery_failures
            )));
        }
        self.check_closed()?;
        let l = self.ledger_id;
        let q = meta.quorums;
        for e in 0..=meta.last_entry_id.max(-1) {
            let e = e as u64;
            let seg = meta.segment_of(e);
            // Intact copies on the members (the very instances) of its write set.
            let copies: Vec<Bytes> = q
                .write_set(e)
                .into_iter()
                .filter_map(|p| {
                    let m = &seg.members[p];
                    let b = &self.bookies[self.bookie_index(&m.bookie_id)];
                    (b.instance_id == m.instance_id)
                        .then(|| b.entry(l, e).filter(|x| x.digest_ok()).map(|x| x.payload.clone()))
                        .flatten()
                })
                .collect();
            if copies.is_empty() {
                return Err(Violation(format!(
                    "AllAckedEntriesAreReadable: entry {e} (tail {}) has no readable copy on its write set",
                    meta.last_entry_id
                )));
            }
            // AllCommittedEntriesReachAckQuorum, less the copies the
            // scenario's disk faults may have taken (none: exactly Qa).
            if copies.len() + self.losses < q.ack {
                return Err(Violation(format!(
                    "AllCommittedEntriesReachAckQuorum: entry {e} has {} intact copies on its write set, Qa is {} ({} disk faults)",
                    copies.len(),
                    q.ack,
                    self.losses
                )));
            }
            let want = self.submitted.get(&e);
            if copies.iter().any(|c| Some(c) != want) {
                return Err(Violation(format!(
                    "NoOutOfOrderEntries: entry {e}: stored bytes differ from the writer's"
                )));
            }
        }
        // NoOutOfOrderEntries on every bookie, inside the tail or not: each
        // stored entry holds what the writer submitted under its id.
        for b in &self.bookies {
            for e in b.stored(l) {
                let x = b.entry(l, e).expect("stored");
                if x.digest_ok() && self.submitted.get(&e) != Some(&x.payload) {
                    return Err(Violation(format!("NoOutOfOrderEntries: {} holds entry {e} with other bytes", b.id)));
                }
            }
        }
        Ok(())
    }
}

fn ids(members: &[Member]) -> Vec<&str> {
    members.iter().map(|m| m.bookie_id.as_str()).collect()
}
