//! Exhaustive small-scope model checking of quire's ledger protocol.
//!
//! The simulator (`quire_client::sim`) samples runs from seeds; this crate
//! explores *every* interleaving of a small configuration with
//! [stateright](https://docs.rs/stateright)'s depth-first checker, driving
//! the same code the services run: the [`quire_client::writer::Writer`] and
//! [`quire_client::recovery::Recovery`] state machines, the simulator's
//! bookies (the real bookie's refusals, the seed-003 guard included) and a
//! compare-and-set metadata record. Every message may be delivered in any
//! order or lost (a timeout), recoverers race the writer and each other and
//! may crash at any step and start again, and a bookie's disks may be
//! replaced by empty ones. The invariants (`properties`) are checked in
//! every reachable state; a violation comes with the trace that reached it
//! (depth first: a trace, not the shortest). Two recoverers are checked
//! under a preemption bound ([`Config::preemptions`]).
//!
//! What it does not do: model time beyond timeouts (a lost message is a
//! timeout), metadata outages (the CAS is linearizable and always
//! reachable here; the simulator covers outages), corruption, or the
//! auditor and re-replication.

pub mod chaining;
pub mod config;
pub mod model;
pub mod properties;
pub mod state;

pub use chaining::{check_chain, check_chain_first, ChainBug, ChainConfig, ChainModel, ChainReport};
pub use config::Config;
pub use model::{Action, LedgerModel, Move};

use stateright::{Checker, Model};

/// What one exhaustive run found.
#[derive(Debug)]
pub struct Report {
    /// The configuration.
    pub config: Config,
    /// Distinct states explored.
    pub unique_states: usize,
    /// States generated (with repeats).
    pub states: usize,
    /// The deepest path.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: std::time::Duration,
    /// Whether the whole space was explored (no target cut it short).
    pub complete: bool,
    /// Each violated property with a counterexample: the steps
    /// from the initial state, and the state it ends in.
    pub violations: Vec<(&'static str, Vec<Move>, String)>,
}

impl Report {
    /// One line of figures.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} states ({} generated), depth {}, {:.1} s, {}",
            self.config.describe(),
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.violations.is_empty() {
                "no violation".to_string()
            } else {
                format!("VIOLATED: {}", self.violations.iter().map(|v| v.0).collect::<Vec<_>>().join(", "))
            }
        )
    }
}

/// Explores `config` exhaustively (depth first, `threads` threads: memory
/// holds one fingerprint per state, not the states), or until `max_states`
/// states were generated (0: no bound).
pub fn check(config: Config, threads: usize, max_states: usize) -> Report {
    let started = std::time::Instant::now();
    let model = LedgerModel::new(config.clone());
    let stop_at_first = config.stop_at_first_violation;
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let checker = model.checker().threads(threads).target_state_count(max_states);
    let checker = if config.recoverers == 2 { checker.symmetry() } else { checker };
    let checker = checker.spawn_dfs().join();
    let violations: Vec<(&'static str, Vec<Move>, String)> = names
        .into_iter()
        .flat_map(|name| {
            let Some(path) = checker.discovery(name) else { return Vec::new() };
            let last = path.last_state().clone();
            let text = format!("{last:#?}");
            let moves = path.into_actions();
            if name != properties::ANY {
                return vec![(name, moves, text)];
            }
            // The first violation: name each invariant its state breaks.
            properties::all()
                .into_iter()
                .filter(|p| !(p.condition)(checker.model(), &last))
                .map(|p| (p.name, moves.clone(), text.clone()))
                .collect()
        })
        .collect();
    Report {
        config,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
        // Stopped by a bound, or by the first violation, is not exhaustive.
        // stateright's target counts generated states, not distinct ones.
        complete: checker.is_done()
            && (max_states == 0 || checker.state_count() < max_states)
            && (!stop_at_first || violations.is_empty()),
        violations,
    }
}
