//! Ledger metadata as the protocol sees it, validated on the way in (a peer's
//! bytes are never trusted), and the edits the protocol makes to it: an
//! ensemble change, entering recovery, closing.

use std::collections::BTreeMap;

use bytes::Bytes;
use quire_proto::v1;

use crate::writer::{Member, Quorums};

/// A ledger's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerState {
    /// A writer may add.
    Open,
    /// Recovery has begun: the old writer is being fenced out.
    InRecovery,
    /// Sealed at `last_entry_id`.
    Closed,
}

impl LedgerState {
    /// The name the HTTP API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerState::Open => "open",
            LedgerState::InRecovery => "in_recovery",
            LedgerState::Closed => "closed",
        }
    }
}

/// One ensemble: the members holding entries from `first_entry_id` until the
/// next segment's first entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Segment {
    /// First entry id it stores.
    pub first_entry_id: u64,
    /// The bookies in stripe order, with the instance each was when it joined.
    pub members: Vec<Member>,
}

/// A ledger's custom metadata: keys in order, each once. A sorted slice
/// rather than a B-tree, whose one node is about 640 bytes for two keys
/// (every open ledger a gateway holds keeps its metadata: issue #46).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Custom(Box<[(String, Bytes)]>);

impl Custom {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Bytes> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok().map(|i| &self.0[i].1)
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: String, value: Bytes) {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&key)) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => {
                let mut v = std::mem::take(&mut self.0).into_vec();
                v.insert(i, (key, value));
                self.0 = v.into_boxed_slice();
            }
        }
    }

    /// The keys and values, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Bytes)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A later value for a key replaces an earlier one, as in a map.
impl FromIterator<(String, Bytes)> for Custom {
    fn from_iter<I: IntoIterator<Item = (String, Bytes)>>(iter: I) -> Custom {
        let map: BTreeMap<String, Bytes> = iter.into_iter().collect();
        Custom(map.into_iter().collect())
    }
}

impl From<BTreeMap<String, Bytes>> for Custom {
    fn from(map: BTreeMap<String, Bytes>) -> Custom {
        Custom(map.into_iter().collect())
    }
}

/// A ledger's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LedgerMeta {
    /// Never reused.
    pub ledger_id: u64,
    /// Lifecycle state.
    pub state: LedgerState,
    /// E, Qw, Qa.
    pub quorums: Quorums,
    /// Ensembles by first entry id, ascending; never empty.
    pub segments: Vec<Segment>,
    /// Once closed: the last entry (-1 for an empty ledger).
    pub last_entry_id: i64,
    /// Once closed: payload bytes.
    pub length: u64,
    /// Application metadata.
    pub custom: Custom,
    /// Creation time (metadata leader's clock).
    pub created_at_ms: u64,
    /// The CAS token.
    pub version: u64,
    /// Digest algorithm ("crc32c").
    pub digest_type: String,
}

/// Metadata that does not describe a usable ledger.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid metadata for ledger {ledger_id}: {why}")]
pub struct InvalidMetadata {
    /// The ledger.
    pub ledger_id: u64,
    /// What is wrong.
    pub why: String,
}

