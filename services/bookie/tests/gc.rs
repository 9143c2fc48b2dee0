//! Garbage collection with real processes: bookies, a 3-replica metadata
//! cluster, ledgers written and deleted through the client library.
//! - Deleting half the ledgers and collecting frees their space; the other
//!   half reads back byte-identical after a restart.
//! - A bookie killed (SIGKILL) at each step of a pass loses no live entry
//!   and leaves no index entry pointing at nothing.
//! - With the metadata service down, nothing is deleted.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_pki::{init_dir, IssueOptions, LocalCluster};
use quire_proto::v1::{self, ErrorCode};
use quire_proto::Role;
use quire_rpc::{CallOptions, Credentials, RpcClient, RpcError, TlsFiles};
use quire_testkit::{free_tcp_addr, scrape, TestCluster};

/// Small entry logs, so that a few MB make several sealed ones; scheduled
/// passes far off, so that only the test's RunGc runs one.
const BOOKIE_FLAGS: &[&str] = &[
    "--lease-ms",
    "2000",
    "--flush-kib",
    "256",
    "--gc-interval-ms",
    "3600000",
    "--compaction-rate-bytes-per-sec",
    "0",
];

struct Setup {
    _dir: tempfile::TempDir,
    cluster: TestCluster,
}

impl Setup {
    fn start(bookies: usize, extra: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        init_dir(&certs, "test", &LocalCluster { metadata: 3, bookies: bookies as u32 }, &IssueOptions::default())
            .unwrap();
        let racks: Vec<&str> = (0..bookies).map(|_| "r1").collect();
        let mut flags = BOOKIE_FLAGS.to_vec();
        flags.extend_from_slice(extra);
        let cluster = TestCluster::start(dir.path(), &certs, &racks, &flags).unwrap();
        Setup { _dir: dir, cluster }
    }

    fn rpc(&self) -> RpcClient {
        let creds = Credentials::load(&TlsFiles::in_dir(&self.cluster.certs, Role::Admin, "1")).unwrap();
        RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap()
    }

    /// A fresh client (one made before a bookie's restart may hold a dead connection to it).
    async fn client(&self) -> Client {
        let rpc = self.rpc();
        let meta =
            Arc::new(MetaClient::new(rpc.clone(), self.cluster.metadata.addrs.clone(), MetaClientOptions::default()));
        let client = Client::new(rpc, meta, ClientOptions::default());
        let n = self.cluster.bookies.len();
        quire_testkit::eventually(Duration::from_secs(20), "every bookie registered", || async {
            (client.bookies().refresh().await.ok()?.len() == n).then_some(())
        })
        .await
        .unwrap();
        client
    }

    async fn run_gc(&self, i: usize, major: bool) -> Result<v1::GcReport, RpcError> {
        let b = &self.cluster.bookies[i];
        let peer = self.rpc().peer(&b.addr, Role::Bookie, Some(&b.id));
        let r = peer.call_full(v1::RunGcRequest { major }, CallOptions::timeout(Duration::from_secs(120))).await?;
        Ok(r.body.report.expect("a report"))
    }
}

fn payload(l: u64, e: u64) -> Bytes {
    let mut p = format!("ledger {l} entry {e} ").into_bytes();
    p.resize(1000, (l * 7 + e) as u8);
    Bytes::from(p)
}

/// `ledgers` ledgers of `entries` 1 KB entries, appended 50 at a time in
/// turn (so every entry log mixes them), then closed.
async fn write(client: &Client, spec: &CreateLedger, ledgers: usize, entries: u64) -> BTreeMap<u64, Vec<Bytes>> {
    let mut writers = Vec::new();
    for _ in 0..ledgers {
        writers.push(client.create(spec.clone()).await.unwrap());
    }
    let mut out: BTreeMap<u64, Vec<Bytes>> = writers.iter().map(|w| (w.ledger_id(), Vec::new())).collect();
    for chunk in (0..entries).collect::<Vec<_>>().chunks(50) {
        for w in &writers {
            let data: Vec<Bytes> = chunk.iter().map(|e| payload(w.ledger_id(), *e)).collect();
            w.add_batch(data.clone()).await.unwrap();
            out.get_mut(&w.ledger_id()).unwrap().extend(data);
        }
    }
    for w in writers {
        w.close().await.unwrap();
    }
    out
}

