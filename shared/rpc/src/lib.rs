//! quire's RPC layer: QUIC (quinn) with mutual TLS (rustls).
//!
//! - [`tls`]: loading a service's credentials and building the QUIC crypto
//!   configs (TLS 1.3 only, client certificates required, ring provider only).
//! - [`identity`]: reading `quire://<role>/<id>` out of a peer's certificate.
//! - [`server`]: accepts connections and lanes, authorises each request by the
//!   caller's role, runs handlers with deadlines and bounds, shuts down gracefully.
//! - [`client`]: one connection per peer, many requests in flight on it,
//!   deadlines, bounded in-flight requests, reconnect with backoff.
//! - [`lane`]: the frame I/O both ends share.
//! - [`trace`]: W3C trace context in and out of frames.
//!
//! A *lane* is one long-lived bidirectional QUIC stream carrying length-prefixed
//! frames (`quire_proto::codec`). Requests on a lane reach the handler in the
//! order sent; responses return in completion order, matched by request id. A
//! client maps an ordering key (a ledger id) to a lane, which keeps one ledger's
//! requests in order without serialising the whole connection.
//!
//! What this crate does not do: retry a failed request (only the caller knows
//! whether it is idempotent), or pick peers (that is the client library's job).

mod budget;
pub mod client;
pub mod deny;
pub mod error;
pub mod identity;
pub mod lane;
pub mod packets;
pub mod server;
pub mod socket;
pub mod tls;
pub mod trace;
mod transport;

pub use transport::{MAX_LANES_PER_CONNECTION, MAX_UDP_PAYLOAD_BYTES};

pub use client::{CallOptions, ClientOptions, PeerClient, Reply, RpcClient};
pub use deny::DenyList;
pub use error::{RpcError, ServiceError};
pub use identity::PeerIdentity;
pub use packets::{Packets, PacketsError};
pub use server::{
    RequestContext, Server, ServerHandle, ServerIdentity, ServerOptions, ServerStats, Service, ServiceFuture,
};
pub use tls::{Credentials, TlsError, TlsFiles};
