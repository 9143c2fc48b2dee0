//! Three real metadata replicas on this machine; BENCH_CLIENTS concurrent
//! clients, each compare-and-setting its own ledger's metadata (one RPC per
//! update: the client knows its current version from the last answer).
//! Prints updates/s and latency percentiles.
//!
//! Run: `make bench-metadata` (= `cargo bench -p quire-metadata --bench metadata`).
//! Environment: BENCH_SECS (10), BENCH_CLIENTS (64), BENCH_VALUE (1024 bytes of custom metadata).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, TlsFiles};
use quire_testkit::MetadataCluster;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let secs = env("BENCH_SECS", 10);
    let clients = env("BENCH_CLIENTS", 64) as usize;
    let value = env("BENCH_VALUE", 1024) as usize;
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 0 }, &IssueOptions::default()).unwrap();
    let cluster = MetadataCluster::start(&certs, dir.path(), 3).unwrap();
    println!("metadata bench: 3 replicas, {clients} clients, {value} B of custom metadata per update, {secs} s");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let rpc = RpcClient::new(&creds, ClientOptions::default()).unwrap();
        let meta = Arc::new(MetaClient::new(rpc, cluster.addrs.clone(), MetaClientOptions::default()));
        let mut ledgers = Vec::new();
        for _ in 0..clients {
            let req = v1::CreateLedgerRequest {
                ensemble_size: 3,
                write_quorum: 3,
                ack_quorum: 2,
                bookie_ids: vec!["1".into(), "2".into(), "3".into()],
                instance_ids: vec![],
                custom: Default::default(),
                request_id: String::new(),
            };
            ledgers.push(meta.call(req).await.unwrap().ledger.unwrap());
        }
        let start = Instant::now();
        let end = start + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for mut l in ledgers {
            let meta = meta.clone();
            tasks.push(tokio::spawn(async move {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut n = 0u64;
                while Instant::now() < end {
                    l.custom.insert("v".into(), vec![(n % 251) as u8; value].into());
                    let t = Instant::now();
                    let expected = l.version;
                    let r = meta
                        .call(v1::UpdateLedgerRequest { ledger: Some(l.clone()), expected_version: expected })
                        .await;
                    h.record(t.elapsed().as_micros().max(1) as u64).unwrap();
                    l = r.expect("CAS").ledger.unwrap();
                    n += 1;
                }
                (n, h)
            }));
        }
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        let mut n = 0;
        for t in tasks {
            let (tn, th) = t.await.unwrap();
            n += tn;
            h.add(th).unwrap();
        }
        let el = start.elapsed().as_secs_f64();
        println!(
            "RESULT clients={clients} updates={n} updates_per_s={:.0} p50_us={} p99_us={} p999_us={} max_us={}",
            n as f64 / el,
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    });
    drop(cluster);
}
