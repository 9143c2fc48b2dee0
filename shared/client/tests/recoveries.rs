//! Recoveries that overlap or follow one that stopped half-way, over real
//! processes (issue SAFETY #19, item 1): no later recovery may close a
//! ledger below an entry an earlier one found, whatever the first left
//! behind.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use common::Setup;
use quire_client::meta::LedgerState;
use quire_client::{Client, ClientError, ClientOptions, CreateLedger};
use quire_proto::Role;

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("entry-{i:03}-of-the-overlapping-recoveries"))
}

/// E=3 Qw=2 Qa=2 on bookies [A,B,C] (ids 1-3), D (id 4) the spare.
/// Entries 0..=5 are acknowledged, entry 5 on {C,A}; the bookies' LAC is 4
/// (the writer never publishes 5 on its own). The writer dies, C dies.
///
/// R1 recovers: it finds 5, its write-back to C fails, so C is replaced by
/// D, which dies before its journal takes entry 5; D is then found failed
/// too and there is no bookie left to replace it: R1 gives up. D comes back
/// as the same instance, empty for this ledger. R2 recovers with A frozen: D's "no such entry" for 5 must not
/// count as evidence that 5 was never acknowledged (before the fix, R1's
/// write-back ensemble [A,B,D] from 5 was in the metadata, and R2 closed the
/// ledger at 4). Once A is back, R3 closes the ledger at 5, and 5 reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_after_one_that_stopped_half_way_never_closes_below_what_it_found() {
    let mut s = Setup::start(&["r1", "r1", "r1", "r1"]);
    s.wait_for_bookies(4).await;
    let rpc = s.rpc(Role::Client);
    let quiet = ClientOptions {
        add_timeout: Duration::from_secs(2),
        ensemble_change_deadline: Duration::from_secs(3),
        read_timeout: Duration::from_secs(2),
        // The writer never sends its LAC alone: the bookies' LAC stays 4.
        explicit_lac_interval: Duration::from_secs(3600),
        ..ClientOptions::default()
    };
    let writer_client = Client::new(rpc.clone(), s.meta(&rpc), quiet.clone());
    let spec =
        CreateLedger { ensemble: 3, write_quorum: 2, ack_quorum: 2, custom: BTreeMap::new(), visible_acks: false };
    let w = writer_client.create_on(vec!["1".into(), "2".into(), "3".into()], spec).await.unwrap();
    let id = w.ledger_id();
    for i in 0..6 {
        assert_eq!(w.add(payload(i)).await.unwrap().entry_id, i);
    }
    // The writer is gone from here on (its handle stays idle), and so is C.
    s.cluster.kill_bookie(2).unwrap();
    let admin = s.rpc(Role::Admin);
    let registry = s.meta(&admin);
    let gone = registry
        .wait_for_registry(Duration::from_secs(20), |l| l.len() == 3 && l.iter().all(|b| b.bookie_id != "3"))
        .await
        .unwrap();
    assert!(gone.is_some(), "C's registration never ended");

    // R1: D dies as soon as it would journal anything (before a byte of it
    // is written), so R1 can neither finish nor find another bookie.
    s.cluster.kill_bookie(3).unwrap();
    s.cluster.bookies[3].env = vec![("QUIRE_FAILPOINTS".into(), "journal.before_write".into())];
    s.cluster.start_bookie(3).unwrap();
    let r1 = Client::new(rpc.clone(), s.meta(&rpc), quiet.clone());
    match r1.recover(id).await {
        Err(ClientError::RecoveryFailed(..)) => {}
        other => panic!("R1 cannot finish with D's disk hung and no spare bookie: {other:?}"),
    }
    // D restarts as the same instance, without the crash point: it never
    // stored entry 5 or anything else of this ledger.
    s.cluster.kill_bookie(3).unwrap();
    s.cluster.bookies[3].env.clear();
    s.cluster.start_bookie(3).unwrap();
    let back =
        registry.wait_for_registry(Duration::from_secs(20), |l| l.iter().any(|b| b.bookie_id == "4")).await.unwrap();
    assert!(back.is_some(), "D never registered again");

    // R2 with A frozen: whatever the metadata names, it must not close below 5.
    s.cluster.signal_bookie(0, "STOP").unwrap();
    // Another process (fresh connections: not the ones R1 held to D's
    // previous process).
    let rpc2 = s.rpc(Role::Client);
    let r2 = Client::new(rpc2.clone(), s.meta(&rpc2), quiet.clone());
    let second = r2.recover(id).await;
    s.cluster.signal_bookie(0, "CONT").unwrap();
    match &second {
        Ok(m) => assert!(
            m.last_entry_id >= 5,
            "R2 closed ledger {id} at {} below acknowledged entry 5: {m:?}\n{}",
            m.last_entry_id,
            s.cluster.logs()
        ),
        Err(ClientError::RecoveryFailed(..)) => {}
        Err(e) => panic!("R2: {e}"),
    }

    // R3, with every live bookie answering: closed at exactly 5, 5 readable.
    let r3 = Client::new(rpc2.clone(), s.meta(&rpc2), quiet);
    let closed = r3.recover(id).await.unwrap();
    assert_eq!((closed.state, closed.last_entry_id), (LedgerState::Closed, 5), "{closed:?}");
    let reader = r3.open(id).await.unwrap();
    let entries = reader.read_range(0, 5, 10).await.unwrap();
    let got: Vec<Bytes> = entries.into_iter().map(|e| e.payload).collect();
    assert_eq!(got, (0..6).map(payload).collect::<Vec<_>>());
    drop(w);
}
