//! One bookie process, 1 KiB adds from pipelined clients over QUIC + mTLS.
//!
//! Phases:
//! - `peak`: closed loop, BENCH_CONNS connections x BENCH_WINDOW adds in flight;
//! - `half`: open loop at half the peak rate, latency measured from each add's
//!   scheduled time (no coordinated omission).
//!
//! Prints adds/s, ack latency p50/p99/p99.9 and the bookie's peak RSS (VmHWM).
//! Run: `make bench-bookie` (= `cargo bench -p quire-bookie --bench bookie`).
//! Environment: BENCH_SECS (10), BENCH_CONNS (4), BENCH_WINDOW (256 per connection),
//! BENCH_SIZE (1024), BENCH_DIR (/tmp/quire-bench-bookie: the disk under test).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{CallOptions, ClientOptions, Credentials, PeerClient, RpcClient, TlsFiles};
use quire_testkit::{bin_path, Process};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).unwrap()
}

struct Outcome {
    adds: u64,
    secs: f64,
    h: Histogram<u64>,
}

fn report(phase: &str, o: &Outcome, extra: &str) {
    println!(
        "RESULT phase={phase} adds={} adds_per_s={:.0} MBps={:.1} p50_us={} p99_us={} p999_us={} max_us={} {extra}",
        o.adds,
        o.adds as f64 / o.secs,
        o.adds as f64 * env("BENCH_SIZE", 1024) as f64 / o.secs / 1e6,
        o.h.value_at_quantile(0.5),
        o.h.value_at_quantile(0.99),
        o.h.value_at_quantile(0.999),
        o.h.max()
    );
}

fn add(ledger: u64, entry: u64, payload: &Bytes) -> v1::AddEntryRequest {
    v1::AddEntryRequest {
        entry: Some(v1::Entry::sealed(ledger, entry, entry as i64 - 1, payload.clone())),
        ..Default::default()
    }
}

async fn closed_loop(peers: &[PeerClient], window: usize, secs: u64, payload: Bytes, ledger_base: u64) -> Outcome {
    let end = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, peer) in peers.iter().enumerate() {
        for w in 0..window {
            let (peer, payload) = (peer.clone(), payload.clone());
            // One ledger per in-flight slot keeps entry ids unique without coordination.
            let ledger = ledger_base + (c * window + w) as u64;
            tasks.push(tokio::spawn(async move {
                let mut h = hist();
                let mut e = 0u64;
                while Instant::now() < end {
                    let t = Instant::now();
                    peer.call_full(add(ledger, e, &payload), CallOptions::ordered(ledger)).await.expect("add");
                    h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                    e += 1;
                }
                (e, h)
            }));
        }
    }
    let mut h = hist();
    let mut adds = 0;
    for t in tasks {
        let (n, th) = t.await.unwrap();
        adds += n;
        h.add(th).unwrap();
    }
    Outcome { adds, secs: start.elapsed().as_secs_f64(), h }
}

async fn open_loop(peers: &[PeerClient], rate: f64, secs: u64, payload: Bytes, ledger_base: u64) -> Outcome {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let total = (rate * secs as f64) as u64;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    // Enough issuers that a slow add never delays the schedule.
    for i in 0..(peers.len() * 64) {
        let (peer, payload, next) = (peers[i % peers.len()].clone(), payload.clone(), next.clone());
        let ledger = ledger_base + i as u64;
        tasks.push(tokio::spawn(async move {
            let mut h = hist();
            let mut e = 0u64;
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= total {
                    break;
                }
                let due = start + interval.mul_f64(k as f64);
                tokio::time::sleep_until(due.into()).await;
                peer.call_full(add(ledger, e, &payload), CallOptions::ordered(ledger)).await.expect("add");
                h.record(due.elapsed().as_micros().max(1) as u64).unwrap();
                e += 1;
            }
            (e, h)
        }));
    }
    let mut h = hist();
    let mut adds = 0;
    for t in tasks {
        let (n, th) = t.await.unwrap();
        adds += n;
        h.add(th).unwrap();
    }
    Outcome { adds, secs: start.elapsed().as_secs_f64(), h }
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let secs = env("BENCH_SECS", 10);
    let conns = env("BENCH_CONNS", 4) as usize;
    let window = env("BENCH_WINDOW", 256) as usize;
    let size = env("BENCH_SIZE", 1024) as usize;
    let dir = PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-bookie".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 1, bookies: 1 }, &IssueOptions::default()).unwrap();
    let ready = dir.join("ready");
    let data = dir.join("data");
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
        "info",
    ];
    // Extra bookie flags, space-separated (e.g. BENCH_BOOKIE_ARGS="--journal-max-wait-us 1000").
    let extra = std::env::var("BENCH_BOOKIE_ARGS").unwrap_or_default();
    let mut args: Vec<&str> = args.to_vec();
    args.extend(extra.split_whitespace());
    let mut bookie = Process::spawn("bookie", &bin_path("quire-bookie"), &args, &dir).unwrap();
    let addr = bookie.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    let pid = bookie.pid();
    println!(
        "bookie bench: {size} B entries, {conns} connections x {window} in flight, {secs} s per phase, data on {}, {} cores",
        dir.display(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let mut clients = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..conns {
            let c = RpcClient::new(
                &creds,
                ClientOptions { request_timeout: Duration::from_secs(30), ..ClientOptions::default() },
            )
            .unwrap();
            peers.push(c.peer(&addr, Role::Bookie, None));
            clients.push(c);
        }
        let payload = Bytes::from(vec![0x42u8; size]);
        // Warm-up: connections, journal preallocation, caches.
        closed_loop(&peers, 16, 2, payload.clone(), 1_000_000).await;
        let peak = closed_loop(&peers, window, secs, payload.clone(), 2_000_000).await;
        report("peak", &peak, &format!("connections={conns} in_flight={}", conns * window));
        let half_rate = peak.adds as f64 / peak.secs / 2.0;
        let half = open_loop(&peers, half_rate, secs, payload.clone(), 3_000_000).await;
        report("half", &half, &format!("target_rate={half_rate:.0}"));
        let qd1 = closed_loop(&peers[..1], 1, secs.min(5), payload, 4_000_000).await;
        report("qd1", &qd1, "connections=1 in_flight=1");
        println!("RESULT bookie_peak_rss_mib={:.1}", vm_hwm_kib(pid) as f64 / 1024.0);
        for c in clients {
            c.close(Duration::from_millis(100)).await;
        }
    });
    bookie.terminate(Duration::from_secs(30)).unwrap();
    if let Some(line) = bookie.log().lines().find(|l| l.contains("journal totals")) {
        println!("RESULT journal {}", line.split("journal totals").nth(1).unwrap_or("").trim());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
