//! Journal segment reuse (format version 2): a checkpointed segment's file
//! becomes a spare, and a later segment overwrites it instead of writing a
//! new, zero-filled file. The file still holds its previous life's records;
//! these tests check that replay never hands one back, that a torn or
//! damaged batch in a reused file is told apart as before, that version 1
//! (headerless, unsalted) segments still replay, and, by a property test
//! over random appends, checkpoints and torn crashes, that replay from the
//! last checkpoint yields exactly the completed records after it.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use quire_storage::journal::record::Format;
use quire_storage::journal::segment::{list_segments, list_spares, segment_path, spare_path, Segment, HEADER_BYTES};
use quire_storage::journal::{self, FileJournal, Journal, JournalConfig, JournalPos, Record};

fn entry(l: u64, e: u64, payload: &[u8]) -> Record {
    Record::Entry {
        ledger_id: l,
        entry_id: e,
        last_add_confirmed: e as i64 - 1,
        ledger_length: e * 10,
        crc32c: 7,
        payload: Bytes::copy_from_slice(payload),
    }
}

fn config(dir: &Path) -> JournalConfig {
    let mut c = JournalConfig::new(dir);
    c.segment_bytes = 64 * 1024;
    c.prealloc_bytes = 16 * 1024;
    c.spare_segments = 2;
    c
}

fn append_all(j: &FileJournal, records: &[Record]) -> Vec<JournalPos> {
    let (tx, rx) = mpsc::channel();
    for (i, r) in records.iter().cloned().enumerate() {
        let tx = tx.clone();
        j.append(r, Box::new(move |res| tx.send((i, res.expect("append"))).unwrap()));
    }
    let got: Vec<(usize, JournalPos)> =
        (0..records.len()).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
    assert!(got.iter().enumerate().all(|(k, (i, _))| k == *i), "completions out of append order");
    got.into_iter().map(|(_, p)| p).collect()
}

/// Applies a checkpoint: the journal's thread takes it before the next
/// append, whose completion therefore orders after it.
fn checkpoint(j: &FileJournal, upto: JournalPos, marker: Record) -> JournalPos {
    j.checkpoint(upto);
    append_all(j, &[marker])[0]
}

fn replayed(dir: &Path, from: JournalPos) -> (Vec<Record>, journal::ReplayOutcome) {
    let mut out = Vec::new();
    let o = journal::replay(dir, from, |_, r| out.push(r)).unwrap();
    (out, o)
}

#[test]
fn checkpointed_segments_are_reused_and_replay_yields_only_their_new_records() {
    let t = tempfile::tempdir().unwrap();
    let j = FileJournal::start(config(t.path())).unwrap();
    let mut all = Vec::new();
    let mut pos = Vec::new();
    let mut ckpt = JournalPos::default();
    // The same records, payloads and ids in every round: a previous life's
    // record is byte for byte what the new one would be but for its seal.
    for round in 0..12u64 {
        let recs: Vec<Record> = (0..60).map(|i| entry(1, i, &[i as u8; 900])).collect();
        for c in recs.chunks(10) {
            pos.extend(append_all(&j, c));
            all.extend_from_slice(c);
        }
        if round % 2 == 1 {
            ckpt = pos[pos.len() - 5];
            let m = entry(2, round, b"marker");
            pos.push(checkpoint(&j, ckpt, m.clone()));
            all.push(m);
        }
    }
    let spared = j.stats().segments_spared.load(Relaxed);
    let reused = j.stats().segments_reused.load(Relaxed);
    j.close();
    assert!(spared >= 2, "segments kept as spares: {spared}");
    assert!(reused >= 2, "segments started in a spare's file: {reused}");
    assert!(list_spares(t.path()).unwrap().len() <= 2, "at most spare_segments spares");
    let at = pos.iter().position(|p| *p == ckpt).unwrap();
    let (got, out) = replayed(t.path(), ckpt);
    assert_eq!(got, all[at + 1..].to_vec(), "exactly the records after the checkpoint");
    assert!(out.cut.is_none() && out.damaged.is_empty(), "{out:?}");
}

