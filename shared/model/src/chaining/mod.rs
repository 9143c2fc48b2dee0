//! The log protocol (issue LOGS) under every interleaving: writers racing
//! to take one log over, appending, rolling to pre-made ledgers, crashing,
//! and a trimmer, against the metadata service's CAS on the log record.
//!
//! What is real: the record and every edit of it are `quire_log::chain`'s
//! ([`LogRecord::take_over`], [`LogRecord::roll`], [`LogRecord::trim`]), and
//! the service accepts an edit exactly as `services/metadata/src/logs.rs`
//! does: the version first, then [`check_edit`], then the ledgers the edit
//! names (a sealed segment's ledger closed at exactly its count, or in a
//! takeover up to a batch more: `UpdateLogCutting`, issue #47; an opened
//! one open, empty and unlisted, a dropped one deleted with it). The
//! writer's steps mirror `shell/log.rs`: `open_log_writer`'s loop (read,
//! fence and recover the open ledger, make the next, CAS, again on a
//! conflict) and `LogWriter`'s appends, acknowledgements and rollover (its
//! close of the full ledger and the roll in one update).
//!
//! What is abstract: a ledger is the list of what was written to it, each
//! marked once it reached the ack quorum, a fenced flag and a closed
//! count. Recovery's end is any count from the durable prefix to all that
//! was written (what the ledger model, [`crate::LedgerModel`], proves
//! recovery chooses from). Time is not modelled; idempotent producers and
//! cursors are not (their rules are unit- and property-tested in quire-log).
//!
//! Atomic batches (issue #47), with `batch` above 1: a writer appends a
//! batch's records one step each and rolls only between batches; a batch
//! is acknowledged once all of it reached Qa; a takeover seals at the
//! recovered ledger's last whole batch; no sealed segment ends within a
//! batch.
//!
//! Beyond the exhaustive small scope, [`walk`] samples long seeded runs at
//! large scopes (the simulator's way) over the same steps and invariants.
//!
//! The invariants are those of Jack Vanlightly's LedgerChaining.tla (every
//! non-empty ledger is in the log's list, order across ledgers is kept, at
//! most one ledger of a log takes appends) and quire's guarantee 9: no
//! acknowledged record is lost or duplicated across takeover, rollover and
//! trim, and offsets are dense and never reused ([`properties`]).

pub mod properties;
pub mod state;
pub mod walk;

use std::collections::BTreeMap;

use quire_log::{check_edit, LogRecord};

pub use state::{ChainState, Deleter, Ledger, Side};

/// A deliberate bug, to show the checker finds what each invariant guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainBug {
    /// A takeover recovers the open ledger without fencing it: the old
    /// owner's adds go on reaching Qa past the end the takeover sealed.
    NoFence,
    /// The writer appends to its pre-made next ledger before the rollover
    /// that lists it has landed.
    WriteAhead,
    /// The sweep after a takeover deletes every open ledger the log does
    /// not list, not only those older than the newest it lists: the live
    /// owner's next ledger goes, and its rollover could never land.
    SweepUnbounded,
    /// The delete as it was before issue #47: it recovers the open ledger
    /// it read and then deletes whatever is stored, with no version and
    /// whatever state the open ledger is in.
    DeleteUnfenced,
    /// A takeover seals at the recovered end, as before issue #47: a batch
    /// the recovery cut stays in the log in part.
    KeepCutBatch,
}

/// One configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChainConfig {
    /// Writer processes (writer 0 created the log and owns it at epoch 1).
    pub writers: usize,
    /// Takeovers each writer may start.
    pub takeovers: u8,
    /// Appends each writer may make, over all its epochs.
    pub appends: u8,
    /// The rollover: records per ledger.
    pub rollover_entries: u64,
    /// Trims the trimmer may make.
    pub trims: u8,
    /// Writer crashes allowed.
    pub crashes: u8,
    /// Deletes of the log the deleter may start (`delete_log`'s loop).
    pub deletes: u8,
    /// Records per atomic batch (1: each record alone).
    pub batch: u64,
    /// A deliberate bug (None: the protocol as shipped).
    pub bug: Option<ChainBug>,
}

