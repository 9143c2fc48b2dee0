//! The decoder workload shared by the cargo-fuzz targets (fuzz/) and the
//! proptest run in `make test`, so both exercise exactly the same code.

use prost::Message;

use crate::codec::FrameDecoder;
use crate::v1::{RequestFrame, ResponseFrame};

/// Feeds `data` to the frame decoder in chunks whose sizes come from the data
/// itself, decodes every frame as a request and a response, and checks every
/// decoded entry's digest. Must never panic, whatever the bytes.
pub fn decode_stream(data: &[u8], max_frame_bytes: usize) {
    let mut dec = FrameDecoder::new(max_frame_bytes);
    let mut rest = data;
    while !rest.is_empty() {
        // Mostly small chunks (copied into the decoder's tail), and with the
        // top bit set, chunks past SMALL_CHUNK_BYTES (kept as they are).
        let step = (rest[0] as usize % 64) + 1;
        let step = if rest[0] & 0x80 != 0 { step * 64 } else { step };
        let (chunk, tail) = rest.split_at(step.min(rest.len()));
        rest = tail;
        dec.push_bytes(bytes::Bytes::copy_from_slice(chunk));
        loop {
            match dec.next_frame() {
                Ok(Some(frame)) => decode_frame(frame),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = dec.finish();
}

/// Decodes one frame body both ways and touches what a server would.
pub fn decode_frame(frame: bytes::Bytes) {
    // The server scans a frame before it decodes it (peek.rs).
    if let Ok(p) = crate::peek::peek_request(&frame) {
        let _ = crate::peek::over_bounds(&p);
    }
    if let Ok(req) = RequestFrame::decode(frame.clone()) {
        if let Some(body) = &req.body {
            let m = crate::Method::of_request(body);
            let _ = (m.name(), m.service());
            if let crate::v1::request_frame::Body::AddEntry(a) = body {
                if let Some(e) = &a.entry {
                    let _ = e.digest_ok();
                }
            }
        }
    }
    if let Ok(resp) = ResponseFrame::decode(frame) {
        let _ = crate::v1::ErrorCode::try_from(resp.code);
        if let Some(crate::v1::response_frame::Body::ReadEntry(r)) = &resp.body {
            if let Some(e) = &r.entry {
                let _ = e.digest_ok();
            }
        }
    }
}
