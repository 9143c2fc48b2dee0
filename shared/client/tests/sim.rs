//! The deterministic simulator inside `make test`: every seed that ever
//! failed, then a fixed range of seeds. `make sim SEEDS=N` soaks longer.

fn check(seed: u64) -> Option<String> {
    quire_client::sim::run(seed).err().map(|(v, log)| format!("seed {seed}: {}\n{log}", v.0))
}

#[test]
fn seeds_that_once_failed_pass() {
    let list = include_str!("sim_regressions.txt");
    let seeds: Vec<u64> = list
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap().parse().expect("a seed number"))
        .collect();
    assert!(!seeds.is_empty());
    let failures: Vec<String> = seeds.into_iter().filter_map(check).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn five_hundred_seeds_keep_every_guarantee() {
    let failures: Vec<String> = (0..500).filter_map(check).collect();
    assert!(failures.is_empty(), "{} seeds failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn a_seed_replays_exactly() {
    let a = quire_client::sim::run(7).unwrap();
    let b = quire_client::sim::run(7).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert!(a.messages > 0 && a.acked > 0, "{a:?}");
}
