//! Three real metadata replicas over QUIC + mTLS: ledger metadata CAS,
//! leader loss under load, a minority that cannot write, full restarts,
//! lease expiry, and a replica rebuilt from an empty disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1::{self, ErrorCode};
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, RpcError, TlsFiles};
use quire_testkit::{bin_path, free_udp_ports, wait_until, Process};

struct Cluster {
    dir: tempfile::TempDir,
    certs: PathBuf,
    ports: Vec<u16>,
    procs: BTreeMap<u64, Process>,
    extra: Vec<String>,
}

impl Cluster {
    fn start(extra: &[&str]) -> Cluster {
        Self::start_with_spares(extra, 0)
    }

    /// Three replicas running, and `spares` more with certificates and ports
    /// but not started (for membership changes).
    fn start_with_spares(extra: &[&str], spares: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        let total = 3 + spares as u32;
        init_dir(&certs, "test", &LocalCluster { metadata: total, bookies: 2 }, &IssueOptions::default()).unwrap();
        let ports = free_udp_ports(3 + spares);
        let mut c =
            Cluster { dir, certs, ports, procs: BTreeMap::new(), extra: extra.iter().map(|s| s.to_string()).collect() };
        for id in 1..=3 {
            c.launch(id);
        }
        c
    }

    fn addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.ports[id as usize - 1])
    }

    fn addrs(&self) -> Vec<String> {
        (1..=3).map(|i| self.addr(i)).collect()
    }

    fn data(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("m{id}"))
    }

    fn launch(&mut self, id: u64) {
        let ready = self.dir.path().join(format!("m{id}.ready"));
        let _ = std::fs::remove_file(&ready);
        // The initial three, plus this replica itself when it is a later addition.
        let peers = (1..=3.max(id)).map(|i| format!("{i}={}", self.addr(i))).collect::<Vec<_>>().join(",");
        let mut args = vec![
            "--certs-dir".to_string(),
            self.certs.display().to_string(),
            "--id".into(),
            id.to_string(),
            "--listen".into(),
            self.addr(id),
            "--ready-file".into(),
            ready.display().to_string(),
            "--data-dir".into(),
            self.data(id).display().to_string(),
            "--peers".into(),
            peers,
            "--heartbeat-ms".into(),
            "100".into(),
            "--election-timeout-ms".into(),
            "500".into(),
        ];
        args.extend(self.extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p =
            Process::spawn(&format!("metadata-{id}"), &bin_path("quire-metadata"), &args, self.dir.path()).unwrap();
        p.wait_ready(&ready, Duration::from_secs(30)).unwrap();
        self.procs.insert(id, p);
    }

    fn rpc(&self, role: Role, id: &str) -> RpcClient {
        let creds = Credentials::load(&TlsFiles::in_dir(&self.certs, role, id)).unwrap();
        RpcClient::new(
            &creds,
            ClientOptions { connect_timeout: Duration::from_millis(500), ..ClientOptions::default() },
        )
        .unwrap()
    }

    fn client(&self) -> MetaClient {
        MetaClient::new(self.rpc(Role::Gateway, "1"), self.addrs(), MetaClientOptions::default())
    }

    fn id_of(&self, addr: &str) -> u64 {
        (1..=3).find(|i| self.addr(*i) == addr).expect("a replica address")
    }
}

fn create(e: u32, qw: u32, qa: u32) -> v1::CreateLedgerRequest {
    v1::CreateLedgerRequest {
        ensemble_size: e,
        write_quorum: qw,
        ack_quorum: qa,
        bookie_ids: (1..=e).map(|i| format!("b{i}")).collect(),
        instance_ids: vec![],
        custom: Default::default(),
        request_id: String::new(),
    }
}

fn counter(l: &v1::LedgerMetadata) -> u64 {
    l.custom.get("n").map(|v| String::from_utf8_lossy(v).parse().unwrap()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_metadata_is_created_compared_and_set_listed_and_deleted() {
    let cluster = Cluster::start(&[]);
    let meta = cluster.client();
    let l = meta.call(create(3, 3, 2)).await.unwrap().ledger.unwrap();
    assert_eq!((l.ledger_id, l.version, l.last_entry_id), (1, 1, -1));
    assert_eq!(l.state, v1::LedgerState::Open as i32);
    let mut next = l.clone();
    next.ensembles.push(v1::EnsembleSegment {
        first_entry_id: 7,
        bookie_ids: vec!["b1".into(), "b2".into(), "b4".into()],
        instance_ids: vec![],
    });
    let v2 = meta
        .call(v1::UpdateLedgerRequest { ledger: Some(next.clone()), expected_version: 1 })
        .await
        .unwrap()
        .ledger
        .unwrap();
    assert_eq!(v2.version, 2);
    let err = meta.call(v1::UpdateLedgerRequest { ledger: Some(next), expected_version: 1 }).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::VersionConflict), "{err}");
    let got = meta.call(v1::GetLedgerRequest { ledger_id: 1, stale_ok: false }).await.unwrap().ledger.unwrap();
    assert_eq!(got, v2);
    for _ in 0..4 {
        meta.call(create(1, 1, 1)).await.unwrap();
    }
    let page = meta.call(v1::ListLedgersRequest { start_after: None, limit: 3 }).await.unwrap();
    assert_eq!((page.ledger_ids, page.next), (vec![1, 2, 3], Some(3)));
    meta.call(v1::DeleteLedgerRequest { ledger_id: 2 }).await.unwrap();
    let err = meta.call(v1::GetLedgerRequest { ledger_id: 2, stale_ok: false }).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoSuchLedger));
    // Bad requests are refused, and change nothing.
    assert_eq!(meta.call(create(2, 3, 1)).await.unwrap_err().code(), Some(ErrorCode::BadRequest));
    let err = meta.call(v1::UpdateLedgerRequest { ledger: None, expected_version: 1 }).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));
    let err = meta.call(v1::DeleteLedgerRequest { ledger_id: 999 }).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoSuchLedger));
    // A follower answers a write with the leader's address.
    let leader = meta.leader().unwrap();
    let follower = cluster.addrs().into_iter().find(|a| *a != leader).unwrap();
    let direct = cluster.rpc(Role::Gateway, "1");
    let err = direct.peer(&follower, Role::Metadata, None).call(create(1, 1, 1)).await.unwrap_err();
    match err {
        RpcError::Remote { code: ErrorCode::NotLeader, leader_hint, .. } => {
            assert_eq!(leader_hint.as_deref(), Some(leader.as_str()))
        }
        other => panic!("{other:?}"),
    }
    // A bookie may not create ledgers (role table), on any replica.
    let as_bookie = cluster.rpc(Role::Bookie, "1");
    let err = as_bookie.peer(&leader, Role::Metadata, None).call(create(1, 1, 1)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied));
}

