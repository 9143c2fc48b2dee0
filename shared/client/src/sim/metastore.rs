//! The metadata service as the protocol sees it: versioned ledger records
//! with compare-and-set, and the bookie registry. Linearizable (the Raft
//! replication behind it is tested on its own, services/metadata); faults are
//! windows where it cannot be reached.

use std::collections::BTreeMap;

use crate::meta::{LedgerMeta, LedgerState};
use crate::placement::Candidate;

/// The metadata store.
#[derive(Debug, Default)]
pub struct SimMeta {
    /// Ledgers by id.
    pub ledgers: BTreeMap<u64, LedgerMeta>,
    /// Reachable (false during an outage).
    pub available: bool,
    /// Every version each ledger went through, for the final checks.
    pub history: BTreeMap<u64, Vec<LedgerMeta>>,
}

/// Why a CAS was not applied.
#[derive(Debug)]
pub enum CasError {
    /// The service could not be reached.
    Unavailable,
    /// Another version is stored (the stored record).
    Conflict(Box<LedgerMeta>),
}

impl SimMeta {
    /// An empty, reachable store.
    pub fn new() -> SimMeta {
        SimMeta { available: true, ..SimMeta::default() }
    }

    /// Reads a ledger.
    pub fn get(&self, ledger_id: u64) -> Option<Option<LedgerMeta>> {
        self.available.then(|| self.ledgers.get(&ledger_id).cloned())
    }

    /// Stores a new ledger.
    pub fn create(&mut self, meta: LedgerMeta) {
        self.history.entry(meta.ledger_id).or_default().push(meta.clone());
        self.ledgers.insert(meta.ledger_id, meta);
    }

    /// Compare-and-set on the version, with the real service's rules that
    /// matter here: a closed ledger's state, tail and length are final, and
    /// recovery never reopens.
    pub fn cas(&mut self, expected_version: u64, mut next: LedgerMeta) -> Result<LedgerMeta, CasError> {
        if !self.available {
            return Err(CasError::Unavailable);
        }
        let stored = self.ledgers.get(&next.ledger_id).expect("sim ledgers are never deleted").clone();
        if stored.version != expected_version {
            return Err(CasError::Conflict(Box::new(stored)));
        }
        assert!(
            !(stored.state == LedgerState::Closed
                && (next.state != LedgerState::Closed || next.last_entry_id != stored.last_entry_id)),
            "a closed ledger was reopened or moved: {stored:?} -> {next:?}"
        );
        assert!(
            !(stored.state == LedgerState::InRecovery && next.state == LedgerState::Open),
            "a ledger in recovery was reopened"
        );
        next.version = stored.version + 1;
        self.history.entry(next.ledger_id).or_default().push(next.clone());
        self.ledgers.insert(next.ledger_id, next.clone());
        Ok(next)
    }

    /// Whether a ledger is open (the bookie's unknown-ledger check).
    pub fn ledger_open(&self, ledger_id: u64) -> Option<bool> {
        self.available.then(|| self.ledgers.get(&ledger_id).is_some_and(|l| l.state == LedgerState::Open))
    }
}

/// A registry entry.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Instance id.
    pub instance_id: String,
    /// Rack.
    pub rack: String,
}

/// Placement candidates from the registry.
pub fn candidates(registry: &BTreeMap<String, Registered>) -> Vec<Candidate> {
    registry
        .iter()
        .map(|(id, r)| Candidate {
            bookie_id: id.clone(),
            instance_id: r.instance_id.clone(),
            rack: r.rack.clone(),
            writable: true,
            free_bytes: 1 << 40,
        })
        .collect()
}
