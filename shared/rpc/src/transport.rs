//! QUIC transport parameters shared by both ends.

use std::sync::Arc;
use std::time::Duration;

/// Lanes a client may open per connection. Each open lane can hold a partly
/// received frame, so this bounds what one connection pins in memory.
pub const MAX_LANES_PER_CONNECTION: u32 = 16;

/// `accept_lanes`: whether the peer may open lanes to us (servers: yes;
/// clients: no, they would never be read).
pub(crate) fn transport_config(
    idle_timeout: Duration,
    keep_alive: Duration,
    accept_lanes: bool,
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
    Arc::new(t)
}
