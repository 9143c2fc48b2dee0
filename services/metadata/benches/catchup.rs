//! A metadata replica catching up at production size (issue #46 items 2
//! and 3): three real replicas (default timing: a snapshot after 5 000
//! entries or one per ten ledgers held, whichever is more, 500 entries
//! kept behind it).
//!
//! - BENCH_LEDGERS (100 000) ledgers created and closed through the
//!   metadata client, BENCH_CLIENTS (64) at a time; creates + closes per
//!   second, and each replica's resident memory after;
//! - a follower killed, its disk wiped, started again: seconds until it
//!   serves the newest ledger from its own state (a snapshot install);
//! - a follower killed for BENCH_DOWN_SECS (60; the issue asks 600) while
//!   creations go on at BENCH_RATE (1 000) per second, started again:
//!   seconds until it holds the newest ledger; and each create + close's
//!   latency meanwhile (p50, p99, max);
//! - every replica killed and started again: seconds until each serves and
//!   a create + close commits, and the replicas' resident memory then.
//!
//! A replica that dies on the way (its Raft core stopped) is reported with
//! the end of its log. Run: `cargo bench -p quire-metadata --bench catchup`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, TlsFiles};
use quire_testkit::MetadataCluster;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1e3)
}

fn create() -> v1::CreateLedgerRequest {
    v1::CreateLedgerRequest {
        ensemble_size: 3,
        write_quorum: 3,
        ack_quorum: 2,
        bookie_ids: vec!["1".into(), "2".into(), "3".into()],
        instance_ids: vec![],
        custom: [("app".to_string(), b"orders".to_vec().into()), ("tenant".to_string(), b"t-17".to_vec().into())]
            .into(),
        request_id: String::new(),
    }
}

/// Creates a ledger and closes it; its id.
async fn create_and_close(meta: &MetaClient) -> u64 {
    try_create_and_close(meta).await.expect("create and close")
}

/// Creates a ledger and closes it; its id, or why not.
async fn try_create_and_close(meta: &MetaClient) -> Result<u64, quire_rpc::RpcError> {
    let mut l = meta.call(create()).await?.ledger.unwrap();
    let v = l.version;
    l.state = v1::LedgerState::Closed as i32;
    l.last_entry_id = 999;
    l.length = 1_024_000;
    let id = l.ledger_id;
    meta.call(v1::UpdateLedgerRequest { ledger: Some(l), expected_version: v }).await?;
    Ok(id)
}

