//! Arbitrary bytes as a lane's byte stream: frame cutting, then request and
//! response decoding of every frame.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quire_proto::fuzzing::decode_stream(data, 1 << 20);
});
