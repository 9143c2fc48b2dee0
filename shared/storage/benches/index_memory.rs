//! The index's memory at production size (issue #46): BENCH_LEDGERS
//! (100 000) ledgers written round-robin, BENCH_ROUNDS (100) entries each,
//! one flush per round (each holds one entry of every ledger: each entry is
//! a run of its own), committed through `SledIndex` (a record per ledger
//! block of 64 ids), side by side with the layout before it (a sled record
//! per run, written raw in the same batches of 128), each in a process of
//! its own. Prints resident memory and peak, disk, and time every ten
//! rounds. Run: `cargo bench -p quire-storage --bench index_memory`
//! (BENCH_DIR: the disk under test, /tmp/quire-bench-index-memory).

use std::path::{Path, PathBuf};
use std::time::Instant;

use quire_storage::index::{IndexBatch, LedgerIndex, Location, SledIndex};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn status_mib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn disk_mib(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total >> 20
}

fn run(layout: &str, dir: &Path, ledgers: u64, rounds: u64) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let blocks = (layout == "blocks").then(|| SledIndex::open(dir).unwrap());
    let raw = (layout == "runs").then(|| {
        let db = sled::Config::new().path(dir).cache_capacity(64 << 20).flush_every_ms(None).open().unwrap();
        let tree = db.open_tree("ledger-index").unwrap();
        (db, tree)
    });
    let start = Instant::now();
    for r in 0..rounds {
        // 64-byte entries laid out as a flush writes them: by ledger.
        let locations: Vec<(u64, u64, Location)> =
            (0..ledgers).map(|l| (l, r, Location { log_id: 1 + r as u32, offset: 16 + 80 * l, len: 80 })).collect();
        if let Some(idx) = &blocks {
            idx.commit(&IndexBatch { locations: locations.clone(), ..Default::default() }).unwrap();
        }
        if let Some((db, tree)) = &raw {
            for chunk in locations.chunks(128) {
                let mut b = sled::Batch::default();
                for (l, e, loc) in chunk {
                    let mut k = [b'r'; 17];
                    k[1..9].copy_from_slice(&l.to_be_bytes());
                    k[9..17].copy_from_slice(&e.to_be_bytes());
                    let mut v = Vec::with_capacity(16);
                    v.extend_from_slice(&loc.log_id.to_be_bytes());
                    v.extend_from_slice(&loc.offset.to_be_bytes());
                    v.extend_from_slice(&loc.len.to_be_bytes());
                    b.insert(&k[..], v);
                }
                tree.apply_batch(b).unwrap();
            }
            db.flush().unwrap();
        }
        if r % 10 == 9 || r + 1 == rounds {
            println!(
                "RESULT layout={layout} entries={} rss_mib={} peak_rss_mib={} disk_mib={} secs={:.1}",
                ledgers * (r + 1),
                status_mib("VmRSS:"),
                status_mib("VmHWM:"),
                disk_mib(dir),
                start.elapsed().as_secs_f64()
            );
        }
    }
    if let Some(idx) = &blocks {
        let probe = Instant::now();
        let n = 10_000u64;
        for i in 0..n {
            let l = (i * 7919) % ledgers;
            let e = (i * 104_729) % rounds;
            assert!(idx.location(l, e).unwrap().is_some(), "ledger {l} entry {e}");
        }
        println!("RESULT layout={layout} look_ups={n} mean_us={:.1}", probe.elapsed().as_micros() as f64 / n as f64);
    }
}

fn main() {
    let ledgers = env("BENCH_LEDGERS", 100_000);
    let rounds = env("BENCH_ROUNDS", 100);
    let dir = PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-index-memory".into()));
    if let Ok(layout) = std::env::var("BENCH_LAYOUT_CHILD") {
        run(&layout, &dir.join(&layout), ledgers, rounds);
        return;
    }
    println!("# {ledgers} ledgers round-robin, {rounds} entries each, one commit per round; sled cache 64 MiB");
    for layout in ["blocks", "runs"] {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .env("BENCH_LAYOUT_CHILD", layout)
            .status()
            .unwrap();
        assert!(status.success(), "{layout}: {status}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
