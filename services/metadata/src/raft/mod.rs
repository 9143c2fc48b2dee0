//! Raft plumbing: openraft's type configuration, the sled log and state
//! machine stores, and the network over quire's QUIC RPC.

// openraft's StorageError is large by design and its traits return it; boxing
// it in our helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod election;
pub mod log_store;
pub mod network;
pub mod state_machine;

use std::io::Cursor;

use crate::state::{Command, Outcome};

openraft::declare_raft_types!(
    /// quire's Raft types: commands are `state::Command`, results `state::Outcome`.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A Raft handle of this service.
pub type MetaRaft = openraft::Raft<TypeConfig>;
