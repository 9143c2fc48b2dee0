//! Arbitrary bytes as one frame body.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quire_proto::fuzzing::decode_frame(bytes::Bytes::copy_from_slice(data));
});