/// A reused file whose new life is shorter than its previous one: the
/// previous life's records lie right after the tail marker.
fn reused_segment_with_stale_records_after(dir: &Path) -> (Vec<Record>, Vec<JournalPos>) {
    let mut c = config(dir);
    c.spare_segments = 1;
    let j = FileJournal::start(c).unwrap();
    // Fill segments 1 and 2 with large records, checkpoint all of 1.
    let big: Vec<Record> = (0..100).map(|i| entry(7, i, &[7u8; 1000])).collect();
    let mut pos = Vec::new();
    for ch in big.chunks(10) {
        pos.extend(append_all(&j, ch));
    }
    let last_of_first = *pos.iter().rev().find(|p| p.segment == 1).unwrap();
    // Checkpoint so that segment 1 becomes a spare, then fill up the current
    // segment so the journal rotates into it.
    checkpoint(&j, JournalPos { segment: last_of_first.segment + 1, offset: 0 }, entry(8, 0, b"m"));
    let mut fill = Vec::new();
    let current = pos.last().unwrap().segment;
    let mut k = 0;
    loop {
        let r = entry(9, k, &[9u8; 1000]);
        let p = append_all(&j, std::slice::from_ref(&r))[0];
        k += 1;
        if p.segment != current {
            // The first record of the new segment: in segment 1's file.
            fill.push((r, p));
            break;
        }
    }
    assert_eq!(j.stats().segments_reused.load(Relaxed), 1, "the new segment reused the spare");
    j.close();
    let (r, p) = fill.pop().unwrap();
    (vec![r], vec![p])
}

#[test]
fn a_previous_lifes_records_are_never_replayed() {
    let t = tempfile::tempdir().unwrap();
    let (recs, pos) = reused_segment_with_stale_records_after(t.path());
    let seg = pos[0].segment;
    let newest_from = JournalPos { segment: seg, offset: 0 };
    let (got, out) = replayed(t.path(), newest_from);
    assert_eq!(got, recs, "only the new life's record");
    assert!(out.cut.is_none() && out.damaged.is_empty(), "the tail marker is a clean end: {out:?}");
    let len = std::fs::metadata(segment_path(t.path(), seg)).unwrap().len();
    assert!(len > pos[0].offset + 10_000, "the test needs stale bytes after the tail ({len} bytes)");
}

/// Tears a batch after the last one in segment `id` of `dir`, as a crash
/// before its sync leaves it: its first sector holds `first` (what was there
/// before, or garbage), its second reached the disk, its third did not.
/// Returns where it starts.
fn tear_next_batch(dir: &Path, id: u64, first: &[u8]) -> u64 {
    let path = segment_path(dir, id);
    let data = std::fs::read(&path).unwrap();
    let Format::V4 { nonce } = journal::segment::format_of(&data, id) else { panic!("not version 4") };
    let read = journal::batches::read_batches(&data, nonce);
    let journal::batches::SegmentEnd::Clean(at) = read.end else { panic!("{:?}", read.end) };
    let seq = read.batches.last().map_or(1, |b| b.seq + 1);
    let mut second = BytesMut::new();
    journal::sector::stamp_batch(&[0x5a; 3 * journal::sector::SECTOR_DATA_BYTES], seq, nonce, &mut second);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(first, at).unwrap();
    let s = journal::sector::SECTOR_BYTES;
    f.write_all_at(&second[s..2 * s], at + s as u64).unwrap();
    at
}

#[test]
fn a_torn_batch_in_a_reused_segment_is_cut_before_the_stale_records() {
    for (what, bytes) in [("garbage", vec![0xABu8; 512]), ("zeros", vec![0u8; 512])] {
        let t = tempfile::tempdir().unwrap();
        let (recs, pos) = reused_segment_with_stale_records_after(t.path());
        let at = tear_next_batch(t.path(), pos[0].segment, &bytes);
        assert!(at > pos[0].offset);
        let (got, out) = replayed(t.path(), JournalPos { segment: pos[0].segment, offset: 0 });
        assert_eq!(got, recs, "{what}: the completed record replays, and nothing else");
        assert_eq!(
            out.cut.map(|c| c.0),
            Some(JournalPos { segment: pos[0].segment, offset: at }),
            "{what}: cut where the torn batch starts"
        );
        assert!(out.damaged.is_empty(), "{what}: a torn batch, not damage: {out:?}");
        let again = journal::replay(t.path(), JournalPos::default(), |_, _| {}).unwrap();
        assert!(again.cut.is_none(), "{what}: the cut is durable");
    }
}

/// The file offset of byte `i` of the record whose completion gave `end`.
fn record_byte(dir: &Path, end: JournalPos, i: usize) -> u64 {
    let data = std::fs::read(segment_path(dir, end.segment)).unwrap();
    let spans = journal::inspect::record_spans(&data, end.segment);
    spans.iter().find(|s| s.end == end.offset).expect("the record is in its segment").file_offset(i)
}