impl LedgerMeta {
    /// Validates and converts the metadata service's record.
    pub fn from_proto(p: v1::LedgerMetadata) -> Result<LedgerMeta, InvalidMetadata> {
        let ledger_id = p.ledger_id;
        let bad = |why: String| InvalidMetadata { ledger_id, why };
        let state = match v1::LedgerState::try_from(p.state) {
            Ok(v1::LedgerState::Open) => LedgerState::Open,
            Ok(v1::LedgerState::InRecovery) => LedgerState::InRecovery,
            Ok(v1::LedgerState::Closed) => LedgerState::Closed,
            _ => return Err(bad(format!("unknown state {}", p.state))),
        };
        let quorums = Quorums::new(p.ensemble_size as usize, p.write_quorum as usize, p.ack_quorum as usize)
            .ok_or_else(|| bad(format!("quorums E={} Qw={} Qa={}", p.ensemble_size, p.write_quorum, p.ack_quorum)))?;
        if p.ensembles.is_empty() {
            return Err(bad("no ensemble".into()));
        }
        let mut segments = Vec::with_capacity(p.ensembles.len());
        for s in p.ensembles {
            if s.bookie_ids.len() != quorums.ensemble {
                return Err(bad(format!("an ensemble of {} bookies for E={}", s.bookie_ids.len(), quorums.ensemble)));
            }
            if !s.instance_ids.is_empty() && s.instance_ids.len() != s.bookie_ids.len() {
                return Err(bad("instance ids do not match the ensemble".into()));
            }
            if segments.last().is_some_and(|l: &Segment| l.first_entry_id > s.first_entry_id) {
                return Err(bad("ensembles out of order".into()));
            }
            let members = s
                .bookie_ids
                .iter()
                .enumerate()
                .map(|(i, b)| Member {
                    bookie_id: b.clone(),
                    instance_id: s.instance_ids.get(i).cloned().unwrap_or_default(),
                })
                .collect();
            segments.push(Segment { first_entry_id: s.first_entry_id, members });
        }
        if segments[0].first_entry_id != 0 {
            return Err(bad("the first ensemble does not start at entry 0".into()));
        }
        Ok(LedgerMeta {
            ledger_id,
            state,
            quorums,
            segments,
            last_entry_id: p.last_entry_id,
            length: p.length,
            // Copied: the values arrive as slices of the whole response
            // frame, which a long-lived writer would otherwise keep.
            custom: p.custom.into_iter().map(|(k, v)| (k, Bytes::copy_from_slice(&v))).collect(),
            created_at_ms: p.created_at_ms,
            version: p.version,
            digest_type: p.digest_type,
        })
    }

    /// The record for the metadata service.
    pub fn to_proto(&self) -> v1::LedgerMetadata {
        let state = match self.state {
            LedgerState::Open => v1::LedgerState::Open,
            LedgerState::InRecovery => v1::LedgerState::InRecovery,
            LedgerState::Closed => v1::LedgerState::Closed,
        };
        v1::LedgerMetadata {
            ledger_id: self.ledger_id,
            state: state as i32,
            ensemble_size: self.quorums.ensemble as u32,
            write_quorum: self.quorums.write as u32,
            ack_quorum: self.quorums.ack as u32,
            ensembles: self
                .segments
                .iter()
                .map(|s| v1::EnsembleSegment {
                    first_entry_id: s.first_entry_id,
                    bookie_ids: s.members.iter().map(|m| m.bookie_id.clone()).collect(),
                    instance_ids: if s.members.iter().all(|m| m.instance_id.is_empty()) {
                        Vec::new()
                    } else {
                        s.members.iter().map(|m| m.instance_id.clone()).collect()
                    },
                })
                .collect(),
            last_entry_id: self.last_entry_id,
            length: self.length,
            digest_type: self.digest_type.clone(),
            custom: self.custom.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            created_at_ms: self.created_at_ms,
            version: self.version,
        }
    }

    /// The segment holding `entry_id`.
    pub fn segment_of(&self, entry_id: u64) -> &Segment {
        self.segments.iter().rev().find(|s| s.first_entry_id <= entry_id).expect("the first segment starts at 0")
    }

    /// The current (last) segment.
    pub fn last_segment(&self) -> &Segment {
        self.segments.last().expect("never empty")
    }

    /// The ensembles keyed by first entry id, as the writer keeps them.
    pub fn ensembles(&self) -> BTreeMap<u64, Vec<Member>> {
        self.segments.iter().map(|s| (s.first_entry_id, s.members.clone())).collect()
    }

    /// The metadata with `members` as the ensemble from `first_entry_id` on.
    /// A last segment that starts there already (it never held an
    /// acknowledged entry) is replaced rather than followed by an empty one.
    pub fn with_ensemble(&self, first_entry_id: u64, members: Vec<Member>) -> LedgerMeta {
        let mut next = self.clone();
        assert!(first_entry_id >= self.last_segment().first_entry_id, "ensembles only change at the tail");
        if next.last_segment().first_entry_id == first_entry_id {
            next.segments.last_mut().expect("never empty").members = members;
        } else {
            next.segments.push(Segment { first_entry_id, members });
        }
        next
    }

