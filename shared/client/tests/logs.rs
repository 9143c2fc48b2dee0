//! Logs over chains of ledgers (issue #23) end to end, over real processes:
//! 3 metadata replicas, 3 bookies, QUIC with mTLS.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::Setup;
use quire_client::ClientError;
use quire_log::{LogConfig, Retention, Rollover};

fn config(max_entries: u64) -> LogConfig {
    LogConfig {
        ensemble_size: 3,
        write_quorum: 3,
        ack_quorum: 2,
        rollover: Rollover { max_entries, max_bytes: 0, max_age_ms: 0 },
        retention: Retention::default(),
    }
}

/// `n` records of `name` from `from`, waiting for each to be committed
/// where the LAC a reader sees trails the writer's.
async fn read(client: &quire_client::Client, name: &str, from: u64, n: usize) -> Vec<quire_client::LogEntry> {
    let mut out: Vec<quire_client::LogEntry> = Vec::new();
    while out.len() < n {
        let next = from + out.len() as u64;
        let got = client.read_log_wait(name, next, n - out.len(), Duration::from_secs(10)).await.unwrap();
        assert!(!got.is_empty(), "offset {next} of {name} not committed within 10 s");
        out.extend(got);
    }
    out
}

fn record(i: u64) -> Bytes {
    Bytes::from(format!("record-{i:04}"))
}

/// Appends kept in flight from one task (`submit`): each is given its
/// offset as it is placed, in order, across rollovers; each resolves to
/// that offset; what a fenced writer had in flight or submits after a
/// takeover is never acknowledged (LogFenced), and the log holds exactly
/// what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_in_flight_from_one_task_keep_their_order_across_rollovers() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("window", config(4), "owner-a").await.unwrap();
    let mut pending = std::collections::VecDeque::new();
    let mut offsets = Vec::new();
    for i in 0..30u64 {
        let p = w.submit(record(i)).await.unwrap();
        assert_eq!(p.offset(), i, "placed in order");
        pending.push_back(p);
        if pending.len() == 8 {
            offsets.push(pending.pop_front().unwrap().await.unwrap());
        }
    }
    for p in pending {
        offsets.push(p.await.unwrap());
    }
    assert_eq!(offsets, (0..30).collect::<Vec<_>>());
    assert_eq!(w.committed(), 30);
    let ends: Vec<Option<u64>> =
        client.log_meta("window").await.unwrap().record.segments.iter().map(|s| s.end_offset).collect();
    assert_eq!(ends[..7], [Some(4), Some(8), Some(12), Some(16), Some(20), Some(24), Some(28)], "{ends:?}");
    assert!(read(&client, "window", 0, 30).await.iter().all(|e| e.payload == record(e.offset)));
    // Too large is refused without stopping the writer.
    let big = Bytes::from(vec![0u8; client.options().max_entry_bytes]);
    assert!(matches!(w.submit(big).await, Err(ClientError::EntryTooLarge(_))));
    let in_flight = w.submit(record(30)).await.unwrap();
    let b = client.open_log_writer("window", "owner-b").await.unwrap();
    let late = w.submit(record(99)).await;
    let resolved = in_flight.await;
    // Refused at once (the writer knows it stopped), or placed and then
    // refused by the fenced ledger: never acknowledged.
    let late = match late {
        Ok(p) => p.await,
        Err(e) => Err(e),
    };
    assert!(matches!(late, Err(ClientError::LogFenced(_))), "{late:?}");
    // The one in flight at the takeover is either acknowledged (kept by
    // the recovery) or refused; the new owner's records follow what was kept.
    let next = b.append(record(100)).await.unwrap();
    match resolved {
        Ok(o) => assert_eq!((o, next), (30, 31)),
        Err(e) => assert!(matches!(e, ClientError::LogFenced(_)) && next >= 30, "{e:?} {next}"),
    }
    assert!(read(&client, "window", 0, next as usize + 1).await.iter().all(|e| e.payload != record(99)));
}

/// A log's ownership lock (`log/<name>`) is taken, free or from its
/// holder, only by an identity that may change the log: another
/// certificate can neither squat it nor take it from the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_who_may_change_a_log_takes_its_lock() {
    use quire_proto::v1;
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    client.create_log("guarded", config(10), "owner").await.unwrap();
    let intruder = s.client_as(quire_proto::Role::Client, "intruder");
    let lock = |take_over| v1::AcquireLockRequest {
        name: "log/guarded".into(),
        owner: String::new(),
        lease_ms: 10_000,
        take_over,
    };
    for take_over in [false, true] {
        let e = intruder.meta().call(lock(take_over)).await.unwrap_err();
        assert_eq!(e.code(), Some(v1::ErrorCode::PermissionDenied), "take_over {take_over}: {e}");
    }
    let held = client.meta().call(lock(false)).await.unwrap().lock.unwrap();
    assert!(held.owner.starts_with("client/1"), "{held:?}");
    let e = intruder.meta().call(lock(true)).await.unwrap_err();
    assert_eq!(e.code(), Some(v1::ErrorCode::PermissionDenied), "{e}");
    let renew = v1::RenewLockRequest { name: "log/guarded".into(), lock_id: held.lock_id };
    client.meta().call(renew).await.expect("still the creator's grant");
}

