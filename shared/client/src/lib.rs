//! quire's ledger protocol (BookKeeper's, with seed 003 closed).
//!
//! - [`placement`]: rack-aware choice of ensembles and replacements.
//! - [`recovery`]: when fencing is complete, and whether an entry exists (#1067, #2908, seed 004).
//! - [`writer`]: the writer's state machine: striping over the ensemble,
//!   pending adds, the ack rule, LAC, bookie failures and ensemble changes,
//!   the instance-id guard. Plain: events in (with the time), commands out;
//!   no I/O, no clock.
//!
//! The async shell that drives it over quire-rpc, recovery, readers and the
//! deterministic simulator arrive with the rest of the CLIENT issue.

pub mod meta;
pub mod placement;
pub mod recovery;
pub mod writer;
