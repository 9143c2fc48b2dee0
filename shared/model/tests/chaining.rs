//! The log model (LedgerChaining) in `make test`: the small scope explored
//! to the end holds every invariant, and each deliberate bug is caught.

use quire_model::{check_chain, check_chain_first, ChainBug, ChainConfig};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Two writers taking the log from each other, appending,
/// rolling every two records, one of them free to crash, and a trim: every
/// reachable state holds every invariant.
#[test]
fn racing_owners_rollovers_a_crash_and_a_trim_hold_every_log_invariant() {
    holds(ChainConfig::small());
}

/// `config` explored to the end (on 2 threads), over a million states (each
/// scope here reaches 1.7 to 5.4 million: fewer means a step stopped being
/// taken), with every invariant held.
fn holds(config: ChainConfig) {
    let r = check_chain(config, 2);
    println!("{}", r.summary());
    assert!(r.complete, "not explored to the end: {}", r.summary());
    assert!(r.unique_states > 1_000_000, "suspiciously few states: {}", r.summary());
    assert!(r.violations.is_empty(), "{}\n{:#?}", r.summary(), r.violations);
}

fn caught(config: ChainConfig, property: &str) -> Vec<quire_model::chaining::ChainAction> {
    let bug = config.bug;
    // One thread, to the first violation: the same one every run.
    let r = check_chain_first(config);
    println!("{}", r.summary());
    let (_, steps, _) = r
        .violations
        .iter()
        .find(|v| v.0 == property)
        .unwrap_or_else(|| panic!("{bug:?} was not caught by \"{property}\": {}", r.summary()));
    steps.clone()
}

/// A takeover that does not fence: the old owner's adds reach Qa past the
/// end the new owner sealed, and are acknowledged at offsets the new
/// owner's ledger holds.
#[test]
fn a_takeover_without_a_fence_loses_an_acknowledged_record_and_the_checker_finds_it() {
    use quire_model::chaining::ChainAction as A;
    let steps =
        caught(ChainConfig { bug: Some(ChainBug::NoFence), ..ChainConfig::small() }, "no acknowledged record is lost");
    // An earlier owner acknowledges after another writer's recovery chose
    // its end (the fence it did not set would have stopped that).
    let acked_after_recovery = steps.iter().enumerate().any(|(i, a)| match a {
        A::TakeRecover(taker, _) => steps[i..].iter().any(|b| matches!(b, A::Ack(w) if w != taker)),
        _ => false,
    });
    assert!(acked_after_recovery, "no acknowledgement of an earlier owner after a recovery: {steps:?}");
}

/// Appending to the pre-made ledger before the rollover lists it (a third
/// append, past a full ledger): a non-empty ledger the log does not list.
#[test]
fn writing_ahead_of_the_rollover_leaves_records_outside_the_log_and_the_checker_finds_it() {
    let c = ChainConfig { bug: Some(ChainBug::WriteAhead), appends: 3, trims: 0, crashes: 0, ..ChainConfig::small() };
    caught(c, "every non-empty ledger is in the log's list");
}

/// A sweep after a takeover that deletes every ledger the log does not
/// list, not only those older than the newest it lists, deletes the live
/// owner's next ledger before its rollover lists it.
#[test]
fn a_sweep_past_the_newest_listed_ledger_deletes_a_live_writers_next_and_the_checker_finds_it() {
    use quire_model::chaining::ChainAction as A;
    let c = ChainConfig { bug: Some(ChainBug::SweepUnbounded), trims: 0, crashes: 0, ..ChainConfig::small() };
    let steps = caught(c, "no offset given twice, no edit of the client refused");
    assert!(steps.iter().any(|a| matches!(a, A::Sweep)), "{steps:?}");
}

/// A delete racing the writers' rollovers and takeovers (issue #47): in
/// every reachable state no add reaches its ack quorum in a ledger the
/// delete took, and the other invariants hold until it lands.
#[test]
fn a_delete_racing_rollovers_and_takeovers_leaves_no_writer_unfenced() {
    holds(ChainConfig::delete());
}

/// The delete as it was (no version, whatever the open ledger's state):
/// a rollover between its read and its delete lists a ledger it never
/// fenced, and the writer's next add reaches Qa in a deleted ledger.
#[test]
fn a_delete_without_its_version_leaves_the_writer_unfenced_and_the_checker_finds_it() {
    use quire_model::chaining::ChainAction as A;
    let c = ChainConfig { bug: Some(ChainBug::DeleteUnfenced), ..ChainConfig::delete() };
    let steps = caught(c, "no add reaches its ack quorum in a deleted ledger");
    assert!(steps.iter().any(|a| matches!(a, A::Roll(_))), "not a rollover's race: {steps:?}");
}

/// Atomic batches (issue #47): in every reachable state no sealed segment
/// ends within a batch, a seal is short of its closed ledger only by a cut
/// batch, and every acknowledged batch is kept whole.
#[test]
fn atomic_batches_cut_by_a_crash_or_a_takeover_are_sealed_before_they_begin() {
    holds(ChainConfig::batches());
}

/// A takeover sealing at the recovered end, as before atomic batches:
/// a batch the recovery cut stays in the log in part.
#[test]
fn a_takeover_that_keeps_a_cut_batch_is_caught() {
    let c = ChainConfig { bug: Some(ChainBug::KeepCutBatch), ..ChainConfig::batches() };
    caught(c, "no sealed segment ends within a batch");
}

/// The simulator's way at a scope no exhaustive search reaches: four
/// writers taking the log from each other up to five times each, forty
/// appends each in batches of two rolling every three records, four trims,
/// three crashes; 3,000 seeded walks, every invariant after every step.
#[test]
fn long_random_walks_of_four_racing_owners_hold_every_log_invariant() {
    let c = ChainConfig {
        writers: 4,
        takeovers: 5,
        appends: 40,
        rollover_entries: 3,
        trims: 4,
        crashes: 3,
        deletes: 0,
        // In atomic batches of two (issue #47): cut by crashes and
        // takeovers all along.
        batch: 2,
        bug: None,
    };
    let mut steps = 0;
    for seed in 0..3_000 {
        match quire_model::chaining::walk::walk(&c, seed, 2_000) {
            Ok(n) => steps += n,
            Err(f) => {
                panic!("seed {}: \"{}\" after {} steps: {:?}\n{}", f.seed, f.property, f.steps.len(), f.steps, f.state)
            }
        }
    }
    println!("{}: 3000 walks, {steps} steps", c.describe());
    assert!(steps > 3_000 * 50, "walks too short to mean much: {steps} steps");
}

/// The walks find the bug the exhaustive search finds.
#[test]
fn random_walks_find_a_takeover_without_a_fence() {
    let c = ChainConfig {
        writers: 4,
        takeovers: 5,
        appends: 40,
        rollover_entries: 3,
        trims: 4,
        crashes: 3,
        deletes: 0,
        batch: 1,
        bug: Some(ChainBug::NoFence),
    };
    let found = (0..3_000).find_map(|seed| quire_model::chaining::walk::walk(&c, seed, 2_000).err());
    let f = found.expect("3,000 walks never met the unfenced takeover");
    println!("seed {}: {} after {} steps", f.seed, f.property, f.steps.len());
}
