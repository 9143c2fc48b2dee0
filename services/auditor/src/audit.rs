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

/// Bookies `meta` names with an instance other than the one registered
/// under that id now: the registered process is a replacement (an empty
/// disk at the old address, seed 003) and holds nothing the ledger put on
/// its predecessor. Found from the registry alone, on every pass, for open
/// ledgers too: the replica check only reads closed fragments, and an idle
/// writer never learns of the replacement, so an open ledger could lose a
/// second copy before anything noticed the first (fault suite, seed 3).
pub fn replaced_members(meta: &LedgerMeta, registered: &BTreeMap<String, String>) -> BTreeSet<String> {
    meta.segments
        .iter()
        .flat_map(|s| &s.members)
        .filter(|m| !m.instance_id.is_empty())
        .filter(|m| registered.get(&m.bookie_id).is_some_and(|now| *now != m.instance_id))
        .map(|m| m.bookie_id.clone())
        .collect()
}

/// The instance each registered bookie is now: the one its process
/// answers as, where it answered (`live`), else the registered one. A
/// process that replaced a bookie at its address serves before it can
/// register: its predecessor's registration stands until that lease ends,
/// and a metadata leader change extends every lease (the fault suite saw
/// 54 s). Judged by the registry alone, the bookie looked intact all that
/// time, and the ledgers it held one copy short (seed 98).
pub fn current_instances(
    registered: &BTreeMap<String, String>,
    live: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    registered.iter().map(|(b, i)| (b.clone(), live.get(b).unwrap_or(i).clone())).collect()
}

/// Which bookies a replica check asks at this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckScope {
    /// Every bookie: a check begins.
    All,
    /// Those the check under way has not reached yet.
    Only(BTreeSet<String>),
}

/// The replica check across passes. A check begins when one is due; each
/// bookie it must ask is asked once; one that does not answer stays
/// pending and is asked again, alone, every tenth of the interval (at most
/// 30 s apart) until it answers or leaves the registry (then the
/// lost-bookie rule is its judge). Only then is the check complete. A
/// check still pending an interval after it began gives way to a new one
/// over every bookie: a bookie that never answers (cut off from the auditor
/// alone, or failing its reads) must not stop the others being checked,
/// nor be read again at every pass. Before, a bookie that did not answer was
/// skipped and the check counted as done: the report then said "checked"
/// of a bookie replaced by an empty process whose first answer was the old
/// connection's reset (seed 98).
#[derive(Debug, Clone)]
pub struct ReplicaCheck {
    /// Between the end of one complete check and the start of the next (0: never).
    interval_ms: u64,
    /// The last complete check: when it began and when it ended.
    last: Option<(Now, Now)>,
    /// The check under way: when it began, and the bookies it has not
    /// reached (`None`: its first pass has not ended; everyone is to ask).
    under_way: Option<(Now, Option<BTreeSet<String>>)>,
    /// When the check under way last asked its pending bookies.
    asked: Option<Now>,
}

/// A moment on two clocks: the monotonic one schedules checks (a wall
/// clock stepped back must not postpone them), the wall clock is what the
/// report says, for readers on other machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono_ms: u64,
    pub wall_ms: u64,
}

impl ReplicaCheck {
    /// Checks every `interval_ms` (0: never).
    pub fn new(interval_ms: u64) -> ReplicaCheck {
        ReplicaCheck { interval_ms, last: None, under_way: None, asked: None }
    }

    /// What this pass checks, if anything; begins a check when one is due.
    pub fn plan(&mut self, now: Now) -> Option<CheckScope> {
        if self.interval_ms == 0 {
            return None;
        }
        if let Some((began, pending)) = &self.under_way {
            let since = |t: Now| now.mono_ms.saturating_sub(t.mono_ms);
            match pending {
                // Its first pass failed part-way: everyone again.
                None => return Some(CheckScope::All),
                Some(_) if since(*began) >= self.interval_ms => {}
                Some(p) => {
                    let retry_ms = (self.interval_ms / 10).min(30_000);
                    let due = self.asked.is_none_or(|t| since(t) >= retry_ms);
                    return due.then(|| CheckScope::Only(p.clone()));
                }
            }
        }
        let due = self.last.is_none_or(|(_, ended)| now.mono_ms.saturating_sub(ended.mono_ms) >= self.interval_ms);
        if !due {
            return None;
        }
        self.under_way = Some((now, None));
        Some(CheckScope::All)
    }

    /// The pass that checked what `plan` said has ended, and `unreached`
    /// did not answer: the check is complete when nobody is left.
    pub fn finish(&mut self, unreached: BTreeSet<String>, now: Now) {
        let Some((began, _)) = self.under_way.take() else { return };
        self.asked = Some(now);
        if unreached.is_empty() {
            self.last = Some((began, now));
        } else {
            self.under_way = Some((began, Some(unreached)));
        }
    }

    /// Wall clock (began, ended) of the last complete check; (0, 0) before the first.
    pub fn last(&self) -> (u64, u64) {
        self.last.map_or((0, 0), |(b, e)| (b.wall_ms, e.wall_ms))
    }

    /// The bookies the check under way still has to reach.
    pub fn unreached(&self) -> Vec<String> {
        self.under_way.as_ref().and_then(|(_, p)| p.as_ref()).map_or_else(Vec::new, |p| p.iter().cloned().collect())
    }
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

