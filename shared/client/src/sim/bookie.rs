//! A bookie as the protocol sees it: entries, fence and LAC per ledger, an
//! instance id, and the same refusals as the real one (services/bookie). Only
//! durable state is modelled: an answer leaves after its "fsync", so a crash
//! keeps everything answered and loses only what was in flight.

use std::collections::{BTreeMap, BTreeSet};

use quire_proto::v1::Entry;

/// A request to a bookie.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BookieReq {
    /// AddEntry.
    Add {
        /// The entry.
        entry: Entry,
        /// The instance the sender expects ("" for none).
        expected_instance: String,
        /// A recovery add.
        recovery: bool,
    },
    /// FenceLedger.
    Fence {
        /// Ledger.
        ledger_id: u64,
    },
    /// ReadEntry.
    Read {
        /// Ledger.
        ledger_id: u64,
        /// Entry.
        entry_id: u64,
        /// Recovery read (fences first).
        fence: bool,
    },
    /// ReadLac.
    ReadLac {
        /// Ledger.
        ledger_id: u64,
    },
    /// WriteLac.
    WriteLac {
        /// Ledger.
        ledger_id: u64,
        /// LAC.
        lac: i64,
    },
}

/// A bookie's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BookieResp {
    /// Added, by this instance.
    Added {
        /// The instance that answered.
        instance_id: String,
    },
    /// Fenced; its LAC.
    FenceDone {
        /// LAC.
        lac: i64,
    },
    /// An entry.
    Entry(Entry),
    /// No such entry or ledger.
    NoSuchEntry {
        /// The instance that answered.
        instance_id: String,
    },
    /// The stored copy is damaged.
    Corrupt,
    /// A LAC.
    Lac(i64),
    /// The ledger is fenced (or closed in the metadata).
    LedgerFenced,
    /// The add named another instance.
    WrongInstance,
    /// The unknown-ledger check could not reach the metadata service: the
    /// bookie is up, the add may be sent again (`Answer::Unavailable`).
    MetadataUnavailable,
    /// The bookie lost data it may have acknowledged and has not refilled
    /// this ledger yet: absence here is not evidence (LEDGER_IN_LIMBO).
    Limbo,
    /// Any other refusal (a damaged entry...).
    Refused,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Ledger {
    entries: BTreeMap<u64, Entry>,
    fenced: bool,
    lac: i64,
}

/// One bookie.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimBookie {
    /// Id (stable across replacements).
    pub id: String,
    /// Current instance.
    pub instance_id: String,
    /// Rack.
    pub rack: String,
    /// Serving (false while crashed).
    pub up: bool,
    /// Bumped by every crash: answers from before it are never sent.
    pub incarnation: u64,
    ledgers: BTreeMap<u64, Ledger>,
    /// Ledgers in limbo (the data-integrity check, services/bookie/src/integrity.rs).
    limbo: BTreeSet<u64>,
    /// Ledgers in limbo the metadata service has said are open since.
    vouched: BTreeSet<u64>,
}

/// What the bookie learns from the metadata service for a ledger it has never
/// seen (seed 003's second guard): `None` when the service is unreachable.
pub type LedgerOpen = Option<bool>;

impl SimBookie {
    /// A bookie with empty disks.
    pub fn new(id: String, instance_id: String, rack: String) -> SimBookie {
        SimBookie {
            id,
            instance_id,
            rack,
            up: true,
            incarnation: 0,
            ledgers: BTreeMap::new(),
            limbo: BTreeSet::new(),
            vouched: BTreeSet::new(),
        }
    }

    /// The LAC a reader would be answered for `ledger_id` (none in limbo,
    /// or for a ledger it never saw: NoSuchEntry).
    pub fn readable_lac(&self, ledger_id: u64) -> Option<i64> {
        if self.limbo.contains(&ledger_id) {
            return None;
        }
        self.ledgers.get(&ledger_id).map(|l| l.lac)
    }

    /// Its data is gone but its instance stays (the index lost, files from
    /// an old backup): every entry and fence is lost, and `limbo` (a ledger
    /// the metadata names this instance for) is in limbo until refilled.
    pub fn lose_data(&mut self, limbo: Option<u64>) {
        self.ledgers.clear();
        self.limbo.extend(limbo);
        self.vouched.clear();
    }

    /// Whether the ledger is in limbo here.
    pub fn in_limbo(&self, ledger_id: u64) -> bool {
        self.limbo.contains(&ledger_id)
    }

