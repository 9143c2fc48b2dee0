//! The state's ledgers and logs, each with the indexes a command needs so
//! that its cost follows what it touches, not the size of the cluster
//! (issue #46 item 5: a log's takeover swept every ledger under the state's
//! write lock).
//!
//! The indexes are derived: never persisted nor carried in a snapshot
//! (both encode the maps alone, unchanged), rebuilt whenever a map is
//! built, and kept by the only methods that change the maps. Reads go
//! through `Deref` to the maps themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::state::{Ledger, Log};
use quire_log::config::LEDGER_KEY as LOG_LEDGER_KEY;

/// Ledgers by id, and by the log their custom metadata says they were made
/// for (`quire_log::config::LEDGER_KEY`).
#[derive(Clone, Default)]
pub struct Ledgers {
    by_id: BTreeMap<u64, Ledger>,
    /// Ids of the ledgers carrying `LEDGER_KEY = name`, by that name's bytes.
    made_for: BTreeMap<Vec<u8>, BTreeSet<u64>>,
}

impl Ledgers {
    /// Stores `ledger` under `id`, returning what was there.
    pub fn insert(&mut self, id: u64, ledger: Ledger) -> Option<Ledger> {
        debug_assert_eq!(id, ledger.ledger_id, "a ledger is stored under its own id");
        if let Some(name) = ledger.custom.get(LOG_LEDGER_KEY) {
            self.made_for.entry(name.clone()).or_default().insert(id);
        }
        let old = self.by_id.insert(id, ledger);
        if let Some(old) = &old {
            self.unindex_if_changed(id, old);
        }
        old
    }

    /// Removes ledger `id`, returning it.
    pub fn remove(&mut self, id: &u64) -> Option<Ledger> {
        let old = self.by_id.remove(id)?;
        if let Some(name) = old.custom.get(LOG_LEDGER_KEY) {
            self.unindex(name, *id);
        }
        Some(old)
    }

    /// The ids of the ledgers made for log `name` (their custom metadata
    /// says so), ascending.
    pub fn made_for(&self, name: &str) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.made_for.get(name.as_bytes()).into_iter().flat_map(|ids| ids.iter().copied())
    }

    /// `old` was replaced at `id`: drop its index entry unless the new
    /// ledger names the same log.
    fn unindex_if_changed(&mut self, id: u64, old: &Ledger) {
        let Some(old_name) = old.custom.get(LOG_LEDGER_KEY) else { return };
        if self.by_id[&id].custom.get(LOG_LEDGER_KEY) != Some(old_name) {
            let name = old_name.clone();
            self.unindex(&name, id);
        }
    }

    fn unindex(&mut self, name: &[u8], id: u64) {
        if let Some(ids) = self.made_for.get_mut(name) {
            ids.remove(&id);
            if ids.is_empty() {
                self.made_for.remove(name);
            }
        }
    }
}

impl Deref for Ledgers {
    type Target = BTreeMap<u64, Ledger>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

impl FromIterator<(u64, Ledger)> for Ledgers {
    fn from_iter<I: IntoIterator<Item = (u64, Ledger)>>(iter: I) -> Self {
        let mut l = Ledgers::default();
        for (id, ledger) in iter {
            l.insert(id, ledger);
        }
        l
    }
}

impl PartialEq for Ledgers {
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

impl Eq for Ledgers {}

impl std::fmt::Debug for Ledgers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.by_id.fmt(f)
    }
}

// Encoded as the map alone: snapshots are unchanged.
impl Serialize for Ledgers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.by_id.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Ledgers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(BTreeMap::<u64, Ledger>::deserialize(d)?.into_iter().collect())
    }
}

/// Logs by name, and which logs list each ledger.
#[derive(Clone, Default)]
pub struct Logs {
    by_name: BTreeMap<String, Log>,
    /// The names of the logs whose record lists each ledger id.
    listed_by: BTreeMap<u64, BTreeSet<String>>,
}

impl Logs {
    /// Stores `log` under `name`, returning what was there.
    pub fn insert(&mut self, name: String, log: Log) -> Option<Log> {
        let old = self.by_name.remove(&name);
        if let Some(old) = &old {
            for s in &old.record.segments {
                self.unlist(s.ledger_id, &name);
            }
        }
        for s in &log.record.segments {
            self.listed_by.entry(s.ledger_id).or_default().insert(name.clone());
        }
        self.by_name.insert(name, log);
        old
    }