async fn reads_back(client: &Client, ledgers: &BTreeMap<u64, Vec<Bytes>>) {
    for (id, data) in ledgers {
        let r = client.open(*id).await.unwrap_or_else(|e| panic!("open ledger {id}: {e}"));
        let got = r.read_range(0, data.len() as u64 - 1, data.len()).await.unwrap();
        assert_eq!(got.len(), data.len(), "ledger {id}");
        for (e, (g, want)) in got.iter().zip(data).enumerate() {
            assert!(g.payload == *want, "ledger {id} entry {e}: other bytes");
        }
    }
}

fn entry_log_bytes(data: &Path) -> u64 {
    std::fs::read_dir(data.join("ledgers/entrylogs")).unwrap().map(|f| f.unwrap().metadata().unwrap().len()).sum()
}

/// Deletes every other ledger (in the metadata service); the rest.
async fn delete_half(client: &Client, all: BTreeMap<u64, Vec<Bytes>>) -> (Vec<u64>, BTreeMap<u64, Vec<Bytes>>) {
    let mut deleted = Vec::new();
    let mut kept = BTreeMap::new();
    for (i, (id, data)) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            client.delete(id).await.unwrap();
            deleted.push(id);
        } else {
            kept.insert(id, data);
        }
    }
    (deleted, kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_half_the_ledgers_frees_their_space_and_the_rest_reads_back_after_a_restart() {
    let mut s = Setup::start(2, &["--entry-log-mib", "4"]);
    let client = s.client().await;
    let spec =
        CreateLedger { ensemble: 2, write_quorum: 2, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false };
    let all = write(&client, &spec, 8, 1200).await;
    let (deleted, kept) = delete_half(&client, all).await;
    // Clean restarts flush the write caches: everything is in entry logs.
    for i in 0..2 {
        s.cluster.terminate_bookie(i).unwrap();
        s.cluster.start_bookie(i).unwrap();
    }
    let before: Vec<u64> = s.cluster.bookies.iter().map(|b| entry_log_bytes(&b.data)).collect();
    for i in 0..2 {
        let r = s.run_gc(i, true).await.unwrap();
        assert_eq!(r.ledgers_deleted, 4, "bookie {i}: {r:?}");
        assert_eq!(r.ledgers_unconfirmed, 0, "{r:?}");
        assert!(r.deletion_skipped.is_empty(), "{r:?}");
        assert!(r.entry_logs_compacted + r.entry_logs_removed >= 1, "{r:?}");
        assert!(r.bytes_reclaimed > 0, "{r:?}");
        assert_eq!(r.compaction_failures, 0);
        assert_eq!(r.kind, "major");
    }
    for i in 0..2 {
        s.cluster.terminate_bookie(i).unwrap();
        s.cluster.start_bookie(i).unwrap();
    }
    let client = s.client().await;
    reads_back(&client, &kept).await;
    for id in &deleted {
        for b in ["1", "2"] {
            let r = client.bookies().read(b, *id, 0, false, Duration::from_secs(5)).await;
            assert_eq!(r.err().and_then(|e| e.code()), Some(ErrorCode::NoSuchLedger), "ledger {id} on bookie {b}");
        }
    }
    for (i, b) in s.cluster.bookies.iter().enumerate() {
        let after = entry_log_bytes(&b.data);
        assert!(
            after * 10 < before[i] * 7,
            "bookie {i}: half deleted, yet {} bytes of entry logs became {after}",
            before[i]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_killed_at_any_step_of_gc_loses_no_live_entry_and_leaves_no_dangling_index_entry() {
    // 16 MiB logs half live hold 8 MiB of live entries: compaction switches
    // the index in 4 MiB steps, so "compaction.switched" stops it with part
    // of a log's runs moved and part not.
    let mut s = Setup::start(1, &["--entry-log-mib", "16"]);
    let spec =
        CreateLedger { ensemble: 1, write_quorum: 1, ack_quorum: 1, custom: BTreeMap::new(), visible_acks: false };
    let mut kept = BTreeMap::new();
    for point in ["gc.ledgers_deleted", "compaction.copied", "compaction.switched", "compaction.before_unlink"] {
        let client = s.client().await;
        let (_, k) = delete_half(&client, write(&client, &spec, 8, 4500).await).await;
        kept.extend(k);
        s.cluster.terminate_bookie(0).unwrap();
        s.cluster.bookies[0].env = vec![(quire_storage::failpoint::ENV.to_string(), point.to_string())];
        s.cluster.start_bookie(0).unwrap();
        // The call never gets an answer: the process dies mid-pass (waiting
        // for the call to fail would wait for QUIC's idle timeout).
        let b = &s.cluster.bookies[0];
        let peer = s.rpc().peer(&b.addr, Role::Bookie, Some(&b.id));
        let call = tokio::spawn(async move {
            peer.call_full(v1::RunGcRequest { major: true }, CallOptions::timeout(Duration::from_secs(120))).await
        });
        let status = s.cluster.bookies[0].proc.as_mut().unwrap().wait_exit(Duration::from_secs(60)).unwrap();
        call.abort();
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL at {point}");
        s.cluster.bookies[0].proc = None;
        s.cluster.bookies[0].env.clear();
        s.cluster.start_bookie(0).unwrap();
        let client = s.client().await;
        reads_back(&client, &kept).await;
        // The interrupted pass is finished by the next one.
        let r = s.run_gc(0, true).await.unwrap();
        assert_eq!(r.compaction_failures, 0, "after {point}: {r:?}");
        reads_back(&client, &kept).await;
    }
    // Offline: every index run reads back intact.
    s.cluster.terminate_bookie(0).unwrap();
    let data = s.cluster.bookies[0].data.clone();
    let store = quire_storage::Store::open(quire_storage::StoreConfig::new(data.join("journal"), data.join("ledgers")))
        .unwrap();
    assert_eq!(store.verify_index().unwrap(), Vec::<String>::new());
    assert_eq!(store.ledger_ids().len(), kept.len(), "exactly the kept ledgers are left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_metadata_service_down_gc_deletes_nothing() {
    let metrics = free_tcp_addr();
    let mut s = Setup::start(1, &["--metrics-listen", &metrics, "--entry-log-mib", "4"]);
    let client = s.client().await;
    let spec =
        CreateLedger { ensemble: 1, write_quorum: 1, ack_quorum: 1, custom: BTreeMap::new(), visible_acks: false };
    let all = write(&client, &spec, 4, 300).await;
    let all_copy = all.clone();
    let (deleted, _) = delete_half(&client, all).await;
    for p in &mut s.cluster.metadata.procs {
        p.kill().unwrap();
    }
    let r = s.run_gc(0, true).await.unwrap();
    assert_eq!(r.ledgers_deleted, 0, "{r:?}");
    assert!(!r.deletion_skipped.is_empty(), "the report says why nothing was deleted: {r:?}");
    // The deleted ledgers' entries are all still on the bookie.
    let b = &s.cluster.bookies[0];
    let peer = s.rpc().peer(&b.addr, Role::Bookie, Some(&b.id));
    for id in &deleted {
        for (e, want) in all_copy[id].iter().enumerate() {
            let got =
                peer.call(v1::ReadEntryRequest { ledger_id: *id, entry_id: e as u64, ..Default::default() }).await;
            assert_eq!(got.unwrap().entry.unwrap().payload, *want, "ledger {id} entry {e}");
        }
    }
    let text = scrape(&metrics);
    assert!(text.contains("quire_bookie_gc_passes_total 1"), "{text}");
    assert!(text.contains("quire_bookie_gc_ledgers_deleted_total 0"), "{text}");
    assert!(text.contains("quire_bookie_entry_log_live_ratio{log=\"00000001\"}"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_closed_ledger_moved_off_a_bookie_are_dropped_there_but_not_during_a_repair() {
    let s = Setup::start(3, &["--entry-log-mib", "4"]);
    let client = s.client().await;
    let spec =
        CreateLedger { ensemble: 2, write_quorum: 2, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false };
    let written = write(&client, &spec, 1, 300).await;
    let (&id, data) = written.iter().next().unwrap();
    let first = data[0].clone();
    let m = client.metadata(id).await.unwrap();
    let from = m.segments[0].members[0].bookie_id.clone();
    let from_i = s.cluster.bookies.iter().position(|b| b.id == from).unwrap();
    // Drain `from` so that re-replication moves its fragment to the third bookie.
    let set = |state: v1::BookieState| v1::SetBookieStateRequest { bookie_id: from.clone(), state: state as i32 };
    client.meta().call(set(v1::BookieState::Decommissioning)).await.unwrap();
    let repair = client
        .rereplicate(id, std::slice::from_ref(&from), &quire_client::shell::throttle::Throttle::new(0), &|| true)
        .await
        .unwrap();
    assert!(repair.failed.is_empty(), "{repair:?}");
    client.meta().call(set(v1::BookieState::Available)).await.unwrap();
    let m = client.metadata(id).await.unwrap();
    assert!(m.segments.iter().all(|g| g.members.iter().all(|x| x.bookie_id != from)), "moved off {from}");

    // While a repair of the ledger holds its lock, the copies stay.
    let lock = client
        .meta()
        .call(v1::AcquireLockRequest {
            name: format!("replicate/{id}"),
            owner: "test".into(),
            lease_ms: 60_000,
            take_over: false,
        })
        .await
        .unwrap()
        .lock
        .unwrap();
    let r = s.run_gc(from_i, false).await.unwrap();
    assert_eq!(r.ledgers_not_here, 0, "{r:?}");
    let kept = client.bookies().read(&from, id, 0, false, Duration::from_secs(5)).await.unwrap();
    assert_eq!(kept.body.entry.map(|e| e.payload), Some(first), "the copy on {from} stays, bytes and all");
    client
        .meta()
        .call(v1::ReleaseLockRequest { name: format!("replicate/{id}"), lock_id: lock.lock_id })
        .await
        .unwrap();

    let r = s.run_gc(from_i, false).await.unwrap();
    assert_eq!((r.ledgers_not_here, r.ledgers_deleted), (1, 0), "{r:?}");
    let gone = client.bookies().read(&from, id, 0, false, Duration::from_secs(5)).await;
    assert_eq!(gone.err().and_then(|e| e.code()), Some(ErrorCode::NoSuchEntry), "entries gone, ledger still known");
    // Its fence stays: the old writer's add is refused there.
    // (The bookie learns that it is no longer draining from its next lease
    // answer; until then it refuses normal adds as read-only, which says
    // nothing about the fence: ask again until it answers on the fence.)
    let b = &s.cluster.bookies[from_i];
    let rpc = s.rpc();
    let zombie = quire_testkit::eventually(Duration::from_secs(20), "the bookie to stop draining", || async {
        let r = rpc
            .peer(&b.addr, Role::Bookie, Some(&b.id))
            .call(v1::AddEntryRequest {
                entry: Some(v1::Entry::sealed(id, 300, 299, payload(id, 300))),
                ..Default::default()
            })
            .await;
        let code = r.err().and_then(|e| e.code());
        (code != Some(ErrorCode::BookieReadOnly)).then_some(code)
    })
    .await
    .unwrap();
    assert_eq!(zombie, Some(ErrorCode::LedgerFenced));
    // The members keep theirs: GC on them drops nothing, and the ledger reads back.
    for (i, b) in s.cluster.bookies.iter().enumerate().filter(|(_, b)| b.id != from) {
        let r = s.run_gc(i, false).await.unwrap();
        assert_eq!(r.ledgers_not_here, 0, "bookie {}: {r:?}", b.id);
    }
    reads_back(&client, &written).await;
}
