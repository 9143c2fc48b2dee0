//! Property tests of every decoder: arbitrary bytes never panic, and any
//! stream of valid frames decodes back to the same messages however it is cut.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use prost::Message;
use quire_proto::codec::{encode_frame, FrameDecoder};
use quire_proto::fuzzing::decode_stream;
use quire_proto::v1::{self, request_frame::Body, RequestFrame};

fn arb_frame() -> impl Strategy<Value = RequestFrame> {
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048)
            .prop_map(|p| Body::Ping(v1::PingRequest { payload: Bytes::from(p), echo: true })),
        (any::<u64>(), any::<u64>(), any::<i64>(), proptest::collection::vec(any::<u8>(), 0..4096), any::<bool>())
            .prop_map(|(l, e, lac, p, rec)| Body::AddEntry(v1::AddEntryRequest {
                entry: Some(v1::Entry::sealed(l, e, lac, Bytes::from(p))),
                metadata_version: 3,
                expected_instance_id: "abc".into(),
                recovery: rec,
                replication: !rec,
            })),
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(l, after, t)| Body::WaitLac(v1::WaitLacRequest {
            ledger_id: l,
            after,
            timeout_ms: t
        })),
    ];
    (any::<u64>(), any::<u32>(), body).prop_map(|(id, t, b)| RequestFrame {
        request_id: id,
        timeout_ms: t,
        traceparent: String::new(),
        tracestate: String::new(),
        body: Some(b),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        decode_stream(&data, 1024);
    }

    /// Mostly-valid streams reach deeper: a real frame with bytes flipped.
    #[test]
    fn corrupted_frames_never_panic(frame in arb_frame(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut buf = BytesMut::new();
        encode_frame(&frame, &mut buf);
        let mut bytes = buf.to_vec();
        for (pos, x) in flips {
            let i = pos % bytes.len();
            bytes[i] ^= x | 1;
        }
        decode_stream(&bytes, 1 << 20);
    }

    #[test]
    fn frames_round_trip_however_the_stream_is_cut(
        frames in proptest::collection::vec(arb_frame(), 1..20),
        cuts in proptest::collection::vec(1usize..5000, 1..50),
    ) {
        let mut wire = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut wire);
        }
        let mut dec = FrameDecoder::new(1 << 20);
        let mut got = Vec::new();
        let mut rest = &wire[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            i += 1;
            dec.push(&rest[..n]);
            rest = &rest[n..];
            while let Some(f) = dec.next_frame().unwrap() {
                got.push(RequestFrame::decode(f).unwrap());
            }
        }
        dec.finish().unwrap();
        prop_assert_eq!(got, frames);
    }
}

/// Every file in fuzz/corpus-seed (minimised inputs the fuzzer found
/// interesting, and any that once crashed) is replayed here.
#[test]
fn seed_corpus_replays() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus-seed/decode_stream");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("fuzz/corpus-seed/decode_stream exists") {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        decode_stream(&data, 1 << 20);
        n += 1;
    }
    assert!(n > 0, "empty seed corpus");
}
