//! The simulated world: one ledger, its writer, a recovery client and a
//! reader, bookies and the metadata store, a network that delays, drops and
//! partitions, and a clock that only moves from event to event. Everything
//! random comes from the seed.

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
    /// The recovering client.
    Recovery,
    /// A tailing reader.
    Reader,
}

#[derive(Debug, Clone)]
enum Caller {
    WriterAdd { entry_id: u64, position: usize, member: Member },
    WriterLac,
    Fence { gen: u64, position: usize },
    RecRead { gen: u64, entry_id: u64, position: usize },
    RecWrite { gen: u64, entry_id: u64, position: usize, member: Member },
    ReaderLac,
    ReaderRead { entry_id: u64, rest: Vec<String> },
}

impl Caller {
    fn client(&self) -> Client {
        match self {
            Caller::WriterAdd { .. } | Caller::WriterLac => Client::Writer,
            Caller::Fence { .. } | Caller::RecRead { .. } | Caller::RecWrite { .. } => Client::Recovery,
            Caller::ReaderLac | Caller::ReaderRead { .. } => Client::Reader,
        }
    }
}

#[derive(Debug, Clone)]
enum MetaOp {
    WriterChange { failed: Vec<usize>, first: u64, deadline: Time },
    RecoveryMark { gen: u64 },
    RecoveryReplace { gen: u64, failed: Vec<usize>, first: u64, members: Vec<Member>, deadline: Time },
    RecoveryClose { gen: u64, base: u64, last: i64, length: u64, ensembles: BTreeMap<u64, Vec<Member>> },
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
}