impl ChainConfig {
    /// Two writers (writer 0 the owner at epoch 1), one takeover each (so
    /// the log changes hands up to twice, the second back to writer 0),
    /// two appends each, a rollover every two records, one trim, one crash,
    /// and the sweep after a takeover: 5.4 million states, 21 s on 2 cores.
    pub fn small() -> ChainConfig {
        ChainConfig {
            writers: 2,
            takeovers: 1,
            appends: 2,
            rollover_entries: 2,
            trims: 1,
            crashes: 1,
            deletes: 0,
            batch: 1,
            bug: None,
        }
    }

    /// A delete racing the writer's rollovers (issue #47): one writer that
    /// rolls after every record, may crash and take the log over again
    /// (twice), a trim and one delete: 1.7 million states, 6 s. (Two
    /// writers racing it: `make check-model`, 14.8 million, 90 s.)
    pub fn delete() -> ChainConfig {
        ChainConfig {
            writers: 1,
            takeovers: 2,
            appends: 3,
            rollover_entries: 1,
            trims: 1,
            crashes: 1,
            deletes: 1,
            batch: 1,
            bug: None,
        }
    }

    /// Atomic batches (issue #47): two writers taking the log from each
    /// other, a batch of two records each, a rollover every two, a trim
    /// and a crash: a batch cut by a crash or a takeover is sealed before
    /// it. 2.1 million states, 11 s (`make test`); two batches each:
    /// 20.1 million, 100 s (`make check-model`).
    pub fn batches() -> ChainConfig {
        ChainConfig { batch: 2, ..ChainConfig::small() }
    }

    /// Short text for reports.
    pub fn describe(&self) -> String {
        format!(
            "log: {} writers x{} takeovers x{} appends in batches of {}, rollover every {}, {} trims, {} crashes, {} deletes{}",
            self.writers,
            self.takeovers,
            self.appends,
            self.batch,
            self.rollover_entries,
            self.trims,
            self.crashes,
            self.deletes,
            self.bug.map(|b| format!(", BUG {b:?}")).unwrap_or_default()
        )
    }
}

/// One atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChainAction {
    /// Writer `w` starts a takeover: reads the record.
    TakeRead(usize),
    /// It fences the open ledger it read.
    TakeFence(usize),
    /// Its recovery closes that ledger holding this many entries (or finds it closed).
    TakeRecover(usize, u64),
    /// It makes the ledger of its epoch.
    TakeCreate(usize),
    /// Its CAS.
    TakeCas(usize),
    /// Writer `w` adds its next record to its ledger.
    Append(usize),
    /// Its oldest add not yet at Qa reaches Qa (or meets the fence).
    Persist(usize),
    /// Its oldest durable add is acknowledged to the application.
    Ack(usize),
    /// It makes the next ledger ahead of the rollover.
    Precreate(usize),
    /// It closes its full ledger and rolls to the next, in one update.
    Roll(usize),
    /// Its process dies.
    Crash(usize),
    /// The trimmer moves the trim point to this offset.
    Trim(u64),
    /// The metadata leader's sweep after a takeover (`SweepLogLedgers`):
    /// the open ledgers the log does not list, older than the newest it
    /// lists, are deleted. (It may also never come: the leader proposes it
    /// without waiting.)
    Sweep,
    /// The deleter reads the record (`delete_log`).
    DeleteRead,
    /// It fences the open ledger it read.
    DeleteFence,
    /// Its recovery closes that ledger holding this many entries (or finds it closed).
    DeleteRecover(u64),
    /// The metadata service's delete: the log, the ledgers it lists and
    /// those made for it, at the version read (again from the read on a
    /// conflict).
    DeleteApply,
}

/// The model of one configuration.
pub struct ChainModel {
    pub config: ChainConfig,
}

