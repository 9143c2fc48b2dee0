//! A log as the metadata service stores it, and as the wire carries it
//! (`quire.v1.LogMetadata`).

use quire_proto::v1;
use serde::{Deserialize, Serialize};

use crate::chain::{LogRecord, LogSegment};
use crate::config::{LogConfig, Retention, Rollover};
use crate::producers::{ProducerState, Producers};

/// A log's stored metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// Segments, owner epoch, trim point.
    pub record: LogRecord,
    /// Ledger shape, rollover, retention.
    pub config: LogConfig,
    /// The de-duplication table as of `producers.covers_before`.
    pub producers: Producers,
    /// The creator's certificate identity (`role/id`): who may change it.
    pub creator: String,
    /// Leader clock at creation.
    pub created_at_ms: u64,
    /// Bumped by every update: the CAS token.
    pub version: u64,
    /// The HTTP principal a gateway created it for (empty: none). Only
    /// that principal may append to it, trim it, take it over, hold its
    /// retention or delete it through a gateway; anyone may read it. Set
    /// at creation and never changed. (Skipped by serde: the metadata
    /// service stores it after the encoded record, so that records, Raft
    /// commands and snapshots written before it still decode.)
    #[serde(skip)]
    pub principal: String,
}

impl LogMeta {
    /// As the HTTP API and the CLI show it.
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.record;
        let c = &self.config;
        serde_json::json!({
            "name": r.name,
            "epoch": r.epoch,
            "owner": r.owner,
            "trim_before": r.trim_before,
            "ledgers": r.segments.iter().map(|s| serde_json::json!({
                "ledger_id": s.ledger_id, "first_offset": s.first_offset, "end_offset": s.end_offset,
                "sealed_at_ms": s.sealed_at_ms,
            })).collect::<Vec<_>>(),
            "ensemble": c.ensemble_size,
            "write_quorum": c.write_quorum,
            "ack_quorum": c.ack_quorum,
            "rollover": {
                "max_entries": c.rollover.max_entries,
                "max_bytes": c.rollover.max_bytes,
                "max_age_ms": c.rollover.max_age_ms,
            },
            "retention": { "max_age_ms": c.retention.max_age_ms, "max_bytes": c.retention.max_bytes },
            "version": self.version,
            "created_at_ms": self.created_at_ms,
            "principal": if self.principal.is_empty() { serde_json::Value::Null } else { self.principal.clone().into() },
        })
    }

    /// As the wire carries it.
    pub fn to_wire(&self) -> v1::LogMetadata {
        let r = &self.record;
        let c = &self.config;
        v1::LogMetadata {
            name: r.name.clone(),
            epoch: r.epoch,
            owner: r.owner.clone(),
            segments: r
                .segments
                .iter()
                .map(|s| v1::LogSegment {
                    ledger_id: s.ledger_id,
                    first_offset: s.first_offset,
                    end_offset: s.end_offset,
                    sealed_at_ms: s.sealed_at_ms,
                })
                .collect(),
            trim_before: r.trim_before,
            ensemble_size: c.ensemble_size,
            write_quorum: c.write_quorum,
            ack_quorum: c.ack_quorum,
            rollover: Some(v1::LogRollover {
                max_entries: c.rollover.max_entries,
                max_bytes: c.rollover.max_bytes,
                max_age_ms: c.rollover.max_age_ms,
            }),
            retention: Some(v1::LogRetention { max_age_ms: c.retention.max_age_ms, max_bytes: c.retention.max_bytes }),
            producers_cover_before: self.producers.covers_before,
            producers: self
                .producers
                .by_id
                .iter()
                .map(|(id, p)| v1::LogProducer {
                    producer_id: id.clone(),
                    last_sequence: p.last_sequence,
                    recent_sequences: p.recent.iter().map(|(s, _)| *s).collect(),
                    recent_offsets: p.recent.iter().map(|(_, o)| *o).collect(),
                })
                .collect(),
            created_at_ms: self.created_at_ms,
            version: self.version,
            creator: self.creator.clone(),
            cursors: Vec::new(),
            principal: self.principal.clone(),
        }
    }

    /// From the wire; `Err` names what is malformed (the record's own
    /// invariants are [`LogRecord::check`]'s, not checked here).
    pub fn from_wire(m: &v1::LogMetadata) -> Result<LogMeta, String> {
        let rollover = m.rollover.unwrap_or_default();
        let retention = m.retention.unwrap_or_default();
        let mut producers = Producers { covers_before: m.producers_cover_before, ..Producers::default() };
        for p in &m.producers {
            if p.recent_sequences.len() != p.recent_offsets.len() {
                return Err(format!("producer {}: sequences and offsets differ in number", p.producer_id));
            }
            let recent: Vec<(u64, u64)> =
                p.recent_sequences.iter().copied().zip(p.recent_offsets.iter().copied()).collect();
            if recent.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(format!("producer {}: recent sequences out of order", p.producer_id));
            }
            let state = ProducerState { last_sequence: p.last_sequence, recent };
            if producers.by_id.insert(p.producer_id.clone(), state).is_some() {
                return Err(format!("producer {} listed twice", p.producer_id));
            }
        }
        Ok(LogMeta {
            record: LogRecord {
                name: m.name.clone(),
                epoch: m.epoch,
                owner: m.owner.clone(),
                segments: m
                    .segments
                    .iter()
                    .map(|s| LogSegment {
                        ledger_id: s.ledger_id,
                        first_offset: s.first_offset,
                        end_offset: s.end_offset,
                        sealed_at_ms: s.sealed_at_ms,
                    })
                    .collect(),
                trim_before: m.trim_before,
            },
            config: LogConfig {
                ensemble_size: m.ensemble_size,
                write_quorum: m.write_quorum,
                ack_quorum: m.ack_quorum,
                rollover: Rollover {
                    max_entries: rollover.max_entries,
                    max_bytes: rollover.max_bytes,
                    max_age_ms: rollover.max_age_ms,
                },
                retention: Retention { max_age_ms: retention.max_age_ms, max_bytes: retention.max_bytes },
            },
            producers,
            creator: m.creator.clone(),
            created_at_ms: m.created_at_ms,
            version: m.version,
            principal: m.principal.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_crosses_the_wire_unchanged() {
        let mut producers = Producers::default();
        producers.observe("p", 3, 7);
        producers.observe("p", 4, 9);
        producers.cover(10);
        let log = LogMeta {
            record: LogRecord::new("orders", "gw-1", 5).roll(1, 9, 6).unwrap(),
            config: LogConfig {
                ensemble_size: 3,
                write_quorum: 3,
                ack_quorum: 2,
                rollover: Rollover::default(),
                retention: Retention { max_age_ms: 1, max_bytes: 2 },
            },
            producers,
            creator: "gateway/1".into(),
            created_at_ms: 11,
            version: 4,
            principal: "alice".into(),
        };
        assert_eq!(LogMeta::from_wire(&log.to_wire()).unwrap(), log);
        let mut bad = log.to_wire();
        bad.producers[0].recent_offsets.pop();
        assert!(LogMeta::from_wire(&bad).is_err());
    }
}
