//! QUIC transport parameters shared by both ends.

use std::sync::Arc;
use std::time::Duration;

use crate::packets::Packets;

/// The largest UDP payload a quire endpoint sends or takes with
/// segmentation offload on (the default), and the bound of its MTU
/// discovery; [`crate::packets::Packets`] allows more with offload off. quinn's defaults (1 472 taken, discovery up to
/// 1 452) cut a megabyte into some 720 packets, each with its own header,
/// encryption call, acknowledgement and wake-up: the RPC bench's bulk phase
/// stopped at about 730 MB/s on 2 cores, 550 000 packets a second. A path
/// that carries larger datagrams (loopback: 65 536; jumbo frames: 9 000)
/// now gets them, and discovery still stops at what a path carries (a
/// 1 500-byte IPv4 Ethernet path: about 1 470, after a few probes the
/// kernel refuses), so this is safe on any network.
///
/// The default, and the bound with segmentation offload on
/// ([`crate::packets::Packets`]). Why 6 550 and not more: quinn sends up to 10 packets per `sendmsg`
/// with segmentation offload (GSO), and the kernel refuses a send over
/// 65 507 bytes with EMSGSIZE. quinn-udp 0.5 maps that refusal to success
/// (its `unix.rs`): the batch's packets are dropped without a word, counted
/// lost later, and repeated losses of full-size packets are taken for a
/// black hole, so a larger bound with GSO on ends in 1 200-byte packets
/// (measured: 9 000 here gave 646 MB/s, path MTU 1 200, three black holes).
pub const MAX_UDP_PAYLOAD_BYTES: u16 = 6_550;

/// Packets quinn hands the kernel in one GSO send, and the largest UDP
/// payload a send may carry. A copy of quinn 0.11's private
/// `MAX_TRANSMIT_SEGMENTS` (its `connection.rs`): an upgrade that raised
/// it would pass this assertion, and fail the loopback test in
/// tests/rpc.rs with a black hole.
pub(crate) const GSO_SEGMENTS_MAX: usize = 10;
pub(crate) const UDP_SEND_BYTES_MAX: usize = 65_507;
const _: () = assert!(MAX_UDP_PAYLOAD_BYTES as usize * GSO_SEGMENTS_MAX <= UDP_SEND_BYTES_MAX);

/// Lanes a client may open per connection. Each open lane can hold a partly
/// received frame, so this bounds what one connection pins in memory.
pub const MAX_LANES_PER_CONNECTION: u32 = 16;

/// `accept_lanes`: whether the peer may open lanes to us (servers: yes;
/// clients: no, they would never be read). MTU discovery searches up to
/// `packets`' payload.
pub(crate) fn transport_config(
    idle_timeout: Duration,
    keep_alive: Duration,
    accept_lanes: bool,
    packets: Packets,
) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    let lanes = if accept_lanes { MAX_LANES_PER_CONNECTION } else { 0 };
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(lanes));
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(0));
    // Windows sized for pipelined 1 KiB-1 MiB entries on a LAN: small windows cap
    // throughput at window/RTT long before the CPU does.
    t.stream_receive_window(quinn::VarInt::from_u32(16 * 1024 * 1024));
    t.receive_window(quinn::VarInt::from_u32(64 * 1024 * 1024));
    t.send_window(64 * 1024 * 1024);
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(idle_timeout).expect("idle timeout below QUIC's 2^62 ms bound"),
    ));
    t.keep_alive_interval(Some(keep_alive));
    let mut discovery = quinn::MtuDiscoveryConfig::default();
    discovery.upper_bound(packets.payload_bytes());
    t.mtu_discovery_config(Some(discovery));
    Arc::new(t)
}

/// `config` taking datagrams of up to `packets`' payload (the transport
/// parameter a peer sizes its packets by). Both ends need it: a peer's own
/// bound caps what discovery may reach.
pub(crate) fn sized(mut config: quinn::EndpointConfig, packets: Packets) -> quinn::EndpointConfig {
    config
        .max_udp_payload_size(packets.payload_bytes())
        .expect("Packets::new keeps it within QUIC's bounds (1 200 to 65 527)");
    config
}
