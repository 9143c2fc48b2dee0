//! Arbitrary bytes as a bookie entry read back as a log record.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quire_log::fuzzing::decode_entry(data);
});
