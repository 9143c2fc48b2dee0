//! One state of the log world: the stored log record (the real
//! [`LogRecord`]) and its version, the ledgers it is made of, each
//! writer's place in the takeover and append protocol, and the oracle
//! (every acknowledgement, by offset).

use std::collections::BTreeMap;

use quire_log::LogRecord;

/// A ledger as the log protocol sees it (the ledger model checks what
/// lies under this: fencing, recovery's end, the seed-003 guard).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Ledger {
    /// What was written to it, in entry order: a record's value, and
    /// whether it reached the ack quorum (a recovery then keeps it).
    pub entries: Vec<(u8, bool)>,
    /// Fenced by a recovery: no add reaches the ack quorum from then on.
    pub fenced: bool,
    /// Closed in its metadata, holding this many entries.
    pub closed: Option<u64>,
    /// Deleted (its segment trimmed away, or created for nothing).
    pub deleted: bool,
}

impl Ledger {
    /// Entries at the ack quorum, from the first (adds reach it in order).
    pub fn durable_prefix(&self) -> u64 {
        self.entries.iter().take_while(|e| e.1).count() as u64
    }
}

/// Where one writer process is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Side {
    /// Not writing (never was, crashed, or gave up).
    Idle,
    /// Taking the log over: `open_log_writer`'s loop.
    Opening {
        /// The record it read, and its version.
        snap: LogRecord,
        version: u64,
        /// Whether it fenced the snapshot's open ledger.
        fenced: bool,
        /// The open ledger's recovered last entry (-1: empty), once known.
        recovered: Option<i64>,
        /// The ledger it made for its epoch.
        next: Option<u64>,
    },
    /// The owner at `epoch`, appending to `ledger` (its open segment).
    Writing {
        epoch: u64,
        /// The record as it last stored it, and that version.
        known: LogRecord,
        version: u64,
        ledger: u64,
        first_offset: u64,
        /// Adds given to the ledger, those it knows reached Qa, and those
        /// acknowledged to the application.
        written: u64,
        durable: u64,
        acked: u64,
        /// The next ledger, made ahead of the rollover.
        next: Option<u64>,
        /// It stopped taking appends (fenced, refused); what reached Qa
        /// is still acknowledged.
        broken: bool,
    },
}

/// Where the deleter is (`Client::delete_log`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Deleter {
    /// Not deleting.
    Idle,
    /// It read the record at `version`, and has (or not yet) fenced and
    /// recovered the open ledger `snap` names.
    Read { snap: LogRecord, version: u64, fenced: bool, recovered: bool },
}

/// The world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChainState {
    /// The stored record and its version (the metadata service's CAS).
    pub record: LogRecord,
    pub version: u64,
    /// Ledger `i + 1` is `ledgers[i]`.
    pub ledgers: Vec<Ledger>,
    pub writers: Vec<Side>,
    /// Takeovers and appends each writer may still start; trims left.
    pub takeovers_left: Vec<u8>,
    pub appends_left: Vec<u8>,
    pub trims_left: u8,
    /// Crashes left (a writer's process dies, its acknowledgements with it).
    pub crashes_left: u8,
    /// The oracle: every acknowledged record, by the offset it was given.
    pub acked: BTreeMap<u64, u8>,
    /// The next record's value (every append's bytes differ).
    pub next_value: u8,
    /// Records (by value) that are not the last of their atomic batch
    /// (issue #47): a batch is whole once a record not in here follows
    /// them. Empty with batches of one.
    pub continues: std::collections::BTreeSet<u8>,
    /// A takeover landed and the leader's sweep of the ledgers no writer
    /// can list has not run yet.
    pub sweep_pending: bool,
    /// The deleter, its deletes left, and whether the log was deleted.
    pub deleter: Deleter,
    pub deletes_left: u8,
    pub log_deleted: bool,
    /// An add reached its ack quorum in a deleted ledger: a writer the
    /// delete left unfenced, acknowledged into a log that is gone.
    pub persisted_deleted: bool,
    /// A rule broken as a step met it (an offset given twice, an edit the
    /// client's own rules made refused by the service's).
    pub broken: Option<String>,
}

impl ChainState {
    /// Ledger `id`.
    pub fn ledger(&self, id: u64) -> &Ledger {
        &self.ledgers[(id - 1) as usize]
    }

    pub fn ledger_mut(&mut self, id: u64) -> &mut Ledger {
        &mut self.ledgers[(id - 1) as usize]
    }

    /// A new, empty ledger's id.
    pub fn create_ledger(&mut self) -> u64 {
        self.ledgers.push(Ledger::default());
        self.ledgers.len() as u64
    }

    /// Records the first breach only (the trace ends there).
    pub fn breach(&mut self, why: String) {
        if self.broken.is_none() {
            self.broken = Some(why);
        }
    }
}
