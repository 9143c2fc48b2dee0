//! Re-replication throughput: a worker's copy of a whole fragment, measured
//! in MB/s, unthrottled and throttled, in one run.
//!
//! Four bookies (one rack each) and three metadata replicas as processes.
//! Two closed ledgers of BENCH_ENTRIES (2000) entries of BENCH_SIZE (16 KiB)
//! on bookies 1, 2, 3 (E=Qw=3, Qa=2); bookie 2 is then decommissioned, and
//! `Client::rereplicate` (the worker's core) moves its fragment of each
//! ledger to bookie 4: reads from bookies 1 and 3, replication adds on 4,
//! the ensemble updated by CAS. The first ledger unthrottled, the second at
//! BENCH_THROTTLE bytes/s (8 000 000). BENCH_DROP_CACHES=1 drops the page
//! cache before the copies (as root), so the sources read their disks.
//!
//! Run: `make bench-rereplicate` (= `cargo bench -p quire-replication-worker
//! --bench rereplicate`). Compare with the disk's limits
//! (`bash ../shared/bench/disk-limit.sh`: 64 KiB and 1 MiB appends with
//! fdatasync), since the copy lands in the target bookie's journal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quire_client::{Client, ClientOptions, CreateLedger, Throttle};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::{v1, Role};
use quire_rpc::{Credentials, RpcClient, TlsFiles};
use quire_testkit::TestCluster;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let entries = env("BENCH_ENTRIES", 2000);
    let size = env("BENCH_SIZE", 16 * 1024) as usize;
    let throttle = env("BENCH_THROTTLE", 8_000_000);
    let dir =
        std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-rereplicate".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 4 }, &IssueOptions::default()).unwrap();
    let cluster = TestCluster::start(&dir, &certs, &["r1", "r2", "r3", "r4"], &[]).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Admin, "1")).unwrap();
        let rpc = RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap();
        let meta = Arc::new(MetaClient::new(rpc.clone(), cluster.metadata.addrs.clone(), MetaClientOptions::default()));
        meta.wait_for_registry(Duration::from_secs(30), |b| b.len() >= 4).await.unwrap().expect("4 bookies");
        let client = Client::new(rpc, meta.clone(), ClientOptions::default());
        let spec =
            CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false };
        let mut ledgers = Vec::new();
        for l in 0..2u8 {
            let w = client.create_on(vec!["1".into(), "2".into(), "3".into()], spec.clone()).await.unwrap();
            let batch: Vec<Bytes> = (0..entries).map(|e| Bytes::from(vec![(e as u8) ^ l; size])).collect();
            for chunk in batch.chunks(256) {
                w.add_batch(chunk.to_vec()).await.unwrap();
            }
            ledgers.push(w.close().await.unwrap().ledger_id);
        }
        if env("BENCH_DROP_CACHES", 0) == 1 {
            // The sources' entry logs are read from the disk, not the page
            // cache (root only; a failure leaves them cached, and says so).
            let dropped = std::process::Command::new("sh")
                .args(["-c", "sync && echo 3 > /proc/sys/vm/drop_caches"])
                .status()
                .is_ok_and(|s| s.success());
            println!("page cache {}", if dropped { "dropped" } else { "NOT dropped (needs root)" });
        }
        meta.call(v1::SetBookieStateRequest { bookie_id: "2".into(), state: v1::BookieState::Decommissioning as i32 })
            .await
            .unwrap();
        for (phase, ledger, rate) in [("unthrottled", ledgers[0], 0), ("throttled", ledgers[1], throttle)] {
            let t = Throttle::new(rate);
            let start = Instant::now();
            let r = client.rereplicate(ledger, &["2".to_string()], &t, &|| true).await.unwrap();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(r.repaired, vec!["2".to_string()], "{r:?}");
            let after = client.metadata(ledger).await.unwrap();
            assert!(after.segments[0].members.iter().all(|m| m.bookie_id != "2"));
            println!(
                "RESULT phase={phase} throttle_bytes_per_sec={rate} entries={} mb={:.1} secs={secs:.2} mb_per_s={:.1}",
                r.entries_copied,
                r.bytes_copied as f64 / 1e6,
                r.bytes_copied as f64 / 1e6 / secs
            );
        }
    });
}
