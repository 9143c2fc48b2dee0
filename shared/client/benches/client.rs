//! The headline benchmark: three bookie processes, three metadata replicas,
//! ledgers E=3 Qw=3 Qa=2, 1 KiB entries, through the client library.
//!
//! Cases mirror ../shared/bench/nats-jetstream.sh: `writers:window` = ledgers
//! written at once x adds in flight per ledger (window 1 = one add at a time).
//! Each case runs BENCH_WARM seconds unmeasured, then BENCH_SECS measured;
//! latency is from `add` to its acknowledgement (closed loop).
//!
//! Run: `make bench-client` (= `cargo bench -p quire-client --bench client`).
//! Environment: BENCH_SECS (10), BENCH_WARM (2), BENCH_CASES ("1:1 16:1 1:100 4:100"),
//! BENCH_SIZE (1024), BENCH_DIR (/tmp/quire-bench-client: the disk under test),
//! BENCH_BOOKIE_ARGS (extra bookie flags).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::{v1, Role};
use quire_rpc::{Credentials, RpcClient, TlsFiles};
use quire_testkit::TestCluster;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|s| {
            let f: Vec<&str> = s.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        })
        .sum()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

async fn run_case(
    client: &Client,
    writers: usize,
    window: usize,
    warm: Duration,
    secs: Duration,
    payload: Bytes,
) -> (u64, f64, Histogram<u64>) {
    let spec = CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, ..CreateLedger::default() };
    let mut ledgers = Vec::new();
    for _ in 0..writers {
        ledgers.push(client.create(spec.clone()).await.expect("create ledger"));
    }
    let start = Instant::now() + warm;
    let end = start + secs;
    let mut tasks = Vec::new();
    for w in &ledgers {
        for _ in 0..window {
            let (w, payload) = (w.clone(), payload.clone());
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
                let mut n = 0u64;
                loop {
                    let t = Instant::now();
                    if t >= end {
                        break;
                    }
                    w.add(payload.clone()).await.expect("add");
                    if t >= start {
                        h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                        n += 1;
                    }
                }
                (n, h)
            }));
        }
    }
    let mut total = 0;
    let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
    for t in tasks {
        let (n, th) = t.await.unwrap();
        total += n;
        h.add(th).unwrap();
    }
    for w in ledgers {
        w.close().await.expect("close");
    }
    (total, secs.as_secs_f64(), h)
}

fn main() {
    let secs = Duration::from_secs(env("BENCH_SECS", 10));
    let warm = Duration::from_secs(env("BENCH_WARM", 2));
    let size = env("BENCH_SIZE", 1024) as usize;
    let cases = std::env::var("BENCH_CASES").unwrap_or_else(|_| "1:1 16:1 1:100 4:100".into());
    let dir = std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-client".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    let extra = std::env::var("BENCH_BOOKIE_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    let cluster = TestCluster::start(&dir, &certs, &["r1", "r2", "r3"], &extra).unwrap();
    let bookie_pids: Vec<u32> = cluster.bookies.iter().map(|b| b.proc.as_ref().unwrap().pid()).collect();
    let meta_pids: Vec<u32> = cluster.metadata.procs.iter().map(|p| p.pid()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap();
        let meta = Arc::new(MetaClient::new(rpc.clone(), cluster.metadata.addrs.clone(), MetaClientOptions::default()));
        // Every bookie registered before the first ledger.
        loop {
            let n = meta.call(v1::ListBookiesRequest {}).await.map(|l| l.bookies.len()).unwrap_or(0);
            if n >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let client = Client::new(rpc, meta, ClientOptions::default());
        let payload = Bytes::from(vec![0x5au8; size]);
        let hz = 100.0; // USER_HZ
        for case in cases.split_whitespace() {
            let (w, win) = case.split_once(':').expect("cases are writers:window");
            let (w, win): (usize, usize) = (w.parse().unwrap(), win.parse().unwrap());
            let all: Vec<u32> = bookie_pids.iter().chain(&meta_pids).copied().collect();
            let (c0, t0) = (cpu_ticks(&all) + cpu_ticks(&[std::process::id()]), Instant::now());
            let (n, s, h) = run_case(&client, w, win, warm, secs, payload.clone()).await;
            let cpu = (cpu_ticks(&all) + cpu_ticks(&[std::process::id()]) - c0) as f64 / hz / t0.elapsed().as_secs_f64();
            println!(
                "RESULT case={w}x{win} adds={n} adds_per_s={:.0} p50_us={} p99_us={} p999_us={} max_us={} cpu_cores={cpu:.2}",
                n as f64 / s,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            );
        }
    });
    let rss: Vec<u64> = bookie_pids.iter().map(|p| rss_kib(*p) / 1024).collect();
    println!("RESULT bookie_peak_rss_mib={rss:?}");
    drop(cluster);
}
