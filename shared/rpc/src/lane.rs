//! Frame I/O on a lane (one bidirectional QUIC stream), shared by client and server.

use bytes::{Bytes, BytesMut};
use prost::Message;
use quire_proto::codec::{encode_frame, FrameDecoder, FrameError};
use std::time::Duration;

use tokio::sync::mpsc;

/// Frames written to the stream in one write, at most (when more are queued).
/// One write per batch instead of per frame is what makes pipelining cheap.
const COALESCE_BYTES_MAX: usize = 256 * 1024;

/// QUIC application error code for a lane closed because its framing broke.
pub const LANE_ERROR_FRAMING: u32 = 1;
/// QUIC application error code for a lane or connection closed at shutdown.
pub const LANE_ERROR_SHUTDOWN: u32 = 2;
/// QUIC application error code for a lane reset because its peer stopped
/// reading (the send deadline passed).
pub const LANE_ERROR_STALLED: u32 = 3;
/// QUIC application error code for a connection closed because its peer's
/// certificate was revoked.
pub const LANE_ERROR_REVOKED: u32 = 4;

/// Why reading a lane stopped.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The byte stream could not be cut into frames (oversized or truncated).
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The stream or its connection failed.
    #[error("read: {0}")]
    Read(#[from] quinn::ReadError),
}

/// Cuts a QUIC receive stream into frame bodies.
pub struct FrameReader {
    recv: quinn::RecvStream,
    dec: FrameDecoder,
}

impl FrameReader {
    /// A reader refusing frames above `max_frame_bytes`.
    pub fn new(recv: quinn::RecvStream, max_frame_bytes: usize) -> Self {
        FrameReader { recv, dec: FrameDecoder::new(max_frame_bytes) }
    }

    /// The next frame body; `Ok(None)` when the peer finished the stream cleanly.
    pub async fn next(&mut self) -> Result<Option<Bytes>, LaneError> {
        loop {
            if let Some(frame) = self.dec.next_frame()? {
                return Ok(Some(frame));
            }
            match self.recv.read_chunk(COALESCE_BYTES_MAX, true).await? {
                Some(chunk) => self.dec.push_bytes(chunk.bytes),
                None => {
                    self.dec.finish()?;
                    return Ok(None);
                }
            }
        }
    }

    /// Tells the peer to stop sending on this stream.
    pub fn stop(&mut self, code: u32) {
        // Already stopped or finished: nothing left to refuse.
        let _ = self.recv.stop(quinn::VarInt::from_u32(code));
    }
}

/// Something a lane writer sends: a frame, and whatever it holds until the
/// frame has been handed to QUIC (a response's share of the byte budget).
pub trait Outgoing: Send + 'static {
    /// Appends the frame (length prefix and message) to `buf`.
    fn encode(&self, buf: &mut BytesMut);
}

impl<M: Message + Send + 'static> Outgoing for M {
    fn encode(&self, buf: &mut BytesMut) {
        encode_frame(self, buf)
    }
}

/// Why a lane writer stopped before its channel closed.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailed {
    /// The stream or its connection failed.
    #[error(transparent)]
    Write(#[from] quinn::WriteError),
    /// The peer read nothing for the send deadline: the stream was reset.
    #[error("the peer took none of {bytes} bytes for {timeout:?}: stream reset")]
    Stalled {
        /// Bytes waiting to be written.
        bytes: usize,
        /// The deadline.
        timeout: Duration,
    },
}

/// Writes every item from `rx` as frames until the channel closes, then
/// finishes the stream. Items queued together go out in one write, and are
/// dropped (their budget given back) once it is done. With `send_timeout`,
/// a write the peer does not take within it (a reader that stopped reading
/// while the flow-control window is shut) resets the stream: what the lane
/// holds is given back rather than pinned for as long as the peer likes.
pub async fn write_frames<T: Outgoing>(
    mut send: quinn::SendStream,
    mut rx: mpsc::Receiver<T>,
    send_timeout: Option<Duration>,
) -> Result<(), WriteFailed> {
    let mut buf = BytesMut::with_capacity(COALESCE_BYTES_MAX);
    let mut batch: Vec<T> = Vec::new();
    while let Some(first) = rx.recv().await {
        first.encode(&mut buf);
        batch.push(first);
        while buf.len() < COALESCE_BYTES_MAX {
            match rx.try_recv() {
                Ok(m) => {
                    m.encode(&mut buf);
                    batch.push(m);
                }
                Err(_) => break,
            }
        }
        // Handed to QUIC as it is (QUIC keeps it until the peer acknowledges
        // it) rather than copied into a buffer of QUIC's: a batch read's
        // megabyte response is otherwise copied once more, into fresh memory.
        let out = buf.split().freeze();
        let bytes = out.len();
        match send_timeout {
            Some(t) => match tokio::time::timeout(t, send.write_chunk(out)).await {
                Ok(r) => r?,
                Err(_) => {
                    let _ = send.reset(quinn::VarInt::from_u32(LANE_ERROR_STALLED));
                    return Err(WriteFailed::Stalled { bytes, timeout: t });
                }
            },
            None => send.write_chunk(out).await?,
        }
        batch.clear();
        if buf.capacity() < COALESCE_BYTES_MAX / 4 {
            // What the split left is too little to coalesce into.
            buf = BytesMut::with_capacity(COALESCE_BYTES_MAX);
        }
    }
    // The stream may already be reset by the peer; then there is nothing to finish.
    if send.finish().is_ok() {
        // Written is not delivered: wait until the peer has read to the end (or the
        // connection is gone), so that closing the connection next loses nothing.
        let _ = send.stopped().await;
    }
    Ok(())
}
