//! A bounded cache of entries read ahead from the entry logs, for sequential
//! readers (catch-up reads, recovery). Evicts oldest first.

use std::collections::{HashMap, VecDeque};

use quire_proto::v1::Entry;

/// Read-ahead cache bounded in payload bytes.
pub struct ReadCache {
    map: HashMap<(u64, u64), Entry>,
    order: VecDeque<(u64, u64)>,
    bytes: usize,
    max_bytes: usize,
}

impl ReadCache {
    /// A cache holding at most `max_bytes` of payload.
    pub fn new(max_bytes: usize) -> Self {
        ReadCache { map: HashMap::new(), order: VecDeque::new(), bytes: 0, max_bytes }
    }

    /// A cached entry, removed from the cache: a sequential reader reads each once.
    pub fn take(&mut self, ledger_id: u64, entry_id: u64) -> Option<Entry> {
        let e = self.map.remove(&(ledger_id, entry_id))?;
        self.bytes -= e.payload.len();
        Some(e)
    }

    /// Caches an entry, evicting the oldest to stay in bounds.
    pub fn put(&mut self, e: Entry) {
        if e.payload.len() > self.max_bytes {
            return;
        }
        let key = (e.ledger_id, e.entry_id);
        self.bytes += e.payload.len();
        if let Some(old) = self.map.insert(key, e) {
            self.bytes -= old.payload.len();
        } else {
            self.order.push_back(key);
        }
        while self.bytes > self.max_bytes {
            let Some(k) = self.order.pop_front() else { break };
            if let Some(old) = self.map.remove(&k) {
                self.bytes -= old.payload.len();
            }
        }
        // `order` may hold keys already taken; keep it from growing without bound.
        if self.order.len() > 4 * self.map.len() + 1024 {
            let map = &self.map;
            self.order.retain(|k| map.contains_key(k));
        }
    }

    /// Drops every cached entry of a ledger (it was re-written or deleted).
    pub fn forget_ledger(&mut self, ledger_id: u64) {
        self.map.retain(|(l, _), _| *l != ledger_id);
        self.bytes = self.map.values().map(|e| e.payload.len()).sum();
    }

    /// Payload bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