/// Read-modify-write increments of one counter from two writers, with the
/// leader killed midway. Every acknowledged CAS must be in the final value and
/// no two acknowledged CAS may have started from the same version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_cas_is_lost_when_the_leader_dies() {
    let mut cluster = Cluster::start(&[]);
    let meta = Arc::new(cluster.client());
    let id = meta.call(create(3, 3, 2)).await.unwrap().ledger.unwrap().ledger_id;
    let acked = Arc::new(Mutex::new(Vec::<u64>::new())); // the versions each acknowledged CAS expected
    let unknown = Arc::new(Mutex::new(0u64));
    let run = |meta: Arc<MetaClient>, acked: Arc<Mutex<Vec<u64>>>, unknown: Arc<Mutex<u64>>, n: usize| async move {
        let mut done = 0;
        while done < n {
            let Ok(cur) = meta.call(v1::GetLedgerRequest { ledger_id: id, stale_ok: false }).await else { continue };
            let mut l = cur.ledger.unwrap();
            let v = l.version;
            l.custom.insert("n".into(), (counter(&l) + 1).to_string().into_bytes().into());
            match meta.call(v1::UpdateLedgerRequest { ledger: Some(l), expected_version: v }).await {
                Ok(_) => {
                    acked.lock().unwrap().push(v);
                    done += 1;
                }
                Err(e) if e.code() == Some(ErrorCode::VersionConflict) => {}
                Err(_) => *unknown.lock().unwrap() += 1,
            }
        }
    };
    let w1 = tokio::spawn(run(meta.clone(), acked.clone(), unknown.clone(), 60));
    let w2 = tokio::spawn(run(meta.clone(), acked.clone(), unknown.clone(), 60));
    let a2 = acked.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(Duration::from_secs(60), "some CAS done", || (a2.lock().unwrap().len() >= 30).then_some(()))
    })
    .await
    .unwrap()
    .unwrap();
    let leader = cluster.id_of(&meta.leader().unwrap());
    cluster.procs.get_mut(&leader).unwrap().kill().unwrap();
    w1.await.unwrap();
    w2.await.unwrap();
    let final_l = meta.call(v1::GetLedgerRequest { ledger_id: id, stale_ok: false }).await.unwrap().ledger.unwrap();
    let acked = acked.lock().unwrap().clone();
    let unknown = *unknown.lock().unwrap();
    let distinct: BTreeSet<u64> = acked.iter().copied().collect();
    assert_eq!(distinct.len(), acked.len(), "two acknowledged CAS started from the same version: {acked:?}");
    let n = counter(&final_l);
    assert!(
        n >= acked.len() as u64 && n <= acked.len() as u64 + unknown,
        "n={n} acked={} unknown={unknown}",
        acked.len()
    );
    assert_eq!(final_l.version, 1 + n, "every applied CAS bumped the version once");
    // The killed replica comes back and catches up.
    cluster.launch(leader);
    let direct = cluster.rpc(Role::Gateway, "1");
    let addr = cluster.addr(leader);
    let caught_up = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        wait_until(Duration::from_secs(30), "the restarted replica to catch up", || {
            rt.block_on(async {
                let r = direct
                    .peer(&addr, Role::Metadata, None)
                    .call(v1::GetLedgerRequest { ledger_id: id, stale_ok: true })
                    .await;
                r.ok().and_then(|r| r.ledger).filter(|l| l.version == final_l.version).map(|_| ())
            })
        })
    });
    caught_up.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_cannot_write_and_the_state_survives_a_full_restart() {
    let mut cluster = Cluster::start(&[]);
    let meta = cluster.client();
    let l = meta.call(create(2, 2, 2)).await.unwrap().ledger.unwrap();
    let leader = cluster.id_of(&meta.leader().unwrap());
    // Freeze both followers: the leader alone is a minority.
    let followers: Vec<u64> = (1..=3).filter(|i| *i != leader).collect();
    for f in &followers {
        cluster.procs[f].signal("STOP").unwrap();
    }
    let lonely = MetaClient::new(
        cluster.rpc(Role::Gateway, "1"),
        vec![cluster.addr(leader)],
        MetaClientOptions { deadline: Duration::from_secs(3), ..MetaClientOptions::default() },
    );
    let err = lonely.call(create(1, 1, 1)).await.unwrap_err();
    assert!(
        matches!(err, RpcError::Timeout { .. })
            || err.code().is_some_and(|c| c == ErrorCode::MetadataUnavailable || c == ErrorCode::NotLeader),
        "a minority wrote: {err:?}"
    );
    for f in &followers {
        cluster.procs[f].signal("CONT").unwrap();
    }
    // The other way round: with one replica cut off, the other two go on.
    let cut = followers[0];
    cluster.procs[&cut].signal("STOP").unwrap();
    let majority = MetaClient::new(
        cluster.rpc(Role::Gateway, "1"),
        (1..=3).filter(|i| *i != cut).map(|i| cluster.addr(i)).collect(),
        MetaClientOptions::default(),
    );
    for _ in 0..5 {
        majority.call(create(1, 1, 1)).await.unwrap();
    }
    cluster.procs[&cut].signal("CONT").unwrap();
    // The majority is back: writes go on.
    let l2 = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
    assert!(l2.ledger_id > l.ledger_id);
    // Stop everything, start everything: the state is intact.
    for id in 1..=3 {
        cluster.procs.get_mut(&id).unwrap().terminate(Duration::from_secs(10)).unwrap();
    }
    for id in 1..=3 {
        cluster.launch(id);
    }
    let meta = cluster.client();
    let got =
        meta.call(v1::GetLedgerRequest { ledger_id: l.ledger_id, stale_ok: false }).await.unwrap().ledger.unwrap();
    assert_eq!(got, l);
    let l3 = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
    assert!(l3.ledger_id > l2.ledger_id, "ledger ids are never reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_registration_lives_as_long_as_its_lease() {
    const LEASE: Duration = Duration::from_millis(3000);
    let cluster = Cluster::start(&[]);
    let as_bookie = MetaClient::new(cluster.rpc(Role::Bookie, "1"), cluster.addrs(), MetaClientOptions::default());
    let record = v1::BookieRecord {
        bookie_id: "1".into(),
        address: "127.0.0.1:3181".into(),
        rack: "r1".into(),
        instance_id: "inst-a".into(),
        ..Default::default()
    };
    let lease = as_bookie
        .call(v1::RegisterBookieRequest { bookie: Some(record.clone()), lease_ms: LEASE.as_millis() as u32 })
        .await
        .unwrap()
        .lease_id;
    let list = as_bookie.call(v1::ListBookiesRequest {}).await.unwrap();
    assert_eq!(list.bookies.len(), 1);
    assert_eq!(list.bookies[0].instance_id, "inst-a");
    // Renewed at a bookie's cadence (a third of the lease, so a renewal
    // late by two thirds of a lease on a loaded machine is still in time),
    // past its first expiry: still there.
    let mut cadence = tokio::time::interval(LEASE / 3);
    cadence.tick().await;
    let mut last_renewal = std::time::Instant::now();
    for _ in 0..4 {
        cadence.tick().await;
        last_renewal = std::time::Instant::now();
        as_bookie.call(v1::RenewLeaseRequest { bookie_id: "1".into(), lease_id: lease }).await.unwrap();
    }
    assert_eq!(as_bookie.call(v1::ListBookiesRequest {}).await.unwrap().bookies.len(), 1);
    // A bookie may not register under another's id.
    let mut other = record.clone();
    other.bookie_id = "2".into();
    let err = as_bookie
        .call(v1::RegisterBookieRequest { bookie: Some(other), lease_ms: LEASE.as_millis() as u32 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied));
    // Not renewed: gone, watched, not polled; never before its lease ran
    // out (the safety half), and within a deadline of five leases (the
    // liveness half: a loaded machine may reap late, never early).
    let version = as_bookie.call(v1::ListBookiesRequest {}).await.unwrap().version;
    let mut w = as_bookie
        .call_waiting(v1::WatchBookiesRequest { after_version: version, timeout_ms: 5000 }, Duration::from_secs(5))
        .await
        .unwrap();
    let deadline = last_renewal + 5 * LEASE;
    while w.timed_out || !w.bookies.is_empty() {
        assert!(std::time::Instant::now() < deadline, "still registered five leases after the last renewal: {w:?}");
        let after = v1::WatchBookiesRequest { after_version: w.version, timeout_ms: 5000 };
        w = as_bookie.call_waiting(after, Duration::from_secs(5)).await.unwrap();
    }
    assert!(last_renewal.elapsed() >= LEASE, "removed {:?} after its last renewal", last_renewal.elapsed());
    let err = as_bookie.call(v1::RenewLeaseRequest { bookie_id: "1".into(), lease_id: lease }).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NoSuchBookie));
}