#[derive(Debug, Clone)]
enum Ev {
    Apply { bookie: usize, incarnation: u64, req_id: u64, req: BookieReq },
    Respond { req_id: u64, resp: BookieResp },
    Timeout { req_id: u64 },
    WriterAdd,
    WriterTick,
    Meta(MetaOp),
    RecoveryStart,
    RecoveryTick { gen: u64 },
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
    // Recovery.
    rec: Option<Recovery>,
    rec_gen: u64,
    rec_meta: Option<LedgerMeta>,
    rec_running: bool,
    // The oracle.
    acked: BTreeMap<u64, Bytes>,
    losses: usize,
    healing: bool,
    /// Counters.
    pub stats: Stats,
    log: Vec<String>,
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
            rec: None,
            rec_gen: 0,
            rec_meta: None,
            rec_running: false,
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
            if self.healing && self.meta.ledgers[&self.ledger_id].state == LedgerState::Closed && !self.rec_running {
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
            custom: BTreeMap::new(),
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
            let f = match self.rng.range(0, 7) {
                0 | 1 => Fault::Crash(b),
                2 if budget > 0 => {
                    budget -= 1;
                    Fault::Replace(b)
                }
                3 => {
                    let c = *self.rng.pick(&[Client::Writer, Client::Recovery, Client::Reader]);
                    Fault::Partition(c, b, self.rng.range(20, 400) * MS)
                }
                4 => Fault::MetaDown(self.rng.range(10, 300) * MS),
                5 if budget > 0 => {
                    budget -= 1;
                    Fault::Corrupt(b)
                }
                _ => Fault::Crash(b),
            };
            self.at(t, Ev::Fault(f));
        }
        if self.rng.chance(0.3) {
            let t = self.rng.range(0, until);
            self.at(t, Ev::Fault(Fault::WriterCrash));
        }
        if self.rng.chance(0.6) {
            let t = self.rng.range(0, until);
            self.at(t, Ev::RecoveryStart);
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
        if !self.rec_running {
            self.after(MS, Ev::RecoveryStart);
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
                    let cmds = self.writer.as_mut().expect("writer").tick(now);
                    self.writer_commands(cmds)?;
                    self.after(5 * MS, Ev::WriterTick);
                }
            }
            Ev::Meta(op) => self.meta_op(op)?,
            Ev::RecoveryStart => {
                if !self.rec_running {
                    self.rec_running = true;
                    self.rec_gen += 1;
                    let gen = self.rec_gen;
                    self.note(format!("recovery {gen} starts"));
                    let d = self.rng.range(500, 3000);
                    self.after(d, Ev::Meta(MetaOp::RecoveryMark { gen }));
                }
            }
            Ev::RecoveryTick { gen } => {
                if gen == self.rec_gen && self.rec.is_some() {
                    let now = self.instant();
                    let steps = self.rec.as_mut().expect("checked").tick(now);
                    self.recovery_steps(gen, steps)?;
                    self.after(10 * MS, Ev::RecoveryTick { gen });
                }
            }
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
                writer::Command::SendLac { member, lac, .. } => {
                    self.send(
                        Caller::WriterLac,
                        &member.bookie_id,
                        BookieReq::WriteLac { ledger_id: self.ledger_id, lac },
                    );
                }
                writer::Command::Acknowledge { entry_ids, lac } => {
                    let stored = &self.meta.ledgers[&self.ledger_id];
                    for id in entry_ids {
                        // Guarantee 3: nothing is acknowledged past a close.
                        if stored.state == LedgerState::Closed && id as i64 > stored.last_entry_id {
                            return Err(Violation(format!(
                                "entry {id} acknowledged after the ledger was closed at {}",
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
                    self.after(d, Ev::Meta(MetaOp::WriterChange { failed, first: first_entry_id, deadline }));
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

    /// One ensemble-change attempt, as the shell does it: check for a fence,
    /// choose replacements, compare-and-set; `Err` retries later.
    fn change(
        &mut self,
        mut meta: LedgerMeta,
        failed: &[usize],
        first: u64,
    ) -> Result<Result<LedgerMeta, FailReason>, ()> {
        let Some(Some(stored)) = self.meta.get(self.ledger_id) else { return Err(()) };
        if stored.version != meta.version {
            match writer_conflict(&meta, &stored) {
                Conflict::Fenced => return Ok(Err(FailReason::Fenced)),
                Conflict::Retry(_) => meta = stored,
            }
        }
        let seed = self.rng.next_u64();
        let cands = self.live_candidates();
        let members =
            replace_members(&meta.last_segment().members, failed, meta.quorums.write, &cands, seed).map_err(|_| ())?;
        let intended = meta.with_ensemble(first, members);
        match self.meta.cas(meta.version, intended) {
            Ok(m) => Ok(Ok(m)),
            Err(CasError::Unavailable) => Err(()),
            Err(CasError::Conflict(stored)) => match writer_conflict(&meta, &stored) {
                Conflict::Fenced => Ok(Err(FailReason::Fenced)),
                Conflict::Retry(_) => Err(()),
            },
        }
    }

    fn meta_op(&mut self, op: MetaOp) -> Result<(), Violation> {
        let now = self.instant();
        match op {
            MetaOp::WriterChange { failed, first, deadline } => {
                if !self.writer_alive {
                    return Ok(());
                }
                let meta = self.writer_meta.clone().expect("writer meta");
                match self.change(meta, &failed, first) {
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
                    Err(()) if self.now < deadline => {
                        self.after(50 * MS, Ev::Meta(MetaOp::WriterChange { failed, first, deadline }))
                    }
                    Err(()) => {
                        let cmds = self.writer.as_mut().expect("writer").abort(FailReason::NotEnoughBookies);
                        self.writer_commands(cmds)?;
                    }
                }
            }
            MetaOp::RecoveryMark { gen } => {
                if gen != self.rec_gen {
                    return Ok(());
                }
                let Some(Some(stored)) = self.meta.get(self.ledger_id) else {
                    self.after(50 * MS, Ev::Meta(MetaOp::RecoveryMark { gen }));
                    return Ok(());
                };
                match stored.state {
                    LedgerState::Closed => {
                        self.rec_running = false;
                        self.note("recovery: already closed".into());
                    }
                    LedgerState::Open => {
                        let mut next = stored.clone();
                        next.state = LedgerState::InRecovery;
                        let _ = self.meta.cas(stored.version, next);
                        let d = self.rng.range(500, 3000);
                        self.after(d, Ev::Meta(MetaOp::RecoveryMark { gen }));
                    }
                    LedgerState::InRecovery => {
                        let opts = RecoveryOptions {
                            read_window: self.rng.range(1, 8) as usize,
                            writer: WriterOptions {
                                max_pending: 16,
                                add_timeout: Duration::from_millis(150),
                                explicit_lac_interval: Duration::from_millis(20),
                                recovery: true,
                            },
                        };
                        self.note(format!("recovery {gen}: fencing {:?}", ids(&stored.last_segment().members)));
                        let (r, steps) = Recovery::new(stored.clone(), opts);
                        self.rec = Some(r);
                        self.rec_meta = Some(stored);
                        self.recovery_steps(gen, steps)?;
                        self.after(10 * MS, Ev::RecoveryTick { gen });
                    }
                }
            }
            MetaOp::RecoveryReplace { gen, failed, first, members, deadline } => {
                if gen != self.rec_gen || self.rec.is_none() {
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
                let steps = match chosen {
                    Some(m) => {
                        self.note(format!("recovery {gen}: write-back ensemble from {first} is {:?}", ids(&m)));
                        self.rec.as_mut().expect("checked").replaced(first, m, now)
                    }
                    None if self.now < deadline => {
                        let op = MetaOp::RecoveryReplace { gen, failed, first, members, deadline };
                        self.after(50 * MS, Ev::Meta(op));
                        Vec::new()
                    }
                    None => self.rec.as_mut().expect("checked").write_aborted(FailReason::NotEnoughBookies),
                };
                self.recovery_steps(gen, steps)?;
            }
            MetaOp::RecoveryClose { gen, base, last, length, ensembles } => {
                if gen != self.rec_gen {
                    return Ok(());
                }
                let meta = self.rec_meta.clone().expect("recovery meta");
                let next = meta.closed_by_recovery(base, &ensembles, last, length);
                match self.meta.cas(meta.version, next) {
                    Ok(m) => {
                        self.note(format!("recovery {gen}: closed at {last}"));
                        self.stats.last_entry_id = m.last_entry_id;
                        self.finish_recovery();
                    }
                    Err(CasError::Unavailable) => {
                        self.after(50 * MS, Ev::Meta(MetaOp::RecoveryClose { gen, base, last, length, ensembles }))
                    }
                    Err(CasError::Conflict(stored)) if stored.state == LedgerState::Closed => self.finish_recovery(),
                    Err(CasError::Conflict(_)) => self.recovery_failed(RecoveryError::WriteBack(FailReason::Fenced)),
                }
            }
        }
        Ok(())
    }

    fn finish_recovery(&mut self) {
        self.rec = None;
        self.rec_running = false;
    }

    fn recovery_failed(&mut self, e: RecoveryError) {
        self.stats.recovery_failures += 1;
        self.note(format!("recovery {} failed: {e}", self.rec_gen));
        self.rec = None;
        self.rec_running = false;
        // Retried later, as the replication worker would.
        let d = self.rng.range(50, 300) * MS;
        self.after(d, Ev::RecoveryStart);
    }

    fn recovery_steps(&mut self, gen: u64, steps: Vec<Step>) -> Result<(), Violation> {
        let l = self.ledger_id;
        for s in steps {
            match s {
                Step::Fence { position, member } => {
                    self.send(Caller::Fence { gen, position }, &member.bookie_id, BookieReq::Fence { ledger_id: l })
                }
                Step::Read { entry_id, position, member } => self.send(
                    Caller::RecRead { gen, entry_id, position },
                    &member.bookie_id,
                    BookieReq::Read { ledger_id: l, entry_id, fence: true },
                ),
                Step::Write(writer::Command::Send { position, member, entry, recovery }) => {
                    let caller = Caller::RecWrite { gen, entry_id: entry.entry_id, position, member: member.clone() };
                    let req = BookieReq::Add { entry, expected_instance: member.instance_id.clone(), recovery };
                    self.send(caller, &member.bookie_id, req);
                }
                Step::Replace { failed, first_entry_id, members } => {
                    let deadline = self.now + 2000 * MS;
                    let d = self.rng.range(500, 3000);
                    let op = MetaOp::RecoveryReplace { gen, failed, first: first_entry_id, members, deadline };
                    self.after(d, Ev::Meta(op));
                }
                Step::Write(_) => {}
                Step::Close { last_entry_id, length, ensembles } => {
                    // Guarantee 4 (checked before the close is even attempted).
                    if let Some((&max, _)) = self.acked.iter().next_back() {
                        if last_entry_id < max as i64 {
                            return Err(Violation(format!(
                                "recovery would close at {last_entry_id} below acknowledged entry {max}"
                            )));
                        }
                    }
                    let d = self.rng.range(500, 3000);
                    let base = self.rec.as_ref().expect("a recovery closes").base();
                    let op = MetaOp::RecoveryClose { gen, base, last: last_entry_id, length, ensembles };
                    self.after(d, Ev::Meta(op));
                }
                Step::Failed(e) => self.recovery_failed(e),
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
            }
            Caller::WriterLac => {
                if self.writer_alive && matches!(resp, Some(BookieResp::LedgerFenced)) {
                    let cmds = self.writer.as_mut().expect("writer").fenced();
                    self.writer_commands(cmds)?;
                }
            }
            Caller::Fence { gen, position } => {
                if gen == self.rec_gen && self.rec.is_some() {
                    let a = match resp {
                        Some(BookieResp::FenceDone { lac }) => FenceAnswer::Fenced { lac },
                        _ => FenceAnswer::Failed,
                    };
                    let steps = self.rec.as_mut().expect("checked").fence_answered(position, a, now);
                    self.recovery_steps(gen, steps)?;
                }
            }
            Caller::RecRead { gen, entry_id, position } => {
                if gen == self.rec_gen && self.rec.is_some() {
                    let a = match resp {
                        Some(BookieResp::Entry(e)) => BookieRead::Entry(e),
                        Some(BookieResp::NoSuchEntry { instance_id }) => BookieRead::NoSuchEntry { instance_id },
                        Some(BookieResp::Corrupt) => BookieRead::Corrupt,
                        _ => BookieRead::Failed,
                    };
                    let steps = self.rec.as_mut().expect("checked").read_answered(entry_id, position, a, now);
                    self.recovery_steps(gen, steps)?;
                }
            }
            Caller::RecWrite { gen, entry_id, position, member } => {
                if gen == self.rec_gen && self.rec.is_some() {
                    let a = match resp {
                        Some(BookieResp::Added { instance_id }) => Answer::Stored { instance_id },
                        Some(BookieResp::LedgerFenced) => Answer::Fenced,
                        Some(BookieResp::MetadataUnavailable) => Answer::Unavailable,
                        _ => Answer::Failed,
                    };
                    let steps = self.rec.as_mut().expect("checked").write_answered(entry_id, position, &member, a, now);
                    self.recovery_steps(gen, steps)?;
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

    /// After healing: the ledger is closed at or past every acknowledged entry,
    /// and every entry up to the tail is readable with the writer's bytes.
    fn check_final(&mut self) -> Result<(), Violation> {
        let meta = self.meta.ledgers[&self.ledger_id].clone();
        if meta.state != LedgerState::Closed {
            return Err(Violation(format!(
                "liveness: not closed after healing ({:?}, {} recovery failures)",
                meta.state, self.stats.recovery_failures
            )));
        }
        let max_acked = self.acked.len() as i64 - 1;
        if meta.last_entry_id < max_acked {
            return Err(Violation(format!("closed at {} below acknowledged {max_acked}", meta.last_entry_id)));
        }
        for e in 0..=meta.last_entry_id.max(-1) {
            let e = e as u64;
            let seg = meta.segment_of(e);
            let copies: Vec<Bytes> = meta
                .quorums
                .write_set(e)
                .into_iter()
                .filter_map(|p| {
                    let b = &self.bookies[self.bookie_index(&seg.members[p].bookie_id)];
                    let mut b = b.clone();
                    match b.handle(BookieReq::Read { ledger_id: self.ledger_id, entry_id: e, fence: false }, |_| None) {
                        BookieResp::Entry(x) => Some(x.payload),
                        _ => None,
                    }
                })
                .collect();
            if copies.is_empty() {
                return Err(Violation(format!("entry {e} (tail {}) has no readable copy", meta.last_entry_id)));
            }
            let want = self.submitted.get(&e);
            if copies.iter().any(|c| Some(c) != want) {
                return Err(Violation(format!("entry {e}: stored bytes differ from the writer's")));
            }
        }
        Ok(())
    }
}

fn ids(members: &[Member]) -> Vec<&str> {
    members.iter().map(|m| m.bookie_id.as_str()).collect()
}
