//! Entries made durable in the journal and not yet in an entry log.
//!
//! Sorted by (ledger, entry), so a flush writes each ledger's entries
//! contiguously without a sort of its own.

use std::collections::BTreeMap;

use quire_proto::v1::Entry;

/// One generation of the write cache.
#[derive(Default)]
pub struct WriteCache {
    entries: BTreeMap<(u64, u64), Entry>,
    bytes: usize,
}

impl WriteCache {
    /// Adds or replaces an entry (a re-add of the same id, e.g. by recovery, wins).
    pub fn insert(&mut self, e: Entry) {
        let size = e.payload.len();
        if let Some(old) = self.entries.insert((e.ledger_id, e.entry_id), e) {
            self.bytes -= old.payload.len();
        }
        self.bytes += size;
    }

    /// The cached entry, if any.
    pub fn get(&self, ledger_id: u64, entry_id: u64) -> Option<&Entry> {
        self.entries.get(&(ledger_id, entry_id))
    }

    /// The cached entries of a ledger in `first..=last`, in entry order.
    pub fn range(&self, ledger_id: u64, first: u64, last: u64) -> impl Iterator<Item = &Entry> {
        self.entries.range((ledger_id, first)..=(ledger_id, last)).map(|(_, e)| e)
    }

    /// The highest cached entry id of a ledger.
    pub fn last_entry(&self, ledger_id: u64) -> Option<u64> {
        self.entries.range((ledger_id, 0)..=(ledger_id, u64::MAX)).next_back().map(|((_, e), _)| *e)
    }

    /// Drops every entry of a ledger (deleted); the bytes it freed.
    pub fn remove_ledger(&mut self, ledger_id: u64) -> usize {
        let keys: Vec<(u64, u64)> =
            self.entries.range((ledger_id, 0)..=(ledger_id, u64::MAX)).map(|(k, _)| *k).collect();
        let mut freed = 0;
        for k in keys {
            if let Some(e) = self.entries.remove(&k) {
                freed += e.payload.len();
            }
        }
        self.bytes -= freed;
        freed
    }

    /// Payload bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries in (ledger, entry) order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }
}