fn owner(w: usize) -> String {
    format!("w{w}")
}

/// Why the metadata service refused an update.
#[derive(Debug)]
enum Refused {
    /// Another edit came first.
    Conflict,
    /// The service's rules said no (`check_edit`'s: the client's own rules
    /// should never make such an edit).
    Chain(String),
    /// A ledger the edit names is not as it says.
    Ledger(String),
    /// The log was deleted.
    Gone,
}

impl ChainModel {
    pub fn new(config: ChainConfig) -> ChainModel {
        ChainModel { config }
    }

    /// The metadata service's UpdateLog: `new` replaces the record stored
    /// at `expected`, or nothing changes.
    fn update(s: &mut ChainState, expected: u64, new: LogRecord) -> Result<(), Refused> {
        if s.log_deleted {
            return Err(Refused::Gone);
        }
        if s.version != expected {
            return Err(Refused::Conflict);
        }
        let edit = check_edit(&s.record, &new).map_err(|e| Refused::Chain(e.to_string()))?;
        // UpdateLogCutting: a takeover may seal short of the closed ledger
        // by a batch its recovery cut; a rollover seals exactly.
        let cut_max = if new.epoch > s.record.epoch { quire_log::envelope::BATCH_RECORDS_MAX as u64 - 1 } else { 0 };
        for &(id, count) in &edit.sealed {
            if !s.ledger(id).closed.is_some_and(|closed| closed >= count && closed - count <= cut_max) {
                return Err(Refused::Ledger(format!("ledger {id} is not closed at {count}")));
            }
        }
        for &id in &edit.opened {
            let l = s.ledger(id);
            if l.closed.is_some() || l.deleted || !l.entries.is_empty() {
                return Err(Refused::Ledger(format!("ledger {id} is not open and empty")));
            }
        }
        for &id in &edit.dropped {
            s.ledger_mut(id).deleted = true;
        }
        s.record = new;
        s.version += 1;
        Ok(())
    }

    /// A recovery of ledger `id` (fenced) that ends it at `count` entries:
    /// its close if it has one (a close is final: every recovery finds
    /// it), else any count from its durable prefix to all it holds, written
    /// back and closed. False when no recovery can end there.
    fn recover(s: &mut ChainState, id: u64, count: u64) -> bool {
        let l = s.ledger(id);
        match l.closed {
            Some(closed) => count == closed,
            None if count < l.durable_prefix() || count > l.entries.len() as u64 => false,
            None => {
                let l = s.ledger_mut(id);
                l.entries.iter_mut().take(count as usize).for_each(|e| e.1 = true);
                l.closed = Some(count);
                true
            }
        }
    }

    /// The place in its batch of the next record a writer appends to
    /// `ledger`, which holds `written` of its records (0: a new batch).
    fn batch_index(s: &ChainState, ledger: u64, written: u64) -> u64 {
        let entries = &s.ledger(ledger).entries[..written as usize];
        entries.iter().rev().take_while(|e| s.continues.contains(&e.0)).count() as u64
    }

    /// Writer `w` appends the record at `index` of its batch to `ledger`.
    fn append_record(&self, s: &mut ChainState, w: usize, ledger: u64, index: u64) -> bool {
        s.appends_left[w] -= 1;
        let v = s.next_value;
        s.next_value += 1;
        if index + 1 < self.config.batch {
            s.continues.insert(v);
        }
        let l = s.ledger_mut(ledger);
        if l.fenced || l.closed.is_some() {
            // Every bookie it reaches refuses it.
            if let Side::Writing { broken, .. } = &mut s.writers[w] {
                *broken = true;
            }
            return true;
        }
        l.entries.push((v, false));
        if let Side::Writing { written, .. } = &mut s.writers[w] {
            *written += 1;
        }
        true
    }

