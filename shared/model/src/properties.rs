//! The invariants checked in every reachable state, named after the ones of
//! Jack Vanlightly's TLA+ specification of BookKeeper's protocol
//! (Vanlightly/bookkeeper-tlaplus, `BookKeeperProtocol.tla`), plus quire's
//! own guarantees (../shared/BRIEF.md).

use stateright::Property;

use crate::model::{LedgerModel, LEDGER};
use crate::state::State;
use quire_client::meta::LedgerState;

/// Every property, in the order reports list them.
pub fn all() -> Vec<Property<LedgerModel>> {
    vec![
        Property::always("no divergence between the client and the metadata", no_divergence),
        Property::always("every acknowledged entry is readable", acknowledged_readable),
        Property::always("every committed entry reached Qa", committed_at_qa),
        Property::always("no out-of-order or premature decisions", nothing_broken),
        Property::always("one value per entry", one_value_per_entry),
    ]
}

/// The name of the one property [`first_violation`] checks.
pub const ANY: &str = "every invariant";

/// One property that fails where any of [`all`] does: the checker stops at
/// the first state breaking any (the report then names which).
pub fn first_violation() -> Vec<Property<LedgerModel>> {
    vec![Property::always(ANY, |m: &LedgerModel, s: &State| all().iter().all(|p| (p.condition)(m, s)))]
}

/// NoDivergenceBetweenClientAndMetadata (BRIEF guarantees 3, 4): once the
/// ledger is closed, every entry the writer was told is acknowledged lies at
/// or below its last entry: recovery never truncated below an
/// acknowledged entry, and no add was acknowledged past the close.
fn no_divergence(_: &LedgerModel, s: &State) -> bool {
    if s.meta.state != LedgerState::Closed {
        return true;
    }
    s.acked.keys().next_back().is_none_or(|&max| max as i64 <= s.meta.last_entry_id)
}

/// AllAckedEntriesAreReadable (guarantee 1): each acknowledged entry (up to
/// the close, once closed) has an intact copy, with the writer's bytes, on
/// a member its segment names, as the very instance it names.
fn acknowledged_readable(_: &LedgerModel, s: &State) -> bool {
    let closed = (s.meta.state == LedgerState::Closed).then_some(s.meta.last_entry_id);
    s.acked.iter().filter(|(e, _)| closed.is_none_or(|last| **e as i64 <= last)).all(|(&e, bytes)| {
        let seg = s.meta.segment_of(e);
        s.meta.quorums.write_set(e).into_iter().any(|p| {
            let m = &seg.members[p];
            s.bookies.iter().find(|b| b.id == m.bookie_id).is_some_and(|b| {
                (m.instance_id.is_empty() || b.instance_id == m.instance_id)
                    && b.entry(LEDGER, e).is_some_and(|x| x.digest_ok() && x.payload == *bytes)
            })
        })
    })
}

/// CommittedEntriesReachAckQuorum: in a closed ledger, every entry up to
/// its last was stored by at least Qa of the instances its segment names
/// (counting copies a replaced disk lost since: the protocol placed them).
fn committed_at_qa(_: &LedgerModel, s: &State) -> bool {
    if s.meta.state != LedgerState::Closed {
        return true;
    }
    let q = s.meta.quorums;
    (0..=s.meta.last_entry_id).all(|e| {
        let e = e as u64;
        let seg = s.meta.segment_of(e);
        let copies = q
            .write_set(e)
            .into_iter()
            .filter(|p| s.ever_stored.contains(&(seg.members[*p].instance_id.clone(), e)))
            .count();
        copies >= q.ack
    })
}

/// NoOutOfOrderEntries, and no recovery that even tried to close below an
/// acknowledged entry: the transitions record a broken rule as they meet it.
fn nothing_broken(_: &LedgerModel, s: &State) -> bool {
    s.broken.is_none()
}

/// NoDirtyReads's ground (guarantee 2): every copy on every bookie is the
/// writer's bytes for that entry id, so no two readers can see different
/// bytes for one entry.
fn one_value_per_entry(_: &LedgerModel, s: &State) -> bool {
    s.bookies.iter().all(|b| {
        b.stored(LEDGER)
            .into_iter()
            .all(|e| b.entry(LEDGER, e).is_some_and(|x| s.submitted.get(&e).is_some_and(|want| x.payload == *want)))
    })
}
