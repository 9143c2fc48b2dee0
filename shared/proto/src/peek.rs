//! What a request frame asks for, read from its bytes before it is decoded.
//!
//! Decoding builds every message of a frame, so a frame of millions of tiny
//! repeated messages costs hundreds of MB even when its sender may not call
//! the method at all. The server therefore scans the frame first (no
//! allocation, one pass over its field headers): the method, to authorise
//! it, and how many elements the body holds, to bound them; only then does
//! it decode (issue #20 item 4).

use prost::encoding::{decode_varint, WireType};
use prost::Message;

use crate::method::Method;
use crate::v1::RequestFrame;

/// Most elements (fields, repeated ones each counted) the body of any
/// request may hold at its top level.
pub const MAX_BODY_FIELDS: usize = 65_536;
/// Most adds in one AddEntries request (the client library sends at most
/// 256).
pub const MAX_BATCH_ADDS: usize = 4096;
/// Most entry ids one CheckEntries request may name.
pub const MAX_CHECK_ENTRIES: usize = 4096;

/// A request frame's envelope, as scanned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    /// The request id (0 when the frame states none).
    pub request_id: u64,
    /// The method its body calls; None for a body this build does not know
    /// (the decode that follows says so) or none at all.
    pub method: Option<Method>,
    /// Top-level fields of the body message.
    pub body_fields: usize,
    /// Elements of the field that carries a request's repeated payload
    /// (AddEntries' adds, CheckEntries' entry ids), where it has one.
    pub repeated: usize,
}

/// One field header: its number, wire type, and where its value ends.
struct Field {
    number: u32,
    wire: u64,
    value: std::ops::Range<usize>,
}

/// Reads the field at `at` of `msg`.
fn field(msg: &[u8], at: usize) -> Result<Field, String> {
    let mut buf = &msg[at..];
    let key = decode_varint(&mut buf).map_err(|e| format!("field key: {e}"))?;
    let number = u32::try_from(key >> 3).map_err(|_| "field number out of range".to_string())?;
    let wire = key & 7;
    let start = msg.len() - buf.len();
    let len = match wire {
        0 => {
            decode_varint(&mut buf).map_err(|e| format!("varint: {e}"))?;
            msg.len() - buf.len() - start
        }
        1 => 8,
        2 => {
            let n = decode_varint(&mut buf).map_err(|e| format!("length: {e}"))?;
            let header = msg.len() - buf.len() - start;
            let n = usize::try_from(n).map_err(|_| "length out of range".to_string())?;
            header.checked_add(n).ok_or("length out of range")?
        }
        5 => 4,
        w => return Err(format!("wire type {w} is not used by quire")),
    };
    let end = start.checked_add(len).filter(|&e| e <= msg.len()).ok_or("a field runs past the end of the frame")?;
    Ok(Field { number, wire, value: start..end })
}

/// The payload of a length-delimited field's value (past its length).
fn payload<'a>(msg: &'a [u8], f: &Field) -> Result<&'a [u8], String> {
    let mut buf = &msg[f.value.clone()];
    decode_varint(&mut buf).map_err(|e| format!("length: {e}"))?;
    Ok(buf)
}

/// Every top-level field of `msg`.
fn fields(msg: &[u8]) -> impl Iterator<Item = Result<Field, String>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= msg.len() {
            return None;
        }
        let f = field(msg, at);
        match &f {
            Ok(f) => at = f.value.end,
            Err(_) => at = msg.len(),
        }
        Some(f)
    })
}

/// Body field numbers are below this (frame.proto's oneof uses 10..=63).
const BODY_FIELD_LIMIT: u32 = 128;

/// The method a body field number calls. Asked once per number of the
/// generated decoder, with a frame holding only an empty message under that
/// number: it skips numbers it does not know. (The generated oneof merge
/// itself must not be asked: it panics on a number outside the oneof.)
fn method_of(number: u32) -> Option<Method> {
    static TABLE: std::sync::OnceLock<Vec<Option<Method>>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (0..BODY_FIELD_LIMIT)
            .map(|n| {
                let mut bytes = Vec::new();
                prost::encoding::encode_key(n.max(1), WireType::LengthDelimited, &mut bytes);
                bytes.push(0);
                let frame = RequestFrame::decode(bytes.as_slice()).ok()?;
                frame.body.as_ref().map(Method::of_request)
            })
            .collect()
    });
    table.get(usize::try_from(number).ok()?).copied().flatten()
}

