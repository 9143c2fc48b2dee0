//! quire's wire protocol.
//!
//! - [`v1`]: the protobuf messages (generated from `proto/quire/v1/*.proto`).
//! - [`codec`]: the length-prefixed frame codec with its size limit.
//! - [`digest`]: the CRC32C every entry carries.
//! - [`method`]: which RPC a frame is, and the response each expects.
//! - [`role`]: certificate roles and the table of which role may call what.
//! - [`peek`]: a request frame's method and element counts, read before decoding.
//!
//! This crate does no I/O: it turns bytes into messages and back, and answers
//! questions about them. The QUIC transport is `quire-rpc`.

pub mod codec;
pub mod digest;
#[doc(hidden)]
pub mod fuzzing;
pub mod method;
pub mod peek;
pub mod role;

/// Generated protobuf types of protocol version 1.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/quire.v1.rs"));
}

pub use codec::{FrameDecoder, FrameError, FRAME_HEADER_BYTES, MAX_FRAME_BYTES_DEFAULT};
pub use method::Method;
pub use role::Role;

/// The ALPN protocol id of protocol version 1. A peer that does not offer it
/// fails the TLS handshake instead of exchanging frames it cannot parse.
pub const ALPN_V1: &[u8] = b"quire/1";

/// The largest entry payload a bookie accepts (BookKeeper's default frame limit
/// is 5 MB). Larger adds answer ENTRY_TOO_LARGE.
pub const MAX_ENTRY_BYTES: usize = 5 * 1024 * 1024;

/// What an entry costs in a ReadEntries answer beyond its payload (ids, LAC,
/// length, digest, field tags), as a bookie counts it against an answer's
/// bound and a reader sizes what it asks for.
pub const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Ledger custom-metadata keys that are the service's, not the application's.
pub mod reserved {
    /// Keys under this prefix: no creator sets them (but a gateway sets
    /// [`PRINCIPAL_KEY`]) and no update changes them.
    pub const PREFIX: &str = "quire.";
    /// The ledger's owner: `role/id` of the certificate that created it,
    /// recorded by the metadata service.
    pub const OWNER_KEY: &str = "quire.owner";
    /// For a ledger created through the gateway: the HTTP principal it was
    /// created for (set and checked by the gateway).
    pub const PRINCIPAL_KEY: &str = "quire.principal";
}
