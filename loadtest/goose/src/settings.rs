//! What a run is told through the environment. goose owns the command line
//! (--host, --users, --run-time, --scenarios, ...), so quire's own knobs are
//! environment variables, read once.

use std::sync::OnceLock;

/// The knobs of every scenario.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Bytes per entry (at least 16: the ids that make each entry checkable).
    pub entry_bytes: usize,
    /// The quorums of every ledger a scenario creates.
    pub ensemble: usize,
    pub write_quorum: usize,
    pub ack_quorum: usize,
    /// Entries per append request in append-heavy (1: single appends).
    pub append_batch: usize,
    /// Entries a tail-reading user appends per round when it follows itself.
    pub tail_batch: usize,
    /// Entries each catch-up user writes before it reads them back.
    pub catchup_entries: u64,
    /// Entries per range read.
    pub read_range: u64,
    /// Entries after which a mixed user closes its ledger and starts another.
    pub ledger_entries: u64,
    /// Long-poll timeout of a tail read.
    pub poll_timeout_ms: u64,
    /// Keep the ledgers a run wrote instead of deleting them when users stop.
    pub keep_ledgers: bool,
    /// Where to write the run's summary as JSON, if anywhere.
    pub report_json: Option<String>,
}

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

impl Settings {
    fn from_env() -> Self {
        let s = Settings {
            entry_bytes: var("QUIRE_ENTRY_BYTES", 1024usize).max(16),
            ensemble: var("QUIRE_ENSEMBLE", 3),
            write_quorum: var("QUIRE_WRITE_QUORUM", 3),
            ack_quorum: var("QUIRE_ACK_QUORUM", 2),
            append_batch: var("QUIRE_APPEND_BATCH", 1usize).max(1),
            tail_batch: var("QUIRE_TAIL_BATCH", 10usize).max(1),
            catchup_entries: var("QUIRE_CATCHUP_ENTRIES", 2000u64).max(1),
            read_range: var("QUIRE_READ_RANGE", 100u64).max(1),
            ledger_entries: var("QUIRE_LEDGER_ENTRIES", 1000u64).max(1),
            poll_timeout_ms: var("QUIRE_POLL_TIMEOUT_MS", 1000u64),
            keep_ledgers: var("QUIRE_KEEP_LEDGERS", 0u8) == 1,
            report_json: std::env::var("QUIRE_REPORT_JSON").ok(),
        };
        assert!(
            s.ack_quorum >= 1 && s.ack_quorum <= s.write_quorum && s.write_quorum <= s.ensemble,
            "quorums must satisfy 1 <= ack <= write <= ensemble"
        );
        s
    }

    /// The settings of this process.
    pub fn get() -> &'static Settings {
        static SETTINGS: OnceLock<Settings> = OnceLock::new();
        SETTINGS.get_or_init(Settings::from_env)
    }
}
