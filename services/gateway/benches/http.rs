//! HTTP appends through the gateway next to direct client appends, in one run:
//! three bookies, three metadata replicas, the gateway, 1 KiB entries.
//!
//! - `http`: BENCH_CONNS (64) keep-alive HTTP/1.1 connections, one append in
//!   flight each, spread over BENCH_LEDGERS (4) ledgers the gateway created;
//! - `direct`: the same number of adds in flight through the client library
//!   in this process, over the same number of ledgers.
//!
//! Run: `make bench-gateway` (= `cargo bench -p quire-gateway --bench http`).
//! Environment: BENCH_SECS (10), BENCH_CONNS (64), BENCH_LEDGERS (4),
//! BENCH_SIZE (1024), BENCH_DIR (/tmp/quire-bench-gateway).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::Role;
use quire_rpc::{Credentials, RpcClient, TlsFiles};
use quire_testkit::{bin_path, HttpConn, Process, TestCluster};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).unwrap()
}

fn report(phase: &str, n: u64, secs: f64, h: &Histogram<u64>) {
    println!(
        "RESULT phase={phase} adds={n} adds_per_s={:.0} p50_us={} p99_us={} p999_us={}",
        n as f64 / secs,
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999)
    );
}

fn main() {
    let secs = Duration::from_secs(env("BENCH_SECS", 10));
    let conns = env("BENCH_CONNS", 64) as usize;
    let ledgers = env("BENCH_LEDGERS", 4) as usize;
    let size = env("BENCH_SIZE", 1024) as usize;
    let dir =
        std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-gateway".into()));
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
    // Ready, with every bookie registered.
    loop {
        let (status, body) = c.call("GET", "/readyz", b"");
        if status == 200 && serde_json::from_slice::<serde_json::Value>(&body).unwrap()["bookies"] == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let payload = vec![0x5au8; size];

    // HTTP: ledgers created by the gateway, `conns` connections over them.
    let ids: Vec<u64> = (0..ledgers)
        .map(|_| {
            let (status, body) = c.call("POST", "/v1/ledgers", b"");
            assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()["ledger_id"].as_u64().unwrap()
        })
        .collect();
    let end = Instant::now() + secs;
    let threads: Vec<_> = (0..conns)
        .map(|i| {
            let (http, payload, id) = (http.clone(), payload.clone(), ids[i % ids.len()]);
            std::thread::spawn(move || {
                let mut c = HttpConn::new(&http);
                let mut h = hist();
                let path = format!("/v1/ledgers/{id}/entries");
                let mut n = 0u64;
                while Instant::now() < end {
                    let t = Instant::now();
                    let (status, body) = c.call("POST", &path, &payload);
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                    n += 1;
                }
                (n, h)
            })
        })
        .collect();
    let mut h = hist();
    let mut n = 0;
    for t in threads {
        let (tn, th) = t.join().unwrap();
        n += tn;
        h.add(th).unwrap();
    }
    report("http", n, secs.as_secs_f64(), &h);
    let http_rate = n as f64 / secs.as_secs_f64();

    // Direct: the client library in this process, the same adds in flight.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let direct_rate = rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap();
        let meta = Arc::new(MetaClient::new(rpc.clone(), cluster.metadata.addrs.clone(), MetaClientOptions::default()));
        let client = Client::new(rpc, meta, ClientOptions::default());
        let mut writers = Vec::new();
        for _ in 0..ledgers {
            let spec = CreateLedger {
                ensemble: 3,
                write_quorum: 3,
                ack_quorum: 2,
                custom: BTreeMap::new(),
                visible_acks: false,
            };
            writers.push(client.create(spec).await.unwrap());
        }
        let payload = Bytes::from(payload);
        let end = Instant::now() + secs;
        let tasks: Vec<_> = (0..conns)
            .map(|i| {
                let (w, payload) = (writers[i % writers.len()].clone(), payload.clone());
                tokio::spawn(async move {
                    let mut h = hist();
                    let mut n = 0u64;
                    while Instant::now() < end {
                        let t = Instant::now();
                        w.add(payload.clone()).await.unwrap();
                        h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                        n += 1;
                    }
                    (n, h)
                })
            })
            .collect();
        let mut h = hist();
        let mut n = 0;
        for t in tasks {
            let (tn, th) = t.await.unwrap();
            n += tn;
            h.add(th).unwrap();
        }
        report("direct", n, secs.as_secs_f64(), &h);
        n as f64 / secs.as_secs_f64()
    });
    println!("RESULT http_over_direct={:.2}", http_rate / direct_rate);
    drop(gw);
    drop(cluster);
}
