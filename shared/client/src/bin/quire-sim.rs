//! Runs the protocol simulator over many seeds (`make sim SEEDS=N`).
//!
//! quire-sim [--seeds N] [--start S] [--seed X]
//!
//! Prints one line per failing seed with what broke and the end of its event
//! log; exits non-zero if any failed. A failing seed belongs in
//! shared/client/tests/sim_regressions.txt forever.

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
        println!("quire-sim [--seeds N] [--start S] [--seed X]");
        return;
    }
    let (start, count) = match value("--seed") {
        Some(s) => (s, 1),
        None => (value("--start").unwrap_or(0), value("--seeds").unwrap_or(1000)),
    };
    let t = Instant::now();
    let (mut failed, mut acked, mut changes, mut faults, mut unavailable) = (0u64, 0u64, 0u64, 0u64, 0u64);
    for seed in start..start + count {
        let lines = if count == 1 { usize::MAX } else { 60 };
        match quire_client::sim::run_with_log(seed, lines) {
            Ok(s) => {
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
        "{count} seeds from {start}: {failed} failed; {acked} adds acknowledged, {changes} ensemble changes, {faults} faults, {unavailable} adds answered METADATA_UNAVAILABLE; {:.1} s",
        t.elapsed().as_secs_f64()
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
