//! The UDP sockets QUIC endpoints run on, with receive and send buffers
//! sized for bursts.
//!
//! Linux's default UDP receive buffer (rmem_default, 208 KiB here) holds
//! about 150 datagrams. A batch read answers with a megabyte at once, and a
//! receiver busy for a moment drops what overflows: a catch-up read over
//! loopback lost 1.7% of its datagrams that way (RcvbufErrors in
//! /proc/net/snmp), and QUIC's congestion controller took each loss for
//! congestion, halved its window and left megabyte responses waiting for
//! hundreds of milliseconds. With 6 550-byte packets
//! ([`crate::MAX_UDP_PAYLOAD_BYTES`]) a sender outruns a busy receiver
//! sooner: the RPC bench's bulk phase lost 4 000 datagrams in 5 s to a
//! 4 MiB buffer (RcvbufErrors), none to 16 MiB, and carried 5 % more. The
//! kernel caps what is asked at net.core.rmem_max / wmem_max
//! (deploy/README.md says how to raise them).

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Receive and send buffer asked for each endpoint's socket.
pub const SOCKET_BUFFER_BYTES: usize = 16 << 20;

/// A UDP socket bound to `addr` with [`SOCKET_BUFFER_BYTES`] buffers (or as
/// much as the kernel allows); an IPv6 wildcard also takes IPv4.
pub(crate) fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // Dual-stack where the host allows it; IPv6-only otherwise.
        let _ = socket.set_only_v6(false);
    }
    // Best effort: a smaller buffer than asked still works, only with more
    // loss under bursts. The kernel silently caps the size at its maximum.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_socket_gets_the_buffers_asked_for_up_to_the_kernels_cap() {
        let socket = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let s = socket2::SockRef::from(&socket);
        let cap = |name: &str| -> usize {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}")).unwrap().trim().parse().unwrap()
        };
        // Linux grants min(asked, its cap) and reports twice that (its
        // bookkeeping overhead included): exactly, so a socket left at the
        // default (208 KiB here) fails this.
        assert_eq!(s.recv_buffer_size().unwrap(), 2 * SOCKET_BUFFER_BYTES.min(cap("rmem_max")));
        assert_eq!(s.send_buffer_size().unwrap(), 2 * SOCKET_BUFFER_BYTES.min(cap("wmem_max")));
    }
}
