//! The state's ledgers and logs, each with the indexes a command needs so
//! that its cost follows what it touches, not the size of the cluster
//! (issue #46 item 5: a log's takeover swept every ledger under the state's
//! write lock).
//!
//! The indexes are derived: never persisted nor carried in a snapshot
//! (both encode the maps alone, unchanged), rebuilt whenever a map is
//! built, and kept by the only methods that change the maps. Reads go
//! through `Deref` to the maps themselves.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::state::{Ledger, LedgerHead, Log};
use quire_log::config::LEDGER_KEY as LOG_LEDGER_KEY;

/// Ledgers by id, each held as its postcard encoding, and by the log their
/// custom metadata says they were made for (`quire_log::config::LEDGER_KEY`).
///
/// Encoded because a replica holds every ledger ever kept (issue #46 item
/// 4): a closed ledger with three bookies and three custom keys is about
/// 190 bytes encoded, and was about 1.3 KB decoded (its custom map alone a
/// B-tree node of 540 bytes), so a million of them needed 1.3 GB. Reads
/// decode the one ledger they name (about a microsecond); the few scans
/// that filter every ledger (a bookie's load, a decommission check) decode
/// only each one's start, borrowing its strings (`heads`).
///
/// Copied cheaply ([`Chunks`]): a snapshot copies the state under its read
/// lock, and every apply waits meanwhile.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Ledgers {
    by_id: Chunks,
    /// Ids of the ledgers carrying `LEDGER_KEY = name`, by that name's bytes.
    made_for: BTreeMap<Vec<u8>, BTreeSet<u64>>,
}

/// One chunk of [`Chunks`]: encodings by id.
type Chunk = BTreeMap<u64, Arc<[u8]>>;

/// Ids per chunk of [`Chunks`].
const CHUNK_IDS: u64 = 1 << 14;

/// A map of ledger encodings by id in copy-on-write chunks of
/// [`CHUNK_IDS`] consecutive ids. A copy shares every chunk (a million
/// ledgers: 62 pointers, where one B-tree's copy took 79 to 258 ms with
/// three replicas on two cores, every apply waiting); a change to a shared
/// chunk copies that chunk alone. Empty chunks are dropped, so equal maps
/// are equal chunk by chunk.
#[derive(Clone, Default, PartialEq, Eq)]
struct Chunks {
    chunks: BTreeMap<u64, Arc<Chunk>>,
    len: usize,
}

impl Chunks {
    fn insert(&mut self, id: u64, v: Arc<[u8]>) -> Option<Arc<[u8]>> {
        let old = Arc::make_mut(self.chunks.entry(id / CHUNK_IDS).or_default()).insert(id, v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    fn remove(&mut self, id: &u64) -> Option<Arc<[u8]>> {
        let c = self.chunks.get_mut(&(id / CHUNK_IDS))?;
        if !c.contains_key(id) {
            return None;
        }
        let chunk = Arc::make_mut(c);
        let old = chunk.remove(id);
        if chunk.is_empty() {
            self.chunks.remove(&(id / CHUNK_IDS));
        }
        self.len -= 1;
        old
    }

    fn get(&self, id: &u64) -> Option<&Arc<[u8]>> {
        self.chunks.get(&(id / CHUNK_IDS))?.get(id)
    }

    fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = (&u64, &Arc<[u8]>)> + '_ {
        self.chunks.values().flat_map(|c| c.iter())
    }

    fn keys(&self) -> impl DoubleEndedIterator<Item = &u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    fn values(&self) -> impl DoubleEndedIterator<Item = &Arc<[u8]>> + '_ {
        self.iter().map(|(_, v)| v)
    }

    fn range(&self, from: std::ops::RangeFrom<u64>) -> impl Iterator<Item = (&u64, &Arc<[u8]>)> + '_ {
        let start = from.start;
        self.chunks.range(start / CHUNK_IDS..).flat_map(move |(_, c)| c.range(start..))
    }
}

fn encode(ledger: &Ledger) -> Arc<[u8]> {
    // Encoding a value in memory fails only if serde's data model refuses
    // it, which a `Ledger` (plain fields, string-keyed maps) never does.
    Arc::from(postcard::to_stdvec(ledger).expect("a ledger encodes"))
}

fn decode(bytes: &[u8]) -> Ledger {
    // Bytes this map encoded itself: a failure is a bug, not bad input.
    postcard::from_bytes(bytes).expect("a ledger the state encoded decodes")
}