    /// Applies one step; false when it is not enabled.
    fn step(&self, s: &mut ChainState, a: &ChainAction) -> bool {
        match *a {
            ChainAction::TakeRead(w) => {
                let may = match &s.writers[w] {
                    Side::Idle => true,
                    Side::Writing { broken, .. } => *broken,
                    Side::Opening { .. } => false,
                };
                if !may || s.takeovers_left[w] == 0 || s.log_deleted {
                    return false;
                }
                s.takeovers_left[w] -= 1;
                s.writers[w] = Side::Opening {
                    snap: s.record.clone(),
                    version: s.version,
                    fenced: false,
                    recovered: None,
                    next: None,
                };
                true
            }
            ChainAction::TakeFence(w) => {
                let Side::Opening { snap, fenced, recovered, .. } = &s.writers[w] else { return false };
                if *fenced || recovered.is_some() {
                    return false;
                }
                match snap.open_segment().map(|seg| seg.ledger_id) {
                    Some(id) => {
                        if self.config.bug != Some(ChainBug::NoFence) {
                            s.ledger_mut(id).fenced = true;
                        }
                        let Side::Opening { fenced, .. } = &mut s.writers[w] else { unreachable!() };
                        *fenced = true;
                    }
                    None => {
                        let Side::Opening { recovered, .. } = &mut s.writers[w] else { unreachable!() };
                        *recovered = Some(-1);
                    }
                }
                true
            }
            ChainAction::TakeRecover(w, count) => {
                let Side::Opening { snap, fenced: true, recovered: None, .. } = &s.writers[w] else { return false };
                let id = snap.open_segment().expect("fenced an open segment").ledger_id;
                if !Self::recover(s, id, count) {
                    return false;
                }
                // The last whole batch (`Client::whole_batches`).
                let mut whole = count;
                if self.config.bug != Some(ChainBug::KeepCutBatch) {
                    let l = s.ledger(id);
                    while whole > 0 && s.continues.contains(&l.entries[whole as usize - 1].0) {
                        whole -= 1;
                    }
                }
                let Side::Opening { recovered, .. } = &mut s.writers[w] else { unreachable!() };
                *recovered = Some(whole as i64 - 1);
                true
            }
            ChainAction::TakeCreate(w) => {
                if !matches!(&s.writers[w], Side::Opening { next: None, .. }) {
                    return false;
                }
                let id = s.create_ledger();
                let Side::Opening { next, .. } = &mut s.writers[w] else { unreachable!() };
                *next = Some(id);
                true
            }
            ChainAction::TakeCas(w) => {
                let Side::Opening { snap, version, recovered: Some(last), next: Some(next), .. } = s.writers[w].clone()
                else {
                    return false;
                };
                let taken = match snap.take_over(owner(w), last, next) {
                    Ok(t) => t,
                    Err(e) => {
                        s.breach(format!("writer {w}: take_over refused its own snapshot: {e}"));
                        return true;
                    }
                };
                match Self::update(s, version, taken.clone()) {
                    Ok(()) => {
                        s.sweep_pending = true;
                        let first_offset = taken.open_segment().expect("a takeover opens a segment").first_offset;
                        s.writers[w] = Side::Writing {
                            epoch: taken.epoch,
                            known: taken,
                            version: s.version,
                            ledger: next,
                            first_offset,
                            written: 0,
                            durable: 0,
                            acked: 0,
                            next: None,
                            broken: false,
                        };
                    }
                    Err(Refused::Conflict) => {
                        // Again from the record as it is now; the ledger
                        // made for this attempt is nobody's.
                        s.ledger_mut(next).deleted = true;
                        s.writers[w] = Side::Opening {
                            snap: s.record.clone(),
                            version: s.version,
                            fenced: false,
                            recovered: None,
                            next: None,
                        };
                    }
                    Err(Refused::Gone) => s.writers[w] = Side::Idle,
                    Err(Refused::Chain(why)) => s.breach(format!("writer {w}: the service refused a takeover: {why}")),
                    // Its own ledger, made empty, and the one it recovered
                    // and closed itself: the service has no reason to say no.
                    Err(Refused::Ledger(why)) => {
                        s.breach(format!("writer {w}: the service refused a takeover's ledgers: {why}"))
                    }
                }
                true
            }
            ChainAction::Append(w) => {
                let Side::Writing { ledger, written, next, broken: false, .. } = s.writers[w].clone() else {
                    return false;
                };
                // Within a batch: its next record, past the rollover if
                // need be (a rollover comes between batches).
                let index = Self::batch_index(s, ledger, written);
                if index > 0 {
                    if s.appends_left[w] == 0 {
                        return false;
                    }
                    return self.append_record(s, w, ledger, index);
                }
                let room = s.appends_left[w] as u64 >= self.config.batch;
                if !room || written >= self.config.rollover_entries {
                    // Full: the append waits for the rollover (or, with
                    // the bug, goes to the next ledger ahead of it).
                    if self.config.bug == Some(ChainBug::WriteAhead) && s.appends_left[w] > 0 {
                        if let Some(n) = next {
                            s.appends_left[w] -= 1;
                            let v = s.next_value;
                            s.next_value += 1;
                            s.ledger_mut(n).entries.push((v, true));
                            return true;
                        }
                    }
                    return false;
                }
                self.append_record(s, w, ledger, 0)
            }
            ChainAction::Persist(w) => {
                let Side::Writing { ledger, written, durable, broken: false, .. } = s.writers[w] else { return false };
                if durable >= written {
                    return false;
                }
                let l = s.ledger_mut(ledger);
                if l.fenced {
                    if let Side::Writing { broken, .. } = &mut s.writers[w] {
                        *broken = true;
                    }
                    return true;
                }
                if l.deleted {
                    s.persisted_deleted = true;
                }
                let l = s.ledger_mut(ledger);
                l.entries[durable as usize].1 = true;
                if let Side::Writing { durable, .. } = &mut s.writers[w] {
                    *durable += 1;
                }
                true
            }
            ChainAction::Ack(w) => {
                let Side::Writing { ledger, first_offset, durable, acked, .. } = s.writers[w] else { return false };
                // A batch is acknowledged whole, once all of it reached Qa.
                let entries = &s.ledger(ledger).entries;
                let Some(last) = (acked..durable).find(|i| !s.continues.contains(&entries[*i as usize].0)) else {
                    return false;
                };
                for i in acked..=last {
                    let offset = first_offset + i;
                    let v = s.ledger(ledger).entries[i as usize].0;
                    match s.acked.get(&offset) {
                        Some(&other) if other != v => {
                            s.breach(format!("offset {offset} acknowledged for record {other} and then {v}"))
                        }
                        _ => {
                            s.acked.insert(offset, v);
                        }
                    }
                }
                if let Side::Writing { acked, .. } = &mut s.writers[w] {
                    *acked = last + 1;
                }
                true
            }
            ChainAction::Precreate(w) => {
                if !matches!(&s.writers[w], Side::Writing { next: None, broken: false, .. }) {
                    return false;
                }
                let id = s.create_ledger();
                if let Side::Writing { next, .. } = &mut s.writers[w] {
                    *next = Some(id);
                }
                true
            }
            ChainAction::Roll(w) => {
                let Side::Writing {
                    epoch,
                    known,
                    version,
                    ledger,
                    written,
                    acked,
                    next: Some(next),
                    broken: false,
                    ..
                } = s.writers[w].clone()
                else {
                    return false;
                };
                if written < self.config.rollover_entries
                    || acked < written
                    || Self::batch_index(s, ledger, written) > 0
                {
                    return false;
                }
                // Made from the record as it last stored it.
                let rolled = match known.roll(epoch, written as i64 - 1, next) {
                    Ok(r) => r,
                    Err(e) => {
                        s.breach(format!("writer {w}: roll refused its own record: {e}"));
                        return true;
                    }
                };
                // The close of the full ledger goes in the same update:
                // tried on a copy, kept only if the update lands.
                let mut attempt = s.clone();
                let ok = if attempt.ledger(ledger).closed.is_some() {
                    Err(Refused::Ledger(format!("ledger {ledger} already closed")))
                } else {
                    attempt.ledger_mut(ledger).closed = Some(written);
                    Self::update(&mut attempt, version, rolled.clone())
                };
                match ok {
                    Ok(()) => {
                        *s = attempt;
                        let first_offset = rolled.open_segment().expect("a roll opens a segment").first_offset;
                        s.writers[w] = Side::Writing {
                            epoch,
                            known: rolled,
                            version: s.version,
                            ledger: next,
                            first_offset,
                            written: 0,
                            durable: 0,
                            acked: 0,
                            next: None,
                            broken: false,
                        };
                    }
                    Err(Refused::Conflict) if s.record.epoch == epoch => {
                        // A trim came first: again from the stored record.
                        let (record, v) = (s.record.clone(), s.version);
                        if let Side::Writing { known, version, .. } = &mut s.writers[w] {
                            *known = record;
                            *version = v;
                        }
                    }
                    Err(Refused::Chain(why)) => s.breach(format!("writer {w}: the service refused a rollover: {why}")),
                    Err(_) => {
                        // A newer owner: LogFenced.
                        if let Side::Writing { broken, .. } = &mut s.writers[w] {
                            *broken = true;
                        }
                    }
                }
                true
            }
            ChainAction::Crash(w) => {
                if s.crashes_left == 0 || matches!(s.writers[w], Side::Idle) {
                    return false;
                }
                s.crashes_left -= 1;
                s.writers[w] = Side::Idle;
                true
            }
            ChainAction::Sweep => {
                if !s.sweep_pending || s.log_deleted {
                    return false;
                }
                s.sweep_pending = false;
                let listed: Vec<u64> = s.record.segments.iter().map(|g| g.ledger_id).collect();
                let newest = listed.iter().copied().max().unwrap_or(0);
                let bound = if self.config.bug == Some(ChainBug::SweepUnbounded) { u64::MAX } else { newest };
                // What a writer may still list: a live owner's next ledger
                // (its rollover tries again over a trim), and the ledger of
                // a takeover whose CAS could still land.
                let may_list: Vec<(usize, u64)> = s
                    .writers
                    .iter()
                    .enumerate()
                    .filter_map(|(w, side)| match side {
                        Side::Writing { epoch, next: Some(n), broken: false, .. } if *epoch == s.record.epoch => {
                            Some((w, *n))
                        }
                        Side::Opening { version, next: Some(n), .. } if *version == s.version => Some((w, *n)),
                        _ => None,
                    })
                    .collect();
                for id in 1..=s.ledgers.len() as u64 {
                    let l = s.ledger(id);
                    if id >= bound || l.deleted || l.closed.is_some() || listed.contains(&id) {
                        continue;
                    }
                    if let Some((w, _)) = may_list.iter().find(|(_, n)| *n == id) {
                        s.breach(format!("the sweep deleted ledger {id}, which writer {w} may still list"));
                        return true;
                    }
                    if !l.entries.is_empty() {
                        s.breach(format!("the sweep deleted ledger {id}, which holds records"));
                        return true;
                    }
                    s.ledger_mut(id).deleted = true;
                }
                true
            }
            ChainAction::DeleteRead => {
                if s.deletes_left == 0 || s.log_deleted || !matches!(s.deleter, Deleter::Idle) {
                    return false;
                }
                s.deletes_left -= 1;
                s.deleter =
                    Deleter::Read { snap: s.record.clone(), version: s.version, fenced: false, recovered: false };
                true
            }
            ChainAction::DeleteFence => {
                let Deleter::Read { snap, fenced: false, .. } = &s.deleter else { return false };
                match snap.open_segment().map(|seg| seg.ledger_id) {
                    Some(id) => {
                        s.ledger_mut(id).fenced = true;
                        if let Deleter::Read { fenced, .. } = &mut s.deleter {
                            *fenced = true;
                        }
                    }
                    None => {
                        if let Deleter::Read { fenced, recovered, .. } = &mut s.deleter {
                            (*fenced, *recovered) = (true, true);
                        }
                    }
                }
                true
            }
            ChainAction::DeleteRecover(count) => {
                let Deleter::Read { snap, fenced: true, recovered: false, .. } = &s.deleter else { return false };
                let id = snap.open_segment().expect("fenced an open segment").ledger_id;
                if !Self::recover(s, id, count) {
                    return false;
                }
                if let Deleter::Read { recovered, .. } = &mut s.deleter {
                    *recovered = true;
                }
                true
            }
            ChainAction::DeleteApply => {
                let Deleter::Read { version, recovered: true, .. } = &s.deleter else { return false };
                if !s.log_deleted {
                    let open_closed =
                        s.record.open_segment().is_none_or(|seg| s.ledger(seg.ledger_id).closed.is_some());
                    let checked = self.config.bug != Some(ChainBug::DeleteUnfenced);
                    if checked && (*version != s.version || !open_closed) {
                        // A conflict: delete_log reads and fences again.
                        s.deleter = Deleter::Read {
                            snap: s.record.clone(),
                            version: s.version,
                            fenced: false,
                            recovered: false,
                        };
                        return true;
                    }
                    // The log, what it lists, and what was made for it
                    // and never listed (open, unlisted: a writer's next).
                    let listed: Vec<u64> = s.record.segments.iter().map(|g| g.ledger_id).collect();
                    for id in 1..=s.ledgers.len() as u64 {
                        let l = s.ledger(id);
                        if listed.contains(&id) || (l.closed.is_none() && !l.deleted) {
                            s.ledger_mut(id).deleted = true;
                        }
                    }
                    s.log_deleted = true;
                    s.sweep_pending = false;
                }
                s.deleter = Deleter::Idle;
                true
            }
            ChainAction::Trim(before) => {
                if s.log_deleted || s.trims_left == 0 || before <= s.record.trim_before || before > s.record.fixed_end()
                {
                    return false;
                }
                s.trims_left -= 1;
                let (trimmed, _) = match s.record.trim(before) {
                    Ok(t) => t,
                    Err(e) => {
                        s.breach(format!("trim to {before} refused: {e}"));
                        return true;
                    }
                };
                let v = s.version;
                if let Err(e) = Self::update(s, v, trimmed) {
                    s.breach(format!("the service refused a trim to {before}: {e:?}"));
                }
                true
            }
        }
    }

