//! quire's bookie storage engine, usable and testable without the network.
//!
//! The write path of one add, in order:
//! 1. the entry's size and CRC32C are checked, and the ledger's fence state
//!    (under the ledger's lock, so an add and a fence are ordered);
//! 2. a journal record is queued ([`journal`]), and group-committed with its
//!    neighbours by one fdatasync;
//! 3. once durable, on the journal's thread and in journal order, the entry
//!    joins the write cache (readable from here on), the ledger's LAC rises,
//!    long polls wake, and the add is acknowledged.
//!
//! In the background the flusher moves the write cache, sorted by ledger, into
//! an entry log (synced), commits the locations, ledger records and the journal
//! checkpoint to the index ([`index`]) in one atomic durable batch, and lets the
//! journal delete segments the checkpoint covers.
//!
//! Garbage collection ([`gc`]): ledgers the bookie found deleted are dropped
//! from the index and caches ([`Store::delete_ledgers`]); entry logs nothing
//! references are removed and sparse ones compacted
//! ([`Store::collect_garbage`]).
//!
//! What this crate does not do: talk to peers or the metadata service, or
//! decide who may write or which ledgers are deleted (the bookie service does).

pub mod cookie;
pub mod disk;
pub mod entrylog;
pub mod error;
pub mod failpoint;
pub mod gc;
pub mod index;
pub mod journal;
pub mod store;

pub use error::StorageError;
pub use store::{RangeQuery, RangeRead, Store, StoreConfig, StoreStats, Stripe};
