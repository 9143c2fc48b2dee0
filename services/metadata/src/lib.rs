//! A quire metadata replica: ledger metadata (versioned, compare-and-set),
//! the bookie registry with leases and cookie ownership, replicated by Raft
//! (openraft) with sled holding the log, the vote and the state machine.
//!
//! - [`state`]: the deterministic state machine (commands, refusals);
//! - [`raft`]: openraft's types, the sled stores, the QUIC network;
//! - [`service`]: the RPC handlers (leader writes, linearizable reads, watches);
//! - [`node`]: starting a replica;
//! - [`logs`]: logs' records beside their ledgers (issue #23);
//! - [`convert`]: wire messages to records and back;
//! - [`index`]: the ledgers and logs with their derived indexes;
//! - [`revocation`]: the replica's own deny list of certificates.

pub mod convert;
pub mod index;
pub mod logs;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod revocation;
pub mod service;
pub mod state;