/// Seconds until replica `i` holds ledger `id` in its own state, or why not.
async fn caught_up(cluster: &mut MetadataCluster, rpc: &RpcClient, i: usize, id: u64, within: Duration) -> String {
    let start = Instant::now();
    let peer = rpc.peer(&cluster.addrs[i], Role::Metadata, None);
    loop {
        let r = peer.call(v1::GetLedgerRequest { ledger_id: id, stale_ok: true }).await;
        if r.is_ok() {
            return format!("{:.1}", start.elapsed().as_secs_f64());
        }
        if let Ok(Some(status)) = cluster.procs[i].try_wait() {
            let log = cluster.procs[i].log();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return format!("died({status}): {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | "));
        }
        if start.elapsed() > within {
            let log = cluster.procs[i].log();
            let tail: Vec<&str> = log.lines().rev().take(8).collect();
            return format!(
                "not_within_{}s: {}",
                within.as_secs(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() {
    let total = env("BENCH_LEDGERS", 100_000);
    let clients = env("BENCH_CLIENTS", 64);
    let down = Duration::from_secs(env("BENCH_DOWN_SECS", 60));
    let rate = env("BENCH_RATE", 1_000);
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let certs = dir.path().join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 0 }, &IssueOptions::default()).unwrap();
    // BENCH_SNAPSHOT_EVERY: the replicas' --snapshot-every (default 5 000 entries).
    let replica_env: Vec<(String, String)> = std::env::var("BENCH_SNAPSHOT_EVERY")
        .ok()
        .map(|v| ("QUIRE_SNAPSHOT_EVERY".to_string(), v))
        .into_iter()
        .collect();
    let mut cluster = MetadataCluster::start_with_env(&certs, dir.path(), 3, &replica_env).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Client, "1")).unwrap();
        let rpc = RpcClient::new(&creds, ClientOptions::default()).unwrap();
        let meta = Arc::new(MetaClient::new(rpc.clone(), cluster.addrs.clone(), MetaClientOptions::default()));

        let t = Instant::now();
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (meta, next) = (meta.clone(), next.clone());
                tokio::spawn(async move {
                    let mut last = 0;
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                        last = last.max(create_and_close(&meta).await);
                    }
                    last
                })
            })
            .collect();
        let mut newest = 0;
        for task in tasks {
            newest = newest.max(task.await.unwrap());
        }
        let rss: Vec<String> = cluster.procs.iter().map(|p| format!("{:.0}", rss_mb(p.pid()))).collect();
        println!(
            "RESULT phase=fill ledgers={total} creates_and_closes_per_s={:.0} replica_rss_mb={}",
            total as f64 / t.elapsed().as_secs_f64(),
            rss.join("/")
        );

        // A follower's disk wiped.
        let leader = meta.leader().unwrap_or_default();
        let victim = (0..3).find(|i| cluster.addrs[*i] != leader).unwrap();
        cluster.procs[victim].kill().unwrap();
        std::fs::remove_dir_all(dir.path().join(format!("metadata-{}", victim + 1))).unwrap();
        let t = Instant::now();
        cluster.restart(victim).unwrap();
        let started = t.elapsed().as_secs_f64();
        let secs =
            caught_up(&mut cluster, &rpc, victim, newest, Duration::from_secs(env("BENCH_WAIT_SECS", 300))).await;
        println!(
            "RESULT phase=wiped ledgers={total} start_s={started:.1} caught_up_s={secs} rss_mb={:.0}",
            rss_mb(cluster.procs[victim].pid())
        );
        if secs.starts_with("not") || secs.starts_with("died") {
            for (i, p) in cluster.procs.iter().enumerate() {
                let log = p.log();
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("napshot"))
                    .collect();
                let tail: Vec<&str> = lines.iter().rev().take(6).rev().copied().collect();
                println!("replica {}: {}", i + 1, tail.join("\n    "));
            }
        }

        // A follower down while creations go on.
        let leader = meta.leader().unwrap_or_default();
        let victim = (0..3).find(|i| cluster.addrs[*i] != leader).unwrap();
        cluster.procs[victim].kill().unwrap();
        let end = Instant::now() + down;
        let (mut created, mut failed) = (0u64, 0u64);
        let mut latencies_us = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while Instant::now() < end {
            tick.tick().await;
            // Spread over the second, as independent clients would send them.
            let batch: Vec<_> = (0..rate)
                .map(|i| {
                    let meta = meta.clone();
                    let at = Duration::from_secs(1) * i as u32 / rate as u32;
                    tokio::spawn(async move {
                        tokio::time::sleep(at).await;
                        let t = Instant::now();
                        let r = try_create_and_close(&meta).await;
                        (r, t.elapsed().as_micros() as u64)
                    })
                })
                .collect();
            for b in batch {
                // A call over the client's attempt timeout (1 s) fails as
                // of unknown outcome: counted, its time kept as a latency.
                let (r, us) = b.await.unwrap();
                match r {
                    Ok(id) => {
                        newest = newest.max(id);
                        created += 1;
                    }
                    Err(e) => {
                        failed += 1;
                        println!(
                            "a create + close failed after {} ms, {:.1} s into the outage: {e}",
                            us / 1000,
                            (down - (end - Instant::now().min(end))).as_secs_f64()
                        );
                    }
                }
                latencies_us.push(us);
            }
        }
        latencies_us.sort_unstable();
        let pct = |p: f64| latencies_us[((latencies_us.len() - 1) as f64 * p) as usize] as f64 / 1e3;
        cluster.restart(victim).unwrap();
        let secs = caught_up(&mut cluster, &rpc, victim, newest, Duration::from_secs(300)).await;
        println!(
            "RESULT phase=down down_s={} created_meanwhile={created} failed={failed} caught_up_s={secs} rss_mb={:.0} create_close_p50_ms={:.1} create_close_p99_ms={:.1} create_close_max_ms={:.1}",
            down.as_secs(),
            rss_mb(cluster.procs[victim].pid()),
            pct(0.5),
            pct(0.99),
            pct(1.0),
        );
        // What the replicas did meanwhile: snapshots, purges, slow syncs.
        for (i, p) in cluster.procs.iter().enumerate() {
            let log = p.log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("wrote a snapshot")
                        || l.contains("purged the log")
                        || l.contains("was slow")
                        || l.contains("copied the state")
                        || l.contains("waited")
                })
                .collect();
            let tail: Vec<&str> = lines.iter().rev().take(30).rev().copied().collect();
            println!("replica {}:\n    {}", i + 1, tail.join("\n    "));
        }

        // Every replica at once.
        for p in cluster.procs.iter_mut() {
            p.kill().unwrap();
        }
        let t = Instant::now();
        for i in 0..3 {
            cluster.restart(i).unwrap();
        }
        let serving_s = t.elapsed().as_secs_f64();
        let meta = MetaClient::new(rpc.clone(), cluster.addrs.clone(), MetaClientOptions::default());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let create = tokio::time::timeout(Duration::from_secs(5), meta.call(create()));
            if let Ok(Ok(r)) = create.await {
                assert!(r.ledger.unwrap().ledger_id > newest);
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(300), "no create within 300 s of a full restart");
            tokio::time::sleep(Duration::from_millis(50)).await; // a poll, while they elect
        }
        let rss: Vec<String> = cluster.procs.iter().map(|p| format!("{:.0}", rss_mb(p.pid()))).collect();
        println!(
            "RESULT phase=restart ledgers={} all_serving_s={serving_s:.1} first_create_s={:.1} attempts={attempts} replica_rss_mb={}",
            total + created,
            t.elapsed().as_secs_f64(),
            rss.join("/")
        );
    });
    drop(cluster);
}
