//! quire's ledger protocol (BookKeeper's, with seed 003 closed).
//!
//! Plain state machines and rules (no I/O, no clock: events and `now` in,
//! commands out), shared by the async shell and the simulator:
//! - [`placement`]: rack-aware choice of ensembles and replacements.
//! - [`meta`]: ledger metadata, validated, and the edits the protocol makes.
//! - [`writer`]: striping, pending adds, the ack rule, LAC, bookie failures
//!   and ensemble changes, the instance-id guard.
//! - [`fragments`]: which entries a bookie is meant to hold, and which of
//!   them autorecovery may repair now.
//! - [`read_plan`]: which bookie of a striped ensemble a batch read asks
//!   for which ids.
//! - [`log_chain`]: a log as a chain of ledgers (offsets, rollover,
//!   takeover, trim), the record's edits as pure functions (issue #23;
//!   the crate quire-log, re-exported).
//! - [`recovery`]: fence coverage, reading forward, write-back, close at the
//!   true tail; fail rather than truncate (#1067, #2614, #2908, seed 004).
//!
//! The async shell ([`shell`]) executes those commands over QUIC: the
//! [`Client`] creates, opens, recovers and deletes ledgers; a
//! [`LedgerWriter`] is an actor per ledger; a [`LedgerReader`] reads up to the
//! LAC with speculative retries.
//!
//! [`Client::rereplicate`] repairs the fragments of a marked ledger (the
//! replication worker's job); detecting under-replication is the auditor's
//! (services/auditor), and retrying a failed recovery is the caller's.

pub mod fragments;
pub use quire_log::chain as log_chain;
pub mod meta;
pub mod placement;
pub mod read_plan;
pub mod recovery;
pub mod shell;
pub mod sim;
pub mod writer;

pub use shell::{
    Added, Client, ClientError, ClientOptions, CreateLedger, CursorStart, LedgerReader, LedgerWriter, LogCursor,
    LogEntry, LogWriter, PendingAdd, PendingAppend, Recovered, Repair, Tail, TailEvent, Throttle,
};