/// A replica whose disk was lost starts again under its id and catches up
/// from a snapshot: one that was behind the leader's purge when its disk
/// went, and one that was up to date (the leader had it matched beyond the
/// log it kept: before `loosen-follower-log-revert`, openraft's search for
/// the match underflowed, and the leader asked its store for the purged
/// entries from 0 every 10 ms for ever: the catch-up bench at 100 000
/// ledgers, where the snapshot policy first purges).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_an_empty_disk_catches_up_from_a_snapshot() {
    for (keep, written_while_down) in [("0", 40), ("10", 0)] {
        let mut cluster = Cluster::start(&["--snapshot-every", "20", "--logs-to-keep", keep]);
        let meta = cluster.client();
        let mut last = None;
        for _ in 0..80 {
            last = Some(meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap());
        }
        let mut last = last.unwrap();
        let leader = cluster.id_of(&meta.leader().unwrap());
        let victim = (1..=3).find(|i| *i != leader).unwrap();
        // Up to date when it goes: it holds the newest ledger.
        wait_for_ledger_on(&cluster, cluster.addr(victim), last.ledger_id, Duration::from_secs(30), "the follower")
            .await;
        cluster.procs.get_mut(&victim).unwrap().kill().unwrap();
        std::fs::remove_dir_all(cluster.data(victim)).unwrap();
        // Writes go on meanwhile (or not), the log it missed compacted away.
        for _ in 0..written_while_down {
            last = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
        }
        cluster.launch(victim);
        let what = format!("the wiped replica to catch up (logs kept {keep})");
        wait_for_ledger_on(&cluster, cluster.addr(victim), last.ledger_id, Duration::from_secs(30), what).await;
        // Caught up by a snapshot, not by a log the leader no longer holds.
        let victim_proc = &cluster.procs[&victim];
        let seen = wait_until(Duration::from_secs(10), "the snapshot's log line", || {
            victim_proc.log().contains("installed a snapshot from the leader").then_some(())
        });
        assert!(seen.is_ok(), "{}", victim_proc.log());
        // And it takes its part in the quorum again: with the other follower
        // down, the leader still commits.
        let other = (1..=3).find(|i| *i != leader && *i != victim).unwrap();
        cluster.procs.get_mut(&other).unwrap().kill().unwrap();
        let l = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
        wait_for_ledger_on(
            &cluster,
            cluster.addr(victim),
            l.ledger_id,
            Duration::from_secs(30),
            "a commit without the other follower",
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autorecovery_bookkeeping_marks_locks_and_watches() {
    let cluster = Cluster::start(&[]);
    let gw = cluster.client();
    let l = gw.call(create(3, 3, 2)).await.unwrap().ledger.unwrap();

    // A watcher parked on the ledger wakes when it changes.
    let watcher = MetaClient::new(cluster.rpc(Role::Gateway, "1"), cluster.addrs(), MetaClientOptions::default());
    let watch = tokio::spawn(async move {
        watcher
            .call_waiting(
                v1::WatchLedgerRequest { ledger_id: l.ledger_id, after_version: 1, timeout_ms: 20_000 },
                Duration::from_secs(20),
            )
            .await
    });
    let auditor = MetaClient::new(cluster.rpc(Role::Auditor, "1"), cluster.addrs(), MetaClientOptions::default());
    let mark = v1::MarkUnderReplicatedRequest {
        ledger_id: l.ledger_id,
        missing_bookie_ids: vec!["b2".into()],
        reason: "bookie b2 lost".into(),
    };
    let m = auditor.call(mark).await.unwrap().mark.unwrap();
    assert_eq!(m.missing_bookie_ids, vec!["b2"]);
    let list = auditor.call(v1::ListUnderReplicatedRequest { start_after: None, limit: 10 }).await.unwrap();
    assert_eq!(list.marks.len(), 1);
    // A gateway may mark (its writers report copies no bookie confirmed)
    // but never clear a mark: only a repair does (role table).
    let err = gw
        .call(v1::ClearUnderReplicatedRequest { ledger_id: l.ledger_id, bookie_ids: vec!["b2".into()] })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied));

    // Two workers race for the ledger's lock: one wins until its lease ends.
    let w1 = MetaClient::new(cluster.rpc(Role::ReplicationWorker, "1"), cluster.addrs(), MetaClientOptions::default());
    let name = format!("replicate/{}", l.ledger_id);
    let lock = w1
        .call(v1::AcquireLockRequest { name: name.clone(), owner: "worker-1".into(), lease_ms: 1500, take_over: false })
        .await
        .unwrap()
        .lock
        .unwrap();
    let err = w1
        .call(v1::AcquireLockRequest { name: name.clone(), owner: "worker-2".into(), lease_ms: 1500, take_over: false })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld), "{err}");
    // The owner is the certificate's identity; the request only labels it.
    let owner = || async { w1.call(v1::GetLockRequest { name: name.clone() }).await.unwrap().lock.unwrap().owner };
    assert_eq!(owner().await, "replication-worker/1:worker-1");
    // Issue #20 item 3: a bookie certificate can neither take the auditor's
    // lock (and so stop autorecovery) nor renew or release the worker's
    // grant, though its id is public; the grant stays the worker's.
    let b1 = MetaClient::new(cluster.rpc(Role::Bookie, "1"), cluster.addrs(), MetaClientOptions::default());
    let take_auditor =
        v1::AcquireLockRequest { name: "auditor".into(), owner: "auditor/1".into(), lease_ms: 1500, take_over: false };
    assert_eq!(b1.call(take_auditor).await.unwrap_err().code(), Some(ErrorCode::PermissionDenied));
    let renew = v1::RenewLockRequest { name: name.clone(), lock_id: lock.lock_id };
    assert_eq!(b1.call(renew).await.unwrap_err().code(), Some(ErrorCode::PermissionDenied));
    let release = v1::ReleaseLockRequest { name: name.clone(), lock_id: lock.lock_id };
    assert_eq!(b1.call(release).await.unwrap_err().code(), Some(ErrorCode::PermissionDenied));
    assert_eq!(owner().await, "replication-worker/1:worker-1");

    // The repair: the worker moves the ensemble and clears the mark.
    let mut moved = l.clone();
    moved.ensembles[0].bookie_ids[1] = "b4".into();
    w1.call(v1::UpdateLedgerRequest { ledger: Some(moved), expected_version: 1 }).await.unwrap();
    let cleared = w1
        .call(v1::ClearUnderReplicatedRequest { ledger_id: l.ledger_id, bookie_ids: vec!["b2".into()] })
        .await
        .unwrap();
    assert!(cleared.mark.is_none());
    w1.call(v1::ReleaseLockRequest { name: name.clone(), lock_id: lock.lock_id }).await.unwrap();
    assert!(w1.call(v1::GetLockRequest { name }).await.unwrap().lock.is_none());
    assert!(auditor
        .call(v1::ListUnderReplicatedRequest { start_after: None, limit: 10 })
        .await
        .unwrap()
        .marks
        .is_empty());

    let w = watch.await.unwrap().unwrap();
    assert!(!w.timed_out && !w.deleted);
    assert_eq!(w.ledger.unwrap().version, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_added_and_another_replaced_without_losing_writes() {
    let mut cluster = Cluster::start_with_spares(&[], 1);
    let meta = cluster.client();
    let first = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
    let admin = MetaClient::new(cluster.rpc(Role::Admin, "1"), cluster.addrs(), MetaClientOptions::default());
    // Only the operator may change the membership.
    let addrs: Vec<String> = (1..=4).map(|i| cluster.addr(i)).collect();
    let voters = |ids: &[u64]| v1::ChangeMembershipRequest {
        voters: ids.iter().map(|i| v1::Replica { id: *i, address: addrs[*i as usize - 1].clone() }).collect(),
    };
    let err = meta.call(voters(&[1, 2, 3])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied));

    // Add replica 4: it starts, catches up as a learner, then votes.
    cluster.launch(4);
    let r = admin.call_waiting(voters(&[1, 2, 3, 4]), Duration::from_secs(20)).await.unwrap();
    assert_eq!(r.voters.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    // A stale read on replica 4 answers from what it has applied, which may
    // trail the log it acknowledged when it joined ("no ledger 1" once, in
    // CI): it must come to hold the ledger, not hold it at once.
    let direct = cluster.rpc(Role::Admin, "1");
    let peer4 = direct.peer(&cluster.addr(4), Role::Metadata, Some("4"));
    let got = quire_testkit::eventually(Duration::from_secs(20), "replica 4 to apply ledger 1", || async {
        let r = peer4.call(v1::GetLedgerRequest { ledger_id: first.ledger_id, stale_ok: true }).await;
        r.ok().and_then(|r| r.ledger)
    })
    .await
    .unwrap();
    assert_eq!(got, first);

    // Replace replica 3: take it out of the voters, then stop it.
    let r = admin.call_waiting(voters(&[1, 2, 4]), Duration::from_secs(20)).await.unwrap();
    assert_eq!(r.voters.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 4]);
    cluster.procs.get_mut(&3).unwrap().kill().unwrap();
    let meta = MetaClient::new(
        cluster.rpc(Role::Gateway, "1"),
        vec![cluster.addr(1), cluster.addr(2), cluster.addr(4)],
        MetaClientOptions::default(),
    );
    let later = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap();
    assert!(later.ledger_id > first.ledger_id);
    let status = meta.call(v1::MetadataStatusRequest::default()).await.unwrap();
    assert_eq!(status.voters.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 4]);
    assert!(status.leader_id.is_some() && !status.leader_address.is_empty(), "{status:?}");
}