    fn ledger(members: &[(&str, &str)], closed: bool) -> LedgerMeta {
        use quire_client::meta::{LedgerState, Segment};
        use quire_client::writer::{Member, Quorums};
        let members: Vec<Member> =
            members.iter().map(|(b, i)| Member { bookie_id: b.to_string(), instance_id: i.to_string() }).collect();
        LedgerMeta {
            ledger_id: 7,
            state: if closed { LedgerState::Closed } else { LedgerState::Open },
            quorums: Quorums::new(members.len(), 2, 2).unwrap(),
            segments: vec![Segment { first_entry_id: 0, members }],
            last_entry_id: if closed { 9 } else { -1 },
            length: 0,
            custom: Default::default(),
            created_at_ms: 0,
            version: 1,
            digest_type: "crc32c".into(),
        }
    }

    #[test]
    fn a_member_whose_bookie_came_back_as_another_instance_was_replaced() {
        let open = ledger(&[("1", "i1"), ("2", "i2"), ("3", "")], false);
        let reg = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        // Same instances: nothing. An unknown instance (older metadata): nothing.
        assert!(replaced_members(&open, &reg(&[("1", "i1"), ("2", "i2"), ("3", "x")])).is_empty());
        // Bookie 2 is a new instance; bookie 1 unregistered is the lost-bookie rule's business.
        assert_eq!(replaced_members(&open, &reg(&[("2", "i2b"), ("3", "x")])), set(&["2"]));
        // An open ledger's writer's segment on a replaced bookie needs repair
        // (the worker waits for the writer, then recovers the ledger).
        assert_eq!(needs_repair(&open, &set(&["2"])), vec!["2".to_string()]);
        let closed = ledger(&[("1", "i1"), ("2", "i2"), ("3", "i3")], true);
        assert_eq!(replaced_members(&closed, &reg(&[("1", "j1"), ("2", "i2"), ("3", "i3")])), set(&["1"]));
    }

    #[test]
    fn the_instance_that_answers_at_a_bookies_address_is_the_one_that_counts() {
        let reg = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let registered = reg(&[("1", "i1"), ("2", "i2"), ("3", "i3")]);
        // Bookie 2's process answers as a new instance; bookie 3 did not answer.
        let now = current_instances(&registered, &reg(&[("1", "i1"), ("2", "i2b")]));
        assert_eq!(now, reg(&[("1", "i1"), ("2", "i2b"), ("3", "i3")]));
        let closed = ledger(&[("1", "i1"), ("2", "i2"), ("3", "i3")], true);
        assert_eq!(replaced_members(&closed, &now), set(&["2"]));
        // An answer from a bookie the registry does not list adds nothing.
        assert_eq!(current_instances(&registered, &reg(&[("9", "x")])), registered);
    }

    #[test]
    fn a_replica_check_is_complete_only_when_every_bookie_answered() {
        // The wall clock runs 5 s ahead of the monotonic one.
        let at = |ms: u64| Now { mono_ms: ms, wall_ms: ms + 5000 };
        let mut c = ReplicaCheck::new(1000);
        assert_eq!(c.plan(at(10)), Some(CheckScope::All), "the first check is due at once");
        // Bookie 2 did not answer: the check goes on with it alone, pass after pass.
        c.finish(set(&["2"]), at(20));
        assert_eq!(c.last(), (0, 0), "not complete");
        assert_eq!(c.unreached(), vec!["2".to_string()]);
        // Asked again a tenth of the interval after the last time, not at every pass.
        assert_eq!(c.plan(at(100)), None);
        assert_eq!(c.plan(at(120)), Some(CheckScope::Only(set(&["2"]))));
        c.finish(set(&["2"]), at(130));
        assert_eq!(c.plan(at(230)), Some(CheckScope::Only(set(&["2"]))));
        c.finish(BTreeSet::new(), at(240));
        assert_eq!(c.last(), (5010, 5240), "complete: it began at 10 (wall clock 5010)");
        assert!(c.unreached().is_empty());
        // The next is due an interval after the last one ended.
        assert_eq!(c.plan(at(1239)), None);
        assert_eq!(c.plan(at(1240)), Some(CheckScope::All));
        // A pass that failed part-way (finish not called) asks everyone again,
        // and the check keeps the moment it began.
        assert_eq!(c.plan(at(1300)), Some(CheckScope::All));
        c.finish(BTreeSet::new(), at(1400));
        assert_eq!(c.last(), (6240, 6400));
        // A bookie that never answers: an interval after its check began, a
        // new check over every bookie begins (the others are checked on).
        assert_eq!(c.plan(at(2400)), Some(CheckScope::All));
        c.finish(set(&["3"]), at(2500));
        assert_eq!(c.plan(at(2600)), Some(CheckScope::Only(set(&["3"]))));
        c.finish(set(&["3"]), at(2700));
        assert_eq!(c.plan(at(3400)), Some(CheckScope::All), "the stuck check gives way");
        c.finish(set(&["3"]), at(3500));
        assert_eq!(c.last(), (6240, 6400), "never complete while bookie 3 does not answer");
        assert_eq!(c.unreached(), vec!["3".to_string()]);
        // Interval 0: never.
        assert_eq!(ReplicaCheck::new(0).plan(at(5)), None);
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
