//! The ledger protocol end to end, over real processes: 3 metadata replicas,
//! bookies, QUIC with mTLS.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::Setup;
use quire_client::meta::LedgerState;
use quire_client::{ClientError, CreateLedger};

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("entry-{i:05}-{}", "x".repeat((i % 7) as usize * 100)))
}

/// `entries` are exactly entries 0..n, in order, each with the bytes the
/// writer added and an intact checksum: a read-back that compares bytes,
/// not counts.
fn assert_entries(entries: &[quire_proto::v1::Entry], n: u64) {
    assert_eq!(entries.len() as u64, n, "entries read back");
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.entry_id, i as u64);
        assert_eq!(e.payload, payload(i as u64), "entry {i}'s bytes");
        assert!(e.digest_ok(), "entry {i}'s checksum");
    }
}

fn spec(e: usize, w: usize, a: usize) -> CreateLedger {
    CreateLedger { ensemble: e, write_quorum: w, ack_quorum: a, custom: BTreeMap::new(), visible_acks: false }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_is_written_tailed_closed_and_read_back() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let mut custom = BTreeMap::new();
    custom.insert("app".to_string(), Bytes::from_static(b"test"));
    let w = client.create(CreateLedger { custom, ..spec(3, 3, 2) }).await.unwrap();
    let id = w.ledger_id();
    let meta = w.metadata();
    assert_eq!(meta.last_segment().members.len(), 3);
    assert!(meta.last_segment().members.iter().all(|m| !m.instance_id.is_empty()), "instance ids recorded");

    // Pipelined adds: ids in order, each acknowledged.
    let mut pending = Vec::new();
    for i in 0..200 {
        pending.push(w.submit(payload(i)).await.unwrap());
    }
    for (i, p) in pending.into_iter().enumerate() {
        let a = p.await.unwrap();
        assert_eq!(a.entry_id, i as u64);
        assert!(a.lac >= i as i64);
    }
    assert_eq!(w.lac(), 199);

    // A reader of the open ledger: the idle writer publishes its LAC.
    let r = client.open(id).await.unwrap();
    assert_eq!(r.wait_lac(198, Duration::from_secs(5)).await.unwrap(), 199);
    let all = r.read_range(0, 1000, 10_000).await.unwrap();
    assert_eq!(all.len(), 200, "cut at the LAC");
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.payload, payload(i as u64));
        assert!(e.digest_ok());
    }
    assert!(matches!(r.read(200).await, Err(ClientError::NoSuchEntry(_, 200))), "past the LAC");

    // Tailing: a long poll answers when the next entry lands.
    let tail = tokio::spawn({
        let r = client.open(id).await.unwrap();
        async move { r.wait_lac(199, Duration::from_secs(10)).await }
    });
    w.add(payload(200)).await.unwrap();
    assert!(tail.await.unwrap().unwrap() >= 200);

    // Close: sealed at the LAC with the ledger's length.
    let closed = w.close().await.unwrap();
    assert_eq!((closed.state, closed.last_entry_id), (LedgerState::Closed, 200));
    let length: u64 = (0..=200).map(|i| payload(i).len() as u64).sum();
    assert_eq!(closed.length, length);
    assert_eq!(closed.custom.get("app").map(|b| &b[..]), Some(&b"test"[..]));
    match w.add(payload(201)).await {
        Err(ClientError::LedgerClosed(l)) => assert_eq!(l, id, "a closed writer takes no adds"),
        other => panic!("a closed writer takes no adds: {other:?}"),
    }
    let r = client.open(id).await.unwrap();
    assert_eq!(r.read_lac().await.unwrap(), 200);
    assert_eq!(r.read(200).await.unwrap().payload, payload(200));
    // Recovering a closed ledger changes nothing.
    assert_eq!(client.recover(id).await.unwrap().last_entry_id, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    let s = Setup::start(&["r1", "r2"]);
    s.wait_for_bookies(2).await;
    let client = s.client();
    assert!(matches!(client.create(spec(2, 3, 2)).await, Err(ClientError::BadRequest(_))));
    assert!(matches!(client.create(spec(3, 3, 2)).await, Err(ClientError::NotEnoughBookies(_))));
    assert!(matches!(client.open(999_999).await, Err(ClientError::NoSuchLedger(999_999))));
    assert!(matches!(client.recover(999_999).await, Err(ClientError::NoSuchLedger(999_999))));
    let w = client.create(spec(2, 2, 2)).await.unwrap();
    let big = Bytes::from(vec![0u8; client.options().max_entry_bytes + 1]);
    assert!(matches!(w.add(big).await, Err(ClientError::EntryTooLarge(_))));
    w.add(Bytes::from_static(b"ok")).await.unwrap();
    let r = client.open(w.ledger_id()).await.unwrap();
    assert!(matches!(r.read_range(5, 1, 10).await, Err(ClientError::BadRequest(_))));
    client.delete(w.ledger_id()).await.unwrap();
    assert!(matches!(client.open(w.ledger_id()).await, Err(ClientError::NoSuchLedger(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_bookie_is_replaced_and_no_acknowledged_entry_is_lost() {
    let mut s = Setup::start(&["r1", "r2", "r3", "r1"]);
    s.wait_for_bookies(4).await;
    let client = s.client();
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    let id = w.ledger_id();
    for i in 0..50 {
        w.add(payload(i)).await.unwrap();
    }
    // Crash one member of the ensemble; adds go on through an ensemble change.
    let victim = w.metadata().last_segment().members[1].bookie_id.clone();
    let idx = s.cluster.bookies.iter().position(|b| b.id == victim).unwrap();
    s.cluster.kill_bookie(idx).unwrap();
    // Adds go on at Qa = 2 meanwhile; once the victim's add times out it is
    // replaced. Keep writing until the metadata shows the change.
    let killed = std::time::Instant::now();
    let mut next = 50u64;
    while w.metadata().segments.len() < 2 {
        assert!(killed.elapsed() < Duration::from_secs(30), "no ensemble change after the crash");
        let a = w.add(payload(next)).await.unwrap();
        assert_eq!(a.entry_id, next);
        next += 1;
    }
    for _ in 0..20 {
        assert_eq!(w.add(payload(next)).await.unwrap().entry_id, next);
        next += 1;
    }
    let meta = w.metadata();
    assert_eq!(meta.segments.len(), 2, "{meta:?}");
    assert!(meta.last_segment().members.iter().all(|m| m.bookie_id != victim));
    let first_new = meta.last_segment().first_entry_id;
    assert!((50..next - 20).contains(&first_new), "the new ensemble starts after the crash ({first_new})");
    let closed = w.close().await.unwrap();
    assert_eq!(closed.last_entry_id, next as i64 - 1);
    // Every entry reads back with the victim still down.
    let r = client.open(id).await.unwrap();
    let all = r.read_range(0, next, 100_000).await.unwrap();
    assert_eq!(all.iter().map(|e| e.payload.clone()).collect::<Vec<_>>(), (0..next).map(payload).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_fences_the_writer_and_closes_at_the_true_tail() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let writer_client = s.client();
    let w = writer_client.create(spec(3, 3, 2)).await.unwrap();
    let id = w.ledger_id();
    let mut acked = -1i64;
    for i in 0..40 {
        acked = w.add(payload(i)).await.unwrap().entry_id as i64;
    }
    // Another process recovers the ledger while the writer still holds it.
    let other = s.client();
    let recovered = other.recover(id).await.unwrap();
    assert_eq!(recovered.state, LedgerState::Closed);
    assert!(recovered.last_entry_id >= acked, "recovery never truncates below what was acknowledged");
    assert_eq!(recovered.last_entry_id, 39, "nothing past the writer's last add exists");
    let length: u64 = (0..40).map(|i| payload(i).len() as u64).sum();
    assert_eq!(recovered.length, length);
    // The old writer's next add is refused: fenced, never acknowledged.
    match w.add(payload(40)).await {
        Err(ClientError::LedgerFenced(l)) => assert_eq!(l, id),
        other => panic!("expected LedgerFenced, got {other:?}"),
    }
    assert!(matches!(w.close().await, Err(ClientError::LedgerFenced(_))));
    let r = other.open(id).await.unwrap();
    assert_entries(&r.read_range(0, 100, 100).await.unwrap(), 40);
    // Recovery is idempotent.
    assert_eq!(other.recover(id).await.unwrap().last_entry_id, 39);
}

/// Issue #20 item 3: a ledger is the certificate's that created it. Another
/// client may recover it (fence and close it: how a new owner of a log takes
/// it over), but not close it as its writer, change its ensemble or delete
/// it, nor name an owner at creation; the operator may delete it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_is_its_creators_and_another_client_may_only_recover_it() {
    use quire_proto::{v1, Role};
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let owner = s.client();
    let other = s.client_as(Role::Client, "2");
    let w = owner.create(spec(3, 3, 2)).await.unwrap();
    let id = w.ledger_id();
    w.add(payload(0)).await.unwrap();
    let m = other.metadata(id).await.unwrap();
    assert_eq!(m.custom.get("quire.owner"), Some(&Bytes::from_static(b"client/1")));

    let denied = |e: quire_rpc::RpcError| assert_eq!(e.code(), Some(v1::ErrorCode::PermissionDenied), "{e}");
    // A writer's close, by the other client: refused.
    let mut closed = m.to_proto();
    closed.state = v1::LedgerState::Closed as i32;
    closed.last_entry_id = 0;
    let update = |l| v1::UpdateLedgerRequest { ledger: Some(l), expected_version: m.version };
    denied(other.meta().call(update(closed)).await.unwrap_err());
    // An ensemble change of the open ledger: refused.
    let mut moved = m.to_proto();
    moved.ensembles.push(v1::EnsembleSegment { first_entry_id: 1, ..moved.ensembles[0].clone() });
    denied(other.meta().call(update(moved)).await.unwrap_err());
    // A deletion: refused.
    assert!(matches!(other.delete(id).await, Err(ClientError::PermissionDenied(_))));
    // Nor may a creator name an owner.
    let mut forged = spec(3, 3, 2);
    forged.custom.insert("quire.owner".into(), Bytes::from_static(b"client/1"));
    assert!(matches!(other.create(forged).await, Err(ClientError::BadRequest(_))));
    // The owner's writer goes on; then the other recovers it, which fences it.
    w.add(payload(1)).await.unwrap();
    assert_eq!(other.recover(id).await.unwrap().last_entry_id, 1);
    assert!(matches!(w.add(payload(2)).await, Err(ClientError::LedgerFenced(_))));
    // Closed, it is still not the other's to delete; the operator's it is.
    assert!(matches!(other.delete(id).await, Err(ClientError::PermissionDenied(_))));
    s.client_as(Role::Admin, "1").delete(id).await.unwrap();
    assert!(matches!(owner.metadata(id).await, Err(ClientError::NoSuchLedger(_))));
}

/// Seed 004: with too few bookies answering, recovery fails and leaves the
/// ledger in recovery, untouched; once they are back it recovers everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_fails_rather_than_truncate_and_succeeds_once_bookies_return() {
    let mut s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    let id = w.ledger_id();
    for i in 0..25 {
        w.add(payload(i)).await.unwrap();
    }
    // Two of three bookies crash: no write set has Qw-Qa+1 = 2 members left.
    let members: Vec<String> = w.metadata().last_segment().members.iter().map(|m| m.bookie_id.clone()).collect();
    let down: Vec<usize> =
        members[..2].iter().map(|b| s.cluster.bookies.iter().position(|x| &x.id == b).unwrap()).collect();
    for &i in &down {
        s.cluster.kill_bookie(i).unwrap();
    }
    let other = s.client();
    match other.recover(id).await {
        Err(ClientError::RecoveryFailed(l, e)) => {
            assert_eq!(l, id);
            assert!(e.to_string().contains("do not cover"), "{e}");
        }
        res => panic!("recovery with one bookie of three must fail, got {res:?}"),
    }
    let meta = other.metadata(id).await.unwrap();
    assert_eq!((meta.state, meta.last_entry_id), (LedgerState::InRecovery, -1), "left in recovery, untouched");
    // The writer is shut out already: the ledger is in recovery.
    match w.add(payload(25)).await {
        Err(ClientError::LedgerFenced(l)) => assert_eq!(l, id),
        other => panic!("the writer of a ledger in recovery is fenced out: {other:?}"),
    }
    // The bookies come back (same disks): recovery finds every acknowledged entry.
    for &i in &down {
        s.cluster.start_bookie(i).unwrap();
    }
    let closed = other.recover(id).await.unwrap();
    assert_eq!((closed.state, closed.last_entry_id), (LedgerState::Closed, 24));
    let r = other.open(id).await.unwrap();
    assert_entries(&r.read_range(0, 24, 100).await.unwrap(), 25);
}

/// More adds queued at once than the writer takes in one go (256): each is
/// acknowledged, none dropped between two takes (a regression).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_one_take_is_acknowledged_whole() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    for round in 0..3u64 {
        let data: Vec<Bytes> = (0..700u64).map(|e| payload(round * 700 + e)).collect();
        let (first, last) = w.add_batch(data).await.unwrap();
        assert_eq!((first, last), (round * 700, round * 700 + 699));
    }
    let closed = w.close().await.unwrap();
    assert_eq!(closed.last_entry_id, 2099);
}

/// A bookie failed and no other can replace it: the adds it held fail,
/// and the writer still closes the ledger at its LAC, as BookKeeper's
/// handle does on an unrecoverable add error. Every acknowledged entry is
/// in the close, and the missing copies are the auditor's to restore. The
/// close used to fail with NotEnoughBookies and leave the ledger open for
/// a recovery (the replication worker's limbo test met it whenever a copy
/// was still on its way to the bookie it killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_without_a_replacement_for_a_failed_bookie_still_closes_at_its_lac() {
    let mut s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let opts = quire_client::ClientOptions {
        ensemble_change_deadline: Duration::from_secs(1),
        ..s.client().options().clone()
    };
    let rpc = s.rpc(quire_proto::Role::Client);
    let client = quire_client::Client::new(rpc.clone(), s.meta(&rpc), opts);
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    let id = w.ledger_id();
    for i in 0..10 {
        w.add(payload(i)).await.unwrap();
    }
    s.cluster.kill_bookie(1).unwrap();
    // Adds go on at Qa = 2 until the writer notices the dead member (a
    // failed add or a failed copy of an acknowledged one) and finds no
    // replacement: from then on every add fails.
    let killed = std::time::Instant::now();
    let mut acked = 10u64;
    loop {
        assert!(killed.elapsed() < Duration::from_secs(30), "the writer never noticed the dead bookie");
        match w.add(payload(acked)).await {
            Ok(a) => {
                assert_eq!(a.entry_id, acked);
                acked += 1;
            }
            Err(ClientError::NotEnoughBookies(_)) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    match w.add(payload(acked)).await {
        Err(ClientError::NotEnoughBookies(_)) => {}
        other => panic!("a writer that could not go on takes no more adds: {other:?}"),
    }
    let closed = w.close().await.unwrap();
    assert_eq!((closed.state, closed.last_entry_id), (LedgerState::Closed, acked as i64 - 1));
    assert_eq!(closed.segments.len(), 1, "no ensemble change was recorded");
    let r = client.open(id).await.unwrap();
    let all = r.read_range(0, acked + 10, usize::MAX).await.unwrap();
    assert_eq!(all.len() as u64, acked, "cut at the close");
    assert!(all.iter().enumerate().all(|(i, e)| e.payload == payload(i as u64)), "every acknowledged entry reads back");
}

/// Issue #46 item 1: an idle writer's actor sleeps (no task, no timer: a
/// gateway holds 100 000 open ledgers) and wakes for the next message.
/// Adds from several tasks racing its sleep, round after round (the LAC
/// published within milliseconds, so the actor goes to sleep between and
/// during rounds), are each acknowledged once, and the close holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_writer_sleeps_and_wakes_for_every_racing_add() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let rpc = s.rpc(quire_proto::Role::Client);
    let opts = quire_client::ClientOptions {
        add_timeout: Duration::from_secs(2),
        explicit_lac_interval: Duration::from_millis(2),
        ..quire_client::ClientOptions::default()
    };
    let client = quire_client::Client::new(rpc.clone(), s.meta(&rpc), opts);
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    assert!(w.asleep(), "a new writer has nothing to do");
    let mut acked = std::collections::BTreeSet::new();
    let mut slept = 0;
    for round in 0..200u64 {
        if round % 20 == 0 {
            quire_testkit::eventually(Duration::from_secs(10), "the idle writer to sleep", || async {
                w.asleep().then_some(())
            })
            .await
            .unwrap();
            slept += 1;
        }
        let tasks: Vec<_> = (0..4u64)
            .map(|k| {
                let w = w.clone();
                tokio::spawn(async move {
                    for _ in 0..k {
                        tokio::task::yield_now().await;
                    }
                    // Bounded: a writer that slept through an add never answers it.
                    let add = tokio::time::timeout(Duration::from_secs(10), w.add(payload(round * 4 + k)));
                    add.await.expect("an add was never answered: the writer slept through it").unwrap().entry_id
                })
            })
            .collect();
        for t in tasks {
            let id = t.await.unwrap();
            assert!(acked.insert(id), "entry {id} acknowledged twice");
        }
    }
    assert_eq!(slept, 10);
    assert_eq!(acked, (0..800).collect(), "every add acknowledged, ids dense");
    let closed = w.close().await.unwrap();
    assert_eq!(closed.last_entry_id, 799);
    assert!(!w.asleep(), "a closed writer's actor ended: it does not sleep");
}

/// A woken writer runs on the runtime it was made on, not the caller's: an
/// add from a short-lived runtime (an HTTP worker's, say) must not take the
/// writer with it when that runtime ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_woken_from_another_runtime_outlives_it() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create(spec(3, 3, 2)).await.unwrap();
    let other = w.clone();
    let first = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let added = rt.block_on(other.add(payload(0))).unwrap();
        drop(rt);
        added.entry_id
    })
    .await
    .unwrap();
    assert_eq!(first, 0);
    let next = tokio::time::timeout(Duration::from_secs(10), w.add(payload(1)))
        .await
        .expect("the add was answered")
        .expect("the writer outlived the caller's runtime");
    assert_eq!(next.entry_id, 1);
    assert_eq!(w.close().await.unwrap().last_entry_id, 1);
}

