//! A deterministic simulator of the ledger protocol.
//!
//! One seed fixes a whole run: the quorums, the number of bookies, the
//! workload, and the faults (bookie crashes and restarts, bookies replaced by
//! fresh instances at the same id, partitions between a client and a bookie,
//! lost messages, metadata outages, corrupted copies, the writer's crash, a
//! concurrent recovery). The writer, recovery and the reader are the real
//! state machines ([`crate::writer`], [`crate::recovery`], the placement and
//! metadata rules); bookies and the metadata store are models that refuse
//! exactly what the real ones refuse. After the safety phase every fault ends
//! and recovery must close the ledger (liveness).
//!
//! Checked, from BRIEF.md: (1, 4) the ledger closes at or past every
//! acknowledged entry and each entry up to the tail has a readable copy;
//! (2) readers see the acknowledged bytes and no LAC beyond what was
//! acknowledged; (3) nothing is acknowledged past a close; (5) corrupt copies
//! are never taken for entries or for absences.
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
    let mut w = World::new(seed);
    match w.run() {
        Ok(()) => Ok(w.stats.clone()),
        Err(v) => Err((v, format!("{:?}\n{}", w.scenario(), w.log_tail(log_lines)))),
    }
}