/// Scans a request frame (its encoded `RequestFrame`, without the length
/// prefix). The server refuses a frame it cannot scan (quire sends no
/// groups and no malformed fields), so that nothing the scan does not
/// understand reaches the decoder unchecked.
///
/// It follows the decoder: fields it does not know are skipped; a body
/// field of another number replaces the body (a oneof), one of the same
/// number merges into it (so its elements add up).
pub fn peek_request(frame: &[u8]) -> Result<Peeked, String> {
    let mut p = Peeked { request_id: 0, method: None, body_fields: 0, repeated: 0 };
    let mut body_number = None;
    for f in fields(frame) {
        let f = f?;
        match (f.number, f.wire) {
            (1, 0) => p.request_id = decode_varint(&mut &frame[f.value.clone()]).map_err(|e| e.to_string())?,
            (n, 2) if method_of(n).is_some() => {
                if body_number != Some(n) {
                    body_number = Some(n);
                    (p.method, p.body_fields, p.repeated) = (method_of(n), 0, 0);
                }
                let body = payload(frame, &f)?;
                for g in fields(body) {
                    let g = g?;
                    p.body_fields += 1;
                    match (p.method, g.number, g.wire) {
                        (Some(Method::AddEntries), 1, 2) => p.repeated += 1,
                        // Packed (the proto3 default) or not.
                        (Some(Method::CheckEntries), 2, 2) => {
                            p.repeated += payload(body, &g)?.iter().filter(|b| **b < 0x80).count();
                        }
                        (Some(Method::CheckEntries), 2, 0) => p.repeated += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(p)
}

/// Why a scanned request is refused before it is decoded, if it is.
pub fn over_bounds(p: &Peeked) -> Option<String> {
    if p.body_fields > MAX_BODY_FIELDS {
        return Some(format!("a request body holds at most {MAX_BODY_FIELDS} fields, not {}", p.body_fields));
    }
    let cap = match p.method {
        Some(Method::AddEntries) => MAX_BATCH_ADDS,
        Some(Method::CheckEntries) => MAX_CHECK_ENTRIES,
        _ => return None,
    };
    (p.repeated > cap).then(|| {
        format!("a {} request holds at most {cap} elements, not {}", p.method.expect("matched").name(), p.repeated)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::request_frame::Body;
    use crate::v1::{self, RequestFrame};

    fn frame(id: u64, body: Body) -> Vec<u8> {
        RequestFrame { request_id: id, body: Some(body), ..Default::default() }.encode_to_vec()
    }

    #[test]
    fn the_method_and_id_are_read_without_decoding() {
        let read = v1::ReadEntryRequest { ledger_id: 1, entry_id: 2, fence: true, metadata_version: 3 };
        let p = peek_request(&frame(42, Body::ReadEntry(read))).unwrap();
        assert_eq!((p.request_id, p.method), (42, Some(Method::ReadEntry)));
        // Every method the protocol has is recognised by its field number.
        let found: std::collections::BTreeSet<&str> = (10..200).filter_map(method_of).map(|m| m.name()).collect();
        let all: std::collections::BTreeSet<&str> = Method::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(found, all);
    }

    #[test]
    fn elements_are_counted_and_bounded_before_decoding() {
        let adds = vec![v1::AddEntryRequest::default(); MAX_BATCH_ADDS + 1];
        let p = peek_request(&frame(1, Body::AddEntries(v1::AddEntriesRequest { adds }))).unwrap();
        assert_eq!(p.repeated, MAX_BATCH_ADDS + 1);
        assert!(over_bounds(&p).is_some());
        let ids: Vec<u64> = (0..5000).map(|i| i * 1000).collect();
        let p = peek_request(&frame(1, Body::CheckEntries(v1::CheckEntriesRequest { ledger_id: 1, entry_ids: ids })))
            .unwrap();
        assert_eq!(p.repeated, 5000);
        assert!(over_bounds(&p).is_some());
        let p = peek_request(&frame(1, Body::AddEntries(v1::AddEntriesRequest { adds: vec![Default::default(); 3] })))
            .unwrap();
        assert_eq!((p.repeated, over_bounds(&p)), (3, None));
    }

    #[test]
    fn a_damaged_frame_is_an_error_not_a_panic() {
        let good = frame(7, Body::Ping(v1::PingRequest::default()));
        for cut in 0..good.len() {
            let _ = peek_request(&good[..cut]);
        }
        assert!(peek_request(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err(), "a length past the end");
        assert!(peek_request(&[0x0b]).is_err(), "a group");
        let huge = [0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert!(peek_request(&huge).is_err(), "a length near 2^64 does not overflow");
    }

    /// The review's bypasses: the same body field twice merges in the
    /// decoder, so the scan adds its elements up; an unknown field number
    /// after the body neither hides the method nor resets the counts.
    #[test]
    fn the_scan_counts_what_the_decoder_will_build() {
        let half = v1::AddEntriesRequest { adds: vec![v1::AddEntryRequest::default(); MAX_BATCH_ADDS] };
        let one = frame(1, Body::AddEntries(half));
        let mut twice = one.clone();
        twice.extend_from_slice(&one[2..]); // the body field again (after the request id)
        let decoded = RequestFrame::decode(twice.as_slice()).unwrap();
        let Some(Body::AddEntries(b)) = decoded.body else { panic!("not AddEntries") };
        assert_eq!(b.adds.len(), 2 * MAX_BATCH_ADDS, "the decoder merges them");
        let p = peek_request(&twice).unwrap();
        assert_eq!((p.method, p.repeated), (Some(Method::AddEntries), 2 * MAX_BATCH_ADDS));
        assert!(over_bounds(&p).is_some());
        let mut hidden = twice.clone();
        hidden.extend_from_slice(&[(12 << 3) | 2, 0]); // field 12: in no oneof
        let p = peek_request(&hidden).unwrap();
        assert_eq!((p.method, p.repeated), (Some(Method::AddEntries), 2 * MAX_BATCH_ADDS));
    }
}
