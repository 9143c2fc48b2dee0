//! A replica's Raft storage through a power cut, on crashfs (shared/crashfs):
//! what openraft was told is durable (appended entries, the vote, the state
//! a snapshot covers before the log behind it is purged) must come back.
//! A forgotten vote allows two leaders in one term; a forgotten entry undoes
//! a committed ledger close. Needs /dev/fuse and root (make test runs as root).

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use quire_crashfs::{Crash, DataLoss, Mount, NameLoss};
use quire_metadata::raft::{open_storage, TypeConfig};

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(3, 1), index)
}

fn blank(index: u64) -> Entry<TypeConfig> {
    Entry { log_id: log_id(index), payload: EntryPayload::Blank }
}

async fn cut(data: DataLoss, names: NameLoss, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let (state, mnt) = (tmp.path().join("disk"), tmp.path().join("mnt"));
    let mount = Mount::new(&state, &mnt).expect("mount crashfs (needs /dev/fuse and root)");
    let dir = mnt.join("replica").join("raft");
    {
        let (mut log, mut sm) = open_storage(&dir).unwrap();
        log.save_vote(&Vote::new_committed(3, 1)).await.unwrap();
        for first in (1..=50).step_by(10) {
            log.blocking_append((first..first + 10).map(blank)).await.unwrap();
        }
        // Applied, snapshotted, and the log behind the snapshot purged: from
        // here the state machine is the only copy of entries 1..=30.
        sm.apply((1..=30).map(blank)).await.unwrap();
        let mut builder = sm.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap();
        log.purge(log_id(30)).await.unwrap();
        mount.freeze();
        // The process dies with the power: nothing of it runs its destructor.
        std::mem::forget((log, sm, builder));
    }
    mount.crash(Crash { seed, data, names }).unwrap();
    let mount = Mount::new(&state, &mnt).unwrap();
    let (mut log, mut sm) = open_storage(&dir).expect("the replica's storage opens after a power cut");
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new_committed(3, 1)), "the vote was forgotten");
    let st = log.get_log_state().await.unwrap();
    assert_eq!(st.last_log_id, Some(log_id(50)), "appended entries were lost");
    assert_eq!(st.last_purged_log_id, Some(log_id(30)));
    let entries = log.try_get_log_entries(31..=50).await.unwrap();
    assert_eq!(entries.len(), 20, "entries after the snapshot were lost");
    let (applied, _) = sm.applied_state().await.unwrap();
    assert!(applied >= Some(log_id(30)), "the state machine lost what the purged log held: applied {applied:?}");
    drop((log, sm));
    mount.unmount().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vote_appended_entries_and_snapshotted_state_survive_a_power_cut() {
    for seed in 0..3 {
        cut(DataLoss::Drop, NameLoss::All, seed).await;
        cut(DataLoss::Prefix, NameLoss::Prefix, seed).await;
        cut(DataLoss::Torn, NameLoss::Prefix, seed).await;
    }
}

/// The replica as `quire-metadata` starts it (`Node::start` on a data
/// directory it creates), cut once its cluster is initialised: the power
/// cut must leave it initialised. It made its data directory with a plain
/// `create_dir_all`, so the directory's name was never durable: the fault
/// suite's power cut of every node (seed 98) lost all three replicas' Raft
/// state, and replica 1 initialised a new, empty cluster.
#[test]
fn a_replica_started_on_a_new_data_directory_is_still_initialised_after_a_power_cut() {
    use quire_metadata::node::{Node, RaftTiming};
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("certs");
    quire_pki::init_dir(
        &certs,
        "powerloss",
        &quire_pki::LocalCluster { metadata: 1, bookies: 0 },
        &quire_pki::IssueOptions::default(),
    )
    .unwrap();
    let creds =
        quire_rpc::Credentials::load(&quire_rpc::TlsFiles::in_dir(&certs, quire_proto::Role::Metadata, "1")).unwrap();
    let members = std::collections::BTreeMap::from([(1u64, "127.0.0.1:1".to_string())]);
    let timing = RaftTiming {
        heartbeat_ms: 50,
        election_min_ms: 150,
        election_max_ms: 300,
        snapshot_every_entries: 1000,
        logs_to_keep: 1000,
    };
    let (state, mnt) = (tmp.path().join("disk"), tmp.path().join("mnt"));
    let mount = Mount::new(&state, &mnt).expect("mount crashfs (needs /dev/fuse and root)");
    let dir = mnt.join("metadata-1");
    // The replica's life, on a runtime of its own: at the cut it dies with
    // its tasks (leaked, never dropped: sled's destructor panics on a dead disk).
    let life = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let node = life.block_on(async {
        let rpc = quire_rpc::RpcClient::new(&creds, quire_rpc::ClientOptions::default()).unwrap();
        let node = Node::start(1, members, &dir, rpc, timing).await.unwrap();
        assert!(node.raft.is_initialized().await.unwrap());
        node
    });
    mount.freeze();
    std::mem::forget((node, life));
    mount.crash(Crash { seed: 1, data: DataLoss::Drop, names: NameLoss::All }).unwrap();
    let mount = Mount::new(&state, &mnt).unwrap();
    let check = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    check.block_on(async {
        let (mut log, sm) = open_storage(&dir.join("raft")).expect("the replica's storage opens after a power cut");
        let st = log.get_log_state().await.unwrap();
        assert!(st.last_log_id.is_some(), "the replica forgot its cluster: its Raft log is empty after a power cut");
        drop((log, sm));
    });
    mount.unmount().unwrap();
}
