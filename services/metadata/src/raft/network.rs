//! Raft messages over quire's RPC layer: one `RaftRequest` per openraft RPC,
//! its request and result postcard-encoded (openraft's types are serde), sent to
//! the peer replica over QUIC + mTLS. Only certificates of role metadata may
//! send them (the role table).

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
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

/// The most bytes of encoded AppendEntries one request carries. Well
/// inside the RPC frame limit (5 MiB and a little), and small enough to
/// be received, appended and synced within the request's timeout (the
/// heartbeat interval, 100 ms by default): a batch that cannot fit either
/// is refused or times out, and openraft sends the same batch again, for
/// ever (issue #46 item 2). Entries past it go in the next request.
pub const APPEND_ENTRIES_BYTES_MAX: usize = 1 << 20;

/// Makes a connection per peer replica, lazily, from one RPC client.
pub struct Network {
    rpc: RpcClient,
    append_bytes_max: usize,
}

impl Network {
    /// Raft traffic through `rpc` (a client holding this replica's certificate).
    pub fn new(rpc: RpcClient) -> Self {
        Network { rpc, append_bytes_max: APPEND_ENTRIES_BYTES_MAX }
    }
}

/// The connection to one peer replica.
pub struct PeerLink {
    target: u64,
    peer: quire_rpc::PeerClient,
    append_bytes_max: usize,
}

/// How many of the leading entries fit in `budget` bytes, given the
/// encoded size of the request without entries (`envelope`) and of each
/// entry: at least one (a single entry larger than the budget goes alone;
/// the proposer keeps entries far below it).
pub fn entries_that_fit(envelope: usize, entry_sizes: impl IntoIterator<Item = usize>, budget: usize) -> usize {
    let mut used = envelope;
    let mut n = 0;
    for size in entry_sizes {
        used = used.saturating_add(size);
        if used > budget {
            break;
        }
        n += 1;
    }
    n.max(1)
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerLink {
        // The peer must hold the certificate of replica `target`: a misconfigured
        // address cannot make another replica's vote count twice.
        PeerLink {
            target,
            peer: self.rpc.peer(&node.addr, Role::Metadata, Some(&target.to_string())),
            append_bytes_max: self.append_bytes_max,
        }
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
        self.send_encoded(kind, payload, option).await
    }

    async fn send_encoded<Resp: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &mut self,
        kind: u32,
        payload: Vec<u8>,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>> {
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
        let payload = postcard::to_stdvec(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if payload.len() > self.append_bytes_max && rpc.entries.len() > 1 {
            // openraft sends the first `fit` entries at once, and the rest after.
            let sizes = rpc.entries.iter().map(|e| {
                postcard::serialize_with_flavor(e, postcard::ser_flavors::Size::default()).unwrap_or(usize::MAX)
            });
            let envelope = payload.len()
                - rpc
                    .entries
                    .iter()
                    .map(|e| postcard::serialize_with_flavor(e, postcard::ser_flavors::Size::default()).unwrap_or(0))
                    .sum::<usize>();
            let fit = entries_that_fit(envelope, sizes, self.append_bytes_max);
            tracing::debug!(
                target = self.target,
                bytes = payload.len(),
                entries = rpc.entries.len(),
                fit,
                "AppendEntries over its byte bound: split"
            );
            return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(fit as u64)));
        }
        self.send_encoded(kind::APPEND_ENTRIES, payload, &option).await
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

#[cfg(test)]
mod tests {
    use super::entries_that_fit;

    #[test]
    fn entries_are_split_at_the_byte_bound_and_one_always_goes() {
        assert_eq!(entries_that_fit(10, [30, 30, 30], 100), 3);
        assert_eq!(entries_that_fit(10, [30, 30, 31], 100), 2);
        assert_eq!(entries_that_fit(10, [100, 1], 100), 1, "a single oversized entry still goes, alone");
        assert_eq!(entries_that_fit(10, [], 100), 1);
    }
}
