//! Raft plumbing: openraft's type configuration, the sled log and state
//! machine stores, and the network over quire's QUIC RPC.

// openraft's StorageError is large by design and its traits return it; boxing
// it in our helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod amnesia;
pub mod compaction;
pub mod election;
pub mod log_store;
pub mod network;
pub mod snapshot_file;
pub mod state_machine;

use std::path::Path;

use anyhow::Context;

use crate::state::{Command, Outcome};

openraft::declare_raft_types!(
    /// quire's Raft types: commands are `state::Command`, results `state::Outcome`.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = tokio::fs::File,
);

/// A Raft handle of this service.
pub type MetaRaft = openraft::Raft<TypeConfig>;

/// Opens a replica's Raft storage under `dir`: the log and vote in a sled
/// database, the state machine's snapshot file in `dir/sm`. Every flush
/// the log store makes is followed by the fsyncs sled never does
/// (quire-durable's `SyncedSled`), and the snapshot file is fsynced and
/// renamed into place: what openraft is told is durable survives a power
/// cut.
pub fn open_storage(dir: &Path) -> anyhow::Result<(log_store::LogStore, state_machine::StateMachineStore)> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(64 * 1024 * 1024)
        .flush_every_ms(None)
        .mode(sled::Mode::HighThroughput);
    let (db, synced) = quire_durable::SyncedSled::open(config, dir).context("open sled")?;
    let synced = std::sync::Arc::new(synced);
    let sm = state_machine::StateMachineStore::open(&db, &synced, &dir.join("sm"))
        .map_err(|e| anyhow::anyhow!("open the state machine: {e}"))?;
    let log = log_store::LogStore::open(&db, synced).context("open the Raft log")?;
    Ok((log, sm))
}
