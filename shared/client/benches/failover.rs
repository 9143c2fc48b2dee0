//! A metadata leader change under load (issue #19 item 7): three bookie
//! processes, three metadata replicas with the binary's own Raft timing (as
//! deployed), writers appending to open ledgers and a creator making
//! ledgers (create, first add, close) all the time. Each round SIGKILLs the
//! metadata leader and measures, from the kill:
//! - election: until a surviving replica says it is leader;
//! - the longest time no append to an open ledger was acknowledged;
//! - the creator's operations under way then (the longest create, first
//!   add and close, and how many failed);
//!
//! then starts the replica again and waits until it follows the new leader.
//! At the end every writer's ledger is closed: an ensemble change would
//! mean a bookie was counted failed for a metadata outage.
//!
//! Run: `make bench-failover` (= `cargo bench -p quire-client --bench failover`).
//! Environment: BENCH_ROUNDS (5), BENCH_WRITERS (8), BENCH_WINDOW (16),
//! BENCH_SIZE (1024), BENCH_DIR (/tmp/quire-bench-failover), BENCH_RAFT
//! ("heartbeat_ms:election_timeout_ms"; unset: the binary's defaults).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::{v1, Role};
use quire_rpc::{CallOptions, Credentials, RpcClient, TlsFiles};
use quire_testkit::{RaftTiming, TestCluster};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One of the creator's operations: when it started, how long each step took.
#[derive(Debug, Clone)]
struct Op {
    started: Instant,
    create: Duration,
    first_add: Duration,
    close: Duration,
    failed: Option<String>,
}

async fn status(rpc: &RpcClient, addr: &str) -> Option<v1::MetadataStatusResponse> {
    let peer = rpc.peer(addr, Role::Metadata, None);
    peer.call_full(v1::MetadataStatusRequest::default(), CallOptions::timeout(Duration::from_millis(300)))
        .await
        .ok()
        .map(|r| r.body)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let med = v[v.len() / 2];
    let max = v[v.len() - 1];
    let min = v[0];
    println!("{name:<44} min {min:>7.0} ms   median {med:>7.0} ms   max {max:>7.0} ms");
}