    fn listed(&self, s: &ChainState) -> Vec<ChainAction> {
        let mut out = Vec::new();
        for w in 0..s.writers.len() {
            out.extend([
                ChainAction::TakeRead(w),
                ChainAction::TakeFence(w),
                ChainAction::TakeCreate(w),
                ChainAction::TakeCas(w),
                ChainAction::Append(w),
                ChainAction::Persist(w),
                ChainAction::Ack(w),
                ChainAction::Precreate(w),
                ChainAction::Roll(w),
                ChainAction::Crash(w),
            ]);
            if let Side::Opening { snap, fenced: true, recovered: None, .. } = &s.writers[w] {
                let id = snap.open_segment().expect("fenced an open segment").ledger_id;
                let l = s.ledger(id);
                match l.closed {
                    Some(c) => out.push(ChainAction::TakeRecover(w, c)),
                    None => out
                        .extend((l.durable_prefix()..=l.entries.len() as u64).map(|c| ChainAction::TakeRecover(w, c))),
                }
            }
        }
        if s.trims_left > 0 {
            out.extend((s.record.trim_before + 1..=s.record.fixed_end()).map(ChainAction::Trim));
        }
        out.push(ChainAction::Sweep);
        if s.deletes_left > 0 || s.deleter != Deleter::Idle {
            out.extend([ChainAction::DeleteRead, ChainAction::DeleteFence, ChainAction::DeleteApply]);
        }
        if let Deleter::Read { snap, fenced: true, recovered: false, .. } = &s.deleter {
            let id = snap.open_segment().expect("fenced an open segment").ledger_id;
            let l = s.ledger(id);
            match l.closed {
                Some(c) => out.push(ChainAction::DeleteRecover(c)),
                None => out.extend((l.durable_prefix()..=l.entries.len() as u64).map(ChainAction::DeleteRecover)),
            }
        }
        out
    }
}