    /// Stores a copy the integrity check read from a peer.
    pub fn refill(&mut self, entry: Entry) {
        let led = self.ledgers.entry(entry.ledger_id).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() });
        led.entries.insert(entry.entry_id, entry);
    }

    /// The integrity check is done with the ledger (fencing it again first
    /// when it is closed: the fence may have gone with the data).
    pub fn release(&mut self, ledger_id: u64, fence: bool) {
        if fence {
            self.ledgers.entry(ledger_id).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() }).fenced = true;
        }
        self.limbo.remove(&ledger_id);
        self.vouched.remove(&ledger_id);
    }

    /// Whether it has ever seen the ledger.
    pub fn knows(&self, ledger_id: u64) -> bool {
        self.ledgers.contains_key(&ledger_id)
    }

    /// Disks replaced: a new instance with nothing on it.
    pub fn replace(&mut self, instance_id: String) {
        self.instance_id = instance_id;
        self.ledgers.clear();
        self.incarnation += 1;
        self.up = true;
    }

    /// Damages the stored copy of an entry (a flipped bit on disk).
    pub fn corrupt(&mut self, ledger_id: u64, entry_id: u64) -> bool {
        match self.ledgers.get_mut(&ledger_id).and_then(|l| l.entries.get_mut(&entry_id)) {
            Some(e) => {
                e.crc32c ^= 1;
                true
            }
            None => false,
        }
    }

    /// The stored copy of an entry, if any.
    pub fn entry(&self, ledger_id: u64, entry_id: u64) -> Option<&Entry> {
        self.ledgers.get(&ledger_id).and_then(|l| l.entries.get(&entry_id))
    }

    /// Entry ids stored for a ledger.
    pub fn stored(&self, ledger_id: u64) -> Vec<u64> {
        self.ledgers.get(&ledger_id).map(|l| l.entries.keys().copied().collect()).unwrap_or_default()
    }

    /// Handles a request; `ledger_open` answers the unknown-ledger check.
    pub fn handle(&mut self, req: BookieReq, ledger_open: impl Fn(u64) -> LedgerOpen) -> BookieResp {
        match req {
            BookieReq::Add { entry, expected_instance, recovery } => {
                if !expected_instance.is_empty() && expected_instance != self.instance_id {
                    return BookieResp::WrongInstance;
                }
                if !entry.digest_ok() {
                    return BookieResp::Refused;
                }
                let l = entry.ledger_id;
                // A ledger never seen, or one in limbo not vouched for since
                // (its fence may have gone with the data): ask the metadata.
                let unvouched = self.limbo.contains(&l) && !self.vouched.contains(&l);
                if !recovery && (!self.knows(l) || unvouched) {
                    match ledger_open(l) {
                        None => return BookieResp::MetadataUnavailable,
                        Some(false) => {
                            self.ledgers.entry(l).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() }).fenced =
                                true;
                            return BookieResp::LedgerFenced;
                        }
                        Some(true) => {
                            if self.limbo.contains(&l) {
                                self.vouched.insert(l);
                            }
                        }
                    }
                }
                let led = self.ledgers.entry(l).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() });
                if recovery {
                    led.fenced = true;
                } else if led.fenced {
                    return BookieResp::LedgerFenced;
                }
                led.lac = led.lac.max(entry.last_add_confirmed);
                led.entries.insert(entry.entry_id, entry);
                BookieResp::Added { instance_id: self.instance_id.clone() }
            }
            BookieReq::Fence { ledger_id } => {
                let led = self.ledgers.entry(ledger_id).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() });
                led.fenced = true;
                BookieResp::FenceDone { lac: led.lac }
            }
            BookieReq::Read { ledger_id, entry_id, fence } => {
                if fence {
                    self.ledgers.entry(ledger_id).or_insert_with(|| Ledger { lac: -1, ..Ledger::default() }).fenced =
                        true;
                }
                match self.ledgers.get(&ledger_id).and_then(|l| l.entries.get(&entry_id)) {
                    Some(e) if e.digest_ok() => BookieResp::Entry(e.clone()),
                    Some(_) => BookieResp::Corrupt,
                    None if self.limbo.contains(&ledger_id) => BookieResp::Limbo,
                    None => BookieResp::NoSuchEntry { instance_id: self.instance_id.clone() },
                }
            }
            BookieReq::ReadLac { ledger_id } if self.limbo.contains(&ledger_id) => BookieResp::Limbo,
            BookieReq::ReadLac { ledger_id } => match self.ledgers.get(&ledger_id) {
                Some(l) => BookieResp::Lac(l.lac),
                None => BookieResp::NoSuchEntry { instance_id: self.instance_id.clone() },
            },
            BookieReq::WriteLac { ledger_id, lac } => match self.ledgers.get_mut(&ledger_id) {
                Some(l) if l.fenced => BookieResp::LedgerFenced,
                Some(l) => {
                    l.lac = l.lac.max(lac);
                    BookieResp::Added { instance_id: self.instance_id.clone() }
                }
                None => BookieResp::Refused,
            },
        }
    }
}