/// A write that timed out on a frozen leader (killed without a word, or cut
/// off) is not sent there again: the next write goes to another replica and
/// succeeds once the others have elected a leader. Before the fix, every
/// write went back to the remembered leader and timed out, forever (the fault
/// suite's seed 3: bookies lost their leases that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_move_off_a_leader_that_stopped_answering() {
    let cluster = Cluster::start(&[]);
    let meta = MetaClient::new(
        cluster.rpc(Role::Gateway, "1"),
        cluster.addrs(),
        MetaClientOptions { attempt_timeout: Duration::from_millis(700), ..MetaClientOptions::default() },
    );
    meta.call(create(1, 1, 1)).await.unwrap();
    let leader = cluster.id_of(&meta.leader().unwrap());
    cluster.procs[&leader].signal("STOP").unwrap();
    let err = meta.call(create(1, 1, 1)).await.unwrap_err();
    assert!(matches!(err, RpcError::Timeout { .. } | RpcError::ConnectionLost { .. }), "{err:?}");
    // Each failed write is the caller's to retry; the retries must land.
    let mut outcomes = Vec::new();
    let mut landed = None;
    for _ in 0..40 {
        match meta.call(create(1, 1, 1)).await {
            Ok(r) => {
                landed = Some(r);
                break;
            }
            Err(e) => outcomes.push(format!("{e}")),
        }
    }
    cluster.procs[&leader].signal("CONT").unwrap();
    assert!(landed.is_some(), "no write landed with the leader frozen: {outcomes:#?}");
    assert_ne!(cluster.id_of(&meta.leader().unwrap()), leader);
}