fn main() {
    let rounds = env("BENCH_ROUNDS", 5) as usize;
    let writers = env("BENCH_WRITERS", 8) as usize;
    let window = env("BENCH_WINDOW", 16) as usize;
    let size = env("BENCH_SIZE", 1024) as usize;
    let timing = std::env::var("BENCH_RAFT").ok().and_then(|v| {
        let (h, e) = v.split_once(':')?;
        Some(RaftTiming { heartbeat_ms: h.parse().ok()?, election_timeout_ms: e.parse().ok()? })
    });
    let dir =
        std::path::PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/quire-bench-failover".into()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let certs = dir.join("certs");
    init_dir(&certs, "bench", &LocalCluster { metadata: 3, bookies: 3 }, &IssueOptions::default()).unwrap();
    let mut cluster = TestCluster::start_with_raft_timing(&dir, &certs, &["r1", "r2", "r3"], &[], timing).unwrap();
    let addrs = cluster.metadata.addrs.clone();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let creds = |role| Credentials::load(&TlsFiles::in_dir(&certs, role, "1")).unwrap();
    let _guard = rt.enter();
    let rpc = RpcClient::new(&creds(Role::Client), quire_rpc::ClientOptions::default()).unwrap();
    let admin = RpcClient::new(&creds(Role::Admin), quire_rpc::ClientOptions::default()).unwrap();
    let meta = Arc::new(MetaClient::new(rpc.clone(), addrs.clone(), MetaClientOptions::default()));
    let client = Client::new(rpc, meta.clone(), ClientOptions::default());
    let spec = CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, ..CreateLedger::default() };
    let payload = Bytes::from(vec![0x5au8; size]);

    let epoch = Instant::now();
    let last_ack_us = Arc::new(AtomicU64::new(0));
    let acks = Arc::new(AtomicU64::new(0));
    let add_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(Mutex::new(Vec::<Op>::new()));
    let (ledgers, gap_log) = rt.block_on(async {
        meta.wait_for_registry(Duration::from_secs(30), |b| b.len() >= 3).await.unwrap().expect("3 bookies");
        let mut ws = Vec::new();
        for _ in 0..writers {
            ws.push(Arc::new(client.create(spec.clone()).await.unwrap()));
        }
        for w in &ws {
            for _ in 0..window {
                let (w, p, last, n, errs, stop) =
                    (w.clone(), payload.clone(), last_ack_us.clone(), acks.clone(), add_errors.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        match w.add(p.clone()).await {
                            Ok(_) => {
                                last.fetch_max(epoch.elapsed().as_micros() as u64, Ordering::Relaxed);
                                n.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                errs.lock().unwrap().push(e.to_string());
                                break;
                            }
                        }
                    }
                });
            }
        }
        {
            let (client, spec, ops, stop, p) =
                (client.clone(), spec.clone(), ops.clone(), stop.clone(), payload.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let mut op = Op {
                        started,
                        create: Duration::ZERO,
                        first_add: Duration::ZERO,
                        close: Duration::ZERO,
                        failed: None,
                    };
                    match client.create(spec.clone()).await {
                        Ok(w) => {
                            op.create = started.elapsed();
                            let t = Instant::now();
                            match w.add(p.clone()).await {
                                Ok(_) => {
                                    op.first_add = t.elapsed();
                                    let t = Instant::now();
                                    match w.close().await {
                                        Ok(_) => op.close = t.elapsed(),
                                        Err(e) => op.failed = Some(format!("close: {e}")),
                                    }
                                }
                                Err(e) => op.failed = Some(format!("first add: {e}")),
                            }
                        }
                        Err(e) => op.failed = Some(format!("create: {e}")),
                    }
                    ops.lock().unwrap().push(op);
                }
            });
        }
        // The longest stretch with no acknowledged append, sampled every 2 ms.
        let gap_log = Arc::new(Mutex::new(Vec::<(Instant, Duration)>::new()));
        {
            let (last, stop, log) = (last_ack_us.clone(), stop.clone(), gap_log.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let now = epoch.elapsed().as_micros() as u64;
                    let gap = Duration::from_micros(now.saturating_sub(last.load(Ordering::Relaxed)));
                    log.lock().unwrap().push((Instant::now(), gap));
                }
            });
        }
        (ws, gap_log)
    });

    let mut elections = Vec::new();
    let mut gaps = Vec::new();
    let mut creates = Vec::new();
    let mut first_adds = Vec::new();
    let mut closes = Vec::new();
    let mut failed_ops = Vec::new();
    let mut spurious = 0;
    println!(
        "metadata failover under load: {writers} ledgers x {window} adds in flight ({size} B, E=3 Qw=3 Qa=2), a creator, Raft timing {}",
        timing.map_or("as deployed (the binary's defaults)".to_string(), |t| format!("{t:?}"))
    );
    for round in 0..rounds {
        // Steady load, and every replica following one leader.
        let leader = rt.block_on(async {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let mut views = Vec::new();
                for a in &addrs {
                    views.push(status(&admin, a).await);
                }
                let leaders: Vec<&str> = views.iter().flatten().map(|s| s.leader_address.as_str()).collect();
                if leaders.len() == addrs.len() && leaders.iter().all(|l| *l == leaders[0] && !l.is_empty()) {
                    break addrs.iter().position(|a| a == leaders[0]).expect("a replica");
                }
            }
        });
        // A leader change in these steady seconds, with no replica killed,
        // would be an election timeout too short for the load.
        let term = |rt: &tokio::runtime::Runtime| rt.block_on(status(&admin, &addrs[leader])).map(|s| s.term);
        let steady_from = term(&rt);
        rt.block_on(tokio::time::sleep(Duration::from_secs(2)));
        let steady_to = term(&rt);
        if let (Some(from), Some(to)) = (steady_from, steady_to) {
            spurious += to.saturating_sub(from);
        }
        cluster.metadata.procs[leader].kill().unwrap();
        let killed = Instant::now();
        let elected = rt.block_on(async {
            loop {
                for (i, a) in addrs.iter().enumerate() {
                    if i == leader {
                        continue;
                    }
                    if status(&admin, a).await.is_some_and(|s| s.raft_state == "leader") {
                        return killed.elapsed();
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        // Let the load meet the new leader, and the creator's operations
        // under way at the kill finish.
        rt.block_on(tokio::time::sleep(Duration::from_secs(6)));
        let window_end = killed + Duration::from_secs(6);
        let gap = gap_log
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t > killed && *t < window_end)
            .map(|(_, g)| *g)
            .max()
            .unwrap_or_default();
        let hit: Vec<Op> = ops
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.started + o.create + o.first_add + o.close >= killed && o.started < window_end)
            .cloned()
            .collect();
        let worst = |f: fn(&Op) -> Duration| hit.iter().map(f).max().unwrap_or_default();
        let (c, a, cl) = (worst(|o| o.create), worst(|o| o.first_add), worst(|o| o.close));
        let failed: Vec<String> = hit.iter().filter_map(|o| o.failed.clone()).collect();
        println!(
            "round {round}: killed replica {}; elected after {:.0} ms; longest without an acknowledged append {:.0} ms; \
             creator under way: {} operations, longest create {:.0} ms, first add {:.0} ms, close {:.0} ms, {} failed {:?}",
            leader + 1,
            ms(elected),
            ms(gap),
            hit.len(),
            ms(c),
            ms(a),
            ms(cl),
            failed.len(),
            failed
        );
        elections.push(ms(elected));
        gaps.push(ms(gap));
        creates.push(ms(c));
        first_adds.push(ms(a));
        closes.push(ms(cl));
        failed_ops.extend(failed);
        cluster.metadata.restart(leader).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (changed, acked) = rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut changed = 0;
        for w in &ledgers {
            match w.close().await {
                Ok(m) if m.segments.len() > 1 => changed += 1,
                Ok(_) => {}
                Err(e) => println!("ledger {}: close failed: {e}", w.ledger_id()),
            }
        }
        (changed, acks.load(Ordering::Relaxed))
    });
    println!("over {rounds} rounds ({spurious} leader changes in the steady periods, with no replica killed):");
    summary("election (kill to a new leader)", elections);
    summary("longest without an acknowledged append", gaps);
    summary("longest create under way at the kill", creates);
    summary("longest first add of a new ledger", first_adds);
    summary("longest close", closes);
    let add_errors = add_errors.lock().unwrap();
    println!(
        "{acked} appends acknowledged; {} failed {:?}; {} creator operations failed; {changed} of {writers} ledgers changed ensemble",
        add_errors.len(),
        add_errors.iter().take(3).collect::<Vec<_>>(),
        failed_ops.len()
    );
}
