//! The CRC32C digest every entry carries (seed 000: "a checksum the bookie
//! verifies on both write and read").
//!
//! It covers the entry's identity and LAC as well as its payload, so a copy
//! filed under the wrong (ledger, entry) or with a forged LAC fails the check
//! exactly as a flipped payload bit does.

use crate::v1::Entry;

/// CRC32C over ledger_id, entry_id, last_add_confirmed, ledger_length and
/// payload length (each 8 bytes, big-endian) followed by the payload.
pub fn entry_crc32c(ledger_id: u64, entry_id: u64, last_add_confirmed: i64, ledger_length: u64, payload: &[u8]) -> u32 {
    let mut header = [0u8; 40];
    header[0..8].copy_from_slice(&ledger_id.to_be_bytes());
    header[8..16].copy_from_slice(&entry_id.to_be_bytes());
    header[16..24].copy_from_slice(&last_add_confirmed.to_be_bytes());
    header[24..32].copy_from_slice(&ledger_length.to_be_bytes());
    header[32..40].copy_from_slice(&(payload.len() as u64).to_be_bytes());
    let crc = crc32c::crc32c(&header);
    crc32c::crc32c_append(crc, payload)
}

impl Entry {
    /// An entry with its digest computed, its ledger length being its own
    /// payload's (tests and tools that do not track a ledger's length).
    pub fn sealed(ledger_id: u64, entry_id: u64, last_add_confirmed: i64, payload: bytes::Bytes) -> Self {
        let len = payload.len() as u64;
        Entry::sealed_at(ledger_id, entry_id, last_add_confirmed, len, payload)
    }

    /// An entry with its digest computed; `ledger_length` counts the payload
    /// bytes of every entry up to and including this one.
    pub fn sealed_at(
        ledger_id: u64,
        entry_id: u64,
        last_add_confirmed: i64,
        ledger_length: u64,
        payload: bytes::Bytes,
    ) -> Self {
        let crc32c = entry_crc32c(ledger_id, entry_id, last_add_confirmed, ledger_length, &payload);
        Entry { ledger_id, entry_id, last_add_confirmed, payload, crc32c, ledger_length }
    }

    /// Whether the carried digest matches the entry's contents.
    pub fn digest_ok(&self) -> bool {
        self.crc32c
            == entry_crc32c(self.ledger_id, self.entry_id, self.last_add_confirmed, self.ledger_length, &self.payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn any_changed_field_breaks_the_digest() {
        let e = Entry::sealed(7, 3, 2, Bytes::from_static(b"hello"));
        assert!(e.digest_ok());
        let mut x = e.clone();
        x.ledger_id = 8;
        assert!(!x.digest_ok());
        let mut x = e.clone();
        x.entry_id = 4;
        assert!(!x.digest_ok());
        let mut x = e.clone();
        x.last_add_confirmed = 3;
        assert!(!x.digest_ok());
        let mut x = e.clone();
        x.ledger_length += 1;
        assert!(!x.digest_ok());
        let mut x = e.clone();
        x.payload = Bytes::from_static(b"hellp");
        assert!(!x.digest_ok());
    }
}
