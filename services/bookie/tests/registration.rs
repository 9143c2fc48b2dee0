//! A bookie registers with a real metadata cluster, keeps its lease, and is
//! gone from the registry within its lease after it dies.

use std::time::{Duration, Instant};

use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, TlsFiles};
use quire_testkit::{bin_path, MetadataCluster, Process};

/// A 3-replica metadata cluster and one bookie registered with it.
struct Setup {
    dir: tempfile::TempDir,
    meta_cluster: MetadataCluster,
    bookie: Process,
    addr: String,
    rpc: RpcClient,
    meta: MetaClient,
}

fn setup(extra: &[&str]) -> Setup {
    setup_in(tempfile::tempdir().unwrap(), None, extra)
}

/// As [`setup`], with the bookie's data under `data` if given.
fn setup_in(dir: tempfile::TempDir, data: Option<std::path::PathBuf>, extra: &[&str]) -> Setup {
    let certs = dir.path().join("certs");
    init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: 1 }, &IssueOptions::default()).unwrap();
    let meta_cluster = MetadataCluster::start(&certs, dir.path(), 3).unwrap();
    let ready = dir.path().join("bookie.ready");
    let data = data.unwrap_or_else(|| dir.path().join("bookie"));
    let metadata = meta_cluster.addrs.join(",");
    let mut args = vec![
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
        "--metadata",
        &metadata,
    ];
    args.extend_from_slice(extra);
    let mut bookie = Process::spawn("bookie", &bin_path("quire-bookie"), &args, dir.path()).unwrap();
    let addr = bookie.wait_ready(&ready, Duration::from_secs(30)).unwrap();
    let creds = Credentials::load(&TlsFiles::in_dir(&certs, Role::Admin, "1")).unwrap();
    let rpc = RpcClient::new(&creds, ClientOptions::default()).unwrap();
    let meta = MetaClient::new(rpc.clone(), meta_cluster.addrs.clone(), MetaClientOptions::default());
    Setup { dir, meta_cluster, bookie, addr, rpc, meta }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_registers_renews_and_expires_with_its_lease() {
    let Setup { dir: _dir, meta_cluster: _cluster, mut bookie, addr, rpc, meta } =
        setup(&["--lease-ms", "2000", "--rack", "rack-a"]);
    // Registered: watch the registry until it appears.
    let mut version = 0;
    let rec = loop {
        let w = meta
            .call_waiting(
                v1::WatchBookiesRequest { after_version: version, timeout_ms: 10_000 },
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        if let Some(b) = w.bookies.iter().find(|b| b.bookie_id == "1") {
            break b.clone();
        }
        assert!(!w.timed_out, "the bookie never registered:\n{}", bookie.log());
        version = w.version;
    };
    assert_eq!(rec.address, addr);
    assert_eq!(rec.rack, "rack-a");
    let instance = rpc.peer(&addr, Role::Bookie, Some("1")).call(v1::BookieInfoRequest {}).await.unwrap().instance_id;
    assert_eq!(rec.instance_id, instance, "the registry names the cookie's instance");

    // It keeps its 2 s lease alive well past 2 s.
    let list = meta.call(v1::ListBookiesRequest {}).await.unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let w = meta
        .call_waiting(v1::WatchBookiesRequest { after_version: list.version, timeout_ms: 5000 }, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(w.timed_out && Instant::now() >= until - Duration::from_millis(100), "the registry changed: {w:?}");

    // Killed: gone once its 2 s lease ran out, within a deadline of five
    // leases (a loaded machine may reap late; the lease's lower bound is
    // the metadata service's own test).
    bookie.kill().unwrap();
    let killed = Instant::now();
    let w = meta
        .call_waiting(v1::WatchBookiesRequest { after_version: w.version, timeout_ms: 10_000 }, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        !w.timed_out && w.bookies.iter().all(|b| b.bookie_id != "1"),
        "not removed {:?} after the kill: {w:?}",
        killed.elapsed()
    );
}

/// A ledger on bookie 1 alone.
fn one_bookie_ledger() -> v1::CreateLedgerRequest {
    v1::CreateLedgerRequest {
        ensemble_size: 1,
        write_quorum: 1,
        ack_quorum: 1,
        bookie_ids: vec!["1".into()],
        instance_ids: vec![],
        custom: Default::default(),
        request_id: String::new(),
    }
}

/// Seed 003's second guard: a bookie asked to take an add for a ledger it has
/// never seen checks the ledger with the metadata service first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_refuses_adds_to_a_ledger_the_metadata_service_closed() {
    let Setup { dir: _dir, meta_cluster: _cluster, mut bookie, addr, rpc, meta } = setup(&[]);
    let create = one_bookie_ledger;
    let open = meta.call(create()).await.unwrap().ledger.unwrap();
    let mut closed = meta.call(create()).await.unwrap().ledger.unwrap();
    let v = closed.version;
    closed.state = v1::LedgerState::Closed as i32;
    meta.call(v1::UpdateLedgerRequest { ledger: Some(closed.clone()), expected_version: v }).await.unwrap();

    let peer = rpc.peer(&addr, Role::Bookie, Some("1"));
    let add = |l: u64, recovery: bool| v1::AddEntryRequest {
        entry: Some(v1::Entry::sealed(l, 0, -1, bytes::Bytes::from_static(b"late write"))),
        recovery,
        ..Default::default()
    };
    // An open ledger: accepted.
    peer.call(add(open.ledger_id, false)).await.unwrap();
    // A closed ledger this bookie never saw (as a fresh process after a disk swap would not have):
    // refused, and fenced here from now on.
    let err = peer.call(add(closed.ledger_id, false)).await.unwrap_err();
    assert_eq!(err.code(), Some(quire_proto::v1::ErrorCode::LedgerFenced), "{err}");
    let err = peer.call(add(closed.ledger_id, false)).await.unwrap_err();
    assert_eq!(err.code(), Some(quire_proto::v1::ErrorCode::LedgerFenced), "{err}");
    // A ledger the metadata service never heard of: refused.
    let err = peer.call(add(999_999, false)).await.unwrap_err();
    assert_eq!(err.code(), Some(quire_proto::v1::ErrorCode::NoSuchLedger), "{err}");
    // Recovery and re-replication still write to a closed ledger.
    peer.call(add(closed.ledger_id, true)).await.unwrap();
    bookie.terminate(Duration::from_secs(10)).unwrap();
}

/// Finding 7 of issue #45: a bookie that turns read-only (here its journal's
/// fdatasync fails: EIO from crashfs, under its data directory) must say so
/// in the registry within a lease renewal, so that placement, the auditor
/// and the operator learn it. The lease renewal carried no state: the
/// registry showed the bookie available for as long as it lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_whose_journal_fails_is_read_only_in_the_registry_within_a_lease() {
    let dir = tempfile::tempdir().unwrap();
    let disk = quire_crashfs::Mount::new(&dir.path().join("disk"), &dir.path().join("mnt"))
        .expect("mount crashfs (needs /dev/fuse and root)");
    let data = dir.path().join("mnt").join("bookie");
    let Setup { dir: _dir, meta_cluster: _cluster, mut bookie, addr, rpc, meta } =
        setup_in(dir, Some(data), &["--lease-ms", "1500"]);
    let state_of = |list: &v1::ListBookiesResponse| {
        list.bookies.iter().find(|b| b.bookie_id == "1").map(|b| v1::BookieState::try_from(b.state).unwrap())
    };
    let registered = quire_testkit::eventually(Duration::from_secs(20), "the bookie to register", || async {
        state_of(&meta.call(v1::ListBookiesRequest {}).await.ok()?)
    })
    .await
    .unwrap();
    assert_eq!(registered, v1::BookieState::Available);
    let ledger = meta.call(one_bookie_ledger()).await.unwrap().ledger.unwrap();
    disk.fail_fsync(quire_crashfs::FsyncFault::next_file("journal-"));
    let peer = rpc.peer(&addr, Role::Bookie, Some("1"));
    let add = v1::AddEntryRequest {
        entry: Some(v1::Entry::sealed(ledger.ledger_id, 0, -1, bytes::Bytes::from_static(b"never durable"))),
        ..Default::default()
    };
    assert!(peer.call(add).await.is_err(), "an add whose fdatasync failed was acknowledged");
    // Within a lease (renewals every third of it), with room for a loaded machine.
    let seen = Instant::now();
    quire_testkit::eventually(Duration::from_secs(6), "the registry to show the bookie read-only", || async {
        (state_of(&meta.call(v1::ListBookiesRequest {}).await.ok()?) == Some(v1::BookieState::ReadOnly)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#} ({:?} after the failure)\n{}", seen.elapsed(), bookie.log()));
    bookie.kill().unwrap();
}
