//! The auditor's decisions, as plain functions and a small state machine:
//! no I/O, time passed in (`now_ms`).
//!
//! - A bookie is *lost* once its registration has been gone for the grace
//!   period (BookKeeper's lostBookieRecoveryDelay), counted from when this
//!   auditor first saw it missing. Only bookies some ledger names matter.
//! - A ledger needs repair on a bookie when that bookie is lost or being
//!   decommissioned and the ledger keeps copies there: a repairable
//!   fragment, or the writer's last segment (the worker waits for the
//!   writer, then recovers the ledger).

use std::collections::{BTreeMap, BTreeSet};

use quire_client::fragments::repairable;
use quire_client::meta::LedgerMeta;

/// When each missing bookie was first seen missing.
#[derive(Debug, Default)]
pub struct LostBookies {
    grace_ms: u64,
    absent_since_ms: BTreeMap<String, u64>,
}

impl LostBookies {
    /// Bookies count as lost after `grace_ms` without a registration.
    pub fn new(grace_ms: u64) -> LostBookies {
        LostBookies { grace_ms, absent_since_ms: BTreeMap::new() }
    }

    /// Given who is registered and who ledgers name, the lost bookies now.
    pub fn observe(
        &mut self,
        registered: &BTreeSet<String>,
        named: &BTreeSet<String>,
        now_ms: u64,
    ) -> BTreeSet<String> {
        self.absent_since_ms.retain(|b, _| !registered.contains(b) && named.contains(b));
        for b in named.difference(registered) {
            self.absent_since_ms.entry(b.clone()).or_insert(now_ms);
        }
        self.absent_since_ms
            .iter()
            .filter(|(_, since)| now_ms.saturating_sub(**since) >= self.grace_ms)
            .map(|(b, _)| b.clone())
            .collect()
    }
}

/// Every bookie a ledger's segments name.
pub fn named_by(meta: &LedgerMeta) -> BTreeSet<String> {
    meta.segments.iter().flat_map(|s| s.members.iter().map(|m| m.bookie_id.clone())).collect()
}

/// Which of `gone` (lost or draining) `meta` keeps copies on.
pub fn needs_repair(meta: &LedgerMeta, gone: &BTreeSet<String>) -> Vec<String> {
    named_by(meta)
        .into_iter()
        .filter(|b| gone.contains(b))
        .filter(|b| {
            let (fragments, in_writers_segment) = repairable(meta, b);
            !fragments.is_empty() || in_writers_segment
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_bookie_is_lost_only_after_the_grace_period_and_forgiven_when_back() {
        let mut l = LostBookies::new(1000);
        let named = set(&["a", "b", "c"]);
        assert!(l.observe(&set(&["a", "b", "c"]), &named, 0).is_empty());
        assert!(l.observe(&set(&["a", "b"]), &named, 100).is_empty(), "c just went");
        assert!(l.observe(&set(&["a", "b"]), &named, 1099).is_empty());
        assert_eq!(l.observe(&set(&["a", "b"]), &named, 1100), set(&["c"]));
        // Back before anyone repaired it: no longer lost, and its clock restarts.
        assert!(l.observe(&set(&["a", "b", "c"]), &named, 1200).is_empty());
        assert!(l.observe(&set(&["a", "b"]), &named, 1300).is_empty());
        // A bookie no ledger names is nobody's concern.
        assert!(l.observe(&set(&["a"]), &set(&["a"]), 5000).is_empty());
    }

    #[test]
    fn a_ledger_needs_repair_where_it_keeps_copies_on_a_gone_bookie() {
        let p = quire_proto::v1::LedgerMetadata {
            ledger_id: 1,
            state: quire_proto::v1::LedgerState::Closed as i32,
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            ensembles: vec![
                quire_proto::v1::EnsembleSegment {
                    first_entry_id: 0,
                    bookie_ids: vec!["a".into(), "b".into(), "c".into()],
                    instance_ids: vec![],
                },
                quire_proto::v1::EnsembleSegment {
                    first_entry_id: 10,
                    bookie_ids: vec!["a".into(), "d".into(), "c".into()],
                    instance_ids: vec![],
                },
            ],
            last_entry_id: 9,
            version: 1,
            digest_type: "crc32c".into(),
            ..Default::default()
        };
        let m = LedgerMeta::from_proto(p).unwrap();
        assert_eq!(needs_repair(&m, &set(&["b", "x"])), vec!["b".to_string()]);
        // d is named only by a segment that never held an entry.
        assert!(needs_repair(&m, &set(&["d"])).is_empty());
    }
}
