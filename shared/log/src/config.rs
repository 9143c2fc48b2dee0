//! A log's settings: the shape of its ledgers, when the writer rolls to a
//! new one, and how long records are kept.

use serde::{Deserialize, Serialize};

/// When the owner rolls to a new ledger: whichever limit comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollover {
    /// Records per ledger at most (0: no limit).
    pub max_entries: u64,
    /// Payload bytes per ledger at most (0: no limit).
    pub max_bytes: u64,
    /// Age of a ledger at most, from its first record (0: no limit).
    pub max_age_ms: u64,
}

impl Default for Rollover {
    /// A ledger of at most 50,000 records, 256 MiB or 4 hours: small
    /// enough that a takeover reads little to rebuild its producers and
    /// retention frees space in steps, large enough that rollovers are rare
    /// against the metadata service.
    fn default() -> Rollover {
        Rollover { max_entries: 50_000, max_bytes: 256 << 20, max_age_ms: 4 * 3_600_000 }
    }
}

impl Rollover {
    /// Whether a ledger of `entries` records, `bytes` bytes, begun
    /// `age_ms` ago, is due to be rolled.
    pub fn due(&self, entries: u64, bytes: u64, age_ms: u64) -> bool {
        let over = |limit: u64, v: u64| limit > 0 && v >= limit;
        entries > 0 && (over(self.max_entries, entries) || over(self.max_bytes, bytes) || over(self.max_age_ms, age_ms))
    }
}

/// How long records are kept; the retention service trims past them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Trim whole ledgers whose last record is older than this (0: keep).
    pub max_age_ms: u64,
    /// Trim the oldest whole ledgers while the log holds more (0: keep).
    pub max_bytes: u64,
}

/// A log's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogConfig {
    /// E of every ledger.
    pub ensemble_size: u32,
    /// Qw.
    pub write_quorum: u32,
    /// Qa.
    pub ack_quorum: u32,
    /// When to roll.
    pub rollover: Rollover,
    /// What to keep.
    pub retention: Retention,
}

/// Longest log name, in bytes.
pub const NAME_MAX_BYTES: usize = 128;

/// A log's name: 1 to 128 of `[A-Za-z0-9._-]`, not `.` or `..` (it goes
/// in URL paths and metadata keys as it is).
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX_BYTES
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("log name {name:?}: 1 to {NAME_MAX_BYTES} of A-Z a-z 0-9 . _ - (not . or ..)"))
    }
}

/// The custom metadata key a log's ledgers carry, naming their log.
pub const LEDGER_KEY: &str = "log";

/// The names of logs' ownership locks start so: the writer of log `x`
/// among gateways holds the metadata lock `log/x`.
pub const OWNER_LOCK_PREFIX: &str = "log/";

/// The ownership lock of log `name`.
pub fn owner_lock(name: &str) -> String {
    format!("{OWNER_LOCK_PREFIX}{name}")
}

/// Longest HTTP principal a log records (the gateway's token file allows 64).
pub const PRINCIPAL_MAX_BYTES: usize = 64;

/// Whether `p` is an HTTP principal as the gateway names them: 1 to 64
/// of `[A-Za-z0-9._-]`.
pub fn validate_principal(p: &str) -> Result<(), String> {
    let ok = !p.is_empty()
        && p.len() <= PRINCIPAL_MAX_BYTES
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("principal {p:?}: 1 to {PRINCIPAL_MAX_BYTES} of A-Z a-z 0-9 . _ -"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollover_is_due_at_the_first_limit_and_never_for_an_empty_ledger() {
        let r = Rollover { max_entries: 10, max_bytes: 100, max_age_ms: 0 };
        assert!(!r.due(0, 1000, 1 << 40));
        assert!(!r.due(9, 99, 1 << 40), "age 0 is no limit");
        assert!(r.due(10, 0, 0));
        assert!(r.due(1, 100, 0));
    }

    #[test]
    fn names_are_path_safe() {
        for good in ["orders", "a.b-c_d", "X9"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "%2e", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