/// A follower frozen past the leader lease while the others go on writing
/// comes back with a shorter log and no leader heard for seconds. It asks
/// for a pre-vote, is refused (the others hear their leader), and follows:
/// no term is raised and the leader stays. Before the pre-vote (openraft's
/// own election timer) it stood at once, and its higher term made the
/// leader step down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_cannot_win_raises_no_term_and_deposes_no_leader() {
    let cluster = Cluster::start(&[]);
    let meta = cluster.client();
    meta.call(create(1, 1, 1)).await.unwrap();
    let admin = cluster.rpc(Role::Admin, "1");
    let status = |id: u64| {
        let peer = admin.peer(&cluster.addr(id), Role::Metadata, None);
        async move { peer.call(v1::MetadataStatusRequest::default()).await.unwrap() }
    };
    let leader = cluster.id_of(&meta.leader().unwrap());
    let before = status(leader).await;
    assert_eq!(before.raft_state, "leader");
    let frozen = (1..=3).find(|i| *i != leader).unwrap();
    cluster.procs[&frozen].signal("STOP").unwrap();
    // The others write on; the frozen one hears nothing for three leases
    // (election timeout 500 ms, lease 1 s).
    let frozen_at = std::time::Instant::now();
    let mut written = 0;
    while frozen_at.elapsed() < Duration::from_secs(3) {
        meta.call(create(1, 1, 1)).await.unwrap();
        written += 1;
    }
    assert!(written > 10, "only {written} writes while it was frozen");
    cluster.procs[&frozen].signal("CONT").unwrap();
    // It catches up with the leader's log ...
    let target = status(leader).await.last_applied_index;
    let logs = || cluster.procs.values().map(|p| p.log()).collect::<Vec<_>>().join("\n----\n");
    quire_testkit::eventually(Duration::from_secs(10), "the frozen follower caught up", || async {
        let s = status(frozen).await;
        (s.last_applied_index >= target && s.leader_id == Some(leader)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    // ... and two more leases later nobody has stood for election.
    let caught_up = std::time::Instant::now();
    while caught_up.elapsed() < Duration::from_secs(2) {
        meta.call(create(1, 1, 1)).await.unwrap();
    }
    for id in 1..=3 {
        let s = status(id).await;
        assert_eq!(
            (s.term, s.leader_id),
            (before.term, Some(leader)),
            "replica {id} after the frozen follower came back: {s:?}\n{}",
            logs()
        );
    }
}

/// A replica killed (SIGKILL: no goodbye to its clients) and started again
/// at its address is reached again at once: it answers its predecessor's
/// connections with a stateless reset the client recognises (the reset key
/// comes from the replica's own private key), so the next call fails fast
/// or succeeds instead of timing out on a dead connection until the 30 s
/// idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_resets_its_predecessors_connections() {
    let mut cluster = Cluster::start(&[]);
    let rpc = cluster.rpc(Role::Gateway, "1");
    let addr = cluster.addr(2);
    let peer = rpc.peer(&addr, Role::Metadata, None);
    let opts = quire_rpc::CallOptions::timeout(Duration::from_secs(5));
    peer.call_full(v1::MetadataStatusRequest::default(), opts).await.unwrap();
    cluster.procs.get_mut(&2).unwrap().kill().unwrap();
    cluster.launch(2);
    match peer.call_full(v1::MetadataStatusRequest::default(), opts).await {
        Ok(_) => {}
        Err(RpcError::ConnectionLost { .. } | RpcError::Unavailable { .. }) => {
            peer.call_full(v1::MetadataStatusRequest::default(), opts).await.unwrap();
        }
        Err(e) => panic!("the old connection was not reset: {e:?}"),
    }
}

/// Issue #19 item 7, met by the client's failover test: a metadata outage
/// longer than a lease (no leader, so nobody can renew) must not expire
/// every registration and lock the moment a new leader is elected. Each
/// lease gets a full term from the new leader (etcd's lessor promotes its
/// leases so; ZooKeeper's new leader restarts session timeouts), and a
/// holder's renewal of a lease nobody took over succeeds. Before, the new
/// leader's first reaper tick removed every bookie, and a creation in that
/// window found no bookie at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_a_lease_expires_no_registration_and_no_lock() {
    let mut cluster = Cluster::start(&[]);
    let lease_ms = 1500;
    let as_bookie = MetaClient::new(cluster.rpc(Role::Bookie, "1"), cluster.addrs(), MetaClientOptions::default());
    let record = v1::BookieRecord {
        bookie_id: "1".into(),
        address: "127.0.0.1:3181".into(),
        rack: "r1".into(),
        instance_id: "inst-a".into(),
        ..Default::default()
    };
    let lease = as_bookie.call(v1::RegisterBookieRequest { bookie: Some(record), lease_ms }).await.unwrap().lease_id;
    let worker =
        MetaClient::new(cluster.rpc(Role::ReplicationWorker, "1"), cluster.addrs(), MetaClientOptions::default());
    let name = "replicate/7".to_string();
    let lock = worker
        .call(v1::AcquireLockRequest { name: name.clone(), owner: "worker-1".into(), lease_ms, take_over: false })
        .await
        .unwrap()
        .lock
        .unwrap();

    // No quorum: the leader and one follower die.
    let leader = cluster.id_of(&as_bookie.leader().unwrap());
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    cluster.procs.get_mut(&leader).unwrap().kill().unwrap();
    cluster.procs.get_mut(&follower).unwrap().kill().unwrap();
    // The outage lasts until both leases ran out a lease ago (by the
    // leader clock they were stamped with: this machine's).
    let now_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let ran_out = lock.expires_at_ms + u64::from(lease_ms);
    quire_testkit::eventually(Duration::from_secs(10), "every lease ran out during the outage", || async {
        (now_ms() > ran_out).then_some(())
    })
    .await
    .unwrap();
    cluster.launch(follower);
    let admin = cluster.rpc(Role::Admin, "1");
    let live: Vec<String> = (1..=3).filter(|i| *i != leader).map(|i| cluster.addr(i)).collect();
    quire_testkit::eventually(Duration::from_secs(20), "a leader elected after the outage", || async {
        for a in &live {
            let s = admin.peer(a, Role::Metadata, None).call(v1::MetadataStatusRequest::default()).await;
            if s.is_ok_and(|s| s.raft_state == "leader") {
                return Some(());
            }
        }
        None
    })
    .await
    .unwrap();

    // (Clients that know no dead replica: a wasted attempt on one would
    // cost a second of the lease being checked.)
    let as_bookie = MetaClient::new(cluster.rpc(Role::Bookie, "1"), live.clone(), MetaClientOptions::default());
    let worker = MetaClient::new(cluster.rpc(Role::ReplicationWorker, "1"), live.clone(), MetaClientOptions::default());
    // Still registered, and nothing is removed for two reaper ticks of the
    // new leader.
    let list = as_bookie.call(v1::ListBookiesRequest {}).await.unwrap();
    assert_eq!(list.bookies.len(), 1, "the registration expired with the election: {list:?}");
    let version = list.version;
    let w = as_bookie
        .call_waiting(v1::WatchBookiesRequest { after_version: version, timeout_ms: 500 }, Duration::from_secs(5))
        .await
        .unwrap();
    let logs = || cluster.procs.values().map(|p| p.log()).collect::<Vec<_>>().join("\n----\n");
    assert!(w.timed_out, "registrations changed right after the election: {w:?}\n{}", logs());
    // The holders renew what they held.
    as_bookie
        .call(v1::RenewLeaseRequest { bookie_id: "1".into(), lease_id: lease })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    worker
        .call(v1::RenewLockRequest { name: name.clone(), lock_id: lock.lock_id })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let err = worker
        .call(v1::AcquireLockRequest { name: name.clone(), owner: "worker-2".into(), lease_ms, take_over: false })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::LockHeld), "{err}");
    // And a lease no longer renewed still ends.
    let version = as_bookie.call(v1::ListBookiesRequest {}).await.unwrap().version;
    let w = as_bookie
        .call_waiting(v1::WatchBookiesRequest { after_version: version, timeout_ms: 5000 }, Duration::from_secs(6))
        .await
        .unwrap();
    assert!(!w.timed_out && w.bookies.is_empty(), "{w:?}\n{}", logs());
}

