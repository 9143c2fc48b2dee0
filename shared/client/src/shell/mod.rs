//! The async shell: drives the protocol's state machines over quire-rpc
//! (bookies) and quire-metaclient (metadata). No protocol decisions live here:
//! only I/O, timers, and the compare-and-set loops around the metadata.

pub mod bookies;
pub mod client;
pub mod cursor;
pub mod ensemble;
pub mod error;
pub mod ledger_writer;
pub mod log;
pub mod reader;
pub mod recover;
pub mod rereplicate;
pub mod scan;
pub mod tail;
pub mod throttle;

pub use client::{Client, ClientOptions, CreateLedger};
pub use cursor::{CursorStart, LogCursor};
pub use error::ClientError;
pub use ledger_writer::{Added, Closer, LedgerWriter, PendingAdd};
pub use log::{LogEntry, LogWriter, PendingAppend};
pub use reader::LedgerReader;
pub use recover::Recovered;
pub use rereplicate::Repair;
pub use scan::Scan;
pub use tail::{Tail, TailEvent};
pub use throttle::Throttle;