/// Every add a bookie acknowledged counts in its add latency
/// (`quire_bookie_add_seconds`), also the first adds of a ledger it did not
/// know yet, which it checks with the metadata service before storing.
/// Those went uncounted, and so did every add that reached a bookie while
/// its first check was under way: a Prometheus test that waited for the
/// metric on every bookie failed once under load, one bookie's check
/// having outlasted the test's twenty appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_add_counts_in_the_bookies_add_latency_also_a_new_ledgers_first() {
    let s = Setup::start_with_metrics(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let w = s.client().create(spec(3, 3, 2)).await.unwrap();
    w.add(payload(0)).await.unwrap();
    let bookies: Vec<String> =
        s.cluster.metrics.lock().unwrap().iter().filter(|(role, _)| role == "bookie").map(|(_, a)| a.clone()).collect();
    assert_eq!(bookies.len(), 3);
    let count = |addr: &String| -> u64 {
        quire_testkit::scrape(addr)
            .lines()
            .find_map(|l| l.strip_prefix("quire_bookie_add_seconds_count ").map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("quire_bookie_add_seconds_count not in the metrics of {addr}"))
    };
    // The third copy may land after the add was answered (at two of three).
    let counted = quire_testkit::eventually(Duration::from_secs(20), "the add counted on every bookie", || async {
        bookies.iter().all(|b| count(b) == 1).then_some(())
    })
    .await;
    if let Err(e) = counted {
        let counts: Vec<u64> = bookies.iter().map(count).collect();
        panic!("{e}: counts {counts:?}");
    }
}