#[test]
fn a_damaged_last_record_is_told_from_a_torn_one_by_its_stamps() {
    let t = tempfile::tempdir().unwrap();
    let j = FileJournal::start(config(t.path())).unwrap();
    let recs: Vec<Record> = (0..8).map(|i| entry(4, i, &[4u8; 200])).collect();
    let pos = append_all(&j, &recs);
    j.close();
    // The last record's payload rots after it was synced and acknowledged.
    let path = segment_path(t.path(), pos[7].segment);
    let at = record_byte(t.path(), pos[7], 200);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    drop(f);
    let (got, out) = replayed(t.path(), JournalPos::default());
    assert_eq!(got, recs[..7].to_vec());
    assert!(out.cut.is_none(), "acknowledged bytes are not cut: {out:?}");
    assert_eq!(out.damaged.iter().map(|d| d.0).collect::<Vec<_>>(), vec![pos[6]], "reported as damage");
}

#[test]
fn version_1_segments_still_replay_and_the_journal_goes_on_after_them() {
    let t = tempfile::tempdir().unwrap();
    // A version 1 segment: no header, records from offset 0, unsalted,
    // zeros after (the preallocated part).
    let old: Vec<Record> = (0..20).map(|i| entry(3, i, &[3u8; 300])).collect();
    let mut buf = BytesMut::new();
    for r in &old {
        r.encode(&mut buf, Format::V1);
    }
    buf.resize(buf.len() + 8192, 0);
    std::fs::write(segment_path(t.path(), 1), &buf).unwrap();
    let (got, out) = replayed(t.path(), JournalPos::default());
    assert_eq!(got, old);
    assert!(out.cut.is_none() && out.damaged.is_empty(), "{out:?}");
    assert_eq!(out.last_segment, Some(1));
    let j = FileJournal::start(config(t.path())).unwrap();
    let new: Vec<Record> = (20..30).map(|i| entry(3, i, &[5u8; 300])).collect();
    let pos = append_all(&j, &new);
    j.close();
    assert!(pos.iter().all(|p| p.segment == 2 && p.offset > HEADER_BYTES), "after the old segment: {pos:?}");
    let (got, _) = replayed(t.path(), JournalPos::default());
    assert_eq!(got, [old, new].concat());
}

#[test]
fn a_crash_before_a_spare_is_renamed_leaves_only_a_spare() {
    let t = tempfile::tempdir().unwrap();
    let mut c = config(t.path());
    c.spare_segments = 1;
    let j = FileJournal::start(c).unwrap();
    let recs: Vec<Record> = (0..100).map(|i| entry(7, i, &[7u8; 1000])).collect();
    let mut pos = Vec::new();
    for ch in recs.chunks(10) {
        pos.extend(append_all(&j, ch));
    }
    assert_eq!(pos.last().unwrap().segment, 2, "the test needs two segments");
    checkpoint(&j, JournalPos { segment: 2, offset: 0 }, entry(8, 0, b"m"));
    j.close();
    assert_eq!(list_spares(t.path()).unwrap(), vec![1], "segment 1 kept as a spare");
    // The next journal began to make the spare segment 3 (its header and
    // tail written and synced) and crashed before the rename was durable.
    drop(Segment::reuse(t.path(), 1, 3, 16 * 1024).unwrap());
    std::fs::rename(segment_path(t.path(), 3), spare_path(t.path(), 1)).unwrap();
    let (got, out) = replayed(t.path(), JournalPos { segment: 2, offset: 0 });
    assert!(got
        .iter()
        .all(|r| pos.iter().zip(&recs).any(|(p, x)| p.segment == 2 && x == r) || *r == entry(8, 0, b"m")));
    assert!(out.cut.is_none() && out.damaged.is_empty(), "a spare is never replayed: {out:?}");
    assert_eq!(out.last_segment, Some(2));
    // A journal started now reuses the spare as segment 3, as intended.
    let j = FileJournal::start(config(t.path())).unwrap();
    let p = append_all(&j, &[entry(5, 0, b"after")])[0];
    assert_eq!(j.stats().segments_reused.load(Relaxed), 1);
    j.close();
    assert_eq!(p.segment, 3);
    assert!(list_spares(t.path()).unwrap().is_empty());
    let (got, out) = replayed(t.path(), JournalPos { segment: 3, offset: 0 });
    assert_eq!(got, vec![entry(5, 0, b"after")]);
    assert!(out.cut.is_none() && out.damaged.is_empty(), "{out:?}");
}

