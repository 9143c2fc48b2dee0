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

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use socket2::{Domain, Protocol, Socket, Type};

use crate::packets::Packets;

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

/// A QUIC endpoint on `addr` cutting its traffic as `packets` says, with
/// `server` when it accepts connections.
pub(crate) fn endpoint(
    addr: SocketAddr,
    packets: Packets,
    config: quinn::EndpointConfig,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    let socket = bind_udp(addr)?;
    let runtime = quinn::default_runtime().ok_or_else(|| io::Error::other("no async runtime"))?;
    let config = crate::transport::sized(config, packets);
    if packets.offload() {
        return quinn::Endpoint::new(config, server, socket, runtime);
    }
    let socket = unsegmented(socket, &*runtime)?;
    quinn::Endpoint::new_with_abstract_socket(config, server, socket, runtime)
}

/// `socket` as quinn's, one packet per datagram each way.
fn unsegmented(
    socket: std::net::UdpSocket,
    runtime: &dyn quinn::Runtime,
) -> io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
    // quinn-udp turns receive offload on when it wraps the socket; a second
    // handle on the same socket turns it off again after.
    let handle = socket.try_clone()?;
    let socket = Arc::new(Unsegmented(runtime.wrap_udp_socket(socket)?));
    receive_offload_off(&handle)?;
    Ok(socket)
}

/// Turns UDP_GRO off. With it on, the kernel hands over up to 64 packets
/// coalesced in one receive, which overflows (and truncates into) a buffer
/// sized for one packet.
fn receive_offload_off(socket: &std::net::UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let off: libc::c_int = 0;
    // SAFETY: a valid socket descriptor, an int option, its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&off as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        // A kernel without UDP GRO (before 5.0, gVisor) never coalesces:
        // quinn-udp's attempt to turn it on failed the same way.
        e if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)) => Ok(()),
        e => Err(e),
    }
}

/// quinn's socket with one packet per datagram each way: no segmentation
/// offload, so packets may be as large as one datagram ([`Packets`]).
struct Unsegmented(Arc<dyn quinn::AsyncUdpSocket>);

impl fmt::Debug for Unsegmented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Unsegmented").field(&self.0).finish()
    }
}

impl quinn::AsyncUdpSocket for Unsegmented {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        self.0.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        debug_assert!(transmit.segment_size.is_none(), "one packet per send was asked for");
        self.0.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        1
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
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

    fn receive_offload(socket: &std::net::UdpSocket) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let mut on: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket descriptor, an int and its size.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&mut on as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        on
    }

    /// quinn-udp turns GRO on when it wraps a socket; an unsegmented
    /// socket must have it off, or the kernel hands a peer's 10-packet send
    /// to a buffer sized for one packet, truncated.
    #[tokio::test]
    async fn an_unsegmented_socket_has_receive_offload_off_where_quinn_turns_it_on() {
        let runtime = quinn::default_runtime().unwrap();
        let plain = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let plain_handle = plain.try_clone().unwrap();
        let _quinns = runtime.wrap_udp_socket(plain).unwrap();
        assert_eq!(receive_offload(&plain_handle), 1, "quinn-udp no longer turns GRO on: revisit unsegmented()");
        let ours = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let ours_handle = ours.try_clone().unwrap();
        let socket = unsegmented(ours, &*runtime).unwrap();
        assert_eq!(receive_offload(&ours_handle), 0);
        assert_eq!((socket.max_transmit_segments(), socket.max_receive_segments()), (1, 1));
    }
}
