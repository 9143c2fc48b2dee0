//! A metadata leader change under a writing client, over real processes
//! (issue SAFETY #19, item 7): it costs appends and creations at most the
//! failover, and never a bookie. A metadata outage is not a bookie failure.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Setup;
use quire_client::{Client, ClientOptions, CreateLedger};
use quire_proto::{v1, Role};

fn payload(ledger: u64, i: u64) -> Bytes {
    Bytes::from(format!("ledger-{ledger}-entry-{i:03}-through-a-metadata-failover"))
}

/// E=3 Qw=3 Qa=2 on exactly three bookies, so that a bookie counted failed
/// has no replacement and the writer would fail with NotEnoughBookies.
/// The election is made slower than the writers' default 5 s add timeout
/// (followers wait out their leader lease of 4 s, then 2-4 s more): however
/// long a failover takes, it is no bookie's failure. The metadata leader is
/// SIGKILLed; then at once: the first add of a ledger no bookie has seen
/// yet (each bookie must ask the metadata service about it), an add to a
/// ledger in use, and a creation. Each succeeds; no ensemble changes; the
/// ledgers close and read back. Before the fix the bookies' check waited on
/// the dead leader (3 s per attempt, and followers' hints sent it back
/// there) past the add timeout, the writer counted all three bookies
/// failed, and the add failed with NotEnoughBookies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_metadata_leader_costs_appends_the_failover_and_never_a_bookie() {
    let slow = quire_testkit::RaftTiming { heartbeat_ms: 250, election_timeout_ms: 2000 };
    let mut s = Setup::start_with_raft_timing(&["r1", "r1", "r1"], slow);
    s.wait_for_bookies(3).await;
    let rpc = s.rpc(Role::Client);
    let client = Client::new(rpc.clone(), s.meta(&rpc), ClientOptions::default());
    let spec = CreateLedger { ensemble: 3, write_quorum: 3, ack_quorum: 2, ..CreateLedger::default() };
    let busy = client.create(spec.clone()).await.unwrap();
    for i in 0..5 {
        busy.add(payload(busy.ledger_id(), i)).await.unwrap();
    }
    let fresh = client.create(spec.clone()).await.unwrap();

    let admin = s.rpc(Role::Admin);
    let status = s.meta(&admin).call(v1::MetadataStatusRequest::default()).await.unwrap();
    let leader = s
        .cluster
        .metadata
        .addrs
        .iter()
        .position(|a| *a == status.leader_address)
        .unwrap_or_else(|| panic!("no leader among the replicas: {status:?}"));
    s.cluster.metadata.procs[leader].kill().unwrap();
    let killed = Instant::now();

    let timed = |f| async move {
        let r = f.await;
        (r, killed.elapsed())
    };
    let (first, in_use, created) = tokio::join!(
        timed(Box::pin(async { fresh.add(payload(fresh.ledger_id(), 0)).await.map(|a| a.entry_id) })
            as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>),
        timed(Box::pin(async { busy.add(payload(busy.ledger_id(), 5)).await.map(|a| a.entry_id) })),
        timed(Box::pin(async {
            let w = client.create(spec.clone()).await?;
            let id = w.add(payload(w.ledger_id(), 0)).await?.entry_id;
            w.close().await?;
            Ok(id)
        })),
    );
    eprintln!(
        "after the kill: first add of a new ledger {:?}, add to a ledger in use {:?}, create+add+close {:?}",
        first.1, in_use.1, created.1
    );
    let logs = || s.cluster.logs();
    // A floor on what the test saw: no leader can be elected within 4 s
    // of the kill (the followers wait out the 4 s lease first), so a first
    // add that took less never met the outage.
    assert!(first.1 >= Duration::from_secs(4), "the first add did not wait for a new leader: {:?}", first.1);
    assert_eq!(first.0.as_ref().ok(), Some(&0), "first add: {:?}\n{}", first.0, logs());
    assert_eq!(in_use.0.as_ref().ok(), Some(&5), "add in use: {:?}\n{}", in_use.0, logs());
    assert_eq!(created.0.as_ref().ok(), Some(&0), "create: {:?}\n{}", created.0, logs());

    for w in [&fresh, &busy] {
        let closed = w.close().await.unwrap_or_else(|e| panic!("close of {}: {e}\n{}", w.ledger_id(), logs()));
        assert_eq!(closed.segments.len(), 1, "ledger {}: no bookie was replaced: {closed:?}", w.ledger_id());
        let r = client.open(w.ledger_id()).await.unwrap();
        assert_eq!(closed.last_entry_id, r.known_lac());
        for i in 0..=closed.last_entry_id as u64 {
            assert_eq!(r.read(i).await.unwrap().payload, payload(w.ledger_id(), i));
        }
    }
    assert_eq!(client.lost_copies(), 0, "every copy of every acknowledged entry was stored");
}
