//! quire's logs as data (issue #23): named, always-writable logs over
//! chains of ledgers, in the manner of Pulsar's ManagedLedger and
//! DistributedLog. No I/O and no clock: the metadata service checks every
//! edit of a log's record with these rules, the client's log writer makes
//! the edits, the simulator and the model checker drive both.
//! - [`chain`]: the record (segments with offset ranges, owner epoch, trim
//!   point), its edits (roll, take_over, trim), where an offset is, and
//!   [`chain::check_edit`], what a stored record may become.
//! - [`envelope`]: a record's bytes in its entry (producer id, sequence).
//! - [`producers`]: the de-duplication table of idempotent appends.
//! - [`cursor`]: durable named cursors: acknowledge, seek, retention holds.
//! - [`retention`]: how far retention trims a log (age, size, holding cursors).
//! - [`config`]: ledger shape, rollover and retention settings; names.
//! - [`meta`]: a log as the metadata service stores it, and on the wire.
//! - [`fuzzing`]: the decoder workloads of the fuzz targets and proptests.

pub mod chain;
pub mod config;
pub mod cursor;
pub mod envelope;
pub mod fuzzing;
pub mod meta;
pub mod producers;
pub mod retention;

pub use chain::{check_edit, ChainError, Edit, Located, LogRecord, LogSegment, OFFSET_MAX};
pub use config::{LogConfig, Retention, Rollover};
pub use cursor::Cursor;
pub use meta::LogMeta;
pub use producers::{Producers, Seen};
