//! Open ledgers held by one gateway, idle (issue #46 item 1): what each
//! costs in CPU and memory once nothing is appended. Three bookies, three
//! metadata replicas, one gateway, all real processes.
//!
//! - BENCH_LEDGERS (100 000) ledgers are created over HTTP by BENCH_CONNS
//!   (32) keep-alive connections and left open; every BENCH_STEP (10 000)
//!   the creation rate and its p50/p99 are printed;
//! - then the gateway's CPU over BENCH_IDLE_SECS (10) with no requests at
//!   all (utime + stime from /proc), and its resident memory before and
//!   after, per open ledger.
//!
//! Run: `make bench-scale` (this is its gateway part), or
//! `cargo bench -p quire-gateway --bench idle`. BENCH_DIR
//! (/tmp/quire-bench-idle) holds the cluster.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_testkit::{bin_path, HttpConn, Process, TestCluster};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A process's CPU time so far (user + system), from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// A process's resident set, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn main() {
    let total = env("BENCH_LEDGERS", 100_000);
    let conns = env("BENCH_CONNS", 32);
    let step = env("BENCH_STEP", 10_000).max(1);
    let idle = Duration::from_secs(env("BENCH_IDLE_SECS", 10));
    let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-idle".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    let cluster = TestCluster::start(&dir, &certs, &["r1", "r2", "r3"], &[]).unwrap();
    let ready = dir.join("gateway.ready");
    let http_ready = dir.join("gateway-http.ready");
    let metadata = cluster.metadata_flag();
    let args = [
        "--certs-dir",
        certs.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        ready.to_str().unwrap(),
        "--metadata",
        &metadata,
        "--http-listen",
        "127.0.0.1:0",
        "--http-ready-file",
        http_ready.to_str().unwrap(),
    ];
    let mut gw = Process::spawn("gateway", &bin_path("quire-gateway"), &args, &dir).unwrap();
    gw.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    let http = gw.wait_ready(&http_ready, Duration::from_secs(30)).unwrap();
    let mut c = HttpConn::new(&http);
    loop {
        let (status, body) = c.call("GET", "/readyz", b"");
        if status == 200 && serde_json::from_slice::<serde_json::Value>(&body).unwrap()["bookies"] == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = gw.pid();
    let rss_before = rss_bytes(pid);

    // Creation, in steps: `conns` connections take ledgers off one counter.
    let next = Arc::new(AtomicU64::new(0));
    let mut created = 0u64;
    while created < total {
        let upto = (created + step).min(total);
        let hist = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap()));
        let t0 = Instant::now();
        let threads: Vec<_> = (0..conns)
            .map(|_| {
                let (http, next, hist) = (http.clone(), next.clone(), hist.clone());
                std::thread::spawn(move || {
                    let mut c = HttpConn::new(&http);
                    let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
                    while next.fetch_add(1, Ordering::Relaxed) < upto {
                        let t = Instant::now();
                        let (status, body) = c.call("POST", "/v1/ledgers", b"");
                        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
                        h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                    }
                    hist.lock().unwrap().add(h).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        next.store(upto, Ordering::Relaxed);
        let secs = t0.elapsed().as_secs_f64();
        let h = hist.lock().unwrap();
        println!(
            "RESULT phase=create open_ledgers={upto} creates_per_s={:.0} p50_us={} p99_us={}",
            (upto - created) as f64 / secs,
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99)
        );
        created = upto;
    }

    // Idle: no request at all. Settle first (the last creations' LACs).
    std::thread::sleep(Duration::from_secs(2));
    let (cpu0, t0) = (cpu_time(pid), Instant::now());
    std::thread::sleep(idle);
    let cpu = cpu_time(pid) - cpu0;
    let wall = t0.elapsed();
    let rss = rss_bytes(pid);
    println!(
        "RESULT phase=idle open_ledgers={total} cpu_pct={:.2} rss_mb={:.1} rss_before_mb={:.1} bytes_per_ledger={:.0}",
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        rss as f64 / 1e6,
        rss_before as f64 / 1e6,
        (rss.saturating_sub(rss_before)) as f64 / total as f64
    );
    drop(gw);
    drop(cluster);
}