    /// This (stored, in recovery) record closed by a recovery that started
    /// from the last segment at `base`: its segments before `base` (an
    /// earlier segment's members may have moved since, by re-replication),
    /// then the recovery's `ensembles` from `base` on (its replacements made
    /// during write-back, stored here for the first time), closed at
    /// `last_entry_id` with `length` bytes.
    pub fn closed_by_recovery(
        &self,
        base: u64,
        ensembles: &BTreeMap<u64, Vec<Member>>,
        last_entry_id: i64,
        length: u64,
    ) -> LedgerMeta {
        let mut next = self.clone();
        next.segments.retain(|s| s.first_entry_id < base);
        next.segments.extend(ensembles.range(base..).map(|(f, m)| Segment { first_entry_id: *f, members: m.clone() }));
        assert!(next.segments.first().is_some_and(|s| s.first_entry_id == 0), "recovery keeps the first segment");
        next.state = LedgerState::Closed;
        next.last_entry_id = last_entry_id;
        next.length = length;
        next
    }

    /// The ledger as the HTTP API and the CLI show it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ledger_id": self.ledger_id,
            "state": self.state.as_str(),
            "ensemble": self.quorums.ensemble,
            "write_quorum": self.quorums.write,
            "ack_quorum": self.quorums.ack,
            "ensembles": self.segments.iter().map(|s| serde_json::json!({
                "first_entry_id": s.first_entry_id,
                "bookies": s.members.iter().map(|b| b.bookie_id.clone()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "version": self.version,
            "created_at_ms": self.created_at_ms,
            "metadata": self
                .custom
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect::<BTreeMap<_, _>>(),
        })
    }

    /// The LAC readers may read up to when the ledger is closed.
    pub fn closed_lac(&self) -> Option<i64> {
        (self.state == LedgerState::Closed).then_some(self.last_entry_id)
    }
}

/// What a writer's compare-and-set conflict means, given the record now stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Recovery or a close got there first: the writer is fenced out.
    Fenced,
    /// Only fields the writer does not own changed: retry on this version.
    Retry(u64),
}

