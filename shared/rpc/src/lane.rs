//! Frame I/O on a lane (one bidirectional QUIC stream), shared by client and server.

use bytes::{Bytes, BytesMut};
use prost::Message;
use quire_proto::codec::{encode_frame, FrameDecoder, FrameError};
use tokio::sync::mpsc;

/// Frames written to the stream in one write, at most (when more are queued).
/// One write per batch instead of per frame is what makes pipelining cheap.
const COALESCE_BYTES_MAX: usize = 256 * 1024;

/// QUIC application error code for a lane closed because its framing broke.
pub const LANE_ERROR_FRAMING: u32 = 1;
/// QUIC application error code for a lane or connection closed at shutdown.
pub const LANE_ERROR_SHUTDOWN: u32 = 2;

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
                Some(chunk) => self.dec.push(&chunk.bytes),
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

/// Writes every message from `rx` as frames until the channel closes, then
/// finishes the stream. Messages queued together go out in one write.
pub async fn write_frames<M: Message>(
    mut send: quinn::SendStream,
    mut rx: mpsc::Receiver<M>,
) -> Result<(), quinn::WriteError> {
    let mut buf = BytesMut::with_capacity(COALESCE_BYTES_MAX);
    while let Some(first) = rx.recv().await {
        buf.clear();
        encode_frame(&first, &mut buf);
        while buf.len() < COALESCE_BYTES_MAX {
            match rx.try_recv() {
                Ok(m) => encode_frame(&m, &mut buf),
                Err(_) => break,
            }
        }
        send.write_all(&buf).await?;
        if buf.capacity() > 2 * COALESCE_BYTES_MAX {
            // One large frame must not pin its size for the lane's whole life.
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
