//! What one model run explores: the ledger's shape, how many entries the
//! writer adds, how many recoverers race it, and the fault budget.

use quire_client::writer::Quorums;

/// One configuration of the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// E, Qw, Qa.
    pub quorums: Quorums,
    /// Bookies in the cluster (the first E are the ledger's ensemble; the
    /// others are spares for replacements).
    pub bookies: usize,
    /// Entries the writer adds.
    pub entries: u64,
    /// Recovering clients (the gateway's recover, a worker, an application).
    pub recoverers: usize,
    /// How often each recoverer may start a recovery (a failed or crashed
    /// one may be retried).
    pub runs_per_recoverer: u8,
    /// Requests or answers that may time out (be lost).
    pub timeouts: u8,
    /// Bookies that may have their disks replaced by empty ones at the same
    /// address (seed 003: a new instance, nothing on it).
    pub replacements: u8,
    /// Recoverers that may crash mid-recovery.
    pub recoverer_crashes: u8,
    /// Whether the writer may crash (it always may close).
    pub writer_crash: bool,
    /// Recovery's read window (entries read ahead at once).
    pub read_window: usize,
    /// The shell's behaviour before issue #19's fix: each of recovery's
    /// write-back replacements stored in the metadata by CAS as soon as it
    /// is chosen (`false`: stored only with the close, as today).
    pub store_replacements_eagerly: bool,
    /// Preemption bounding (Musuvathi and Qadeer's CHESS): `Some(k)`
    /// explores every interleaving in which parties switch *while the one
    /// running could still act* at most `k` times; a switch away from a
    /// party with nothing left to do is free, and so are the environment's
    /// faults (a bookie replaced). `None`: every interleaving, unbounded.
    pub preemptions: Option<u8>,
    /// Stop at the first state that breaks any invariant (the checker
    /// otherwise goes on until each invariant has a counterexample or the
    /// space is exhausted).
    pub stop_at_first_violation: bool,
}

impl Config {
    /// E=3 with the given Qw and Qa, one spare bookie, the writer and two
    /// recoverers, one bookie replacement, one recoverer crash and two
    /// timeouts: the small scope.
    pub fn small(write: usize, ack: usize, entries: u64) -> Config {
        Config {
            quorums: Quorums::new(3, write, ack).expect("valid quorums"),
            bookies: 4,
            entries,
            recoverers: 2,
            runs_per_recoverer: 2,
            timeouts: 2,
            replacements: 1,
            recoverer_crashes: 1,
            writer_crash: true,
            read_window: 2,
            store_replacements_eagerly: false,
            preemptions: None,
            stop_at_first_violation: false,
        }
    }

    /// Short text for reports: `E3 Qw2 Qa2, 2 entries, 2 recoverers, ...`.
    pub fn describe(&self) -> String {
        format!(
            "E{} Qw{} Qa{}, {} bookies, {} entries, {} recoverers x{} runs, {} timeouts, {} replacements, {} recoverer crashes{}{}{}",
            self.quorums.ensemble,
            self.quorums.write,
            self.quorums.ack,
            self.bookies,
            self.entries,
            self.recoverers,
            self.runs_per_recoverer,
            self.timeouts,
            self.replacements,
            self.recoverer_crashes,
            if self.writer_crash { ", writer may crash" } else { "" },
            if self.store_replacements_eagerly { ", PRE-FIX eager replacements" } else { "" },
            match self.preemptions {
                Some(k) => format!(", at most {k} preemptions"),
                None => String::new(),
            },
        )
    }
}
