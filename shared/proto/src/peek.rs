//! What a request frame asks for, read from its bytes before it is decoded.
//!
//! Decoding builds every message of a frame, so a frame of millions of tiny
//! repeated messages costs hundreds of MB even when its sender may not call
//! the method at all. The server therefore scans the frame first (no
//! allocation, one pass over its field headers): the method, to authorise
//! it, and how many elements the decoder would build, at any depth (an
//! UpdateLedger's segments' bookie ids as much as an AddEntries' adds), to
//! bound them; only then does it decode (issue #20 item 4). The walk
//! follows the schema build.rs writes from the .proto files, so a message
//! added later is bounded without anyone remembering to.

use prost::encoding::{decode_varint, WireType};
use prost::Message;

use crate::method::Method;
use crate::v1::RequestFrame;

/// Most elements (fields, each repeated one and each packed number counted,
/// at any depth) the body of any request may hold. An AddEntries of
/// [`MAX_BATCH_ADDS`] adds is about 49 000.
pub const MAX_ELEMENTS: usize = 65_536;
/// Deepest nesting walked; the schema nests 4 deep at most (a frame, an
/// UpdateLedger, its metadata, a segment).
const MAX_DEPTH: u32 = 16;

/// How a field of a message is walked (see build.rs).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A message of the schema's message at this index.
    Message(usize),
    /// A repeated number, packed or not.
    Packed,
}

/// A message's fields that need walking.
#[derive(Debug)]
pub(crate) struct Schema {
    name: &'static str,
    fields: &'static [(u32, Kind)],
}

include!(concat!(env!("OUT_DIR"), "/schema.rs"));

/// The schema index of a message by its full name (`.quire.v1.X`).
fn schema_of(name: &str) -> Option<usize> {
    MESSAGES.iter().position(|m| m.name == name)
}
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
    /// Elements the decoder would build for the body, at any depth.
    pub elements: usize,
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

/// Counts the elements of `msg`, a message of schema `ty`, adding them to
/// `count`: every field, each element of a packed number field, and those of
/// nested messages. Stops early past `cap` (the frame is refused anyway).
fn count_elements(msg: &[u8], ty: usize, depth: u32, count: &mut usize, cap: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("messages nested deeper than {MAX_DEPTH}"));
    }
    let schema = MESSAGES[ty].fields;
    for f in fields(msg) {
        let f = f?;
        *count += 1;
        if *count > cap {
            return Ok(());
        }
        let kind = schema.iter().find(|(n, _)| *n == f.number).map(|(_, k)| *k);
        match (kind, f.wire) {
            (Some(Kind::Message(child)), 2) => count_elements(payload(msg, &f)?, child, depth + 1, count, cap)?,
            // Each varint ends in a byte below 0x80 (fixed-width numbers
            // are overcounted, never under).
            (Some(Kind::Packed), 2) => *count += payload(msg, &f)?.iter().filter(|b| **b < 0x80).count(),
            _ => {}
        }
    }
    Ok(())
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
    static FRAME: std::sync::OnceLock<(usize, &'static [(u32, Kind)])> = std::sync::OnceLock::new();
    let (_, frame_fields) = *FRAME.get_or_init(|| {
        let i = schema_of(".quire.v1.RequestFrame").expect("the schema has RequestFrame");
        (i, MESSAGES[i].fields)
    });
    let mut p = Peeked { request_id: 0, method: None, elements: 0, repeated: 0 };
    let mut body_number = None;
    for f in fields(frame) {
        let f = f?;
        match (f.number, f.wire) {
            (1, 0) => p.request_id = decode_varint(&mut &frame[f.value.clone()]).map_err(|e| e.to_string())?,
            (n, 2) if method_of(n).is_some() => {
                if body_number != Some(n) {
                    body_number = Some(n);
                    (p.method, p.elements, p.repeated) = (method_of(n), 0, 0);
                }
                let body = payload(frame, &f)?;
                let Some((_, Kind::Message(ty))) = frame_fields.iter().find(|(m, _)| *m == n) else {
                    return Err(format!("body field {n} is not a message in the schema"));
                };
                count_elements(body, *ty, 1, &mut p.elements, MAX_ELEMENTS)?;
                for g in fields(body) {
                    let g = g?;
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
    if p.elements > MAX_ELEMENTS {
        return Some(format!("a request body holds at most {MAX_ELEMENTS} elements, not more"));
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

    /// Issue #20 item 4's last gap: nested repeated fields were bounded only
    /// by the frame size. An UpdateLedger whose segments name 70 000 bookie
    /// ids (two bytes each on the wire, a String each when decoded) is
    /// counted through the metadata and its segments, and refused.
    #[test]
    fn nested_repeated_fields_are_counted_at_every_depth() {
        let update = |segments: usize, ids: usize| {
            let seg = v1::EnsembleSegment { bookie_ids: vec![String::new(); ids], ..Default::default() };
            let ledger = v1::LedgerMetadata { ensembles: vec![seg; segments], ..Default::default() };
            frame(1, Body::UpdateLedger(v1::UpdateLedgerRequest { ledger: Some(ledger), ..Default::default() }))
        };
        let p = peek_request(&update(7, 10_000)).unwrap();
        assert_eq!(p.method, Some(Method::UpdateLedger));
        assert!(p.elements > MAX_ELEMENTS, "{}", p.elements);
        assert!(over_bounds(&p).unwrap().contains("elements"));
        // An ordinary ledger: a frame field, the metadata, 3 segments of 3
        // bookies and their other fields.
        let p = peek_request(&update(3, 3)).unwrap();
        assert!(p.elements < 30, "{}", p.elements);
        assert_eq!(over_bounds(&p), None);
        // Packed numbers count one each.
        let ids: Vec<u64> = (0..100).collect();
        let p = peek_request(&frame(1, Body::CheckEntries(v1::CheckEntriesRequest { ledger_id: 1, entry_ids: ids })))
            .unwrap();
        assert_eq!(p.elements, 1 + 1 + 100, "ledger_id, the packed field, its numbers");
    }

    /// A full AddEntries batch stays within the element bound.
    #[test]
    fn a_full_batch_of_adds_is_within_the_element_bound() {
        let add = v1::AddEntryRequest {
            entry: Some(v1::Entry {
                ledger_id: 1,
                entry_id: 2,
                last_add_confirmed: 1,
                payload: vec![1u8; 8].into(),
                crc32c: 7,
                ledger_length: 9,
            }),
            metadata_version: 3,
            expected_instance_id: "i".into(),
            recovery: true,
            replication: true,
        };
        let p = peek_request(&frame(1, Body::AddEntries(v1::AddEntriesRequest { adds: vec![add; MAX_BATCH_ADDS] })))
            .unwrap();
        assert_eq!(over_bounds(&p), None, "{} elements", p.elements);
    }

    /// Every message the schema names is in it, and every body of a frame is a message.
    #[test]
    fn the_schema_covers_every_request_body() {
        for n in 0..BODY_FIELD_LIMIT {
            if method_of(n).is_some() {
                let i = schema_of(".quire.v1.RequestFrame").unwrap();
                assert!(
                    MESSAGES[i].fields.iter().any(|(m, k)| *m == n && matches!(k, Kind::Message(_))),
                    "body field {n}"
                );
            }
        }
    }
}
