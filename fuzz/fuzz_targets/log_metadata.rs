//! Arbitrary bytes as a log's stored or answered metadata.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quire_log::fuzzing::decode_log_metadata(data);
});