/// Offsets run on densely across rollovers; a read crosses ledger
/// boundaries; a trim deletes the ledgers wholly below it and answers
/// Trimmed below it; deleting the log deletes its ledgers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_rolls_over_reads_across_ledgers_and_trims_whole_ledgers() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("orders", config(10), "test-a").await.unwrap();
    let mut offsets = Vec::new();
    // Batches of 5: a rollover comes between batches (a batch lies in one
    // ledger), so the ledgers of 10 each end at one.
    for chunk in (0..35u64).collect::<Vec<_>>().chunks(5) {
        offsets.extend(w.append_batch(chunk.iter().map(|i| record(*i)).collect(), None).await.unwrap());
    }
    assert_eq!(offsets, (0..35).collect::<Vec<_>>(), "dense offsets from 0");
    let meta = client.log_meta("orders").await.unwrap();
    let ends: Vec<Option<u64>> = meta.record.segments.iter().map(|s| s.end_offset).collect();
    assert_eq!(ends, vec![Some(10), Some(20), Some(30), None], "rolled every 10 records");
    for s in &meta.record.segments[..3] {
        let l = client.metadata(s.ledger_id).await.unwrap();
        assert_eq!(l.last_entry_id, 9, "ledger {} closed at its segment's end", s.ledger_id);
    }

    let all = read(&client, "orders", 0, 35).await;
    assert_eq!(all.iter().map(|e| e.offset).collect::<Vec<_>>(), offsets);
    assert!(all.iter().all(|e| e.payload == record(e.offset) && e.produced.is_none()));
    let mid = client.read_log("orders", 8, 5).await.unwrap();
    assert_eq!(mid.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![8, 9, 10, 11, 12], "across a boundary");
    assert!(client.read_log("orders", 35, 10).await.unwrap().is_empty(), "nothing past the end");
    // A follower at the tail is answered when the next record lands.
    let follower = tokio::spawn({
        let client = client.clone();
        async move { client.read_log_wait("orders", 35, 10, Duration::from_secs(20)).await }
    });

    let dropped: Vec<u64> = meta.record.segments[..2].iter().map(|s| s.ledger_id).collect();
    let trimmed = client.trim_log("orders", 20).await.unwrap();
    assert_eq!(trimmed.record.trim_before, 20);
    for id in &dropped {
        assert!(matches!(client.metadata(*id).await, Err(ClientError::NoSuchLedger(_))), "ledger {id} deleted");
    }
    assert!(matches!(
        client.read_log("orders", 19, 5).await,
        Err(ClientError::Trimmed { trim_before: 20, offset: 19, .. })
    ));
    assert_eq!(client.read_log("orders", 20, 1).await.unwrap()[0].payload, record(20));
    assert!(client.trim_log("orders", 40).await.is_err(), "not past the fixed end");
    // The writer goes on after the trim (its rollover builds on the trimmed record).
    assert_eq!(w.append(record(35)).await.unwrap(), 35);
    let followed = follower.await.unwrap().unwrap();
    assert_eq!(followed[0].offset, 35);
    assert_eq!(followed[0].payload, record(35));
    // Across a rollover too: 36..40 fill the open ledger, 40 is the next one's first.
    let follower = tokio::spawn({
        let client = client.clone();
        async move { read(&client, "orders", 36, 5).await }
    });
    for i in 36..41 {
        assert_eq!(w.append(record(i)).await.unwrap(), i);
    }
    let followed = follower.await.unwrap();
    assert_eq!(followed.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![36, 37, 38, 39, 40]);

    let left: Vec<u64> = client.log_meta("orders").await.unwrap().record.segments.iter().map(|s| s.ledger_id).collect();
    client.delete_log("orders").await.unwrap();
    assert!(matches!(client.log_meta("orders").await, Err(ClientError::NoSuchLog(_))));
    // Its writer was fenced by the deletion: nothing is acknowledged into a
    // deleted ledger (a review found a live writer kept acknowledging).
    assert!(matches!(w.append(record(99)).await, Err(ClientError::LogFenced(_))));
    for id in left {
        assert!(matches!(client.metadata(id).await, Err(ClientError::NoSuchLedger(_))), "ledger {id} deleted");
    }
    assert!(matches!(client.create_log("bad/name", config(10), "x").await, Err(ClientError::BadRequest(_))));
}