/// A bookie in its integrity check marks its own open ledgers in limbo
/// under-replicated, so that a worker recovers them (integrity.rs); it may
/// name itself only, never another bookie's copies missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_may_mark_only_its_own_copies_missing() {
    let cluster = Cluster::start(&[]);
    let as_bookie = MetaClient::new(cluster.rpc(Role::Bookie, "1"), cluster.addrs(), MetaClientOptions::default());
    let ledger_id = cluster.client().call(create(3, 2, 2)).await.unwrap().ledger.unwrap().ledger_id;
    let mark = |missing: Vec<&str>| v1::MarkUnderReplicatedRequest {
        ledger_id,
        missing_bookie_ids: missing.into_iter().map(String::from).collect(),
        reason: "integrity check".into(),
    };
    for missing in [vec!["2"], vec!["1", "2"], vec![]] {
        let err = as_bookie.call(mark(missing.clone())).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::PermissionDenied), "{missing:?}: {err}");
    }
    let m = as_bookie.call(mark(vec!["1"])).await.unwrap().mark.unwrap();
    assert_eq!((m.ledger_id, m.missing_bookie_ids), (ledger_id, vec!["1".to_string()]));
}

/// Issue #20 item 3: a Raft message speaks for the replica its vote names,
/// and that must be the sender's certificate. Replica 2's certificate asking
/// for votes as replica 1 (with a term that would depose the leader) is
/// refused; asking as itself is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_message_may_only_name_its_senders_own_replica() {
    let cluster = Cluster::start(&[]);
    cluster.client().call(create(3, 2, 2)).await.unwrap();
    let as_two = cluster.rpc(Role::Metadata, "2");
    let vote_as = |node: u64| {
        let req = openraft::raft::VoteRequest::<u64>::new(openraft::Vote::new(1_000, node), None);
        v1::RaftRequest { kind: 2, payload: postcard::to_stdvec(&req).unwrap().into() }
    };
    let three = as_two.peer(&cluster.addr(3), Role::Metadata, Some("3"));
    let err = three.call(vote_as(1)).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PermissionDenied), "{err}");
    three.call(vote_as(2)).await.unwrap();
}