impl Ledgers {
    /// Stores `ledger` under `id`, returning what was there.
    pub fn insert(&mut self, id: u64, ledger: Ledger) -> Option<Ledger> {
        assert_eq!(id, ledger.ledger_id, "a ledger is stored under its own id");
        if let Some(name) = ledger.custom.get(LOG_LEDGER_KEY) {
            self.made_for.entry(name.clone()).or_default().insert(id);
        }
        let new_name = ledger.custom.get(LOG_LEDGER_KEY).cloned();
        let old = self.by_id.insert(id, encode(&ledger)).map(|b| decode(&b));
        if let Some(old_name) = old.as_ref().and_then(|o| o.custom.get(LOG_LEDGER_KEY)) {
            if new_name.as_ref() != Some(old_name) {
                let name = old_name.clone();
                self.unindex(&name, id);
            }
        }
        old
    }

    /// Removes ledger `id`, returning it.
    pub fn remove(&mut self, id: &u64) -> Option<Ledger> {
        let old = decode(&self.by_id.remove(id)?);
        if let Some(name) = old.custom.get(LOG_LEDGER_KEY) {
            self.unindex(name, *id);
        }
        Some(old)
    }

    /// Ledger `id`, decoded.
    pub fn get(&self, id: &u64) -> Option<Ledger> {
        self.by_id.get(id).map(|b| decode(b))
    }

    /// Whether ledger `id` exists.
    pub fn contains_key(&self, id: &u64) -> bool {
        self.by_id.contains_key(id)
    }

    /// How many ledgers there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Every ledger id, ascending.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.by_id.keys().copied()
    }

    /// The ledger ids from `from` (inclusive), ascending.
    pub fn ids_from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        self.by_id.range(from..).map(|(id, _)| *id)
    }

    /// Every ledger, decoded one at a time, by id.
    pub fn values(&self) -> impl Iterator<Item = Ledger> + '_ {
        self.by_id.values().map(|b| decode(b))
    }

    /// The start of every ledger (`LedgerHead`: which bookies hold its
    /// entries), decoded one at a time without copying, by id.
    pub fn heads(&self) -> impl Iterator<Item = LedgerHead<'_>> + '_ {
        self.by_id.values().map(|b| postcard::from_bytes(b).expect("a ledger the state encoded decodes"))
    }

    /// The bytes the ledgers' encodings take (for benchmarks).
    pub fn encoded_bytes(&self) -> usize {
        self.by_id.values().map(|b| b.len()).sum()
    }

    /// The ids of the ledgers made for log `name` (their custom metadata
    /// says so), ascending.
    pub fn made_for(&self, name: &str) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.made_for.get(name.as_bytes()).into_iter().flat_map(|ids| ids.iter().copied())
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

impl FromIterator<(u64, Ledger)> for Ledgers {
    fn from_iter<I: IntoIterator<Item = (u64, Ledger)>>(iter: I) -> Self {
        let mut l = Ledgers::default();
        for (id, ledger) in iter {
            l.insert(id, ledger);
        }
        l
    }
}

impl std::fmt::Debug for Ledgers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.by_id.iter().map(|(id, b)| (id, decode(b)))).finish()
    }
}