/// A takeover fences the earlier owner (its next append fails with
/// LogFenced, never lands in the log), keeps every acknowledged record at
/// its offset, and the new owner's records follow them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_fences_the_earlier_owner_and_keeps_every_acknowledged_record() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let a = client.create_log("events", config(4), "owner-a").await.unwrap();
    for i in 0..6 {
        assert_eq!(a.append(record(i)).await.unwrap(), i);
    }
    // The first writer made its next ledger ahead of a rollover it will never do.
    let premade = made_ahead(&client, "events").await;
    let b = client.open_log_writer("events", "owner-b").await.unwrap();
    let meta = b.metadata().await;
    assert_eq!((meta.record.epoch, meta.record.owner.as_str()), (2, "owner-b"));
    assert!(matches!(a.append(record(99)).await, Err(ClientError::LogFenced(_))), "the earlier owner is fenced");
    assert!(matches!(a.append(record(99)).await, Err(ClientError::LogFenced(_))), "and stays so");
    assert_eq!(b.append(record(6)).await.unwrap(), 6);
    let all = read(&client, "events", 0, 7).await;
    assert!(client.read_log("events", 7, 10).await.unwrap().is_empty());
    assert!(all.iter().all(|e| e.payload == record(e.offset)), "nothing of the fenced append");
    // A third owner takes over from the second.
    let c = client.open_log_writer("events", "owner-c").await.unwrap();
    assert!(matches!(b.append(record(99)).await, Err(ClientError::LogFenced(_))));
    assert_eq!(c.append(record(7)).await.unwrap(), 7);
    assert_eq!(read(&client, "events", 0, 8).await.len(), 8);
    assert!(client.read_log("events", 8, 10).await.unwrap().is_empty());
    // What the fenced writers made ahead is swept after the takeovers: the
    // only unlisted ledger left is the live writer's next, newer than any
    // the log lists.
    let newest = c.metadata().await.record.segments.iter().map(|s| s.ledger_id).max().unwrap();
    let left = quire_testkit::eventually(Duration::from_secs(10), "the fenced writers' ledgers swept", || async {
        let left = unlisted(&client, "events").await;
        left.iter().all(|id| *id > newest).then_some(left)
    })
    .await
    .unwrap();
    assert!(premade < newest && !left.contains(&premade), "{premade} swept, {left:?} left");
    assert!(matches!(client.metadata(premade).await, Err(ClientError::NoSuchLedger(_))));
    assert_eq!(c.append(record(8)).await.unwrap(), 8, "the live writer goes on");
}

/// Deleting a log deletes the ledger its writer made ahead of a rollover
/// (newer than any the log lists, so no takeover's sweep takes it), with
/// the ones it lists; a log made again under the name starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_log_deletes_the_ledger_its_writer_made_ahead() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let a = client.create_log("orders", config(4), "owner-a").await.unwrap();
    assert_eq!(a.append(record(0)).await.unwrap(), 0);
    let premade = made_ahead(&client, "orders").await;
    let listed = a.metadata().await.record.segments[0].ledger_id;
    assert!(premade > listed);
    client.delete_log("orders").await.unwrap();
    for id in [listed, premade] {
        assert!(matches!(client.metadata(id).await, Err(ClientError::NoSuchLedger(_))), "ledger {id} deleted");
    }
    let again = client.create_log("orders", config(4), "owner-b").await.unwrap();
    assert_eq!(again.append(record(0)).await.unwrap(), 0);
}

/// Issue #47 item 1, read your writes: a read that begins after an append
/// was answered returns it, from another client (another process's view:
/// its own connections and metadata), for single appends and batches,
/// one at a time and with a window of appends in flight, across
/// rollovers. (Before, a read right after an append stopped at the LAC the
/// bookies knew, which trails the writer until its next add or its
/// explicit LAC 100 ms later.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_append_is_read_at_once_by_any_reader() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let reader = s.client();
    let w = client.create_log("ryw", config(7), "owner-a").await.unwrap();
    let mut next = 0u64;
    // One at a time: each read right after its append.
    for _ in 0..20 {
        let offset = w.append(record(next)).await.unwrap();
        assert_eq!(offset, next);
        let got = reader.read_log("ryw", offset, 10).await.unwrap();
        assert_eq!(got.first().map(|e| (e.offset, e.payload.clone())), Some((offset, record(next))), "offset {offset}");
        next += 1;
    }
    // Batches: every record of the batch.
    for _ in 0..5 {
        let batch: Vec<Bytes> = (next..next + 4).map(record).collect();
        let offsets = w.append_batch(batch, None).await.unwrap();
        let got = reader.read_log("ryw", offsets[0], 10).await.unwrap();
        assert_eq!(got.len(), 4, "the whole batch at {}", offsets[0]);
        next += 4;
    }
    // Under load: a window of 32 appends in flight from one task; as each
    // resolves, a read from its offset returns it.
    let mut pending = std::collections::VecDeque::new();
    for i in 0..300u64 {
        pending.push_back(w.submit(record(next + i)).await.unwrap());
        let drain = if i == 299 { pending.len() } else { pending.len().saturating_sub(31) };
        for _ in 0..drain {
            let offset = pending.pop_front().unwrap().await.unwrap();
            let got = reader.read_log("ryw", offset, 1).await.unwrap();
            assert_eq!(got.first().map(|e| e.offset), Some(offset), "offset {offset} under load");
        }
    }
}