/// Judges a CAS conflict of the party that owns `ours` (the writer of an open
/// ledger, or recovery of one in recovery) against `theirs`, the record now
/// stored. That party owns the last ensemble; re-replication may have moved
/// an earlier segment's copies to other bookies meanwhile (same segments,
/// other members), which it retries on top of. Any other change to the
/// ensembles, or another state, means someone else has taken over.
pub fn writer_conflict(ours: &LedgerMeta, theirs: &LedgerMeta) -> Conflict {
    let same_shape = theirs.segments.len() == ours.segments.len()
        && theirs.segments.iter().zip(&ours.segments).all(|(t, o)| t.first_entry_id == o.first_entry_id);
    let only_earlier_members_moved = same_shape && theirs.segments.last() == ours.segments.last();
    if theirs.state != ours.state || !only_earlier_members_moved {
        Conflict::Fenced
    } else {
        Conflict::Retry(theirs.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The custom map keeps keys in order, each once, the last value
    /// winning, as the B-tree it replaced did.
    #[test]
    fn custom_metadata_behaves_as_a_map() {
        let mut c: Custom =
            [("b", "2"), ("a", "1"), ("b", "3")].into_iter().map(|(k, v)| (k.to_string(), Bytes::from(v))).collect();
        assert_eq!(c.iter().map(|(k, v)| (k.as_str(), &v[..])).collect::<Vec<_>>(), [("a", &b"1"[..]), ("b", b"3")]);
        c.insert("c".into(), Bytes::from("4"));
        c.insert("a".into(), Bytes::from("5"));
        assert_eq!(
            (c.get("a"), c.get("c"), c.get("z"), c.len()),
            (Some(&Bytes::from("5")), Some(&Bytes::from("4")), None, 3)
        );
        assert_eq!(c.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    fn proto() -> v1::LedgerMetadata {
        v1::LedgerMetadata {
            ledger_id: 5,
            state: v1::LedgerState::Open as i32,
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            ensembles: vec![v1::EnsembleSegment {
                first_entry_id: 0,
                bookie_ids: vec!["a".into(), "b".into(), "c".into()],
                instance_ids: vec!["ia".into(), "ib".into(), "ic".into()],
            }],
            last_entry_id: -1,
            version: 3,
            digest_type: "crc32c".into(),
            ..Default::default()
        }
    }

    #[test]
    fn round_trips_and_refuses_nonsense() {
        let m = LedgerMeta::from_proto(proto()).unwrap();
        assert_eq!(m.to_proto(), proto());
        assert_eq!(m.last_segment().members[1].instance_id, "ib");
        let mut p = proto();
        p.ensembles[0].bookie_ids.pop();
        assert!(LedgerMeta::from_proto(p).is_err());
        let mut p = proto();
        p.ack_quorum = 4;
        assert!(LedgerMeta::from_proto(p).is_err());
        let mut p = proto();
        p.state = 42;
        assert!(LedgerMeta::from_proto(p).is_err());
        let mut p = proto();
        p.ensembles[0].first_entry_id = 1;
        assert!(LedgerMeta::from_proto(p).is_err());
    }

    #[test]
    fn an_ensemble_change_appends_or_replaces_an_empty_tail_segment() {
        let m = LedgerMeta::from_proto(proto()).unwrap();
        let mut members = m.last_segment().members.clone();
        members[2] = Member { bookie_id: "d".into(), instance_id: "id".into() };
        let a = m.with_ensemble(10, members.clone());
        assert_eq!(a.segments.len(), 2);
        assert_eq!(a.segment_of(9).first_entry_id, 0);
        assert_eq!(a.segment_of(10).members[2].bookie_id, "d");
        let b = m.with_ensemble(0, members);
        assert_eq!(b.segments.len(), 1, "segment 0 held nothing acknowledged");
        assert_eq!(writer_conflict(&m, &b), Conflict::Fenced);
        let mut c = m.clone();
        c.version = 9;
        assert_eq!(writer_conflict(&m, &c), Conflict::Retry(9));
        c.state = LedgerState::InRecovery;
        assert_eq!(writer_conflict(&m, &c), Conflict::Fenced);
    }

    #[test]
    fn a_recovery_close_stores_its_ensembles_from_its_base_and_keeps_earlier_moves() {
        let m = LedgerMeta::from_proto(proto()).unwrap();
        let d = Member { bookie_id: "d".into(), instance_id: "id".into() };
        let mut started = m.with_ensemble(10, m.last_segment().members.clone());
        started.state = LedgerState::InRecovery;
        // Recovery replaced c from 12 on, and in place at its base too.
        let mut ours = started.ensembles();
        let mut with_d = started.last_segment().members.clone();
        with_d[2] = d.clone();
        ours.insert(10, with_d.clone());
        ours.insert(12, with_d.clone());
        // Meanwhile a worker moved segment 0's copies from a to e.
        let mut stored = started.clone();
        stored.segments[0].members[0] = Member { bookie_id: "e".into(), instance_id: "ie".into() };
        let closed = stored.closed_by_recovery(10, &ours, 20, 99);
        assert_eq!(closed.state, LedgerState::Closed);
        assert_eq!((closed.last_entry_id, closed.length), (20, 99));
        assert_eq!(closed.segments[0], stored.segments[0], "the worker's move is kept");
        assert_eq!(
            closed.ensembles(),
            BTreeMap::from([(0, stored.segments[0].members.clone()), (10, with_d.clone()), (12, with_d)])
        );
    }

    #[test]
    fn re_replication_of_an_earlier_segment_is_retried_on_but_the_last_is_the_writers() {
        let m = LedgerMeta::from_proto(proto()).unwrap();
        let mut members = m.last_segment().members.clone();
        members[2] = Member { bookie_id: "d".into(), instance_id: "id".into() };
        let ours = m.with_ensemble(10, members);
        // A worker moved segment 0's copies from a to e.
        let mut moved = ours.clone();
        moved.segments[0].members[0] = Member { bookie_id: "e".into(), instance_id: "ie".into() };
        moved.version = ours.version + 1;
        assert_eq!(writer_conflict(&ours, &moved), Conflict::Retry(moved.version));
        // But a change to the last segment, or a new segment, is someone else's ensemble change.
        let mut last = ours.clone();
        last.segments[1].members[0] = Member { bookie_id: "e".into(), instance_id: "ie".into() };
        assert_eq!(writer_conflict(&ours, &last), Conflict::Fenced);
        let more = ours.with_ensemble(20, ours.last_segment().members.clone());
        assert_eq!(writer_conflict(&ours, &more), Conflict::Fenced);
    }
}
