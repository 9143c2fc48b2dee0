//! Runs the protocol simulator over many seeds (`make sim SEEDS=N`).
//!
//! quire-sim [--seeds N] [--start S] [--seed X] [--store-replacements-early]
//!
//! Prints one line per failing seed with what broke and the end of its event
//! log; exits non-zero if any failed. A failing seed belongs in
//! shared/client/tests/sim_regressions.txt forever.
//!
//! `--store-replacements-early` runs a deliberately broken recovery (its
//! write-back replacements stored by CAS as made, the code before issue #19
//! item 1), to show that the checkers find the loss it causes.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<u64> {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("{name} takes a number, got {v:?}");
                std::process::exit(2)
            })
        })
    };
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("quire-sim [--seeds N] [--start S] [--seed X] [--store-replacements-early]");
        return;
    }
    let broken = args.iter().any(|a| a == "--store-replacements-early");
    let (start, count) = match value("--seed") {
        Some(s) => (s, 1),
        None => (value("--start").unwrap_or(0), value("--seeds").unwrap_or(1000)),
    };
    let t = Instant::now();
    let (mut failed, mut acked, mut changes, mut faults, mut unavailable) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut recoveries, mut overlapping, mut stopped, mut lost_replies, mut limbo) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for seed in start..start + count {
        let lines = if count == 1 { usize::MAX } else { 60 };
        let tweak = |s: &mut quire_client::sim::Scenario| s.store_replacements_early = broken;
        match quire_client::sim::run_tweaked(seed, lines, tweak) {
            Ok(s) => {
                recoveries += s.recoveries;
                overlapping += s.overlapping_recoveries;
                stopped += s.recoverer_crashes;
                lost_replies += s.cas_replies_lost;
                limbo += s.limbo_answers;
                acked += s.acked;
                changes += s.ensemble_changes;
                faults += s.faults;
                unavailable += s.unavailable;
                if count == 1 {
                    println!("seed {seed}: {s:?}");
                }
            }
            Err((v, log)) => {
                failed += 1;
                println!("seed {seed} FAILED: {}\n{log}\n", v.0);
            }
        }
    }
    println!(
        "{count} seeds from {start}: {failed} failed; {acked} adds acknowledged, {changes} ensemble changes, {faults} faults, {unavailable} adds answered METADATA_UNAVAILABLE; {recoveries} recoveries ({overlapping} overlapping another, {stopped} stopped half-way), {lost_replies} CAS replies lost, {limbo} recovery reads answered in limbo; {:.1} s",
        t.elapsed().as_secs_f64()
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
