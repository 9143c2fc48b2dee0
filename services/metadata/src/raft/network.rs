//! Raft messages over quire's RPC layer: one `RaftRequest` per openraft RPC,
//! its request and result postcard-encoded (openraft's types are serde), sent to
//! the peer replica over QUIC + mTLS. Only certificates of role metadata may
//! send them (the role table).

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{AnyError, BasicNode};
use quire_proto::v1::RaftRequest;
use quire_proto::Role;
use quire_rpc::{CallOptions, RpcClient, RpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::TypeConfig;

/// `RaftRequest.kind` values.
pub mod kind {
    /// AppendEntries.
    pub const APPEND_ENTRIES: u32 = 1;
    /// RequestVote.
    pub const VOTE: u32 = 2;
    /// InstallSnapshot (one chunk).
    pub const INSTALL_SNAPSHOT: u32 = 3;
    /// quire's pre-vote (`election.rs`), asked before an election.
    pub const PRE_VOTE: u32 = 4;
}

/// Makes a connection per peer replica, lazily, from one RPC client.
pub struct Network {
    rpc: RpcClient,
}

impl Network {
    /// Raft traffic through `rpc` (a client holding this replica's certificate).
    pub fn new(rpc: RpcClient) -> Self {
        Network { rpc }
    }
}

/// The connection to one peer replica.
pub struct PeerLink {
    target: u64,
    peer: quire_rpc::PeerClient,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerLink {
        // The peer must hold the certificate of replica `target`: a misconfigured
        // address cannot make another replica's vote count twice.
        PeerLink { target, peer: self.rpc.peer(&node.addr, Role::Metadata, Some(&target.to_string())) }
    }
}

impl PeerLink {
    async fn send<Req: Serialize, Resp: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &mut self,
        kind: u32,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let payload = postcard::to_stdvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let reply = self
            .peer
            .call_full(RaftRequest { kind, payload: payload.into() }, CallOptions::timeout(option.hard_ttl()))
            .await
            .map_err(|e| match e {
                RpcError::Unavailable { .. } | RpcError::WrongPeer { .. } => {
                    RPCError::Unreachable(Unreachable::from(AnyError::error(e.to_string())))
                }
                other => RPCError::Network(NetworkError::from(AnyError::error(other.to_string()))),
            })?;
        let result: Result<Resp, RaftError<u64, E>> =
            postcard::from_bytes(&reply.body.payload).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(kind::APPEND_ENTRIES, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.send(kind::INSTALL_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(kind::VOTE, &rpc, &option).await
    }
}
