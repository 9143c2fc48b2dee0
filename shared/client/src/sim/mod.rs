//! A deterministic simulator of the ledger protocol.
//!
//! One seed fixes a whole run: the quorums, the number of bookies, the
//! workload, and the faults (bookie crashes and restarts, bookies replaced by
//! fresh instances at the same id, partitions between a client and a bookie,
//! lost messages, metadata outages, corrupted copies, a bookie that lost its
//! data and answers in limbo until refilled, the writer's crash, one to three
//! recovering clients that overlap and stop half-way at any step, and
//! compare-and-sets applied whose replies are lost). The writer, recovery
//! and the reader are the real
//! state machines ([`crate::writer`], [`crate::recovery`], the placement and
//! metadata rules); bookies and the metadata store are models that refuse
//! exactly what the real ones refuse. After the safety phase every fault ends
//! and recovery must close the ledger (liveness).
//!
//! Checked, as named invariants (the first four are those of Vanlightly's
//! TLA+ specification, bookkeeper-tlaplus):
//! - `NoDivergenceBetweenClientAndMetaData`: once closed, no acknowledged
//!   entry lies past the close (checked at every close and acknowledgement);
//! - `AllAckedEntriesAreReadable`: every entry up to the tail has an intact
//!   copy on its write set;
//! - `AllCommittedEntriesReachAckQuorum`: every entry up to the tail has Qa
//!   intact copies on its write set, less the copies disk faults took;
//! - `NoOutOfOrderEntries`: every stored entry holds the writer's bytes for
//!   its id;
//! - `RecoveredTailNotBelowAcked`: no recovery proposes a close below an
//!   acknowledged entry (checked before its CAS);
//! - and BRIEF.md's: readers see the acknowledged bytes and no LAC beyond
//!   what was acknowledged; corrupt copies are never taken for entries or
//!   for absences; after healing the ledger is closed (liveness).
//!
//! Not modelled: the Raft replication behind the metadata store (it is tested
//! with real processes), byte-level torn writes (the journal's own tests).

pub mod bookie;
pub mod metastore;
pub mod rng;
pub mod world;

pub use world::{Scenario, Stats, Violation, World};

/// Runs one seed; `Err` carries what broke and the end of the event log.
pub fn run(seed: u64) -> Result<Stats, (Violation, String)> {
    run_with_log(seed, 60)
}

/// Runs one seed, keeping the last `log_lines` of its event log on failure.
pub fn run_with_log(seed: u64, log_lines: usize) -> Result<Stats, (Violation, String)> {
    run_tweaked(seed, log_lines, |_| {})
}

/// As [`run_with_log`], the scenario changed by `tweak` first.
pub fn run_tweaked(
    seed: u64,
    log_lines: usize,
    tweak: impl FnOnce(&mut Scenario),
) -> Result<Stats, (Violation, String)> {
    let mut w = World::new_with(seed, tweak);
    match w.run() {
        Ok(()) => Ok(w.stats.clone()),
        Err(v) => Err((v, format!("{:?}\n{}", w.scenario(), w.log_tail(log_lines)))),
    }
}