/// Issue #47 item 2, conditional appends: written only at the expected
/// offset, else PreconditionFailed with the next offset and nothing
/// written; a retry of a conditional idempotent append that was written
/// answers its offset; racing appends expecting one offset, and owners on
/// either side of a takeover, never both succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_append_is_written_only_where_it_expects() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let a = client.create_log("cas", config(3), "owner-a").await.unwrap();
    assert_eq!(a.append_at(record(0), 0).await.unwrap(), 0);
    let refused = a.append_at(record(99), 0).await;
    assert!(
        matches!(refused, Err(ClientError::PreconditionFailed { expected_offset: 0, next_offset: 1, .. })),
        "{refused:?}"
    );
    assert_eq!(a.append_batch_at(vec![record(1), record(2)], None, Some(1)).await.unwrap(), vec![1, 2]);
    let p = Some(("p", 7));
    assert_eq!(a.append_batch_at(vec![record(3)], p, Some(3)).await.unwrap(), vec![3]);
    assert_eq!(a.append_batch_at(vec![record(3)], p, Some(3)).await.unwrap(), vec![3], "a retry, not a refusal");
    // Eight appends racing for offset 4 from one writer: one is written.
    let racing: Vec<_> = (0..8)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move { a.append_at(Bytes::from(format!("racer-{i}")), 4).await })
        })
        .collect();
    let mut won = Vec::new();
    for r in racing {
        match r.await.unwrap() {
            Ok(o) => won.push(o),
            Err(ClientError::PreconditionFailed { next_offset: 5, .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won, vec![4], "exactly one racer is written");
    // Across a takeover: the new owner's next offset is the recovered end;
    // the old owner's conditional append is fenced.
    let b = client.open_log_writer("cas", "owner-b").await.unwrap();
    assert!(matches!(a.append_at(record(5), 5).await, Err(ClientError::LogFenced(_))));
    assert!(matches!(b.append_at(record(5), 4).await, Err(ClientError::PreconditionFailed { next_offset: 5, .. })));
    assert_eq!(b.append_at(record(5), 5).await.unwrap(), 5);
    let all = client.read_log("cas", 0, 100).await.unwrap();
    assert_eq!(
        all.iter().map(|e| e.offset).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>(),
        "nothing refused was written"
    );
    assert_eq!(all[5].payload, record(5));
}

/// Issue #47, hole 1: a delete that read the log, then recovered the open
/// ledger it saw, after the writer had rolled to its next one. The delete
/// as it was sent (no version) is refused while the log's open ledger is
/// open: it used to delete the log under the writer, whose appends the
/// bookies went on acknowledging. `delete_log` fences what is there and
/// deletes it; the writer's next append fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_a_rollover_leaves_no_writer_unfenced() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("racing", config(2), "owner-a").await.unwrap();
    assert_eq!(w.append(record(0)).await.unwrap(), 0);
    // The deleter reads the record: ledger 1 open.
    let seen = client.log_meta("racing").await.unwrap();
    let first = seen.record.open_segment().unwrap().ledger_id;
    // The writer rolls (its third record goes to the next ledger).
    for i in 1..3 {
        assert_eq!(w.append(record(i)).await.unwrap(), i);
    }
    let now = w.metadata().await;
    let second = now.record.open_segment().unwrap().ledger_id;
    assert_ne!(first, second, "rolled");
    // The deleter recovers the ledger it saw (closed already: nothing to
    // fence), then deletes as it used to, with no version.
    client.recover(first).await.unwrap();
    let req = quire_proto::v1::DeleteLogRequest { name: "racing".into(), ..Default::default() };
    let refused = client.meta().call(req).await;
    assert!(refused.is_err(), "deleted under a writer nobody fenced");
    assert_eq!(w.append(record(3)).await.unwrap(), 3, "the writer goes on: the log is still there");
    // The delete as it is now: fences the open ledger, then deletes.
    client.delete_log("racing").await.unwrap();
    assert!(w.append(record(4)).await.is_err(), "the writer of a deleted log is fenced");
    assert!(matches!(client.log_meta("racing").await, Err(ClientError::NoSuchLog(_))));
    assert!(matches!(client.metadata(second).await, Err(ClientError::NoSuchLedger(_))));
}

/// The ledger log `name`'s writer made ahead of its next rollover, once
/// made.
async fn made_ahead(client: &quire_client::Client, name: &str) -> u64 {
    quire_testkit::eventually(Duration::from_secs(10), "the writer's next ledger", || async {
        unlisted(client, name).await.into_iter().next()
    })
    .await
    .unwrap()
}

/// The open ledgers made for log `name` that it does not list.
async fn unlisted(client: &quire_client::Client, name: &str) -> Vec<u64> {
    let listed: Vec<u64> = client.log_meta(name).await.unwrap().record.segments.iter().map(|s| s.ledger_id).collect();
    let mut out = Vec::new();
    for id in client.list_all().await.unwrap() {
        let Ok(m) = client.metadata(id).await else { continue };
        let ours = m.custom.get("log").is_some_and(|v| v.as_ref() == name.as_bytes());
        if ours && m.state == quire_client::meta::LedgerState::Open && !listed.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// An idempotent append retried answers its first offset, from the writer
/// that wrote it and from a new owner after a takeover (the table rebuilt
/// from the records); a retry older than the window is refused, not
/// written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_idempotent_append_answers_its_first_offset_across_a_takeover() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let a = client.create_log("payments", config(5), "owner-a").await.unwrap();
    assert_eq!(a.append(record(0)).await.unwrap(), 0);
    assert_eq!(a.append_idempotent(record(1), "p", 0).await.unwrap(), 1);
    assert_eq!(a.append_idempotent(record(1), "p", 0).await.unwrap(), 1, "a retry");
    assert_eq!(a.append_batch(vec![record(2), record(3), record(4)], Some(("p", 1))).await.unwrap(), vec![2, 3, 4]);
    // (A rollover after offset 4, and 5..7 in the next ledger.)
    assert_eq!(a.append_batch(vec![record(5), record(6)], Some(("p", 4))).await.unwrap(), vec![5, 6]);
    assert_eq!(a.append_idempotent(record(7), "q", 100).await.unwrap(), 7);
    // The writer stops (a crash): the new owner rebuilds from the records.
    drop(a);
    let b = client.open_log_writer("payments", "owner-b").await.unwrap();
    assert_eq!(b.append_batch(vec![record(2), record(3)], Some(("p", 1))).await.unwrap(), vec![2, 3]);
    assert_eq!(b.append_idempotent(record(6), "p", 5).await.unwrap(), 6);
    assert_eq!(b.append_idempotent(record(7), "q", 100).await.unwrap(), 7);
    assert_eq!(b.append_idempotent(record(8), "p", 6).await.unwrap(), 8, "the next sequence is new");
    for seq in 7..30 {
        b.append_idempotent(Bytes::from_static(b"more"), "p", seq).await.unwrap();
    }
    assert!(matches!(
        b.append_idempotent(record(1), "p", 0).await,
        Err(ClientError::SequenceTooOld { sequence: 0, last_sequence: 29, .. })
    ));
    let all = read(&client, "payments", 0, 9 + 23).await;
    assert!(client.read_log("payments", 9 + 23, 10).await.unwrap().is_empty(), "no record written twice");
    assert_eq!(all[1].produced, Some(("p".to_string(), 0)));
}

/// An append its ledger never took (the ensemble change that would have
/// placed it failed: no bookie to replace a lost one), with a rollover due
/// behind it: every offset acknowledged reads back as its own record after
/// a takeover, none twice. (A review found offsets drifting by such an
/// append when the rollover's close succeeds and the next ledger takes
/// writes; here the next ledger is on the lost bookie too, so this run
/// meets the refusal and the rollover, not that exact interleaving: the
/// writer's check of the sealed end against the appends it gave covers it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_the_ledger_refused_moves_no_later_offset() {
    let mut s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("strict", LogConfig { ack_quorum: 3, ..config(3) }, "owner-a").await.unwrap();
    assert_eq!(w.append(record(0)).await.unwrap(), 0);
    assert_eq!(w.append(record(1)).await.unwrap(), 1);
    // Qa = 3 of 3 bookies, one gone and no spare: the next add cannot be acknowledged.
    s.cluster.kill_bookie(2).unwrap();
    let refused = tokio::spawn({
        let w = w.clone();
        async move { w.append(record(2)).await }
    });
    // The third append makes the segment due: its rollover comes while the
    // one before is still pending (or after it failed).
    let after = w.append(record(3)).await;
    let refused = refused.await.unwrap();
    let mut acked: Vec<(u64, u64)> = vec![(0, 0), (1, 1)];
    if let Ok(o) = refused {
        acked.push((o, 2));
    }
    if let Ok(o) = after {
        acked.push((o, 3));
    }
    s.cluster.start_bookie(2).unwrap();
    s.wait_for_bookies(3).await;
    // The restarted bookie may refuse recovery's write-back for a while (it
    // checks its own copies after the crash): recovery fails without
    // changing anything, and is asked again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let b = loop {
        match client.open_log_writer("strict", "owner-b").await {
            Ok(b) => break b,
            Err(e @ ClientError::RecoveryFailed(..)) if tokio::time::Instant::now() < deadline => {
                eprintln!("takeover: {e}; again");
            }
            Err(e) => panic!("takeover: {e}"),
        }
    };
    let end = b.metadata().await.record.fixed_end();
    let all = read(&client, "strict", 0, end as usize).await;
    for (offset, i) in &acked {
        assert_eq!(all[*offset as usize].payload, record(*i), "acknowledged offset {offset} holds record {i}");
    }
    let offsets: Vec<u64> = acked.iter().map(|(o, _)| *o).collect();
    let mut unique = offsets.clone();
    unique.dedup();
    assert_eq!(unique.len(), offsets.len(), "no offset acknowledged twice: {offsets:?}");
}

