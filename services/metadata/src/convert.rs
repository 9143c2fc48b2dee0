//! Between the wire's protobuf messages and the state's records.

use quire_proto::v1;

use crate::state::{Bookie, BookieState, Ledger, LedgerState, Lock, Mark, Segment};

/// A ledger record as the wire carries it.
pub fn ledger_to_wire(l: &Ledger) -> v1::LedgerMetadata {
    v1::LedgerMetadata {
        ledger_id: l.ledger_id,
        state: match l.state {
            LedgerState::Open => v1::LedgerState::Open,
            LedgerState::InRecovery => v1::LedgerState::InRecovery,
            LedgerState::Closed => v1::LedgerState::Closed,
        } as i32,
        ensemble_size: l.ensemble_size,
        write_quorum: l.write_quorum,
        ack_quorum: l.ack_quorum,
        ensembles: l
            .ensembles
            .iter()
            .map(|s| v1::EnsembleSegment {
                first_entry_id: s.first_entry_id,
                bookie_ids: s.bookie_ids.clone(),
                instance_ids: s.instance_ids.clone(),
            })
            .collect(),
        last_entry_id: l.last_entry_id,
        length: l.length,
        digest_type: l.digest_type.clone(),
        custom: l.custom.iter().map(|(k, v)| (k.clone(), bytes::Bytes::from(v.clone()))).collect(),
        created_at_ms: l.created_at_ms,
        version: l.version,
    }
}

/// A ledger record from the wire; `Err` names what is malformed.
pub fn ledger_from_wire(m: &v1::LedgerMetadata) -> Result<Ledger, String> {
    let state = match v1::LedgerState::try_from(m.state) {
        Ok(v1::LedgerState::Open) => LedgerState::Open,
        Ok(v1::LedgerState::InRecovery) => LedgerState::InRecovery,
        Ok(v1::LedgerState::Closed) => LedgerState::Closed,
        _ => return Err(format!("ledger state {} is not open, in_recovery or closed", m.state)),
    };
    Ok(Ledger {
        ledger_id: m.ledger_id,
        state,
        ensemble_size: m.ensemble_size,
        write_quorum: m.write_quorum,
        ack_quorum: m.ack_quorum,
        ensembles: m
            .ensembles
            .iter()
            .map(|s| Segment {
                first_entry_id: s.first_entry_id,
                bookie_ids: s.bookie_ids.clone(),
                instance_ids: s.instance_ids.clone(),
            })
            .collect(),
        last_entry_id: m.last_entry_id,
        length: m.length,
        digest_type: m.digest_type.clone(),
        custom: m.custom.iter().map(|(k, v)| (k.clone(), v.to_vec())).collect(),
        created_at_ms: m.created_at_ms,
        version: m.version,
    })
}

/// A bookie registration as the wire carries it.
pub fn bookie_to_wire(b: &Bookie) -> v1::BookieRecord {
    v1::BookieRecord {
        bookie_id: b.bookie_id.clone(),
        address: b.address.clone(),
        rack: b.rack.clone(),
        instance_id: b.instance_id.clone(),
        state: state_to_wire(b.state) as i32,
        total_disk_bytes: b.total_disk_bytes,
        free_disk_bytes: b.free_disk_bytes,
    }
}

/// A bookie state on the wire.
pub fn state_to_wire(s: BookieState) -> v1::BookieState {
    match s {
        BookieState::Available => v1::BookieState::Available,
        BookieState::ReadOnly => v1::BookieState::ReadOnly,
        BookieState::Decommissioning => v1::BookieState::Decommissioning,
        BookieState::Decommissioned => v1::BookieState::Decommissioned,
    }
}

/// A bookie state the operator may set, from the wire.
pub fn operator_state_from_wire(s: i32) -> Result<BookieState, String> {
    match v1::BookieState::try_from(s) {
        Ok(v1::BookieState::Available) => Ok(BookieState::Available),
        Ok(v1::BookieState::Decommissioning) => Ok(BookieState::Decommissioning),
        Ok(v1::BookieState::Decommissioned) => Ok(BookieState::Decommissioned),
        _ => Err(format!("the operator sets AVAILABLE, DECOMMISSIONING or DECOMMISSIONED, not state {s}")),
    }
}

/// A bookie registration from the wire (lease fields are the store's to set).
pub fn bookie_from_wire(r: &v1::BookieRecord) -> Result<Bookie, String> {
    // A bookie says only whether it takes adds; decommissioning is the operator's.
    let state = match v1::BookieState::try_from(r.state) {
        Ok(v1::BookieState::Available) | Ok(v1::BookieState::Unspecified) => BookieState::Available,
        Ok(v1::BookieState::ReadOnly) => BookieState::ReadOnly,
        _ => return Err(format!("a bookie registers as AVAILABLE or READ_ONLY, not state {}", r.state)),
    };
    Ok(Bookie {
        bookie_id: r.bookie_id.clone(),
        address: r.address.clone(),
        rack: r.rack.clone(),
        instance_id: r.instance_id.clone(),
        state,
        total_disk_bytes: r.total_disk_bytes,
        free_disk_bytes: r.free_disk_bytes,
        lease_id: 0,
        lease_ms: 0,
        expires_at_ms: 0,
    })
}

/// An under-replication mark as the wire carries it.
pub fn mark_to_wire(m: &Mark) -> v1::UnderReplicatedMark {
    v1::UnderReplicatedMark {
        ledger_id: m.ledger_id,
        missing_bookie_ids: m.missing.clone(),
        reason: m.reason.clone(),
        marked_at_ms: m.marked_at_ms,
    }
}

/// A lock as the wire carries it.
pub fn lock_to_wire(l: &Lock) -> v1::LockRecord {
    v1::LockRecord { name: l.name.clone(), owner: l.owner.clone(), lock_id: l.lock_id, expires_at_ms: l.expires_at_ms }
}