/// Waits until the replica at `addr` holds ledger `id` in its own state (a
/// stale read: the follower's state, not the leader's).
async fn wait_for_ledger_on(cluster: &Cluster, addr: String, id: u64, within: Duration, what: impl Into<String>) {
    let direct = cluster.rpc(Role::Gateway, "1");
    let what = what.into();
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        wait_until(within, &what, || {
            rt.block_on(async {
                let g = direct
                    .peer(&addr, Role::Metadata, None)
                    .call(v1::GetLedgerRequest { ledger_id: id, stale_ok: true })
                    .await;
                g.ok().map(|_| ())
            })
        })
    })
    .await
    .unwrap()
    .unwrap();
}

/// Creates ledgers with 60 KB of custom metadata each: `sequential` one at
/// a time (one log entry each), then `concurrent` at once (which the
/// leader batches into entries). Returns the last ledger id.
async fn create_heavy(meta: &Arc<MetaClient>, sequential: usize, concurrent: usize) -> u64 {
    let heavy = || {
        let mut c = create(1, 1, 1);
        c.custom.insert("blob".into(), vec![7u8; 60_000].into());
        c
    };
    let mut last = 0;
    for _ in 0..sequential {
        last = last.max(meta.call(heavy()).await.unwrap().ledger.unwrap().ledger_id);
    }
    let tasks: Vec<_> = (0..concurrent)
        .map(|_| {
            let meta = meta.clone();
            let req = heavy();
            tokio::spawn(async move { meta.call(req).await.unwrap().ledger.unwrap().ledger_id })
        })
        .collect();
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    last
}