/// Durable cursors: created at the start, the end or an offset; a reader
/// at a cursor reads on from it; acknowledgements are written by CAS, at
/// most once per interval (flush writes now); a holding cursor stops a
/// trim past it; seek moves it back; it goes when deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_remembers_where_its_reader_stands_and_holds_retention() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("feed", config(4), "owner").await.unwrap();
    for i in 0..10 {
        assert_eq!(w.append(record(i)).await.unwrap(), i);
    }
    read(&client, "feed", 0, 10).await;
    let c = client.create_cursor("feed", "billing", quire_client::CursorStart::Start, true).await.unwrap();
    assert_eq!((c.position, c.version), (0, 1));
    let end = client.create_cursor("feed", "live", quire_client::CursorStart::End, false).await.unwrap();
    assert_eq!(end.position, 10, "one past the last record committed");
    assert!(client.create_cursor("feed", "billing", quire_client::CursorStart::Start, true).await.is_err(), "exists");

    let cursor = quire_client::LogCursor::open(&client, "feed", "billing", Duration::from_secs(3600)).await.unwrap();
    let got = cursor.next(3, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![0, 1, 2]);
    cursor.ack(3).await.unwrap();
    assert_eq!(client.cursor("feed", "billing").await.unwrap().position, 3, "the first ack is written");
    let got = cursor.next(3, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got[0].offset, 3, "reads on from where it stood");
    cursor.ack(6).await.unwrap();
    assert_eq!(client.cursor("feed", "billing").await.unwrap().position, 3, "held back by the interval");
    assert_eq!(cursor.flush().await.unwrap().position, 6);
    // A reopened cursor (a reader restarted) starts at the written position.
    let again = quire_client::LogCursor::open(&client, "feed", "billing", Duration::ZERO).await.unwrap();
    assert_eq!(again.next(1, Duration::from_secs(5)).await.unwrap()[0].offset, 6);

    // Nothing stands past the log's end (10): not an ack, a seek or a new cursor.
    for (what, got) in [
        ("an ack", client.move_cursor("feed", "live", 11, false).await),
        ("a seek", client.move_cursor("feed", "live", 1 << 40, true).await),
        ("a creation", client.create_cursor("feed", "ahead", quire_client::CursorStart::At(11), false).await),
    ] {
        assert!(matches!(&got, Err(ClientError::BadRequest(m)) if m.contains("past the log's end")), "{what}: {got:?}");
    }
    assert_eq!(client.move_cursor("feed", "live", 10, true).await.unwrap().position, 10, "the end itself is fine");

    // Two flushes at once from one reader: the second is not taken for
    // someone else's move (the reader does not rewind).
    let twice = quire_client::LogCursor::open(&client, "feed", "billing", Duration::from_secs(3600)).await.unwrap();
    assert_eq!(twice.next(3, Duration::from_secs(5)).await.unwrap().last().unwrap().offset, 8);
    twice.ack(7).await.unwrap(); // written: the first
    twice.ack(8).await.unwrap(); // held back by the interval
    let (a, b) = tokio::join!(twice.flush(), twice.flush());
    assert_eq!((a.unwrap().position, b.unwrap().position), (8, 8));
    assert_eq!((twice.read_at(), twice.acked()), (9, 8), "not rewound to its own write");
    assert_eq!(client.move_cursor("feed", "billing", 6, true).await.unwrap().position, 6);

    // An ack past what the reader read is refused.
    assert!(matches!(again.ack(9).await, Err(ClientError::BadRequest(_))), "acks only what it read");
    // A seek back (someone wants records 6.. again) is not undone by a
    // reader that still acknowledges from before it: its flush adopts it.
    let got = again.next(3, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.last().unwrap().offset, 9);
    let reader = quire_client::LogCursor::open(&client, "feed", "billing", Duration::from_secs(3600)).await.unwrap();
    reader.next(3, Duration::from_secs(5)).await.unwrap();
    reader.ack(9).await.unwrap();
    assert_eq!(reader.flush().await.unwrap().position, 9);
    assert_eq!(client.move_cursor("feed", "billing", 7, true).await.unwrap().position, 7, "an operator seeks back");
    again.ack(9).await.unwrap();
    let after = again.flush().await.unwrap();
    assert_eq!(after.position, 7, "the stale reader's flush left the seek standing");
    assert_eq!(client.cursor("feed", "billing").await.unwrap().position, 7);
    assert_eq!(again.next(1, Duration::from_secs(5)).await.unwrap()[0].offset, 7, "and it reads on from the seek");
    assert_eq!(client.move_cursor("feed", "billing", 6, true).await.unwrap().position, 6);

    // The holding cursor at 6 stops a trim to 8; the one that holds nothing does not count.
    assert!(matches!(client.trim_log("feed", 8).await, Err(ClientError::BadRequest(m)) if m.contains("billing")));
    assert_eq!(client.trim_log("feed", 4).await.unwrap().record.trim_before, 4);
    assert!(client.move_cursor("feed", "billing", 2, true).await.is_err(), "not below the trim point");
    assert_eq!(client.move_cursor("feed", "billing", 5, true).await.unwrap().position, 5, "a seek moves it back");
    assert_eq!(client.move_cursor("feed", "billing", 4, false).await.unwrap().position, 5, "an ack never does");
    client.delete_cursor("feed", "billing").await.unwrap();
    assert!(matches!(client.cursor("feed", "billing").await, Err(ClientError::NoSuchCursor { .. })));
    assert_eq!(client.trim_log("feed", 8).await.unwrap().record.trim_before, 8, "nothing holds it now");
    assert_eq!(client.cursors("feed").await.unwrap().len(), 1);
}

