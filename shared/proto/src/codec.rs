//! Frame codec: a 4-byte big-endian length, then that many bytes of one
//! protobuf message.
//!
//! The decoder is a plain state machine over pushed bytes, so the same code runs
//! under the QUIC stream reader, the proptest suite and the fuzzer. Its one
//! promise: whatever bytes arrive, it returns frames, asks for more, or returns
//! an error; it never panics and never buffers more than one frame plus one read.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Default bound on one frame's body: room for a maximal entry plus its envelope.
pub const MAX_FRAME_BYTES_DEFAULT: usize = crate::MAX_ENTRY_BYTES + 64 * 1024;

/// Why a byte stream could not be cut into frames.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix announces more than the receiver's limit. The stream's
    /// framing can no longer be trusted and the stream must be closed.
    #[error("frame of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge {
        /// The announced length.
        len_bytes: usize,
        /// The receiver's limit.
        max_bytes: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame ({buffered_bytes} bytes buffered)")]
    Truncated {
        /// Bytes received of the unfinished frame.
        buffered_bytes: usize,
    },
}

/// Cuts a byte stream into frame bodies.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame_bytes: usize,
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max_frame_bytes`.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { buf: BytesMut::with_capacity(64 * 1024), max_frame_bytes }
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.reserve_for_frame(bytes.len());
        self.buf.extend_from_slice(bytes);
    }

    /// Once a quarter of a frame has arrived, room for the rest of it at
    /// once: growing by doubling copies a large frame (a batch read's
    /// megabyte) several times over, each time into fresh memory. A peer must
    /// still send a quarter of what it makes this decoder hold.
    fn reserve_for_frame(&mut self, incoming_bytes: usize) {
        if self.buf.len() < FRAME_HEADER_BYTES {
            return;
        }
        let len_bytes = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        let have = self.buf.len() + incoming_bytes;
        let whole = FRAME_HEADER_BYTES + len_bytes;
        if len_bytes <= self.max_frame_bytes && have < whole && have >= whole / 4 {
            self.buf.reserve(whole - self.buf.len());
        }
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame body, `Ok(None)` if more bytes are needed.
    ///
    /// The returned `Bytes` is a slice of the receive buffer: decoding a message
    /// from it with `bytes` fields is zero-copy.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buf.len() < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let len_bytes = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len_bytes > self.max_frame_bytes {
            return Err(FrameError::TooLarge { len_bytes, max_bytes: self.max_frame_bytes });
        }
        if self.buf.len() < FRAME_HEADER_BYTES + len_bytes {
            // No reserve for the announced length: four bytes from a peer must
            // not buy a multi-megabyte allocation. The buffer grows as bytes arrive.
            return Ok(None);
        }
        self.buf.advance(FRAME_HEADER_BYTES);
        Ok(Some(self.buf.split_to(len_bytes).freeze()))
    }

    /// Call at end of stream: an error if a partial frame is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated { buffered_bytes: self.buf.len() })
        }
    }
}

/// Appends `msg` as one frame to `out`.
///
/// Panics if the encoded message exceeds `u32::MAX` bytes: callers bound their
/// messages far below that (entries by [`crate::MAX_ENTRY_BYTES`]).
pub fn encode_frame<M: Message>(msg: &M, out: &mut BytesMut) {
    let len = msg.encoded_len();
    assert!(u32::try_from(len).is_ok(), "frame of {len} bytes cannot be length-prefixed");
    out.reserve(FRAME_HEADER_BYTES + len);
    out.put_u32(len as u32);
    msg.encode(out).expect("reserved capacity for the whole frame");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::{request_frame, PingRequest, RequestFrame};

    fn ping(id: u64, payload: &[u8]) -> RequestFrame {
        RequestFrame {
            request_id: id,
            body: Some(request_frame::Body::Ping(PingRequest { payload: Bytes::copy_from_slice(payload), echo: true })),
            ..Default::default()
        }
    }

    #[test]
    fn frames_survive_any_split_of_the_stream() {
        let mut wire = BytesMut::new();
        for i in 0..10u64 {
            encode_frame(&ping(i, &vec![i as u8; i as usize * 100]), &mut wire);
        }
        for step in [1, 3, 7, 1000] {
            let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
            let mut got = Vec::new();
            for chunk in wire.chunks(step) {
                dec.push(chunk);
                while let Some(f) = dec.next_frame().unwrap() {
                    got.push(RequestFrame::decode(f).unwrap());
                }
            }
            dec.finish().unwrap();
            assert_eq!(got.len(), 10);
            for (i, f) in got.iter().enumerate() {
                assert_eq!(*f, ping(i as u64, &vec![i as u8; i * 100]));
            }
        }
    }

    #[test]
    fn a_large_frame_is_given_its_room_once_a_quarter_of_it_has_arrived() {
        let mut wire = BytesMut::new();
        encode_frame(&ping(1, &vec![5u8; 1 << 20]), &mut wire);
        let whole = wire.len();
        let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
        // The header alone buys nothing beyond the initial buffer.
        dec.push(&wire[..FRAME_HEADER_BYTES]);
        assert!(dec.buf.capacity() < whole);
        let mut at = FRAME_HEADER_BYTES;
        for chunk in wire[at..].chunks(1200) {
            dec.push(chunk);
            at += chunk.len();
            if at >= whole / 4 {
                assert!(dec.buf.capacity() >= whole, "{} bytes of room at {at} of {whole}", dec.buf.capacity());
            } else {
                assert!(dec.buf.capacity() < whole, "room for the whole frame before a quarter of it came");
            }
        }
        let f = dec.next_frame().unwrap().expect("the whole frame");
        assert_eq!(RequestFrame::decode(f).unwrap(), ping(1, &vec![5u8; 1 << 20]));
    }

    #[test]
    fn oversized_length_is_refused_before_buffering() {
        let mut dec = FrameDecoder::new(1024);
        dec.push(&(1025u32).to_be_bytes());
        assert_eq!(dec.next_frame(), Err(FrameError::TooLarge { len_bytes: 1025, max_bytes: 1024 }));
    }

    #[test]
    fn truncated_stream_is_reported() {
        let mut dec = FrameDecoder::new(1024);
        dec.push(&[0, 0, 0, 10, 1, 2]);
        assert_eq!(dec.next_frame(), Ok(None));
        assert_eq!(dec.finish(), Err(FrameError::Truncated { buffered_bytes: 6 }));
    }
}
