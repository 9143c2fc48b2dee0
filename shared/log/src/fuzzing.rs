//! The decoder workloads shared by the cargo-fuzz targets (fuzz/log_entry,
//! fuzz/log_metadata) and the proptest run in `make test`: what reads a
//! log's bytes back, a record's envelope from a bookie's entry and a log's
//! metadata from the metadata service's store or the wire, must never
//! panic, whatever the bytes; and what it accepts survives a round trip.

use prost::Message;
use quire_proto::v1;

use crate::chain::check_edit;
use crate::cursor::Cursor;
use crate::envelope;
use crate::meta::LogMeta;

/// A bookie's entry read as a log record: decoded, and re-encoded to the
/// same bytes when the writer's rules accept what it carries.
pub fn decode_entry(data: &[u8]) {
    let Ok(r) = envelope::decode(data) else { return };
    assert!(r.payload.len() <= data.len(), "a payload longer than its entry");
    let place = r.header.batch;
    assert!(place.index < place.len, "a place in a batch no batch has: {place:?}");
    // (A version-1 record re-encodes as version 2: only those compare.)
    if data[0] != envelope::VERSION {
        return;
    }
    if let Ok(bytes) = envelope::encode(r.header, r.payload) {
        assert_eq!(bytes, data, "a record re-encoded to other bytes");
    }
}

/// A log's metadata decoded from bytes, as the metadata service reads its
/// store and every client reads an answer: a record that passes its own
/// check is located, edited and re-encoded without a panic; the identity
/// edit is accepted; the wire form round-trips.
pub fn decode_log_metadata(data: &[u8]) {
    let Ok(m) = v1::LogMetadata::decode(data) else { return };
    for c in &m.cursors {
        let c = Cursor::from_wire(c);
        assert_eq!(Cursor::from_wire(&c.to_wire()), c, "a cursor changed on the wire");
    }
    let Ok(meta) = LogMeta::from_wire(&m) else { return };
    assert_eq!(LogMeta::from_wire(&meta.to_wire()).as_ref(), Ok(&meta), "a log changed on the wire");
    let _ = meta.to_json();
    let r = &meta.record;
    if r.check().is_err() {
        return;
    }
    assert!(check_edit(r, r).is_ok(), "a valid record may not stay as it is: {r:?}");
    for probe in [0, r.trim_before, r.fixed_end(), r.fixed_end().saturating_add(1), u64::MAX] {
        let _ = r.locate(probe);
    }
    // Each edit the client makes, from this record: what it returns passes
    // the service's check of the edit.
    let edits = [
        r.roll(r.epoch, -1, u64::MAX).ok(),
        r.take_over("fuzz", -1, u64::MAX).ok(),
        r.trim(r.fixed_end()).ok().map(|(t, _)| t),
    ];
    for next in edits.into_iter().flatten() {
        assert!(check_edit(r, &next).is_ok(), "the service refuses the client's edit {r:?} -> {next:?}");
    }
}