/// Retention without an operator: the active auditor trims whole ledgers
/// past a log's age limit, never the open one, and never past the slowest
/// cursor that holds retention (it waits for the cursor to move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auditor_trims_old_ledgers_but_not_past_a_holding_cursor() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let c = LogConfig { retention: Retention { max_age_ms: 1, max_bytes: 0 }, ..config(3) };
    let w = client.create_log("aged", c, "owner").await.unwrap();
    for i in 0..10 {
        w.append(record(i)).await.unwrap();
    }
    // Ledgers 0..3, 3..6, 6..9 sealed; 9.. open. A cursor at 4 holds them from 3 on.
    client.create_cursor("aged", "slow", quire_client::CursorStart::At(4), true).await.unwrap();
    let _auditor = s.cluster.start_service("quire-auditor", "1", &["--audit-interval-ms", "200"]).unwrap();
    let trimmed_to = |at: u64| {
        let client = client.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let m = client.log_meta("aged").await.unwrap();
                if m.record.trim_before >= at || tokio::time::Instant::now() > deadline {
                    return m;
                }
                // The auditor's next pass, seen as the record's next version.
                let req = quire_proto::v1::WatchLogRequest {
                    name: "aged".into(),
                    after_version: m.version,
                    timeout_ms: 2000,
                };
                let _ = client.meta().call_waiting(req, Duration::from_secs(3)).await;
            }
        }
    };
    let m = trimmed_to(4).await;
    assert_eq!(m.record.trim_before, 4, "to the holding cursor, not past it");
    assert_eq!(m.record.segments[0].first_offset, 3, "the ledger below it went");
    client.move_cursor("aged", "slow", 10, false).await.unwrap();
    let m = trimmed_to(9).await;
    assert_eq!(m.record.trim_before, 9, "every sealed ledger, never the open one");
    assert_eq!(m.record.segments.len(), 1);
    assert_eq!(w.append(record(10)).await.unwrap(), 10, "the writer goes on");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A record's entry as a log writer writes it: `index` of a batch of `len`,
