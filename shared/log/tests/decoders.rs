//! The log decoders under arbitrary bytes (the fuzz targets' workloads,
//! run by proptest in `make test`): random bytes, and valid encodings with
//! bytes flipped, cut or appended, never panic; what decodes round-trips.

use proptest::prelude::*;
use prost::Message;
use quire_log::envelope::{self, BatchPlace, Header, Produced};
use quire_log::fuzzing::{decode_entry, decode_log_metadata};
use quire_log::{LogConfig, LogMeta, LogRecord, Producers};

fn valid_meta(segments: u64, trim: u64) -> Vec<u8> {
    let mut r = LogRecord::new("orders", "gw-1", 10);
    for i in 0..segments {
        r = r.roll(1, 3, 11 + i).expect("roll");
    }
    let t = trim.min(r.fixed_end());
    r = r.trim(t).expect("trim").0;
    let mut producers = Producers::default();
    producers.observe("p-1", 7, 2);
    let meta = LogMeta {
        record: r,
        config: LogConfig {
            ensemble_size: 3,
            write_quorum: 2,
            ack_quorum: 2,
            rollover: Default::default(),
            retention: Default::default(),
        },
        producers,
        creator: "client-1".into(),
        created_at_ms: 1,
        version: 4,
        principal: String::new(),
    };
    meta.to_wire().encode_to_vec()
}

fn damaged(mut bytes: Vec<u8>, flips: Vec<(usize, u8)>, cut: usize, tail: Vec<u8>) -> Vec<u8> {
    for (i, x) in flips {
        if !bytes.is_empty() {
            let n = bytes.len();
            bytes[i % n] ^= x;
        }
    }
    bytes.truncate(bytes.len().saturating_sub(cut));
    bytes.extend(tail);
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_entry(&data);
        decode_log_metadata(&data);
    }

    #[test]
    fn damaged_entries_never_panic(
        id in "[a-z0-9-]{1,40}",
        seq in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in 0usize..8,
        tail in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let header = Header {
            produced: Some(Produced { producer_id: &id, sequence: seq }),
            time_ms: seq >> 20,
            batch: BatchPlace { index: (seq % 7) as u16, len: 7 },
        };
        let e = envelope::encode(header, &payload).unwrap();
        decode_entry(&e);
        decode_entry(&damaged(e, flips, cut, tail));
    }

    #[test]
    fn damaged_log_metadata_never_panics(
        segments in 0u64..6,
        trim in 0u64..30,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in 0usize..16,
        tail in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let m = valid_meta(segments, trim);
        decode_log_metadata(&m);
        decode_log_metadata(&damaged(m, flips, cut, tail));
    }
}

/// Every file in fuzz/corpus-seed/log_entry and log_metadata (inputs worth
/// keeping, and any crash once fixed) goes through its workload again.
#[test]
fn the_fuzz_seed_corpora_replay() {
    for (target, run) in [("log_entry", decode_entry as fn(&[u8])), ("log_metadata", decode_log_metadata)] {
        let dir = format!("{}/../../fuzz/corpus-seed/{target}", env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
            run(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n > 0, "{dir} holds no seed");
    }
}

/// The metadata seed is a real log's encoding: regenerated here so that a
/// change of the wire form shows up as a changed file in review.
#[test]
fn the_log_metadata_seed_is_a_valid_encoding() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus-seed/log_metadata/three-segments");
    let want = valid_meta(2, 3);
    let got = std::fs::read(path).unwrap_or_default();
    if got != want {
        std::fs::write(path, &want).expect("write the seed");
        panic!("{path} was not the current encoding; rewritten: run again and commit it");
    }
}
