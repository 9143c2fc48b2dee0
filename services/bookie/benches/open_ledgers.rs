//! A bookie at production size (issue #46): BENCH_LEDGERS (100 000) open
//! ledgers and an index of BENCH_ENTRIES (10 000 000) entries, over QUIC +
//! mTLS to one bookie process with its default caches.
//!
//! The entries go round-robin over the ledgers (entry 0 of every ledger,
//! then entry 1, ...), as a broker with one open ledger per topic writes
//! them, BENCH_CONNS x BENCH_WINDOW adds in flight, BENCH_SIZE (64) bytes
//! each; no ledger is ever closed. Prints adds/s and the bookie's resident
//! memory as it grows, then its resident memory and peak (VmHWM) at the end
//! against the bound the issue sets: its configured caches (write cache,
//! read cache, the index's sled cache) plus 64 MiB; then the latency of
//! BENCH_READS reads of random entries (the index at that size, cold).
//! Run: `cargo bench -p quire-bookie --bench open_ledgers`
//! (BENCH_DIR: the disk under test, /tmp/quire-bench-open-ledgers;
//! BENCH_BOOKIE_ARGS: extra bookie flags).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{CallOptions, ClientOptions, Credentials, RpcClient, TlsFiles};
use quire_testkit::{bin_path, Process};

/// The bookie's caches at their defaults (quire-bookie --help): write cache
/// 64 MiB, read cache 16 MiB, the index's sled cache 64 MiB.
const CONFIGURED_CACHES_MIB: f64 = 64.0 + 16.0 + 64.0;
/// What the issue allows beyond them.
const SLACK_MIB: f64 = 64.0;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let ledgers = env("BENCH_LEDGERS", 100_000);
    let entries = env("BENCH_ENTRIES", 10_000_000);
    let conns = env("BENCH_CONNS", 4) as usize;
    let window = env("BENCH_WINDOW", 256) as usize;
    let size = env("BENCH_SIZE", 64) as usize;
    let reads = env("BENCH_READS", 2_000);
    let per_ledger = entries.div_ceil(ledgers);
    let dir = PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-open-ledgers".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 1, bookies: 1 }, &IssueOptions::default()).unwrap();
    let (ready, data) = (dir.join("ready"), dir.join("data"));
    let args = [
        "--certs-dir",
        certs.to_str().unwrap(),
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        ready.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--log",
        "warn",
    ];
    // Extra bookie flags, space-separated (e.g. BENCH_BOOKIE_ARGS="--flush-interval-ms 10000").
    let extra = std::env::var("BENCH_BOOKIE_ARGS").unwrap_or_default();
    let mut args: Vec<&str> = args.to_vec();
    args.extend(extra.split_whitespace());
    let mut bookie = Process::spawn("bookie", &bin_path("quire-bookie"), &args, &dir).unwrap();
    let addr = bookie.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    let pid = bookie.pid();
    println!(
        "open-ledgers bench: {ledgers} open ledgers, {} entries of {size} B ({per_ledger} each), {conns} x {window} in flight, data on {}",
        per_ledger * ledgers,
        dir.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let options = ClientOptions { request_timeout: Duration::from_secs(60), ..ClientOptions::default() };
        let clients: Vec<RpcClient> = (0..conns).map(|_| RpcClient::new(&creds, options.clone()).unwrap()).collect();
        let peers: Vec<_> = clients.iter().map(|c| c.peer(&addr, Role::Bookie, None)).collect();
        let payload = Bytes::from(vec![0x5au8; size]);
        let done = Arc::new(AtomicU64::new(0));
        let tasks = conns * window;
        let start = Instant::now();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let (peer, payload, done) = (peers[t % conns].clone(), payload.clone(), done.clone());
            handles.push(tokio::spawn(async move {
                // Task t owns the ledgers congruent to t: each ledger's entries in order.
                for e in 0..per_ledger {
                    let mut l = t as u64;
                    while l < ledgers {
                        let ledger = 1 + l;
                        let entry = v1::Entry::sealed(ledger, e, e as i64 - 1, payload.clone());
                        let req = v1::AddEntryRequest { entry: Some(entry), ..Default::default() };
                        peer.call_full(req, CallOptions::ordered(ledger)).await.expect("add");
                        done.fetch_add(1, Ordering::Relaxed);
                        l += tasks as u64;
                    }
                }
            }));
        }
        let total = per_ledger * ledgers;
        let step = (total / 10).max(1);
        let mut next = step;
        while next <= total {
            while done.load(Ordering::Relaxed) < next {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            println!(
                "RESULT phase=fill entries={next} adds_per_s={:.0} rss_mib={:.1}",
                next as f64 / start.elapsed().as_secs_f64(),
                mib(status_kib(pid, "VmRSS:"))
            );
            next += step;
        }
        for h in handles {
            h.await.unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        // Two flush intervals (the default 1 s) for the write cache to drain
        // into the entry logs and the index: what a bookie holds at rest.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (rss, hwm) = (mib(status_kib(pid, "VmRSS:")), mib(status_kib(pid, "VmHWM:")));
        let bound = CONFIGURED_CACHES_MIB + SLACK_MIB;
        println!(
            "RESULT phase=held ledgers={ledgers} entries={total} adds_per_s={:.0} rss_mib={rss:.1} peak_rss_mib={hwm:.1} bound_mib={bound:.0} (caches {CONFIGURED_CACHES_MIB:.0} + {SLACK_MIB:.0}) {}",
            total as f64 / secs,
            if hwm <= bound { "within" } else { "OVER" }
        );
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..reads {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (ledger, entry) = (1 + x % ledgers, (x >> 32) % per_ledger);
            let t = Instant::now();
            let r = peers[0].call(v1::ReadEntryRequest { ledger_id: ledger, entry_id: entry, ..Default::default() }).await;
            let r = r.expect("read");
            let got = r.entry.expect("an entry");
            assert_eq!((got.ledger_id, got.entry_id), (ledger, entry));
            h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
        }
        println!(
            "RESULT phase=read reads={reads} p50_us={} p99_us={} max_us={} rss_mib={:.1}",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max(),
            mib(status_kib(pid, "VmRSS:"))
        );
        for c in clients {
            c.close(Duration::from_millis(100)).await;
        }
    });
    bookie.terminate(Duration::from_secs(30)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
