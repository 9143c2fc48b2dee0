//! Entry bytes that say where they belong, so every read checks what it got.
//!
//! An entry is `ledger id (8 LE) | entry id (8 LE) | filler`, the filler a
//! byte pattern seeded by both ids. A read that returns another entry's bytes,
//! a truncated entry or a flipped bit is counted as a failed request, not as
//! a fast one.

/// The bytes of entry `entry_id` of `ledger_id`, `len` long (at least 16).
pub fn entry(ledger_id: u64, entry_id: u64, len: usize) -> Vec<u8> {
    let len = len.max(16);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&ledger_id.to_le_bytes());
    out.extend_from_slice(&entry_id.to_le_bytes());
    let seed = (ledger_id.wrapping_mul(31).wrapping_add(entry_id) % 251) as u8;
    out.extend((0..len - 16).map(|i| seed.wrapping_add(i as u8)));
    out
}

/// Why `got` is not entry `entry_id` of `ledger_id` as [`entry`] wrote it.
pub fn check(ledger_id: u64, entry_id: u64, len: usize, got: &[u8]) -> Result<(), String> {
    if got.len() != len.max(16) {
        return Err(format!("ledger {ledger_id} entry {entry_id}: {} bytes, wrote {}", got.len(), len.max(16)));
    }
    if got != entry(ledger_id, entry_id, len).as_slice() {
        let at = u64::from_le_bytes(got[8..16].try_into().expect("16 bytes checked above"));
        return Err(format!("ledger {ledger_id} entry {entry_id}: bytes differ (they say entry {at})"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_checks_against_itself_and_not_against_a_neighbour() {
        let e = entry(7, 3, 1024);
        assert_eq!(e.len(), 1024);
        assert!(check(7, 3, 1024, &e).is_ok());
        assert!(check(7, 4, 1024, &e).is_err());
        assert!(check(8, 3, 1024, &e).is_err());
        assert!(check(7, 3, 1024, &e[..1000]).is_err());
        let mut flipped = e.clone();
        flipped[500] ^= 1;
        assert!(check(7, 3, 1024, &flipped).is_err());
    }
}