/// taken at `time_ms`.
fn entry(i: u64, time_ms: u64, index: u16, len: u16) -> Bytes {
    use quire_log::envelope::{encode, BatchPlace, Header};
    let header = Header { produced: None, time_ms, batch: BatchPlace { index, len } };
    Bytes::from(encode(header, &record(i)).unwrap())
}

/// A log whose writer crashed within a batch, written here entry by entry
/// as its writer would have: the log's first ledger, made and listed as
/// `create_log` does, and its ledger writer (the crashed writer's hands).
async fn crashed_writer(client: &quire_client::Client, name: &str, config: LogConfig) -> quire_client::LedgerWriter {
    let spec = quire_client::CreateLedger {
        ensemble: 3,
        write_quorum: 3,
        ack_quorum: 2,
        custom: [(quire_client::shell::log::LOG_KEY.to_string(), Bytes::from(name.to_string()))].into(),
        visible_acks: true,
    };
    let ledger = client.create(spec).await.unwrap();
    let log = quire_log::LogMeta {
        record: quire_log::LogRecord::new(name, "crashed", ledger.ledger_id()),
        config,
        producers: quire_log::Producers::default(),
        creator: String::new(),
        created_at_ms: 0,
        version: 0,
        principal: String::new(),
    };
    client.meta().call(quire_proto::v1::CreateLogRequest { log: Some(log.to_wire()) }).await.unwrap();
    ledger
}

/// A batch is whole or not in the log (issue #47 item 3). Its records'
/// envelopes name their batch: a reader holds back a batch whose last
/// entry the LAC does not cover yet (a follower waits for it, not for its
/// first), and a takeover that finds a batch its recovery cut (the writer
/// crashed within it: never answered) ends the log before it, so the next
/// writer's records take those offsets. Before: readers answered the cut
/// batch's first records, and the takeover kept them in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cut_by_a_crash_is_never_read_and_a_takeover_leaves_it_out() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let l = crashed_writer(&client, "cut", config(0)).await;
    let t0 = now_ms();
    // Two records alone, then two of a batch of three.
    for (i, (index, len)) in [(0, 1), (0, 1), (0, 3), (1, 3)].into_iter().enumerate() {
        l.add(entry(i as u64, t0 + i.min(2) as u64, index, len)).await.unwrap();
    }
    let got = client.read_log("cut", 0, 100).await.unwrap();
    assert_eq!(got.iter().map(|e| e.offset).collect::<Vec<_>>(), [0, 1], "the partial batch is held back");
    assert_eq!(client.log_end("cut").await.unwrap(), 2, "the committed end is before the partial batch");
    // A follower at the batch waits for its last entry, then reads it whole.
    let follow = {
        let client = client.clone();
        tokio::spawn(async move { client.read_log_wait("cut", 2, 100, Duration::from_secs(20)).await })
    };
    assert!(!follow.is_finished());
    l.add(entry(4, t0 + 2, 2, 3)).await.unwrap();
    let got = follow.await.unwrap().unwrap();
    assert_eq!(got.iter().map(|e| e.offset).collect::<Vec<_>>(), [2, 3, 4], "the batch, whole");
    assert!(got.iter().all(|e| e.payload == record(e.offset) && e.time_ms == t0 + 2));
    // A record alone taken an hour ahead (its writer's clock ran fast),
    // then the first of a batch of two: the writer crashes.
    let ahead = t0 + 3_600_000;
    l.add(entry(5, ahead, 0, 1)).await.unwrap();
    l.add(entry(6, ahead + 5, 0, 2)).await.unwrap();
    assert_eq!(client.read_log("cut", 5, 100).await.unwrap().len(), 1);
    // The takeover ends the log at 6: the cut batch is not in it.
    let w = client.open_log_writer("cut", "owner-b").await.unwrap();
    let sealed = &w.metadata().await.record.segments[0];
    assert_eq!(sealed.end_offset, Some(6), "sealed at the last whole batch");
    assert!(l.add(entry(7, ahead, 1, 2)).await.is_err(), "the crashed writer is fenced");
    assert_eq!(w.append(record(6)).await.unwrap(), 6, "the next record takes the cut batch's offset");
    let all = read(&client, "cut", 0, 7).await;
    assert_eq!(all.iter().map(|e| e.offset).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
    assert!(all.iter().all(|e| e.payload == record(e.offset)), "never a record of the cut batch");
    // Record time never goes back, across the takeover too: the new
    // writer's clock is an hour behind the last record.
    assert_eq!(all[6].time_ms, ahead, "no earlier than the record before it");
    assert!(all.windows(2).all(|p| p[0].time_ms <= p[1].time_ms));
}