impl stateright::Model for ChainModel {
    type State = ChainState;
    type Action = ChainAction;

    fn init_states(&self) -> Vec<ChainState> {
        let c = &self.config;
        // create_log: writer 0 owns it at epoch 1 on ledger 1.
        let record = LogRecord::new("log", owner(0), 1);
        let mut writers = vec![Side::Idle; c.writers];
        writers[0] = Side::Writing {
            epoch: record.epoch,
            known: record.clone(),
            version: 1,
            ledger: 1,
            first_offset: 0,
            written: 0,
            durable: 0,
            acked: 0,
            next: None,
            broken: false,
        };
        vec![ChainState {
            record,
            version: 1,
            ledgers: vec![Ledger::default()],
            writers,
            takeovers_left: vec![c.takeovers; c.writers],
            appends_left: vec![c.appends; c.writers],
            trims_left: c.trims,
            crashes_left: c.crashes,
            acked: BTreeMap::new(),
            next_value: 0,
            continues: Default::default(),
            sweep_pending: false,
            deleter: Deleter::Idle,
            deletes_left: c.deletes,
            log_deleted: false,
            persisted_deleted: false,
            broken: None,
        }]
    }

    fn actions(&self, s: &ChainState, out: &mut Vec<ChainAction>) {
        if s.broken.is_some() {
            return;
        }
        out.extend(self.listed(s).into_iter().filter(|a| self.step(&mut s.clone(), a)));
    }

