//! How an endpoint cuts its traffic into UDP datagrams: the largest payload
//! it sends and takes, and whether the kernel batches them (segmentation
//! offload). One setting per process, checked when it is made: a size the
//! kernel would refuse is an error at start, never batches dropped later.

use std::sync::OnceLock;

use crate::transport::{GSO_SEGMENTS_MAX, UDP_SEND_BYTES_MAX};

/// The smallest UDP payload QUIC allows (RFC 9000 §14: every path must carry 1 200).
pub const MIN_UDP_PAYLOAD_BYTES: u16 = 1_200;

/// The largest payload one UDP datagram can carry over IPv4 (65 535 less
/// the IP and UDP headers); IPv6 allows 20 more, which we do not use.
pub const MAX_UDP_PAYLOAD_BYTES_UNSEGMENTED: u16 = UDP_SEND_BYTES_MAX as u16;

const OFFLOAD_MAX: u16 = crate::MAX_UDP_PAYLOAD_BYTES;

/// What the packets of a process's QUIC endpoints may be.
///
/// - Offload on (the default): quinn hands the kernel up to 10 packets in
///   one `sendmsg` (GSO) and takes up to 64 in one receive (GRO). Fewer
///   system calls, so it carries the most per CPU on a network of ordinary
///   1 500-byte frames; packets are at most [`crate::MAX_UDP_PAYLOAD_BYTES`].
/// - Offload off: one packet per datagram each way, and packets up to
///   65 507 bytes. For paths that carry large datagrams (loopback, a
///   single-host deployment, jumbo frames): measured on loopback, 16 384
///   bytes carried 1.5 GB/s and 6 550 with offload 1.2 GB/s
///   (docs/benchmarks.md). On a 1 500-byte path discovery stops at the
///   path's MTU and each packet costs its own system call: keep offload on
///   there. The endpoint's receive buffer is smaller too (quinn sizes it
///   at payload x receive segments x 32: 2.1 MB at 65 000 bytes without
///   offload, 13.4 MB at 6 550 with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packets {
    payload_bytes: u16,
    offload: bool,
}

/// A packet setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PacketsError {
    /// Below what QUIC requires every path to carry.
    #[error("a UDP payload of {0} bytes is below QUIC's minimum of {MIN_UDP_PAYLOAD_BYTES}")]
    TooSmall(u16),
    /// Larger than one UDP datagram can be.
    #[error("a UDP payload of {0} bytes exceeds the largest UDP datagram ({MAX_UDP_PAYLOAD_BYTES_UNSEGMENTED} bytes)")]
    TooLarge(u16),
    /// Larger than a segmentation-offload batch allows.
    #[error(
        "a UDP payload of {0} bytes with segmentation offload on: quinn sends up to {GSO_SEGMENTS_MAX} packets \
         per system call, the kernel refuses a send over {UDP_SEND_BYTES_MAX} bytes, and quinn drops such a \
         batch without an error (connections then fall back to 1 200-byte packets); give at most \
         {OFFLOAD_MAX} bytes, or turn segmentation offload off"
    )]
    TooLargeForOffload(u16),
}

impl Packets {
    /// Offload on, 6 550-byte packets: safe on any network.
    pub const DEFAULT: Packets = Packets { payload_bytes: crate::MAX_UDP_PAYLOAD_BYTES, offload: true };

    /// Packets of at most `payload_bytes`, with segmentation offload on or off.
    pub fn new(payload_bytes: u16, offload: bool) -> Result<Packets, PacketsError> {
        if payload_bytes < MIN_UDP_PAYLOAD_BYTES {
            return Err(PacketsError::TooSmall(payload_bytes));
        }
        if payload_bytes > MAX_UDP_PAYLOAD_BYTES_UNSEGMENTED {
            return Err(PacketsError::TooLarge(payload_bytes));
        }
        if offload && payload_bytes > crate::MAX_UDP_PAYLOAD_BYTES {
            return Err(PacketsError::TooLargeForOffload(payload_bytes));
        }
        Ok(Packets { payload_bytes, offload })
    }

    /// The largest UDP payload sent or taken, and MTU discovery's bound.
    pub fn payload_bytes(&self) -> u16 {
        self.payload_bytes
    }

    /// Whether the kernel batches packets (GSO and GRO).
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// What this process's endpoints use: the setting installed at start
    /// ([`Packets::install`]), or [`Packets::DEFAULT`].
    pub fn of_process() -> Packets {
        PROCESS.get().copied().unwrap_or(Packets::DEFAULT)
    }

    /// Makes this the process's setting. Once only, before the first
    /// endpoint: endpoints made before keep what they were made with.
    /// Installing the same setting again is allowed; another is refused.
    pub fn install(self) -> Result<(), Packets> {
        match PROCESS.set(self) {
            Ok(()) => Ok(()),
            Err(_) if Packets::of_process() == self => Ok(()),
            Err(_) => Err(Packets::of_process()),
        }
    }
}

impl Default for Packets {
    fn default() -> Self {
        Packets::of_process()
    }
}

static PROCESS: OnceLock<Packets> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_the_kernel_would_refuse_are_errors_not_drops() {
        assert_eq!(Packets::new(6_550, true).unwrap().payload_bytes(), 6_550);
        assert_eq!(Packets::new(9_000, true), Err(PacketsError::TooLargeForOffload(9_000)));
        assert_eq!(Packets::new(6_551, true), Err(PacketsError::TooLargeForOffload(6_551)));
        assert_eq!(Packets::new(1_199, false), Err(PacketsError::TooSmall(1_199)));
        assert_eq!(Packets::new(65_508, false), Err(PacketsError::TooLarge(65_508)));
        let p = Packets::new(65_507, false).unwrap();
        assert!(!p.offload());
        assert_eq!(p.payload_bytes(), 65_507);
        // The message says what to do.
        let text = PacketsError::TooLargeForOffload(9_000).to_string();
        assert!(text.contains("at most 6550 bytes") && text.contains("offload off"), "{text}");
    }

    #[test]
    fn the_default_is_safe_on_any_network() {
        assert_eq!(Packets::new(Packets::DEFAULT.payload_bytes(), Packets::DEFAULT.offload()), Ok(Packets::DEFAULT));
    }
}
