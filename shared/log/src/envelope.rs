//! The bytes of one log record as its ledger entry holds them: a short
//! header, then the application's payload. The header carries the producer
//! id and sequence number of an idempotent append, so that the
//! de-duplication table can be rebuilt from the records themselves by
//! whoever takes the log over (issue #23 item 7), not held only in a
//! writer's memory.
//!
//! ```text
//! version: u8 = 1
//! producer id length: u8 (0: no producer, no sequence follows)
//! producer id: that many bytes of UTF-8
//! sequence: u64, big-endian (only with a producer id)
//! payload: the rest
//! ```
//!
//! A record is one entry: its offset in the log is its entry's place.

/// The header version written.
pub const VERSION: u8 = 1;
/// Longest producer id, in bytes.
pub const PRODUCER_ID_MAX_BYTES: usize = 64;
/// Longest header, in bytes.
pub const HEADER_MAX_BYTES: usize = 2 + PRODUCER_ID_MAX_BYTES + 8;

/// Who appended a record, for de-duplication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced<'a> {
    /// The producer's id, chosen by the application (1 to 64 bytes).
    pub producer_id: &'a str,
    /// Its sequence number for this record.
    pub sequence: u64,
}

/// A record decoded from its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The idempotent append's producer and sequence, when it had one.
    pub produced: Option<Produced<'a>>,
    /// The application's bytes.
    pub payload: &'a [u8],
}

/// Why an entry is not a log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Shorter than its header says.
    #[error("log record truncated: {0} bytes")]
    Truncated(usize),
    /// A version this build does not read.
    #[error("log record version {0} is unknown (this build reads {VERSION})")]
    UnknownVersion(u8),
    /// The producer id is not UTF-8 or too long.
    #[error("log record producer id invalid: {0}")]
    BadProducer(String),
}

/// Checks a producer id before it is written.
pub fn validate_producer_id(id: &str) -> Result<(), EnvelopeError> {
    if id.is_empty() || id.len() > PRODUCER_ID_MAX_BYTES {
        return Err(EnvelopeError::BadProducer(format!("{} bytes (1 to {PRODUCER_ID_MAX_BYTES})", id.len())));
    }
    Ok(())
}

/// The length of the header of a record appended by `produced` (or by no
/// producer).
pub fn header_len(produced: Option<Produced<'_>>) -> usize {
    2 + produced.map_or(0, |p| p.producer_id.len() + 8)
}

/// A record's entry: header and payload, in one allocation of exactly
/// its size.
pub fn encode(produced: Option<Produced<'_>>, payload: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
    let (header, n) = header_bytes(produced)?;
    let mut e = Vec::with_capacity(n + payload.len());
    e.extend_from_slice(&header[..n]);
    e.extend_from_slice(payload);
    Ok(e)
}

/// A record's header alone, on the stack: its bytes are the first `.1`.
/// For a writer that puts header and payload into a buffer of its own.
pub fn header_bytes(produced: Option<Produced<'_>>) -> Result<([u8; HEADER_MAX_BYTES], usize), EnvelopeError> {
    let mut out = [0u8; HEADER_MAX_BYTES];
    out[0] = VERSION;
    let Some(p) = produced else { return Ok((out, 2)) };
    validate_producer_id(p.producer_id)?;
    out[1] = p.producer_id.len() as u8;
    let id_end = 2 + p.producer_id.len();
    out[2..id_end].copy_from_slice(p.producer_id.as_bytes());
    out[id_end..id_end + 8].copy_from_slice(&p.sequence.to_be_bytes());
    Ok((out, id_end + 8))
}

/// Reads a record from its entry (never panics, whatever the bytes).
pub fn decode(entry: &[u8]) -> Result<Record<'_>, EnvelopeError> {
    let (&version, rest) = entry.split_first().ok_or(EnvelopeError::Truncated(entry.len()))?;
    if version != VERSION {
        return Err(EnvelopeError::UnknownVersion(version));
    }
    let (&id_len, rest) = rest.split_first().ok_or(EnvelopeError::Truncated(entry.len()))?;
    if id_len == 0 {
        return Ok(Record { produced: None, payload: rest });
    }
    let id_len = id_len as usize;
    if id_len > PRODUCER_ID_MAX_BYTES {
        return Err(EnvelopeError::BadProducer(format!("{id_len} bytes")));
    }
    if rest.len() < id_len + 8 {
        return Err(EnvelopeError::Truncated(entry.len()));
    }
    let (id, rest) = rest.split_at(id_len);
    let producer_id = std::str::from_utf8(id).map_err(|e| EnvelopeError::BadProducer(e.to_string()))?;
    let (seq, payload) = rest.split_at(8);
    let sequence = u64::from_be_bytes(seq.try_into().expect("8 bytes"));
    Ok(Record { produced: Some(Produced { producer_id, sequence }), payload })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let e = encode(None, b"hello").unwrap();
        assert_eq!(e, [&[VERSION, 0][..], b"hello"].concat());
        assert_eq!(decode(&e).unwrap(), Record { produced: None, payload: b"hello" });
        let p = Produced { producer_id: "orders-7", sequence: 42 };
        let e = encode(Some(p), b"").unwrap();
        assert_eq!(decode(&e).unwrap(), Record { produced: Some(p), payload: b"" });
    }

    #[test]
    fn bad_entries_are_errors_not_panics() {
        assert_eq!(decode(&[]), Err(EnvelopeError::Truncated(0)));
        assert_eq!(decode(&[VERSION]), Err(EnvelopeError::Truncated(1)));
        assert_eq!(decode(&[9, 0]), Err(EnvelopeError::UnknownVersion(9)));
        assert!(matches!(decode(&[VERSION, 3, b'a', b'b', b'c', 0]), Err(EnvelopeError::Truncated(6))));
        assert!(matches!(decode(&[VERSION, 200]), Err(EnvelopeError::BadProducer(_))));
        let mut e = encode(Some(Produced { producer_id: "ab", sequence: 1 }), b"x").unwrap();
        e[2] = 0xff;
        assert!(matches!(decode(&e), Err(EnvelopeError::BadProducer(_))));
        assert!(encode(Some(Produced { producer_id: "", sequence: 1 }), b"").is_err());
        assert!(encode(Some(Produced { producer_id: &"x".repeat(65), sequence: 1 }), b"").is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(r) = decode(&bytes) {
                let again = encode(r.produced, r.payload).unwrap();
                prop_assert_eq!(again, bytes);
            }
        }
    }
}