    fn next_state(&self, s: &ChainState, a: ChainAction) -> Option<ChainState> {
        let mut next = s.clone();
        self.step(&mut next, &a).then_some(next)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        properties::all()
    }
}

/// What one exhaustive run of the log model found.
#[derive(Debug)]
pub struct ChainReport {
    pub config: ChainConfig,
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: std::time::Duration,
    pub complete: bool,
    /// Each violated property, the steps that reach it and the state.
    pub violations: Vec<(&'static str, Vec<ChainAction>, String)>,
}

impl ChainReport {
    pub fn summary(&self) -> String {
        format!(
            "{}: {} states, depth {}, {:.1} s, {}",
            self.config.describe(),
            self.unique_states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.violations.is_empty() {
                "no violation".to_string()
            } else {
                format!("VIOLATED: {}", self.violations.iter().map(|v| v.0).collect::<Vec<_>>().join(", "))
            }
        )
    }
}

/// Explores `config` exhaustively (depth first: memory holds one
/// fingerprint per state; a counterexample is a trace, not the shortest).
pub fn check_chain(config: ChainConfig, threads: usize) -> ChainReport {
    explore(config, threads, false)
}

/// As [`check_chain`], on one thread (so the same violation is met first
/// every run) and stopping at the first violation: a deliberate bug's
/// counterexample without exploring everything past it.
pub fn check_chain_first(config: ChainConfig) -> ChainReport {
    explore(config, 1, true)
}

fn explore(config: ChainConfig, threads: usize, first: bool) -> ChainReport {
    use stateright::{Checker, HasDiscoveries, Model};
    let started = std::time::Instant::now();
    let model = ChainModel::new(config.clone());
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let mut checker = model.checker().threads(threads);
    if first {
        checker = checker.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = checker.spawn_dfs().join();
    let violations = names
        .into_iter()
        .filter_map(|name| {
            let path = checker.discovery(name)?;
            let text = format!("{:#?}", path.last_state());
            Some((name, path.into_actions(), text))
        })
        .collect();
    ChainReport {
        config,
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        complete: checker.is_done(),
        violations,
    }
}
