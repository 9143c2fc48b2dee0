//! Add latency while compaction runs, unthrottled and throttled, next to no
//! compaction at all: what the throttle buys.
//!
//! One store on the disk under test (journal and entry logs on the same
//! device, the hard case). It is filled with 8 ledgers of 4 KiB entries,
//! interleaved so that every entry log holds all of them, then half the
//! ledgers are deleted, leaving every sealed log half live. While adds
//! arrive open-loop at a fixed rate (latency counted from each add's
//! scheduled time, so no coordinated omission), a major compaction moves the
//! live half.
//!
//! Phases: `none` (no compaction, BENCH_SECS), `unthrottled` and `throttled`
//! (BENCH_COMPACTION_RATE bytes/s), each measured for as long as its
//! compaction runs. Before each phase the fill is synced and, where the
//! process may, the page cache dropped, so compaction reads the disk.
//! Prints add p50/p99/p99.9/max and compaction MB/s.
//! Run: `make bench-compaction`. Environment: BENCH_SECS (10), BENCH_RATE
//! (adds/s, 4000), BENCH_SIZE (add payload, 1024), BENCH_FILL_MIB (fill before
//! the unthrottled phase, 1024; the throttled phase gets a quarter),
//! BENCH_COMPACTION_RATE (16 MiB/s), BENCH_DIR (/tmp/quire-bench-compaction).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_proto::v1::Entry;
use quire_storage::gc::Throttle;
use quire_storage::{Store, StoreConfig};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const FILL_LEDGERS: u64 = 8;
const FILL_ENTRY_BYTES: usize = 4096;

/// Fills ledgers `base..base + 8` with `mib` MiB in total, interleaved, then
/// deletes the even ones.
async fn fill_and_delete_half(store: &Store, base: u64, mib: u64) {
    let per_ledger = mib * 1024 * 1024 / FILL_ENTRY_BYTES as u64 / FILL_LEDGERS;
    let payload = Bytes::from(vec![0x42u8; FILL_ENTRY_BYTES]);
    for chunk in 0..per_ledger.div_ceil(64) {
        let mut pending = Vec::new();
        for l in base..base + FILL_LEDGERS {
            for e in chunk * 64..((chunk + 1) * 64).min(per_ledger) {
                pending.push(store.add(Entry::sealed(l, e, e as i64 - 1, payload.clone()), false));
            }
        }
        for p in pending {
            p.await.unwrap();
        }
    }
    store.flush().unwrap();
    let even: Vec<u64> = (base..base + FILL_LEDGERS).filter(|l| l % 2 == 0).collect();
    store.delete_ledgers(&even).unwrap();
    // Start the phase with no writeback of the fill pending, and (as root)
    // with the page cache empty, as on a bookie whose old logs went cold.
    rustix::fs::sync();
    let dropped = std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok();
    println!("# filled {mib} MiB into ledgers {base}.., deleted half; page cache dropped: {dropped}");
}

struct Load {
    h: Arc<Mutex<Histogram<u64>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

/// Adds at `rate`/s to ledger `ledger` until stopped; latency from each add's scheduled time.
fn start_load(store: Arc<Store>, ledger: u64, rate: u64, size: usize) -> Load {
    let h = Arc::new(Mutex::new(Histogram::new_with_bounds(1, 120_000_000, 3).unwrap()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (h2, stop2) = (h.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let payload = Bytes::from(vec![0x17u8; size]);
        let start = tokio::time::Instant::now();
        let interval = Duration::from_secs_f64(1.0 / rate as f64);
        let mut e = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let due = start + interval * e as u32;
            tokio::time::sleep_until(due).await;
            let add = store.add(Entry::sealed(ledger, e, e as i64 - 1, payload.clone()), false);
            let h = h2.clone();
            tokio::spawn(async move {
                add.await.unwrap();
                let us = tokio::time::Instant::now().saturating_duration_since(due).as_micros() as u64;
                h.lock().unwrap().record(us.max(1)).unwrap();
            });
            e += 1;
        }
        e
    });
    Load { h, stop, task }
}

async fn finish(load: Load) -> (u64, Histogram<u64>) {
    load.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n = load.task.await.unwrap();
    // Let the last adds complete.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let h = load.h.lock().unwrap().clone();
    (n, h)
}

fn report(phase: &str, adds: u64, secs: f64, h: &Histogram<u64>, extra: &str) {
    println!(
        "RESULT phase={phase} adds={adds} adds_per_s={:.0} p50_us={} p99_us={} p999_us={} max_us={} {extra}",
        adds as f64 / secs,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
}

async fn compaction_phase(store: &Arc<Store>, phase: &str, ledger: u64, rate_bytes: u64, rate: u64, size: usize) {
    let load = start_load(store.clone(), ledger, rate, size);
    // A second of load first, so the phase starts in steady state.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let s = store.clone();
    let out = tokio::task::spawn_blocking(move || s.collect_garbage(0.8, &mut Throttle::new(rate_bytes)))
        .await
        .unwrap()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let (adds, h) = finish(load).await;
    let moved_mb = out.entries_moved as f64 * FILL_ENTRY_BYTES as f64 / 1e6;
    report(
        phase,
        adds,
        secs + 1.0,
        &h,
        &format!(
            "compaction_secs={secs:.1} logs_compacted={} moved_MB={moved_mb:.0} compaction_MBps={:.1} (moved, read+written is twice that) limit_Bps={rate_bytes}",
            out.logs_compacted,
            moved_mb / secs
        ),
    );
}

fn main() {
    let secs = env("BENCH_SECS", 10);
    let rate = env("BENCH_RATE", 4000);
    let size = env("BENCH_SIZE", 1024) as usize;
    let fill_mib = env("BENCH_FILL_MIB", 1024);
    let limit = env("BENCH_COMPACTION_RATE", 16 * 1024 * 1024);
    let dir = PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-compaction".into()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = StoreConfig::new(dir.join("journal"), dir.join("ledgers"));
        c.entry_log_bytes = 32 * 1024 * 1024;
        let store = Arc::new(Store::open(c).unwrap());
        println!("# dir={} load {rate} adds/s of {size} B", dir.display());
        fill_and_delete_half(&store, 100, fill_mib).await;
        let load = start_load(store.clone(), 1, rate, size);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (adds, h) = finish(load).await;
        report("none", adds, secs as f64, &h, "");
        compaction_phase(&store, "unthrottled", 2, 0, rate, size).await;
        fill_and_delete_half(&store, 200, fill_mib / 4).await;
        compaction_phase(&store, "throttled", 3, limit, rate, size).await;
        print_disk(&dir);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn print_disk(dir: &Path) {
    let logs: u64 = std::fs::read_dir(dir.join("ledgers/entrylogs"))
        .map(|d| d.map(|f| f.unwrap().metadata().unwrap().len()).sum())
        .unwrap_or(0);
    println!("# entry logs now {:.0} MB", logs as f64 / 1e6);
}
