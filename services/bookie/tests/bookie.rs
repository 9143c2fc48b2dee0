//! A real bookie process over QUIC + mTLS: crash consistency under SIGKILL,
//! fences that survive restarts, long polls, and every kind of bad request.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1::{self, ErrorCode};
use quire_proto::Role;
use quire_rpc::{CallOptions, ClientOptions, Credentials, PeerClient, RpcClient, RpcError, TlsFiles};
use quire_testkit::{bin_path, wait_until, Process};

struct Fixture {
    dir: tempfile::TempDir,
    certs: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init_dir(&certs, "test", &LocalCluster { metadata: 1, bookies: 2 }, &IssueOptions::default()).unwrap();
        Fixture { dir, certs }
    }

    fn data(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts bookie `id` on `data`; returns the process and its address.
    fn bookie(&self, id: &str, data: &Path, extra: &[&str]) -> (Process, String) {
        self.bookie_with_env(id, data, extra, &[])
    }

    /// As [`Fixture::bookie`], with environment variables (failpoints).
    fn bookie_with_env(&self, id: &str, data: &Path, extra: &[&str], env: &[(String, String)]) -> (Process, String) {
        let ready = self.dir.path().join(format!("bookie-{id}.ready"));
        let _ = std::fs::remove_file(&ready);
        let mut args = vec![
            "--certs-dir".to_string(),
            self.certs.display().to_string(),
            "--id".into(),
            id.into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--ready-file".into(),
            ready.display().to_string(),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p =
            Process::spawn_with_env(&format!("bookie-{id}"), &bin_path("quire-bookie"), &args, env, self.dir.path())
                .unwrap();
        let addr = p.wait_ready(&ready, Duration::from_secs(30)).unwrap();
        (p, addr)
    }

    fn client(&self) -> RpcClient {
        // A killed process sends no CONNECTION_CLOSE: calls in flight then end by
        // their deadline, so keep it short.
        let creds = Credentials::load(&TlsFiles::in_dir(&self.certs, Role::Gateway, "1")).unwrap();
        let opts = ClientOptions { request_timeout: Duration::from_secs(2), ..ClientOptions::default() };
        RpcClient::new(&creds, opts).unwrap()
    }
}

fn payload(l: u64, e: u64) -> Bytes {
    Bytes::from(format!("{l}:{e}|").repeat(40 + (e % 90) as usize))
}

fn entry(l: u64, e: u64) -> v1::Entry {
    v1::Entry::sealed(l, e, e as i64 - 1, payload(l, e))
}

fn add(l: u64, e: u64) -> v1::AddEntryRequest {
    v1::AddEntryRequest { entry: Some(entry(l, e)), ..Default::default() }
}

async fn read(peer: &PeerClient, l: u64, e: u64) -> Result<v1::Entry, RpcError> {
    let r = peer.call(v1::ReadEntryRequest { ledger_id: l, entry_id: e, ..Default::default() }).await?;
    Ok(r.entry.expect("read without entry"))
}

/// Writes ledger `l` with `window` adds in flight until the bookie dies;
/// returns the entry ids it acknowledged.
async fn write_until_killed(
    peer: PeerClient,
    l: u64,
    window: usize,
    acked: Arc<Mutex<BTreeSet<u64>>>,
    dead: Arc<AtomicBool>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut e = 0u64;
    while !dead.load(Ordering::SeqCst) {
        while tasks.len() >= window {
            tasks.join_next().await;
        }
        let (peer, acked) = (peer.clone(), acked.clone());
        tasks.spawn(async move {
            if peer.call_full(add(l, e), CallOptions::ordered(l)).await.is_ok() {
                acked.lock().unwrap().insert(e);
            }
        });
        e += 1;
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_entry_survives_sigkill_at_any_point() {
    let fx = Fixture::new();
    let data = fx.data("bookie-1");
    let mut written: Vec<(u64, BTreeSet<u64>)> = Vec::new();
    let mut instance = None;
    // Kill after a few, after hundreds (a flush in between), after thousands (several flushes).
    for (round, kill_after) in [(1u64, 5usize), (2, 400), (3, 3000)] {
        let (mut bookie, addr) = fx.bookie("1", &data, &["--flush-interval-ms", "50", "--write-cache-mib", "1"]);
        let client = fx.client();
        let peer = client.peer(&addr, Role::Bookie, Some("1"));
        let info = peer.call(v1::BookieInfoRequest {}).await.unwrap();
        // The same disks: the same instance, across every restart.
        assert_eq!(*instance.get_or_insert(info.instance_id.clone()), info.instance_id);

        // Everything acknowledged in earlier rounds is still there, byte for byte.
        for (l, ids) in &written {
            for e in ids {
                assert_eq!(read(&peer, *l, *e).await.unwrap(), entry(*l, *e), "round {round}: ledger {l} entry {e}");
            }
        }

        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let dead = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn(write_until_killed(peer.clone(), round, 64, acked.clone(), dead.clone()));
        let a2 = acked.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(60), "acks before the kill", || {
                (a2.lock().unwrap().len() >= kill_after).then_some(())
            })
        })
        .await
        .unwrap()
        .unwrap();
        bookie.kill().unwrap();
        dead.store(true, Ordering::SeqCst);
        writer.await.unwrap();
        client.close(Duration::from_millis(100)).await;
        let ids = acked.lock().unwrap().clone();
        assert!(ids.len() >= kill_after);
        written.push((round, ids));
    }
    let (_bookie, addr) = fx.bookie("1", &data, &[]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, Some("1"));
    let mut n = 0;
    for (l, ids) in &written {
        for e in ids {
            assert_eq!(read(&peer, *l, *e).await.unwrap(), entry(*l, *e), "final: ledger {l} entry {e}");
            n += 1;
        }
    }
    assert!(n > 3400, "{n}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_survives_sigkill_and_recovery_reads_fence() {
    let fx = Fixture::new();
    let data = fx.data("bookie-1");
    {
        let (mut bookie, addr) = fx.bookie("1", &data, &[]);
        let client = fx.client();
        let peer = client.peer(&addr, Role::Bookie, None);
        for e in 0..3 {
            peer.call(add(10, e)).await.unwrap();
        }
        let f = peer.call(v1::FenceLedgerRequest { ledger_id: 10, metadata_version: 2 }).await.unwrap();
        assert_eq!(f.last_add_confirmed, 1);
        // A recovery read of another ledger fences it as well.
        peer.call(add(11, 0)).await.unwrap();
        let r = peer
            .call(v1::ReadEntryRequest { ledger_id: 11, entry_id: 0, fence: true, metadata_version: 2 })
            .await
            .unwrap();
        assert_eq!(r.entry.unwrap(), entry(11, 0));
        bookie.kill().unwrap();
    }
    let (_bookie, addr) = fx.bookie("1", &data, &[]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, None);
    for l in [10, 11] {
        let err = peer.call(add(l, 3)).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::LedgerFenced), "ledger {l}: {err}");
    }
    // Recovery adds still go in.
    peer.call(v1::AddEntryRequest { entry: Some(entry(10, 3)), recovery: true, ..Default::default() }).await.unwrap();
    assert_eq!(read(&peer, 10, 3).await.unwrap(), entry(10, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_wakes_when_an_add_raises_the_lac() {
    let fx = Fixture::new();
    let (_bookie, addr) = fx.bookie("1", &fx.data("b"), &[]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, None);
    peer.call(add(20, 0)).await.unwrap();
    peer.call(add(20, 1)).await.unwrap(); // carries LAC 0
    let p2 = peer.clone();
    let poll =
        tokio::spawn(async move { p2.call(v1::WaitLacRequest { ledger_id: 20, after: 0, timeout_ms: 20_000 }).await });
    // The poll is parked: a short poll for the same condition times out.
    let r = peer.call(v1::WaitLacRequest { ledger_id: 20, after: 0, timeout_ms: 50 }).await.unwrap();
    assert_eq!((r.last_add_confirmed, r.timed_out), (0, true));
    assert!(!poll.is_finished());
    peer.call(add(20, 2)).await.unwrap(); // carries LAC 1
    let r = poll.await.unwrap().unwrap();
    assert_eq!((r.last_add_confirmed, r.timed_out), (1, false));
    assert_eq!(peer.call(v1::ReadLacRequest { ledger_id: 20 }).await.unwrap().last_add_confirmed, 1);
}

fn code<T: std::fmt::Debug>(r: Result<T, RpcError>) -> Option<ErrorCode> {
    r.unwrap_err().code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_their_error_codes_and_store_nothing() {
    let fx = Fixture::new();
    let (_bookie, addr) = fx.bookie("1", &fx.data("b"), &["--max-entry-bytes", "4096"]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, None);

    let big = v1::Entry::sealed(30, 0, -1, Bytes::from(vec![7u8; 8192]));
    assert_eq!(
        code(peer.call(v1::AddEntryRequest { entry: Some(big), ..Default::default() }).await),
        Some(ErrorCode::EntryTooLarge)
    );
    let mut forged = entry(30, 0);
    forged.payload = Bytes::from_static(b"forged");
    assert_eq!(
        code(peer.call(v1::AddEntryRequest { entry: Some(forged), ..Default::default() }).await),
        Some(ErrorCode::DigestMismatch)
    );
    assert_eq!(code(peer.call(v1::AddEntryRequest::default()).await), Some(ErrorCode::BadRequest));
    let wrong = v1::AddEntryRequest {
        entry: Some(entry(30, 0)),
        expected_instance_id: "someone-else".into(),
        ..Default::default()
    };
    assert_eq!(code(peer.call(wrong).await), Some(ErrorCode::WrongInstance));
    assert_eq!(code(read(&peer, 30, 0).await), Some(ErrorCode::NoSuchLedger), "nothing was stored");
    assert_eq!(code(peer.call(v1::ReadLacRequest { ledger_id: 31 }).await), Some(ErrorCode::NoSuchLedger));

    // With the right instance id, the add goes in; a missing neighbour is NO_SUCH_ENTRY.
    let instance = peer.call(v1::BookieInfoRequest {}).await.unwrap().instance_id;
    peer.call(v1::AddEntryRequest { entry: Some(entry(30, 0)), expected_instance_id: instance, ..Default::default() })
        .await
        .unwrap();
    assert_eq!(code(read(&peer, 30, 1).await), Some(ErrorCode::NoSuchEntry));
    assert_eq!(read(&peer, 30, 0).await.unwrap(), entry(30, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_disk_never_answers_as_the_old_instance() {
    let fx = Fixture::new();
    let data = fx.data("b");
    let first = {
        let (mut bookie, addr) = fx.bookie("2", &data, &[]);
        let client = fx.client();
        let peer = client.peer(&addr, Role::Bookie, Some("2"));
        peer.call(add(40, 0)).await.unwrap();
        let id = peer.call(v1::BookieInfoRequest {}).await.unwrap().instance_id;
        bookie.terminate(Duration::from_secs(10)).unwrap();
        id
    };
    std::fs::remove_dir_all(data.join("ledgers")).unwrap();
    // Refuses to start on the half-wiped directories.
    let out = std::process::Command::new(bin_path("quire-bookie"))
        .args(["--certs-dir", fx.certs.to_str().unwrap(), "--id", "2", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("wiped or replaced"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Formatted explicitly, it is a new instance, which writers can tell apart.
    let (_bookie, addr) = fx.bookie("2", &data, &["--format"]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, Some("2"));
    let reply = peer.call_full(v1::BookieInfoRequest {}, CallOptions::default()).await.unwrap();
    assert_ne!(reply.body.instance_id, first);
    assert_eq!(reply.instance_id, reply.body.instance_id, "every response carries the instance id");
    let stale = v1::AddEntryRequest { entry: Some(entry(40, 1)), expected_instance_id: first, ..Default::default() };
    assert_eq!(peer.call(stale).await.unwrap_err().code(), Some(ErrorCode::WrongInstance));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_adds_is_judged_add_by_add() {
    let fx = Fixture::new();
    let (_bookie, addr) = fx.bookie("1", &fx.data("b"), &["--max-entry-bytes", "4096"]);
    let client = fx.client();
    let peer = client.peer(&addr, Role::Bookie, None);
    let instance = peer.call(v1::BookieInfoRequest {}).await.unwrap().instance_id;

    // Malformed as a whole: empty, or more adds than allowed.
    assert_eq!(code(peer.call(v1::AddEntriesRequest { adds: vec![] }).await), Some(ErrorCode::BadRequest));
    let too_many = v1::AddEntriesRequest { adds: (0..1025).map(|e| add(50, e)).collect() };
    assert_eq!(code(peer.call(too_many).await), Some(ErrorCode::BadRequest));

    // Ledger 51 is fenced here: its add is refused, the others go in.
    peer.call(v1::FenceLedgerRequest { ledger_id: 51, metadata_version: 0 }).await.unwrap();
    let mut forged = entry(50, 2);
    forged.payload = Bytes::from_static(b"forged");
    let adds = vec![
        v1::AddEntryRequest { entry: Some(entry(50, 0)), expected_instance_id: instance.clone(), ..Default::default() },
        add(51, 0),
        v1::AddEntryRequest { entry: Some(forged), ..Default::default() },
        v1::AddEntryRequest {
            entry: Some(entry(50, 3)),
            expected_instance_id: "someone-else".into(),
            ..Default::default()
        },
        v1::AddEntryRequest::default(),
        add(50, 1),
    ];
    let r = peer.call(v1::AddEntriesRequest { adds }).await.unwrap();
    let got: Vec<(u64, u64, i32)> = r.outcomes.iter().map(|o| (o.ledger_id, o.entry_id, o.code)).collect();
    assert_eq!(
        got,
        vec![
            (50, 0, ErrorCode::Ok as i32),
            (51, 0, ErrorCode::LedgerFenced as i32),
            (50, 2, ErrorCode::DigestMismatch as i32),
            (50, 3, ErrorCode::WrongInstance as i32),
            (0, 0, ErrorCode::BadRequest as i32),
            (50, 1, ErrorCode::Ok as i32),
        ]
    );
    assert_eq!(read(&peer, 50, 0).await.unwrap(), entry(50, 0));
    assert_eq!(read(&peer, 50, 1).await.unwrap(), entry(50, 1));
    for (l, e) in [(50, 2), (50, 3), (51, 0)] {
        assert!(read(&peer, l, e).await.is_err(), "{l}/{e} must not be stored");
    }
    // A recovery batch is accepted on the fenced ledger, and fences a new one.
    let rec = |l: u64, e: u64| v1::AddEntryRequest { entry: Some(entry(l, e)), recovery: true, ..Default::default() };
    let r = peer.call(v1::AddEntriesRequest { adds: vec![rec(51, 0), rec(52, 0)] }).await.unwrap();
    assert!(r.outcomes.iter().all(|o| o.code == ErrorCode::Ok as i32), "{r:?}");
    assert_eq!(code(peer.call(add(52, 1)).await), Some(ErrorCode::LedgerFenced), "a recovery add fences");
}

/// Issue #20 item 3: ReadEntry is open to the auditor and to bookies, but a
/// fencing read fences the ledger. Without FenceLedger's right it is refused
/// (PermissionDenied) and fences nothing: the writer's next add is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_read_needs_the_right_to_fence() {
    let fx = Fixture::new();
    let (_bookie, addr) = fx.bookie("1", &fx.data("bookie-1"), &[]);
    let client = fx.client();
    let writer = client.peer(&addr, Role::Bookie, Some("1"));
    writer.call(add(7, 0)).await.unwrap();
    let fencing_read = || v1::ReadEntryRequest { ledger_id: 7, entry_id: 0, fence: true, metadata_version: 1 };
    for (role, id) in [(Role::Auditor, "1"), (Role::Bookie, "2")] {
        let creds = Credentials::load(&TlsFiles::in_dir(&fx.certs, role, id)).unwrap();
        let other = RpcClient::new(&creds, ClientOptions::default()).unwrap();
        let peer = other.peer(&addr, Role::Bookie, Some("1"));
        assert_eq!(read(&peer, 7, 0).await.unwrap().payload, payload(7, 0), "a plain read is the {role}'s");
        assert_eq!(code(peer.call(fencing_read()).await), Some(ErrorCode::PermissionDenied), "{role}");
    }
    // Not fenced by those: the writer goes on.
    writer.call(add(7, 1)).await.unwrap();
    // A role that may fence may do it by reading, and then the writer stops.
    writer.call(fencing_read()).await.unwrap();
    assert_eq!(code(writer.call(add(7, 2)).await), Some(ErrorCode::LedgerFenced));
}

/// One flush of many ledgers is committed to the index in several sled
/// batches (`COMMIT_BATCH_RECORDS` in shared/storage/src/index.rs: one
/// batch of 100 000 ledgers took a bookie from 123 to 706 MB), the journal
/// checkpoint in the last: a bookie killed between two of them loses no
/// entry it acknowledged, and its index reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_killed_between_the_index_batches_of_one_flush_loses_nothing() {
    let f = Fixture::new();
    let data = f.data("b1");
    let env = [(quire_storage::failpoint::ENV.to_string(), "index.between_batches".to_string())];
    let (mut p, addr) = f.bookie_with_env("1", &data, &[], &env);
    let rpc = f.client();
    let peer = rpc.peer(&addr, Role::Bookie, Some("1"));
    // A thousand ledgers, an entry each, all at once: one flush holds them,
    // a run and a ledger record each, several index batches.
    let calls: Vec<_> = (1..=1000u64)
        .map(|l| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.call_full(add(l, 0), CallOptions::ordered(l)).await.map(|_| l) })
        })
        .collect();
    let mut acked = Vec::new();
    for c in calls {
        if let Ok(l) = c.await.unwrap() {
            acked.push(l);
        }
    }
    assert!(acked.len() > 500, "only {} adds acknowledged before the flush", acked.len());
    let status = p.wait_exit(Duration::from_secs(30)).unwrap();
    assert_eq!(status.signal(), Some(9), "killed at the failpoint between index batches");
    drop(p);
    let (mut p, addr) = f.bookie("1", &data, &[]);
    let peer = rpc.peer(&addr, Role::Bookie, Some("1"));
    for l in &acked {
        let got = read(&peer, *l, 0).await.unwrap_or_else(|e| panic!("ledger {l} entry 0 was acknowledged: {e}"));
        assert_eq!(got.payload, payload(*l, 0), "ledger {l}");
    }
    p.terminate(Duration::from_secs(30)).unwrap();
    let store = quire_storage::Store::open(quire_storage::StoreConfig::new(data.join("journal"), data.join("ledgers")))
        .unwrap();
    assert_eq!(store.verify_index().unwrap(), Vec::<String>::new());
    assert!(store.ledger_ids().len() >= acked.len());
}