/// Every record carries its writer's time (issue #47 item 4): taken as it
/// is appended, one time per batch, never decreasing; a batch lies in one
/// ledger (a rollover comes between batches); and the first record at or
/// after a time is found across sealed segments and the open one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_their_time_and_a_reader_starts_at_a_time() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let w = client.create_log("timed", config(2), "owner-a").await.unwrap();
    let mut times = Vec::new();
    for round in 0..4u64 {
        let before = now_ms();
        let batch = (0..3).map(|k| record(round * 3 + k)).collect();
        let offsets = w.append_batch(batch, None).await.unwrap();
        assert_eq!(offsets, (round * 3..round * 3 + 3).collect::<Vec<_>>());
        times.push((before, now_ms()));
    }
    let meta = client.log_meta("timed").await.unwrap();
    let ends: Vec<Option<u64>> = meta.record.segments.iter().map(|s| s.end_offset).collect();
    assert_eq!(ends[..3], [Some(3), Some(6), Some(9)], "a batch of 3 in a ledger of 2: rolled between batches");
    let all = read(&client, "timed", 0, 12).await;
    for (round, (before, after)) in times.iter().enumerate() {
        let batch = &all[round * 3..round * 3 + 3];
        assert!(batch.iter().all(|e| e.time_ms == batch[0].time_ms), "one time per batch");
        assert!((*before..=*after).contains(&batch[0].time_ms), "taken as it was appended");
    }
    let last = client.segment_last_time_ms(&meta.record, meta.record.segments[1].ledger_id).await.unwrap();
    assert_eq!(last, Some(all[5].time_ms), "a sealed segment's last record's time, as retention reads it");
    // From a time: the first record at or after it, in a sealed segment or
    // the open one (batches may share a millisecond: the first record of
    // the first of them); before every record, the trim point; after, the end.
    let first_at = |t: u64, trim: u64| all.iter().find(|e| e.offset >= trim && e.time_ms >= t).map_or(12, |e| e.offset);
    for e in all.iter().step_by(3) {
        for t in [e.time_ms - 1, e.time_ms, e.time_ms + 1] {
            assert_eq!(client.log_offset_at_time("timed", t).await.unwrap(), first_at(t, 0), "at {t}");
        }
    }
    assert_eq!(client.log_offset_at_time("timed", 0).await.unwrap(), 0);
    assert_eq!(client.log_offset_at_time("timed", all[11].time_ms + 1).await.unwrap(), 12);
    // Trimmed: from the trim point on.
    client.trim_log("timed", 6).await.unwrap();
    assert_eq!(client.log_offset_at_time("timed", 0).await.unwrap(), 6);
    let t9 = all[9].time_ms;
    assert_eq!(client.log_offset_at_time("timed", t9).await.unwrap(), first_at(t9, 6));
    assert!(matches!(client.log_offset_at_time("nope", 0).await, Err(ClientError::NoSuchLog(_))));
}

/// Retention by age counts from the records' time (issue #47 item 4), not
/// from when their ledger was sealed: records taken two hours ago, in a
/// ledger a takeover sealed just now, are past an hour's retention, and
/// the auditor trims them. (By the seal time, as before, they would stay
/// an hour more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age_counts_from_the_records_time_not_the_seal() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    let hour_ms = 3_600_000;
    let c = LogConfig { retention: Retention { max_age_ms: hour_ms, max_bytes: 0 }, ..config(0) };
    let l = crashed_writer(&client, "old", c).await;
    let taken = now_ms() - 2 * hour_ms;
    for i in 0..3 {
        l.add(entry(i, taken, 0, 1)).await.unwrap();
    }
    let w = client.open_log_writer("old", "owner-b").await.unwrap();
    let sealed = w.metadata().await.record.segments[0].clone();
    assert_eq!(sealed.end_offset, Some(3));
    assert!(now_ms().saturating_sub(sealed.sealed_at_ms) < hour_ms, "sealed just now: {sealed:?}");
    assert_eq!(w.append(record(3)).await.unwrap(), 3);
    let _auditor = s.cluster.start_service("quire-auditor", "1", &["--audit-interval-ms", "200"]).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let m = loop {
        let m = client.log_meta("old").await.unwrap();
        if m.record.trim_before >= 3 || tokio::time::Instant::now() > deadline {
            break m;
        }
        // The auditor's next pass, seen as the record's next version.
        let req = quire_proto::v1::WatchLogRequest { name: "old".into(), after_version: m.version, timeout_ms: 2000 };
        let _ = client.meta().call_waiting(req, Duration::from_secs(3)).await;
    };
    assert_eq!(m.record.trim_before, 3, "the old records' ledger went: {:?}", m.record);
    let kept = client.read_log("old", 3, 10).await.unwrap();
    assert_eq!(kept.iter().map(|e| e.offset).collect::<Vec<_>>(), [3], "the young record stays");
}
