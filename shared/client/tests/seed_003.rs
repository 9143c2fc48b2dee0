//! Seed 003 (BookKeeper #4812), step by step, with real processes: an open
//! ledger's bookies are replaced by fresh processes at the same addresses
//! while the ledger is re-replicated, recovered and closed; the original
//! writer's next add must fail with LedgerFenced, never succeed.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::Setup;
use quire_client::meta::{LedgerState, Segment};
use quire_client::writer::Member;
use quire_client::{ClientError, CreateLedger};
use quire_proto::v1::{self, ErrorCode};
use quire_proto::Role;
use quire_rpc::{CallOptions, RpcError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_writer_is_fenced_after_its_bookies_are_replaced_and_the_ledger_recovered() {
    let mut s = Setup::start(&["r1", "r2", "r3"]);
    s.wait_for_bookies(3).await;
    let addr_of = |s: &Setup, id: &str| s.cluster.bookies.iter().find(|b| b.id == id).unwrap().addr.clone();
    let index_of = |s: &Setup, id: &str| s.cluster.bookies.iter().position(|b| b.id == id).unwrap();

    // The client opens a ledger with E=2 Qw=2 Qa=2 and writes entry-0.
    let client = s.client();
    let w = client
        .create(CreateLedger {
            ensemble: 2,
            write_quorum: 2,
            ack_quorum: 2,
            custom: BTreeMap::new(),
            visible_acks: false,
        })
        .await
        .unwrap();
    let id = w.ledger_id();
    assert_eq!(w.add(Bytes::from_static(b"entry-0")).await.unwrap().entry_id, 0);
    let seg = w.metadata().last_segment().clone();
    let (x, y) = (seg.members[0].clone(), seg.members[1].clone());
    let spare = s.cluster.bookies.iter().find(|b| b.id != x.bookie_id && b.id != y.bookie_id).unwrap().id.clone();

    // The replication worker's view: a worker certificate, raw RPCs.
    let worker = s.rpc(Role::ReplicationWorker);
    let meta = s.meta(&worker);
    let spare_instance =
        client.bookies().candidates().await.unwrap().into_iter().find(|c| c.bookie_id == spare).unwrap().instance_id;

    // D1: x is stopped and decommissioned: its fragment is copied to the spare
    // and the metadata points at the spare instead.
    let entry0 = worker
        .peer(&addr_of(&s, &y.bookie_id), Role::Bookie, Some(&y.bookie_id))
        .call(v1::ReadEntryRequest { ledger_id: id, entry_id: 0, fence: false, metadata_version: 0 })
        .await
        .unwrap()
        .entry
        .unwrap();
    worker
        .peer(&addr_of(&s, &spare), Role::Bookie, Some(&spare))
        .call(v1::AddEntryRequest {
            entry: Some(entry0),
            metadata_version: 0,
            expected_instance_id: spare_instance.clone(),
            recovery: true,
            replication: false,
        })
        .await
        .unwrap();
    let mut m = client.metadata(id).await.unwrap();
    let mut moved = m.clone();
    moved.segments = vec![Segment {
        first_entry_id: 0,
        members: vec![Member { bookie_id: spare.clone(), instance_id: spare_instance.clone() }, y.clone()],
    }];
    m = quire_client::meta::LedgerMeta::from_proto(
        meta.call(v1::UpdateLedgerRequest { ledger: Some(moved.to_proto()), expected_version: m.version })
            .await
            .unwrap()
            .ledger
            .unwrap(),
    )
    .unwrap();
    assert_eq!(m.state, LedgerState::Open);

    // E1: a fresh x at the same address (new disks, new instance id).
    let i = index_of(&s, &x.bookie_id);
    s.cluster.replace_bookie(i).unwrap();
    let x_new = s.wait_for_new_instance(&x.bookie_id, &x.instance_id).await;

    // D2: y is stopped; the worker recovers the open ledger: fences it, finds
    // entry-0 as the tail and closes it there.
    let j = index_of(&s, &y.bookie_id);
    s.cluster.kill_bookie(j).unwrap();
    // E2: a fresh y at the same address.
    s.cluster.replace_bookie(j).unwrap();
    let y_new = s.wait_for_new_instance(&y.bookie_id, &y.instance_id).await;
    assert!(x_new != x.instance_id && y_new != y.instance_id);
    let recovered = s.client().recover(id).await.unwrap();
    assert_eq!((recovered.state, recovered.last_entry_id), (LedgerState::Closed, 0));

    // The proceed signal: the original writer adds entry-1 to the addresses
    // of its ensemble, where fresh processes now listen.
    match w.add(Bytes::from_static(b"entry-1")).await {
        Err(ClientError::LedgerFenced(l)) => assert_eq!(l, id),
        other => panic!("seed 003: the old writer's add must fail with LedgerFenced, got {other:?}"),
    }
    assert_eq!(w.lac(), 0, "nothing acknowledged past entry-0");
    let after = client.metadata(id).await.unwrap();
    assert_eq!((after.state, after.last_entry_id), (LedgerState::Closed, 0));
    let r = client.open(id).await.unwrap();
    assert_eq!(r.read(0).await.unwrap().payload, Bytes::from_static(b"entry-0"));

    // Each guard alone is enough. Guard 1: a fresh instance refuses an add
    // that names the old one.
    let add = |expected: &str| v1::AddEntryRequest {
        entry: Some(v1::Entry::sealed(id, 1, 0, Bytes::from_static(b"entry-1"))),
        metadata_version: w.metadata().version,
        expected_instance_id: expected.to_string(),
        recovery: false,
        replication: false,
    };
    // (A new connection: the worker's old one to y's address went to the
    // process that is gone, and would only time out.)
    let fresh = s.rpc(Role::ReplicationWorker);
    let x_peer = fresh.peer(&addr_of(&s, &x.bookie_id), Role::Bookie, Some(&x.bookie_id));
    let err = x_peer.call_full(add(&x.instance_id), CallOptions::default()).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::WrongInstance), "{err}");
    // Guard 2: without an instance id, a bookie that never saw the ledger asks
    // the metadata service first, finds it closed, and fences it.
    let y_peer = fresh.peer(&addr_of(&s, &y.bookie_id), Role::Bookie, Some(&y.bookie_id));
    for peer in [&x_peer, &y_peer] {
        match peer.call_full(add(""), CallOptions::default()).await {
            Err(RpcError::Remote { code: ErrorCode::LedgerFenced, .. }) => {}
            other => panic!(
                "a fresh bookie at {} accepted an add for a closed ledger: {other:?}\n{}",
                peer.addr(),
                s.cluster.logs()
            ),
        }
    }
}
