//! The log invariants checked in every reachable state: LedgerChaining.tla's
//! (Jack Vanlightly's TLA+ specification of a log made of a chain of
//! BookKeeper ledgers) and guarantee 9 of ../shared/BRIEF.md.

use std::collections::BTreeSet;

use quire_log::Located;
use stateright::Property;

use super::state::{ChainState, Side};
use super::ChainModel;

/// Every property, in the order reports list them.
pub fn all() -> Vec<Property<ChainModel>> {
    vec![
        Property::always("the stored record keeps its invariants", record_valid),
        Property::always("every non-empty ledger is in the log's list", non_empty_listed),
        Property::always(
            "every sealed segment is its ledger's closed length, or a cut batch short of it",
            sealed_match,
        ),
        Property::always("no sealed segment ends within a batch", sealed_whole),
        Property::always("at most one ledger of the log takes appends", one_writable),
        Property::always("no acknowledged record is lost", acked_kept),
        Property::always("no record is in the log twice", no_duplicates),
        Property::always("no offset given twice, no edit of the client refused", nothing_broken),
        Property::always("no add reaches its ack quorum in a deleted ledger", no_write_after_delete),
    ]
}

/// Order across ledgers (each segment starts where the one before ended),
/// at most one open segment and it last, the trim point within the log.
fn record_valid(_: &ChainModel, s: &ChainState) -> bool {
    s.record.check().is_ok()
}

/// A ledger holding records is listed, unless it was trimmed away whole:
/// nothing is written where the log would never read it. (Records of the
/// open segment's ledger past a recovered end lie in a listed ledger, past
/// its closed length: never read either.)
fn non_empty_listed(_: &ChainModel, s: &ChainState) -> bool {
    let listed: BTreeSet<u64> = s.record.segments.iter().map(|seg| seg.ledger_id).collect();
    s.ledgers.iter().enumerate().all(|(i, l)| l.entries.is_empty() || l.deleted || listed.contains(&(i as u64 + 1)))
}

/// A sealed segment holds what its closed ledger holds: its end is the
/// recovery's (or the owner's close), never a guess, less only the records
/// of a batch the recovery cut (issue #47: never acknowledged). (The open
/// segment's ledger may be closed already: a takeover's recovery closes it
/// before its CAS seals the segment.)
fn sealed_match(_: &ChainModel, s: &ChainState) -> bool {
    s.log_deleted
        || s.record.segments.iter().all(|seg| {
            seg.end_offset.is_none_or(|end| {
                let count = end - seg.first_offset;
                let l = s.ledger(seg.ledger_id);
                l.closed.is_some_and(|closed| {
                    closed >= count
                        && l.entries[count as usize..closed as usize]
                            .iter()
                            .all(|e| !s.acked.values().any(|v| *v == e.0))
                })
            })
        })
}

/// Every sealed segment ends at a whole batch: no reader of a fixed
/// segment is given part of a batch (issue #47).
fn sealed_whole(_: &ChainModel, s: &ChainState) -> bool {
    s.log_deleted
        || s.record.segments.iter().all(|seg| {
            seg.end_offset.is_none_or(|end| {
                let count = (end - seg.first_offset) as usize;
                count == 0 || !s.continues.contains(&s.ledger(seg.ledger_id).entries[count - 1].0)
            })
        })
}

/// At most one writer holds a ledger that can still take an add to its
/// ack quorum (not fenced, not closed): two owners never both append.
fn one_writable(_: &ChainModel, s: &ChainState) -> bool {
    s.writers
        .iter()
        .filter(|w| match w {
            Side::Writing { ledger, broken: false, .. } => {
                let l = s.ledger(*ledger);
                !l.fenced && l.closed.is_none() && !l.deleted
            }
            _ => false,
        })
        .count()
        <= 1
}

/// Every acknowledged record at or past the trim point is where its offset
/// says, in a listed ledger, within its sealed length, at the ack quorum,
/// with its bytes.
fn acked_kept(_: &ChainModel, s: &ChainState) -> bool {
    // (A deleted log keeps nothing, as asked.)
    s.log_deleted
        || s.acked.range(s.record.trim_before..).all(|(&offset, &v)| match s.record.locate(offset) {
            Located::At { ledger_id, entry_id } => {
                let seg = s.record.segments.iter().find(|g| g.ledger_id == ledger_id).expect("located in a segment");
                let within = seg.end_offset.is_none_or(|end| offset < end);
                let l = s.ledger(ledger_id);
                within && !l.deleted && l.entries.get(entry_id as usize).is_some_and(|e| e.0 == v && e.1)
            }
            Located::Trimmed { .. } | Located::Beyond => false,
        })
}

/// What a reader can be given, from the trim point to the sealed ends and
/// the open ledger's durable prefix, holds each record once.
fn no_duplicates(_: &ChainModel, s: &ChainState) -> bool {
    let mut seen = BTreeSet::new();
    for seg in &s.record.segments {
        let l = s.ledger(seg.ledger_id);
        let count = match seg.end_offset {
            Some(end) => end - seg.first_offset,
            None => l.durable_prefix(),
        };
        for (i, e) in l.entries.iter().take(count as usize).enumerate() {
            if seg.first_offset + i as u64 >= s.record.trim_before && !seen.insert(e.0) {
                return false;
            }
        }
    }
    true
}

/// Rules the steps met: an offset acknowledged for two records, an edit
/// made by the client's own chain rules that the service refused.
fn nothing_broken(_: &ChainModel, s: &ChainState) -> bool {
    s.broken.is_none()
}

/// No writer goes on being acknowledged by the bookies in a ledger that was
/// deleted (a delete that did not fence the ledger it deleted under its
/// writer; a trim or a sweep of a ledger still written).
fn no_write_after_delete(_: &ChainModel, s: &ChainState) -> bool {
    !s.persisted_deleted
}
