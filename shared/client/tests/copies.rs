//! Every copy the writer sends reaches its member unless that member fails,
//! and a copy that does not is counted and reported (issue SAFETY #19,
//! items 5 and 6; BRIEF guarantee 7). Real processes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::Setup;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_proto::Role;
use quire_testkit::eventually;

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("copy-{i:03}-{}", "c".repeat(300)))
}

fn spec() -> CreateLedger {
    CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false }
}

/// Whether bookie `id` serves entries `0..n` of `ledger` with their bytes.
async fn holds_all(client: &Client, id: &str, ledger: u64, n: u64) -> bool {
    for e in 0..n {
        match client.bookies().read(id, ledger, e, false, Duration::from_secs(2)).await {
            Ok(r) if r.body.entry.as_ref().is_some_and(|x| x.digest_ok() && x.payload == payload(e)) => {}
            _ => return false,
        }
    }
    true
}

/// The slowest member of the write set meets the ledger for the first time
/// after the writer's own close (here: it is frozen until then). Its guard
/// finds the ledger closed and refuses the copies as fenced. Before the
/// fix the writer had stopped at its close and dropped them (the third copy
/// was never written: 5 to 14 of 60 batch-written ledgers per run), and a
/// refusal answered before the close's CAS came back failed a close that
/// succeeded. Now the close succeeds, and the copies go again as recovery
/// adds: the frozen bookie ends up holding every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_cancels_no_copy_in_flight_and_its_own_fence_is_no_failure() {
    let s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let client = s.client();
    for round in 0..3 {
        let w = client.create_on(vec!["1".into(), "2".into(), "3".into()], spec()).await.unwrap();
        let id = w.ledger_id();
        s.cluster.signal_bookie(2, "STOP").unwrap();
        for i in 0..3 {
            assert_eq!(w.add(payload(i)).await.unwrap().entry_id, i);
        }
        let closed = w.close().await;
        s.cluster.signal_bookie(2, "CONT").unwrap();
        let closed = closed.unwrap_or_else(|e| panic!("round {round}: a close that succeeded reported {e}"));
        assert_eq!(closed.last_entry_id, 2);
        let all = eventually(Duration::from_secs(10), "bookie 3 to hold every entry", || async {
            holds_all(&client, "3", id, 3).await.then_some(())
        })
        .await;
        assert!(all.is_ok(), "round {round}: the third copies of ledger {id} were never written\n{}", s.cluster.logs());
        assert_eq!(w.lost_copies(), 0, "round {round}");
    }
    assert_eq!(client.lost_copies(), 0);
}

/// A member that never confirms copies of acknowledged entries (frozen past
/// the add timeout): each copy is counted, the member is replaced for later
/// entries, and the ledger is marked under-replicated with that bookie,
/// where GET /v1/cluster and the auditor's metrics show it until repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_no_member_confirmed_are_counted_and_the_ledger_marked() {
    let s = Setup::start(&["r1", "r2", "r3", "r1"]);
    s.wait_for_bookies(4).await;
    let client = s.client();
    let w = client.create_on(vec!["1".into(), "2".into(), "3".into()], spec()).await.unwrap();
    let id = w.ledger_id();
    s.cluster.signal_bookie(2, "STOP").unwrap();
    for i in 0..3 {
        w.add(payload(i)).await.unwrap();
    }
    let counted = eventually(Duration::from_secs(15), "three lost copies counted", || async {
        (w.lost_copies() == 3).then_some(())
    })
    .await;
    let rpc = s.rpc(Role::Admin);
    let admin = Client::new(rpc.clone(), s.meta(&rpc), ClientOptions::default());
    let marked = eventually(Duration::from_secs(15), "the ledger marked under-replicated on bookie 3", || async {
        let marks = admin.under_replicated().await.ok()?;
        marks.iter().any(|m| m.ledger_id == id && m.missing_bookie_ids.iter().any(|b| b == "3")).then_some(())
    })
    .await;
    s.cluster.signal_bookie(2, "CONT").unwrap();
    counted.unwrap_or_else(|e| panic!("{e}: {} counted", w.lost_copies()));
    marked.unwrap();
    assert_eq!(client.lost_copies(), 3);
    let closed = w.close().await.unwrap();
    assert_eq!(closed.last_entry_id, 2);
    assert!(
        !closed.last_segment().members.iter().any(|m| m.bookie_id == "3"),
        "the silent member was replaced: {closed:?}"
    );
}