// Encoded as a map of ledgers, as when they were held decoded: snapshots
// are unchanged.
impl Serialize for Ledgers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // The length first (postcard needs it; a chained iterator's is not exact).
        let mut m = s.serialize_map(Some(self.by_id.len()))?;
        for (id, b) in self.by_id.iter() {
            m.serialize_entry(id, &decode(b))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Ledgers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // One ledger decoded at a time: a snapshot of a million ledgers
        // never exists decoded all at once.
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Ledgers;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of ledgers by id")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Ledgers, A::Error> {
                let mut l = Ledgers::default();
                while let Some((id, ledger)) = map.next_entry::<u64, Ledger>()? {
                    if id != ledger.ledger_id {
                        return Err(serde::de::Error::custom(format!(
                            "ledger {} stored under id {id}",
                            ledger.ledger_id
                        )));
                    }
                    l.insert(id, ledger);
                }
                Ok(l)
            }
        }
        d.deserialize_map(Visitor)
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
        // Only what the edit changed: a rollover lists one ledger more, a
        // trim some fewer, of up to 65,536 (in apply, on every replica).
        let was: HashSet<u64> = old.iter().flat_map(|o| o.record.segments.iter().map(|s| s.ledger_id)).collect();
        let now: HashSet<u64> = log.record.segments.iter().map(|s| s.ledger_id).collect();
        for id in was.difference(&now) {
            self.unlist(*id, &name);
        }
        for id in now.difference(&was) {
            self.listed_by.entry(*id).or_default().insert(name.clone());
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

    /// A ledger's head, decoded from the start of its encoding, says what
    /// the whole ledger says: its fields, and which bookies it names
    /// (segments replaced, closed early or late, with and without custom
    /// metadata after them).
    /// A copy shares the chunks and does not see later changes; order,
    /// `ids_from` and equality hold across chunk boundaries, and a chunk
    /// emptied by removals goes.
    #[test]
    fn a_copy_of_the_ledgers_is_unchanged_by_later_changes_across_chunks() {
        let ids = [0, 1, CHUNK_IDS - 1, CHUNK_IDS, 3 * CHUNK_IDS + 5];
        let mut l: Ledgers = ids.iter().map(|id| (*id, ledger(*id, None))).collect();
        assert_eq!(l.ids().collect::<Vec<_>>(), ids);
        assert_eq!(l.ids().rev().collect::<Vec<_>>(), ids.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(l.ids_from(2).collect::<Vec<_>>(), &ids[2..]);
        assert_eq!(l.ids_from(CHUNK_IDS + 1).collect::<Vec<_>>(), &ids[4..]);
        let copy = l.clone();
        l.insert(7, ledger(7, None));
        l.remove(&CHUNK_IDS);
        assert_eq!((copy.len(), l.len()), (5, 5));
        assert!(copy.contains_key(&CHUNK_IDS) && !copy.contains_key(&7));
        assert!(!l.contains_key(&CHUNK_IDS) && l.contains_key(&7));
        assert_eq!(copy.ids().collect::<Vec<_>>(), ids, "the copy saw a later change");
        // Equal contents are equal maps, however they were reached.
        let mut a: Ledgers = [(1, ledger(1, None))].into_iter().collect();
        a.insert(2 * CHUNK_IDS, ledger(2 * CHUNK_IDS, None));
        a.remove(&(2 * CHUNK_IDS));
        let b: Ledgers = [(1, ledger(1, None))].into_iter().collect();
        assert!(a == b);
        assert_eq!(a.remove(&(2 * CHUNK_IDS)), None);
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn a_ledgers_head_agrees_with_the_whole_ledger() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut l = Ledgers::default();
        for id in 0..2_000 {
            let mut ledger = ledger(id, (next(2) == 0).then_some("orders"));
            let segments = 1 + next(3);
            let mut first = 0;
            ledger.ensembles = (0..segments)
                .map(|_| {
                    first += next(5);
                    let bookie_ids: Vec<String> = (0..3).map(|_| format!("b{}", next(6))).collect();
                    let instance_ids = bookie_ids.iter().map(|b| format!("{b}-i")).collect();
                    crate::state::Segment { first_entry_id: first, bookie_ids, instance_ids }
                })
                .collect();
            ledger.state = [crate::state::LedgerState::Open, crate::state::LedgerState::Closed][next(2) as usize];
            ledger.last_entry_id = next(12) as i64 - 1;
            ledger.custom.insert("app".into(), vec![7; next(40) as usize]);
            l.insert(id, ledger);
        }
        let mut named = 0;
        for (head, whole) in l.heads().zip(l.values()) {
            assert_eq!(
                (head.ledger_id, head.state, head.ensemble_size, head.last_entry_id, head.ensembles.len()),
                (whole.ledger_id, whole.state, whole.ensemble_size, whole.last_entry_id, whole.ensembles.len())
            );
            for b in (0..6).map(|b| format!("b{b}")) {
                assert_eq!(head.names(&b), whole.names(&b), "ledger {} bookie {b}", whole.ledger_id);
                named += usize::from(whole.names(&b));
            }
        }
        assert!(named > 1_000, "the cases name bookies: {named}");
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
            let rebuilt: Ledgers = l.by_id.keys().map(|id| (*id, l.get(id).unwrap())).collect();
            assert_eq!(l.made_for, rebuilt.made_for);
        }
        assert!(l.made_for("a").all(|id| l.get(&id).unwrap().custom[LOG_LEDGER_KEY] == b"a"));
        let decoded: Ledgers = postcard::from_bytes(&postcard::to_stdvec(&l).unwrap()).unwrap();
        assert_eq!((decoded.by_id == l.by_id, decoded.made_for == l.made_for), (true, true));
        // Encoded as the map of decoded ledgers (as before they were held
        // encoded), and each held as exactly its own encoding.
        let plain: BTreeMap<u64, Ledger> = l.by_id.keys().map(|id| (*id, l.get(id).unwrap())).collect();
        assert_eq!(postcard::to_stdvec(&l).unwrap(), postcard::to_stdvec(&plain).unwrap());
        assert!(l.by_id.iter().all(|(id, b)| **b == *postcard::to_stdvec(&plain[id]).unwrap()));
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
