//! The packet setting every quire process takes (`--udp-payload-bytes`,
//! `--udp-offload`): checked and put in force at start, before any QUIC
//! endpoint exists ([`quire_rpc::Packets`]).

use anyhow::Context;
use quire_rpc::Packets;

/// Segmentation offload, on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Offload {
    /// The kernel batches packets (GSO, GRO): packets up to 6 550 bytes.
    On,
    /// One packet per datagram: packets up to 65 507 bytes.
    Off,
}

/// How this process's QUIC endpoints cut traffic into UDP datagrams.
#[derive(Debug, Clone, clap::Args)]
pub struct PacketArgs {
    /// Largest UDP payload of a QUIC packet, in bytes; MTU discovery still
    /// stops at what the path carries. At most 6 550 with --udp-offload on;
    /// up to 65 507 with it off (loopback, one host, jumbo frames).
    #[arg(long, env = "QUIRE_UDP_PAYLOAD_BYTES", global = true, default_value_t = Packets::DEFAULT.payload_bytes())]
    pub udp_payload_bytes: u16,

    /// Segmentation offload: `on` hands the kernel up to 10 packets per
    /// system call (best on ordinary 1 500-byte networks); `off` sends
    /// each packet alone and allows larger ones.
    #[arg(long, env = "QUIRE_UDP_OFFLOAD", global = true, value_enum, default_value = "on")]
    pub udp_offload: Offload,
}

impl PacketArgs {
    /// Checks the setting and makes it the process's (a size the kernel
    /// would refuse is an error here, not dropped batches later).
    pub fn install(&self) -> anyhow::Result<Packets> {
        let packets = Packets::new(self.udp_payload_bytes, self.udp_offload == Offload::On)
            .context("--udp-payload-bytes / --udp-offload")?;
        packets.install().map_err(|other| {
            anyhow::anyhow!("the packet setting was already {other:?} when {packets:?} was asked for")
        })?;
        Ok(packets)
    }

    /// The setting as environment variables, for child processes.
    pub fn env(packets: Packets) -> [(&'static str, String); 2] {
        [
            ("QUIRE_UDP_PAYLOAD_BYTES", packets.payload_bytes().to_string()),
            ("QUIRE_UDP_OFFLOAD", if packets.offload() { "on" } else { "off" }.to_string()),
        ]
    }
}
