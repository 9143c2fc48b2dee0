//! Frame codec: a 4-byte big-endian length, then that many bytes of one
//! protobuf message.
//!
//! The decoder is a plain state machine over pushed bytes, so the same code runs
//! under the QUIC stream reader, the proptest suite and the fuzzer. Its one
//! promise: whatever bytes arrive, it returns frames, asks for more, or returns
//! an error; it never panics and never buffers more than one frame plus one read.
//!
//! It keeps what arrives as the chunks it came in (QUIC hands the stream over
//! as `Bytes` slices of its receive buffers) and copies a frame's bytes once,
//! into a buffer of exactly the frame's size, when the last of them arrives; a
//! frame that lies within one chunk is not copied at all. Collecting into one
//! growing buffer instead copied a batch read's megabyte frame two or three
//! times over (each doubling, and again when a frame was split off a buffer
//! still shared with the previous one).

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Default bound on one frame's body: room for a maximal entry plus its envelope.
pub const MAX_FRAME_BYTES_DEFAULT: usize = crate::MAX_ENTRY_BYTES + 64 * 1024;

/// Chunks below this are copied into a shared tail buffer rather than kept:
/// a kept chunk pins the whole receive buffer it is a slice of, so a peer
/// sending its stream a few bytes per packet would otherwise make this
/// decoder hold far more memory than it sent. Above it, what a chunk can pin
/// (one receive buffer of QUIC's) is a small multiple of the chunk.
pub const SMALL_CHUNK_BYTES: usize = 1024;

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
    /// What arrived and is not yet returned, oldest first; never an empty chunk.
    chunks: VecDeque<Bytes>,
    /// Small chunks copied together; logically after every chunk in `chunks`.
    tail: BytesMut,
    /// Bytes in `chunks` and `tail` together.
    buffered_bytes: usize,
    max_frame_bytes: usize,
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max_frame_bytes`.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { chunks: VecDeque::new(), tail: BytesMut::new(), buffered_bytes: 0, max_frame_bytes }
    }

    /// Appends bytes read from the stream (copied).
    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.len() < SMALL_CHUNK_BYTES {
            self.tail.extend_from_slice(bytes);
            self.buffered_bytes += bytes.len();
        } else {
            self.push_bytes(Bytes::copy_from_slice(bytes));
        }
    }

    /// Appends a chunk read from the stream, kept as it is unless it is small.
    pub fn push_bytes(&mut self, bytes: Bytes) {
        if bytes.len() < SMALL_CHUNK_BYTES {
            self.push(&bytes);
            return;
        }
        self.seal_tail();
        self.buffered_bytes += bytes.len();
        self.chunks.push_back(bytes);
    }

    /// Moves the tail buffer's bytes to the chunk queue, keeping their order.
    fn seal_tail(&mut self) {
        if !self.tail.is_empty() {
            self.chunks.push_back(self.tail.split().freeze());
        }
    }

    /// Bytes buffered and not yet returned as frames.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    /// The next complete frame body, `Ok(None)` if more bytes are needed.
    ///
    /// The returned `Bytes` is a slice of a received chunk or a buffer of the
    /// frame's own: decoding a message from it with `bytes` fields is zero-copy.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buffered_bytes < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let mut header = [0u8; FRAME_HEADER_BYTES];
        self.peek(&mut header);
        let len_bytes = u32::from_be_bytes(header) as usize;
        if len_bytes > self.max_frame_bytes {
            return Err(FrameError::TooLarge { len_bytes, max_bytes: self.max_frame_bytes });
        }
        if self.buffered_bytes < FRAME_HEADER_BYTES + len_bytes {
            // Nothing is reserved for the announced length: four bytes from a
            // peer must not buy a multi-megabyte allocation. Memory is what arrived.
            return Ok(None);
        }
        // Sealed only now that the frame is whole: sealing on every call would
        // keep one slice per pushed chunk, the very thing the tail avoids.
        self.seal_tail();
        self.take(FRAME_HEADER_BYTES);
        Ok(Some(self.take(len_bytes)))
    }

    /// Copies the first `out.len()` buffered bytes into `out` without consuming them.
    fn peek(&self, out: &mut [u8]) {
        let mut at = 0;
        for c in self.chunks.iter().map(|c| &c[..]).chain(std::iter::once(&self.tail[..])) {
            let n = c.len().min(out.len() - at);
            out[at..at + n].copy_from_slice(&c[..n]);
            at += n;
            if at == out.len() {
                return;
            }
        }
        debug_assert!(false, "peek past the buffered bytes");
    }

    /// The first `n` buffered bytes (all sealed into `chunks`), consumed: a
    /// slice of the front chunk when it holds them all, else one copy.
    fn take(&mut self, n: usize) -> Bytes {
        debug_assert!(n <= self.buffered_bytes && self.tail.is_empty());
        self.buffered_bytes -= n;
        if n == 0 {
            return Bytes::new();
        }
        let front = self.chunks.front_mut().expect("n bytes are buffered");
        if front.len() >= n {
            let out = front.split_to(n);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            return out;
        }
        let mut out = BytesMut::with_capacity(n);
        while out.len() < n {
            let front = self.chunks.front_mut().expect("n bytes are buffered");
            let k = front.len().min(n - out.len());
            out.extend_from_slice(&front[..k]);
            front.advance(k);
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        out.freeze()
    }

    /// Call at end of stream: an error if a partial frame is left.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buffered_bytes == 0 {
            Ok(())
        } else {
            Err(FrameError::Truncated { buffered_bytes: self.buffered_bytes })
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
        for step in [1, 3, 7, 1000, 5000] {
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
    fn a_frame_within_one_chunk_is_a_slice_of_it_and_a_larger_one_holds_only_what_arrived() {
        let mut wire = BytesMut::new();
        encode_frame(&ping(1, &[7u8; 4000]), &mut wire);
        encode_frame(&ping(2, &vec![5u8; 1 << 20]), &mut wire);
        let wire = wire.freeze();
        let first = FRAME_HEADER_BYTES + ping(1, &[7u8; 4000]).encoded_len();
        let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
        // The first frame and the start of the second in one chunk, the rest in
        // packet-sized chunks.
        dec.push_bytes(wire.slice(..first + 2000));
        let f = dec.next_frame().unwrap().expect("the first frame");
        assert_eq!(f.as_ptr(), wire[FRAME_HEADER_BYTES..].as_ptr(), "not copied");
        assert_eq!(RequestFrame::decode(f).unwrap(), ping(1, &[7u8; 4000]));
        let mut at = first + 2000;
        while at < wire.len() {
            assert_eq!(dec.next_frame(), Ok(None));
            let end = (at + 1400).min(wire.len());
            dec.push_bytes(wire.slice(at..end));
            at = end;
        }
        // Memory held is what arrived: the chunks themselves.
        assert_eq!(dec.buffered_bytes(), wire.len() - first);
        let f = dec.next_frame().unwrap().expect("the second frame");
        assert_eq!(RequestFrame::decode(f).unwrap(), ping(2, &vec![5u8; 1 << 20]));
        assert_eq!(dec.buffered_bytes(), 0);
        dec.finish().unwrap();
    }

    #[test]
    fn small_chunks_are_copied_together_and_keep_their_order_with_kept_ones() {
        let mut wire = BytesMut::new();
        for i in 0..50u64 {
            encode_frame(&ping(i, &vec![i as u8; (i as usize * 97) % 3000]), &mut wire);
        }
        let wire = wire.freeze();
        // Alternating small and large chunks, so that tail and kept chunks interleave.
        let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
        let (mut at, mut got, mut big) = (0, Vec::new(), false);
        while at < wire.len() {
            let step = if big { SMALL_CHUNK_BYTES + 333 } else { 17 };
            big = !big;
            let end = (at + step).min(wire.len());
            dec.push_bytes(wire.slice(at..end));
            at = end;
            while let Some(f) = dec.next_frame().unwrap() {
                got.push(RequestFrame::decode(f).unwrap());
            }
            assert!(dec.chunks.iter().all(|c| !c.is_empty()));
        }
        dec.finish().unwrap();
        assert_eq!(got.len(), 50);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(*f, ping(i as u64, &vec![i as u8; (i * 97) % 3000]));
        }
    }

    #[test]
    fn a_stream_of_tiny_chunks_is_held_as_one_buffer_not_as_many_slices() {
        let mut wire = BytesMut::new();
        encode_frame(&ping(3, &[2u8; 20_000]), &mut wire);
        let wire = wire.freeze();
        let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
        for i in 0..wire.len() - 1 {
            // Each a slice of one large buffer that keeping it would pin.
            dec.push_bytes(wire.slice(i..i + 1));
            assert_eq!(dec.next_frame(), Ok(None));
        }
        assert!(dec.chunks.len() <= wire.len() / SMALL_CHUNK_BYTES + 1, "{} chunks kept", dec.chunks.len());
        dec.push_bytes(wire.slice(wire.len() - 1..));
        assert_eq!(RequestFrame::decode(dec.next_frame().unwrap().unwrap()).unwrap(), ping(3, &[2u8; 20_000]));
    }

    #[test]
    fn a_header_split_over_chunks_is_read_whole() {
        let mut wire = BytesMut::new();
        encode_frame(&ping(9, &[1u8; 2000]), &mut wire);
        let mut dec = FrameDecoder::new(MAX_FRAME_BYTES_DEFAULT);
        for b in &wire[..3] {
            dec.push(&[*b]);
            assert_eq!(dec.next_frame(), Ok(None));
        }
        dec.push_bytes(Bytes::copy_from_slice(&wire[3..]));
        assert_eq!(RequestFrame::decode(dec.next_frame().unwrap().unwrap()).unwrap(), ping(9, &[1u8; 2000]));
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