    /// Removes log `name`, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Log> {
        let old = self.by_name.remove(name)?;
        for s in &old.record.segments {
            self.unlist(s.ledger_id, name);
        }
        Some(old)
    }

    /// Sets log `name`'s HTTP principal (which no index depends on).
    pub fn set_principal(&mut self, name: &str, principal: String) {
        if let Some(l) = self.by_name.get_mut(name) {
            l.principal = principal;
        }
    }

    /// The names of the logs listing ledger `id`, ascending.
    pub fn listing(&self, id: u64) -> impl Iterator<Item = &str> + '_ {
        self.listed_by.get(&id).into_iter().flat_map(|names| names.iter().map(String::as_str))
    }

    fn unlist(&mut self, id: u64, name: &str) {
        if let Some(names) = self.listed_by.get_mut(&id) {
            names.remove(name);
            if names.is_empty() {
                self.listed_by.remove(&id);
            }
        }
    }
}

impl Deref for Logs {
    type Target = BTreeMap<String, Log>;

    fn deref(&self) -> &Self::Target {
        &self.by_name
    }
}

impl FromIterator<(String, Log)> for Logs {
    fn from_iter<I: IntoIterator<Item = (String, Log)>>(iter: I) -> Self {
        let mut l = Logs::default();
        for (name, log) in iter {
            l.insert(name, log);
        }
        l
    }
}

impl PartialEq for Logs {
    fn eq(&self, other: &Self) -> bool {
        self.by_name == other.by_name
    }
}

impl Eq for Logs {}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.by_name.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(id: u64, log: Option<&str>) -> Ledger {
        let mut custom = BTreeMap::new();
        if let Some(name) = log {
            custom.insert(LOG_LEDGER_KEY.to_string(), name.as_bytes().to_vec());
        }
        Ledger {
            ledger_id: id,
            state: crate::state::LedgerState::Open,
            ensemble_size: 1,
            write_quorum: 1,
            ack_quorum: 1,
            ensembles: vec![],
            last_entry_id: -1,
            length: 0,
            digest_type: "crc32c".into(),
            custom,
            created_at_ms: 0,
            version: 1,
        }
    }

    /// The index always equals one built from scratch from the map, through
    /// inserts, replacements that change or drop the log key, and removes.
    #[test]
    fn the_ledger_index_follows_every_change() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut l = Ledgers::default();
        for _ in 0..5_000 {
            let id = next() % 64;
            match next() % 4 {
                0 => {
                    l.remove(&id);
                }
                k => {
                    let name = ["a", "b", "c"][(next() % 3) as usize];
                    l.insert(id, ledger(id, (k != 1).then_some(name)));
                }
            }
            let rebuilt: Ledgers = l.by_id.clone().into_iter().collect();
            assert_eq!(l.made_for, rebuilt.made_for);
        }
        assert!(l.made_for("a").all(|id| l[&id].custom[LOG_LEDGER_KEY] == b"a"));
        let decoded: Ledgers = postcard::from_bytes(&postcard::to_stdvec(&l).unwrap()).unwrap();
        assert_eq!((decoded.by_id == l.by_id, decoded.made_for == l.made_for), (true, true));
        // Encoded as the map alone.
        assert_eq!(postcard::to_stdvec(&l).unwrap(), postcard::to_stdvec(&l.by_id).unwrap());
    }

    /// The listing index follows logs replaced (segments added and
    /// trimmed) and removed.
    #[test]
    fn the_listing_index_follows_every_change() {
        let with = |name: &str, ids: &[u64]| {
            let mut log = crate::logs::test_log(name, "gateway/1");
            log.record.segments = ids
                .iter()
                .map(|&ledger_id| quire_log::LogSegment {
                    ledger_id,
                    first_offset: 0,
                    end_offset: None,
                    sealed_at_ms: 0,
                })
                .collect();
            log
        };
        let mut logs = Logs::default();
        logs.insert("a".into(), with("a", &[1, 2]));
        logs.insert("b".into(), with("b", &[2, 3]));
        assert_eq!(logs.listing(2).collect::<Vec<_>>(), vec!["a", "b"]);
        logs.insert("a".into(), with("a", &[2, 4]));
        assert_eq!(logs.listing(1).count(), 0, "trimmed from a");
        assert_eq!(logs.listing(4).collect::<Vec<_>>(), vec!["a"]);
        logs.remove("b");
        assert_eq!(logs.listing(2).collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(logs.listing(3).count(), 0);
        let rebuilt: Logs = logs.by_name.clone().into_iter().collect();
        assert_eq!(rebuilt.listed_by, logs.listed_by);
    }
}