#[derive(Debug, Clone)]
enum Op {
    /// Append this many records of this payload size, in one round.
    Append(u8, u16),
    /// Checkpoint at the n-th completed record from the end.
    Checkpoint(u8),
    /// Stop (everything completed is synced) and tear a batch where the
    /// next would have gone, as a crash mid-write leaves it (its first
    /// sector garbage, its second landed); restart.
    CrashTorn(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u8..30, 0u16..3000).prop_map(|(n, s)| Op::Append(n, s)),
        2 => (0u8..40).prop_map(Op::Checkpoint),
        1 => (1u8..64).prop_map(Op::CrashTorn),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the appends, checkpoints (which make spares) and torn
    /// crashes, replay from the last checkpoint yields exactly the records
    /// completed after it, in order: none lost, none stale, none invented.
    #[test]
    fn replay_after_reuse_yields_exactly_the_completed_records(ops in proptest::collection::vec(op(), 1..40)) {
        let t = tempfile::tempdir().unwrap();
        let mut j = FileJournal::start(config(t.path())).unwrap();
        let mut done: Vec<(JournalPos, Record)> = Vec::new();
        let mut ckpt = JournalPos::default();
        let mut seq = 0u64;
        for op in ops {
            match op {
                Op::Append(n, size) => {
                    let recs: Vec<Record> = (0..n as u64)
                        .map(|i| { seq += 1; entry(seq % 5, seq, &vec![(seq + i) as u8; size as usize]) })
                        .collect();
                    let pos = append_all(&j, &recs);
                    done.extend(pos.into_iter().zip(recs));
                }
                Op::Checkpoint(back) => {
                    if let Some((p, _)) = done.iter().rev().nth(back as usize) {
                        ckpt = ckpt.max(*p);
                        seq += 1;
                        let m = entry(99, seq, b"m");
                        let mp = checkpoint(&j, ckpt, m.clone());
                        done.push((mp, m));
                    }
                }
                Op::CrashTorn(len) => {
                    j.close();
                    let newest = *list_segments(t.path()).unwrap().last().unwrap();
                    tear_next_batch(t.path(), newest, &vec![len.wrapping_mul(37) | 1; 512]);
                    // The bookie replays before it starts the journal again.
                    let (got, _) = replayed(t.path(), ckpt);
                    let want: Vec<Record> = done.iter().filter(|(p, _)| *p > ckpt).map(|(_, r)| r.clone()).collect();
                    prop_assert_eq!(got, want);
                    j = FileJournal::start(config(t.path())).unwrap();
                }
            }
        }
        j.close();
        let (got, out) = replayed(t.path(), ckpt);
        let want: Vec<Record> = done.iter().filter(|(p, _)| *p > ckpt).map(|(_, r)| r.clone()).collect();
        prop_assert_eq!(got, want);
        prop_assert!(out.damaged.is_empty(), "{:?}", out);
        prop_assert!(list_spares(t.path()).unwrap().len() <= 2);
        prop_assert!(list_segments(t.path()).unwrap().iter().all(|s| *s >= ckpt.segment), "checkpointed segments retired");
    }
}

/// Finding 2 of issue #45: a torn write makes replay scan forward for the
/// next good record, through the torn record's own payload. A record is
/// told from a payload's bytes only by its seal; a seal anyone can predict
/// (the segment id) lets a client's payload carry records (here a fence and
/// an entry of another ledger) that replay takes for real after a crash
/// tears the record holding them. No payload may forge a record.
#[test]
fn a_payload_cannot_forge_records_that_replay_takes_after_a_torn_write() {
    let t = tempfile::tempdir().unwrap();
    let j = FileJournal::start(config(t.path())).unwrap();
    let seg = *list_segments(t.path()).unwrap().last().unwrap();
    // What a client knowing the file layout would put in its payload: records
    // sealed for every seal it can guess (this segment's id, and version 1).
    let mut forged = BytesMut::new();
    for format in [Format::v2(seg), Format::V1] {
        forged.extend_from_slice(&[0u8; 37]);
        Record::Fence { ledger_id: 666 }.encode(&mut forged, format);
        entry(666, 0, b"forged").encode(&mut forged, format);
    }
    append_all(&j, &[entry(1, 0, b"first")]);
    let attack = append_all(&j, &[entry(1, 1, &forged)])[0];
    append_all(&j, &[entry(1, 2, b"after")]);
    drop(j);
    // Damage the attacker's record: its first 16 bytes zeros, so replay
    // scans on through its payload.
    let at: Vec<u64> = (0..16).map(|i| record_byte(t.path(), attack, i)).collect();
    let f = std::fs::OpenOptions::new().write(true).open(segment_path(t.path(), seg)).unwrap();
    for at in at {
        f.write_all_at(&[0u8], at).unwrap();
    }
    let (got, _) = replayed(t.path(), JournalPos::default());
    assert!(
        got.iter().all(|r| match r {
            Record::Fence { ledger_id } => *ledger_id != 666,
            Record::Entry { ledger_id, .. } => *ledger_id != 666,
        }),
        "replay took a record forged inside a payload: {got:?}"
    );
}
