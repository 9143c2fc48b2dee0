//! Seeded random walks over the log model, at scopes too large to explore
//! exhaustively: many writers and takeovers, long runs of appends and
//! rollovers, several trims and crashes. Each step is one of the enabled
//! actions, chosen by the seed; every invariant is checked after every
//! step, and a failing seed replays exactly.

use quire_client::sim::rng::Rng;
use stateright::Model;

use super::{ChainAction, ChainConfig, ChainModel};

/// A walk that broke an invariant: which, the steps that led there, and
/// the state it ended in.
#[derive(Debug)]
pub struct WalkFailure {
    pub seed: u64,
    pub property: &'static str,
    pub steps: Vec<ChainAction>,
    pub state: String,
}

/// Walks `config` from its initial state for at most `max_steps` steps
/// (or until nothing is enabled), choosing by `seed`. Returns the steps taken.
pub fn walk(config: &ChainConfig, seed: u64, max_steps: usize) -> Result<usize, Box<WalkFailure>> {
    let model = ChainModel::new(config.clone());
    let properties = model.properties();
    let mut rng = Rng::new(seed);
    let mut state = model.init_states().remove(0);
    let mut steps = Vec::new();
    while steps.len() < max_steps {
        let mut enabled = Vec::new();
        model.actions(&state, &mut enabled);
        if enabled.is_empty() {
            break;
        }
        let a = rng.pick(&enabled).clone();
        state = model.next_state(&state, a.clone()).expect("an enabled action takes a step");
        steps.push(a);
        if let Some(p) = properties.iter().find(|p| !(p.condition)(&model, &state)) {
            return Err(Box::new(WalkFailure { seed, property: p.name, steps, state: format!("{state:#?}") }));
        }
    }
    Ok(steps.len())
}