/// Issue #46 item 2: the log a replica missed is larger than one RPC frame
/// (5 MiB). Sent as one AppendEntries it was refused by the RPC layer and
/// sent again for ever; concurrent writes of large metadata made single
/// log entries larger than a frame. Both a replica that was down for a
/// while and one whose disk was wiped (no snapshot: the log holds all)
/// must catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_catches_up_a_log_larger_than_a_frame() {
    for wiped in [false, true] {
        let mut cluster = Cluster::start(&["--snapshot-every", "1000000"]);
        let meta = Arc::new(cluster.client());
        meta.call(create(1, 1, 1)).await.unwrap();
        let leader = cluster.id_of(&meta.leader().unwrap());
        let victim = (1..=3).find(|i| *i != leader).unwrap();
        cluster.procs.get_mut(&victim).unwrap().kill().unwrap();
        if wiped {
            std::fs::remove_dir_all(cluster.data(victim)).unwrap();
        }
        // 120 x 60 KB = 7 MB of entries of one command each, then 64 at
        // once: 3.8 MB if gathered into one entry.
        let last = create_heavy(&meta, 120, 64).await;
        cluster.launch(victim);
        let addr = cluster.addr(victim);
        wait_for_ledger_on(&cluster, addr, last, Duration::from_secs(60), "the replica to catch up").await;
        for (id, p) in &cluster.procs {
            let log = p.log();
            assert!(
                !log.contains("exceeds the frame limit"),
                "replica {id} sent a request over the frame limit: {log}"
            );
        }
    }
}

/// Issue #46 item 3: a replica whose Raft core stops for good (here its
/// disk's fsync fails: EIO from crashfs, a sticky storage error) can never
/// commit or apply again. It kept answering and its ready file, looking
/// healthy for ever; it must exit so that a supervisor sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_raft_core_stops_exits() {
    let mut cluster = Cluster::start(&[]);
    let meta = cluster.client();
    meta.call(create(1, 1, 1)).await.unwrap();
    let leader = cluster.id_of(&meta.leader().unwrap());
    let victim = (1..=3).find(|i| *i != leader).unwrap();
    // The follower starts again with its data on a crashfs disk (it
    // catches up from the leader's log).
    cluster.procs.get_mut(&victim).unwrap().kill().unwrap();
    std::fs::remove_dir_all(cluster.data(victim)).unwrap();
    let state = cluster.dir.path().join("disk-state");
    let disk =
        quire_crashfs::Mount::new(&state, &cluster.data(victim)).expect("mount crashfs (needs /dev/fuse and root)");
    cluster.launch(victim);
    let last = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap().ledger_id;
    wait_for_ledger_on(&cluster, cluster.addr(victim), last, Duration::from_secs(30), "the replica to catch up").await;
    disk.fail_fsync(quire_crashfs::FsyncFault::next_file(""));
    // Writes go on (the other two commit them); the victim's next append fails.
    for _ in 0..5 {
        meta.call(create(1, 1, 1)).await.unwrap();
    }
    let p = cluster.procs.get_mut(&victim).unwrap();
    let status = p.wait_exit(Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e:#}: {}", p.log()));
    assert!(!status.success(), "{status:?}");
    assert!(p.log().contains("the Raft core stopped"), "{}", p.log());
    cluster.procs.remove(&victim);
    disk.unmount().unwrap();
}

/// A replica whose disk was lost votes for no one until it holds what it
/// may have helped commit (`raft/amnesia.rs`): restarted empty while the
/// leader is down, it refuses the other follower, which therefore cannot
/// lead with its vote (with a follower that lagged, such a leader would
/// lack committed entries: openraft's FAQ, "What will happen when data
/// gets lost?"). Once a leader is back and it has caught up, it votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lost_its_disk_votes_only_once_caught_up() {
    let mut cluster = Cluster::start(&[]);
    let meta = cluster.client();
    let mut last = 0;
    for _ in 0..20 {
        last = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap().ledger_id;
    }
    let leader = cluster.id_of(&meta.leader().unwrap());
    let victim = (1..=3).find(|i| *i != leader).unwrap();
    let other = (1..=3).find(|i| *i != leader && *i != victim).unwrap();
    wait_for_ledger_on(&cluster, cluster.addr(victim), last, Duration::from_secs(30), "the victim to hold all").await;
    cluster.procs.get_mut(&victim).unwrap().kill().unwrap();
    std::fs::remove_dir_all(cluster.data(victim)).unwrap();
    cluster.procs.get_mut(&leader).unwrap().kill().unwrap();
    cluster.launch(victim);

    // The other follower asks; the empty replica refuses.
    let victim_proc = &cluster.procs[&victim];
    let refused = wait_until(Duration::from_secs(30), "the empty replica to refuse a vote", || {
        victim_proc.log().contains("refused a vote").then_some(())
    });
    assert!(refused.is_ok(), "{}", victim_proc.log());
    let direct = cluster.rpc(Role::Admin, "1");
    let status = direct
        .peer(&cluster.addr(other), Role::Metadata, None)
        .call(v1::MetadataStatusRequest::default())
        .await
        .unwrap();
    assert_ne!(status.raft_state, "leader", "{status:?}");

    // The old leader returns and leads with the other follower's vote; the
    // empty replica catches up from it, and then votes.
    cluster.launch(leader);
    // A new client: the old one's connection to the old leader was reset.
    let meta = cluster.client();
    let l = meta.call(create(1, 1, 1)).await.unwrap().ledger.unwrap().ledger_id;
    wait_for_ledger_on(&cluster, cluster.addr(victim), l, Duration::from_secs(30), "the empty replica to catch up")
        .await;
    let victim_proc = &cluster.procs[&victim];
    let freed = wait_until(Duration::from_secs(30), "the replica to vote again", || {
        victim_proc.log().contains("votes again").then_some(())
    });
    assert!(freed.is_ok(), "{}", victim_proc.log());
    // Now its vote elects: the leader killed, the two others elect and commit.
    let leader = cluster.id_of(&meta.leader().unwrap());
    cluster.procs.get_mut(&leader).unwrap().kill().unwrap();
    let l = quire_testkit::eventually(Duration::from_secs(30), "a create without the leader", || async {
        meta.call(create(1, 1, 1)).await.ok().and_then(|r| r.ledger)
    })
    .await
    .unwrap();
    assert!(l.ledger_id > last);
}
