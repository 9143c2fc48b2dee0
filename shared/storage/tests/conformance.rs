//! Conformance suites: the contracts in `journal::Journal` and
//! `index::LedgerIndex`, written once and run against every implementation.
//! A new implementation (an in-memory one for the simulator, another index
//! store) adds one line per suite below.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use quire_storage::index::{
    IndexBatch, LedgerIndex, LedgerRecord, Location, RangeLocations, RunInfo, RunMove, SledIndex,
};
use quire_storage::journal::{self, FileJournal, Journal, JournalConfig, JournalPos, Record};
use quire_storage::StorageError;

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

/// Appends `records`, waits for every completion, returns the positions in completion order.
fn append_all(j: &dyn Journal, records: Vec<Record>) -> Vec<JournalPos> {
    let (tx, rx) = mpsc::channel();
    let n = records.len();
    for (i, r) in records.into_iter().enumerate() {
        let tx = tx.clone();
        j.append(r, Box::new(move |res| tx.send((i, res.expect("append"))).unwrap()));
    }
    let got: Vec<(usize, JournalPos)> = (0..n).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
    assert!(got.iter().enumerate().all(|(k, (i, _))| k == *i), "completions out of append order");
    got.into_iter().map(|(_, p)| p).collect()
}

fn replayed(dir: &Path, from: JournalPos) -> Vec<Record> {
    let mut out = Vec::new();
    journal::replay(dir, from, |_, r| out.push(r)).unwrap();
    out
}

// ---- journal suite ----------------------------------------------------------

fn journal_suite(start: impl Fn(&Path) -> Box<dyn JournalUnderTest>) {
    journal_appends_complete_in_order_and_replay_in_order(&start);
    journal_replay_from_a_checkpoint_skips_exactly_what_it_covers(&start);
    journal_checkpoint_drops_old_segments_only(&start);
    journal_torn_tail_is_cut_and_stays_cut(&start);
    journal_damage_with_records_after_it_is_skipped_not_cut(&start);
    journal_a_zeroed_length_is_damage_not_a_clean_end(&start);
    journal_append_many_is_one_completion_in_order_with_single_appends(&start);
}

/// What the suite needs beyond the `Journal` trait: a clean stop.
trait JournalUnderTest: Journal {
    fn stop(&self);
}

impl JournalUnderTest for FileJournal {
    fn stop(&self) {
        self.close()
    }
}

fn small_config(dir: &Path) -> JournalConfig {
    let mut c = JournalConfig::new(dir);
    c.segment_bytes = 64 * 1024; // rotate often
    c.prealloc_bytes = 16 * 1024;
    c
}

fn journal_appends_complete_in_order_and_replay_in_order(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    let t = tempfile::tempdir().unwrap();
    let j = start(t.path());
    let records: Vec<Record> = (0..500).map(|i| entry(1 + i % 3, i, &vec![i as u8; (i as usize * 37) % 700])).collect();
    let pos = append_all(j.as_ref(), records.clone());
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "positions must increase");
    j.stop();
    assert_eq!(replayed(t.path(), JournalPos::default()), records);
}

/// `append_many` groups interleaved with single appends: completions in
/// append order, each group's position just after its last record (its
/// records sit back to back: a replay from it starts at the next append),
/// and a replay yields every record in order; groups straddle the small
/// segments' rotations.
fn journal_append_many_is_one_completion_in_order_with_single_appends(
    start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>,
) {
    let t = tempfile::tempdir().unwrap();
    let j = start(t.path());
    let (tx, rx) = mpsc::channel();
    let mut all = Vec::new();
    let mut appends = 0usize;
    let mut last_of = Vec::new();
    for i in 0..120u64 {
        let tx = tx.clone();
        let k = appends;
        if i % 3 == 0 {
            let r = entry(2, all.len() as u64, &vec![i as u8; 100 + (i as usize * 53) % 900]);
            all.push(r.clone());
            j.append(r, Box::new(move |res| tx.send((k, res.expect("append"))).unwrap()));
        } else {
            let group: Vec<Record> =
                (0..1 + i % 17).map(|n| entry(3 + n % 2, all.len() as u64 + n, &vec![n as u8; 400])).collect();
            all.extend(group.iter().cloned());
            j.append_many(group, Box::new(move |res| tx.send((k, res.expect("append_many"))).unwrap()));
        }
        last_of.push(all.len());
        appends += 1;
    }
    let got: Vec<(usize, JournalPos)> =
        (0..appends).map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap()).collect();
    assert!(got.iter().enumerate().all(|(k, (i, _))| k == *i), "completions out of append order");
    assert!(got.windows(2).all(|w| w[0].1 < w[1].1), "positions must increase");
    j.stop();
    assert_eq!(replayed(t.path(), JournalPos::default()), all);
    for probe in [0usize, 1, 40, 77, appends - 2] {
        assert_eq!(replayed(t.path(), got[probe].1), all[last_of[probe]..].to_vec(), "from append {probe}");
    }
}

fn journal_replay_from_a_checkpoint_skips_exactly_what_it_covers(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    let t = tempfile::tempdir().unwrap();
    let j = start(t.path());
    let records: Vec<Record> = (0..300).map(|i| entry(5, i, &[1u8; 300])).collect();
    let pos = append_all(j.as_ref(), records.clone());
    j.stop();
    for cut in [0usize, 1, 150, 299] {
        assert_eq!(replayed(t.path(), pos[cut]), records[cut + 1..].to_vec(), "from record {cut}");
    }
}

fn journal_checkpoint_drops_old_segments_only(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    let t = tempfile::tempdir().unwrap();
    let j = start(t.path());
    let records: Vec<Record> = (0..400).map(|i| entry(9, i, &[2u8; 1000])).collect();
    // In rounds, so that batches (which never split) fill several segments.
    let pos: Vec<JournalPos> = records.chunks(20).flat_map(|c| append_all(j.as_ref(), c.to_vec())).collect();
    let segments_before = journal::segment::list_segments(t.path()).unwrap().len();
    assert!(segments_before > 3, "the test needs several segments, got {segments_before}");
    j.checkpoint(pos[250]);
    // The checkpoint is applied by the journal's thread; a later append's completion orders after it.
    append_all(j.as_ref(), vec![entry(9, 400, b"x")]);
    j.stop();
    let segments_after = journal::segment::list_segments(t.path()).unwrap().len();
    assert!(segments_after < segments_before, "no segment deleted");
    let mut expected = records[251..].to_vec();
    expected.push(entry(9, 400, b"x"));
    assert_eq!(replayed(t.path(), pos[250]), expected, "records after the checkpoint survive");
}

fn journal_torn_tail_is_cut_and_stays_cut(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    let t = tempfile::tempdir().unwrap();
    let j = start(t.path());
    let records: Vec<Record> = (0..10).map(|i| entry(3, i, &[3u8; 100])).collect();
    let pos = append_all(j.as_ref(), records[..9].to_vec());
    // The last batch: one record of several sectors, alone in its batch.
    let big = entry(3, 9, &[3u8; 3000]);
    let last = append_all(j.as_ref(), vec![big])[0];
    j.stop();
    // Tear it as a crash before its sync would: its first sectors reached
    // the disk, the rest never did, and garbage lies where they would be.
    let seg = journal::segment::segment_path(t.path(), last.segment);
    let half = pos[8].offset + (last.offset - pos[8].offset) / 2;
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(half).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[0xAB; 40], half).unwrap();
    drop(f);
    let mut got = Vec::new();
    let out = journal::replay(t.path(), JournalPos::default(), |_, r| got.push(r)).unwrap();
    assert_eq!(got, records[..9].to_vec());
    assert!(out.cut.is_some(), "the cut is reported: {out:?}");
    assert!(out.damaged.is_empty(), "a torn batch is not damage: {out:?}");
    // The cut is durable: the next replay agrees without cutting again.
    let again = journal::replay(t.path(), JournalPos::default(), |_, _| {}).unwrap();
    assert_eq!(again.records, 9);
    assert!(again.cut.is_none());
    // And a journal started on it appends after it.
    let j = start(t.path());
    append_all(j.as_ref(), vec![entry(3, 9, b"again")]);
    j.stop();
    let mut expected = records[..9].to_vec();
    expected.push(entry(3, 9, b"again"));
    assert_eq!(replayed(t.path(), JournalPos::default()), expected);
}

/// The file offset of byte `i` of the record whose completion gave `end`.
fn record_byte(seg: &Path, end: JournalPos, i: usize) -> u64 {
    let data = std::fs::read(seg).unwrap();
    let spans = journal::inspect::record_spans(&data, end.segment);
    let span = spans.iter().find(|s| s.end == end.offset).expect("the record is in its segment");
    span.file_offset(if i == usize::MAX { span.len - 10 } else { i })
}

fn journal_damage_with_records_after_it_is_skipped_not_cut(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    use std::os::unix::fs::FileExt;
    for damage_length in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let j = start(t.path());
        let records: Vec<Record> = (0..10).map(|i| entry(4, i, &[4u8; 100])).collect();
        let pos = append_all(j.as_ref(), records.clone());
        j.stop();
        // Record 3 (from pos[2] to pos[3]) rots on the disk: a bit of its
        // payload, or of its length prefix.
        let seg = journal::segment::segment_path(t.path(), pos[3].segment);
        let at = record_byte(&seg, pos[3], if damage_length { 2 } else { usize::MAX });
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&seg).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x04], at).unwrap();
        drop(f);
        let mut got = Vec::new();
        let out = journal::replay(t.path(), JournalPos::default(), |_, r| got.push(r)).unwrap();
        let mut expected = records.clone();
        expected.remove(3);
        assert_eq!(got, expected, "damage_length={damage_length}: every record but the damaged one");
        assert!(out.cut.is_none(), "damage_length={damage_length}: nothing cut");
        assert_eq!(out.damaged.len(), 1, "damage_length={damage_length}: the damage is reported");
        assert_eq!(out.damaged[0].0, pos[2], "damage_length={damage_length}: where it is");
        // The file is left as it was: the next replay finds the same.
        let again = journal::replay(t.path(), JournalPos::default(), |_, _| {}).unwrap();
        assert_eq!((again.records, again.damaged.len()), (9, 1));
    }
}

#[test]
fn file_journal_conforms() {
    journal_suite(|dir| Box::new(FileJournal::start(small_config(dir)).unwrap()));
}

/// Issue #19 item 2: a length field zeroed on the disk looks like the
/// preallocated end of the written part. With written bytes after it, it is
/// damage: the records after it are replayed (or, where none decodes, the
/// damage is reported so that the bookie refills from its peers), never
/// dropped as if the segment ended there.
fn journal_a_zeroed_length_is_damage_not_a_clean_end(start: &dyn Fn(&Path) -> Box<dyn JournalUnderTest>) {
    use std::os::unix::fs::FileExt;
    for zeroed in [3usize, 9] {
        let t = tempfile::tempdir().unwrap();
        let j = start(t.path());
        let records: Vec<Record> = (0..10).map(|i| entry(6, i, &[6u8; 100])).collect();
        let pos = append_all(j.as_ref(), records.clone());
        j.stop();
        // Record `zeroed` runs from pos[zeroed - 1] to pos[zeroed].
        let seg = journal::segment::segment_path(t.path(), pos[zeroed].segment);
        let at: Vec<u64> = (0..4).map(|i| record_byte(&seg, pos[zeroed], i)).collect();
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        for at in at {
            f.write_all_at(&[0u8], at).unwrap();
        }
        drop(f);
        let mut got = Vec::new();
        let out = journal::replay(t.path(), JournalPos::default(), |_, r| got.push(r)).unwrap();
        let mut expected = records.clone();
        expected.remove(zeroed);
        assert_eq!(got, expected, "record {zeroed} zeroed: every other record replays");
        assert_eq!(out.damaged.len(), 1, "record {zeroed} zeroed: the damage is reported ({out:?})");
        assert_eq!(out.damaged[0].0, pos[zeroed - 1], "record {zeroed} zeroed: where it is");
        assert!(out.cut.is_none(), "record {zeroed} zeroed: nothing is cut");
        // Nothing was changed on the disk: the next replay finds the same.
        let again = journal::replay(t.path(), JournalPos::default(), |_, _| {}).unwrap();
        assert_eq!((again.records, again.damaged.len()), (9, 1), "record {zeroed} zeroed: replayed again");
    }
}

// ---- index suite --------------------------------------------------------------

fn loc(i: u64) -> Location {
    Location { log_id: (i % 3) as u32 + 1, offset: i * 100, len: 50 + i as u32 }
}

fn index_suite(open: impl Fn(&Path) -> Box<dyn LedgerIndex>) {
    let t = tempfile::tempdir().unwrap();
    {
        let idx = open(t.path());
        assert_eq!(idx.checkpoint().unwrap(), None);
        assert_eq!(idx.location(1, 0).unwrap(), None);
        assert_eq!(idx.last_entry(1).unwrap(), None);
        let batch = IndexBatch {
            locations: (0..100).map(|e| (1, e, loc(e))).chain((0..5).map(|e| (2, e, loc(e)))).collect(),
            ledgers: vec![(1, LedgerRecord { fenced: true, lac: 98 }), (2, LedgerRecord::default())],
            checkpoint: Some(JournalPos { segment: 3, offset: 77 }),
        };
        idx.commit(&batch).unwrap();
        assert_eq!(idx.location(1, 42).unwrap(), Some(loc(42)));
        assert_eq!(idx.last_entry(1).unwrap(), Some(99));
        assert_eq!(idx.last_entry(2).unwrap(), Some(4));
        assert_eq!(idx.last_entry(3).unwrap(), None, "ledger ranges do not bleed into each other");
        // A newer location replaces the old.
        let newer = Location { log_id: 9, offset: 1, len: 2 };
        idx.commit(&IndexBatch { locations: vec![(1, 42, newer)], ..Default::default() }).unwrap();
        assert_eq!(idx.location(1, 42).unwrap(), Some(newer));
        // A batch in no particular order is indexed all the same.
        let shuffled: Vec<(u64, u64, Location)> =
            (0..200u64).rev().map(|i| (10 + i % 3, (i * 37) % 200, loc(i))).collect();
        idx.commit(&IndexBatch { locations: shuffled.clone(), ..Default::default() }).unwrap();
        for (l, e, at) in &shuffled {
            assert_eq!(idx.location(*l, *e).unwrap(), Some(*at), "ledger {l} entry {e}");
        }
    }
    // Durable across a reopen.
    let idx = open(t.path());
    assert_eq!(idx.location(1, 42).unwrap(), Some(Location { log_id: 9, offset: 1, len: 2 }));
    assert_eq!(idx.location(2, 4).unwrap(), Some(loc(4)));
    assert_eq!(idx.ledger(1).unwrap(), Some(LedgerRecord { fenced: true, lac: 98 }));
    assert_eq!(idx.ledger(7).unwrap(), None);
    let mut ls = idx.ledgers().unwrap();
    ls.sort_by_key(|(l, _)| *l);
    assert_eq!(ls.len(), 2);
    assert_eq!(idx.checkpoint().unwrap(), Some(JournalPos { segment: 3, offset: 77 }));
    // Extreme ids sort and round-trip.
    idx.commit(&IndexBatch { locations: vec![(u64::MAX, u64::MAX, loc(1))], ..Default::default() }).unwrap();
    assert_eq!(idx.last_entry(u64::MAX).unwrap(), Some(u64::MAX));
    drop(idx);
    // Close releases the directory at once, even while the closed handle
    // lives on; the handle then refuses everything.
    for round in 0..20u64 {
        let idx = open(t.path());
        idx.commit(&IndexBatch { locations: vec![(9, round, loc(round))], ..Default::default() }).unwrap();
        idx.close().unwrap();
        idx.close().unwrap();
        assert!(matches!(idx.location(9, round), Err(StorageError::IndexClosed)));
        assert!(matches!(idx.commit(&IndexBatch::default()), Err(StorageError::IndexClosed)));
        let again = open(t.path());
        assert_eq!(again.location(9, round).unwrap(), Some(loc(round)), "round {round}");
    }
}

/// Entries laid out back to back, as a flush writes them; then a re-add of
/// some of them elsewhere (recovery), which must win.
fn index_contiguous_entries_and_overlapping_re_adds(open: impl Fn(&Path) -> Box<dyn LedgerIndex>) {
    let t = tempfile::tempdir().unwrap();
    let idx = open(t.path());
    let mut off = 16u64;
    let mut batch = IndexBatch::default();
    for e in 0..2500u64 {
        let len = 40 + (e % 17) as u32;
        batch.locations.push((5, e, Location { log_id: 1, offset: off, len }));
        off += len as u64;
    }
    // A gap in ids, then more: a separate run.
    for e in 3000..3010u64 {
        batch.locations.push((5, e, Location { log_id: 1, offset: off, len: 10 }));
        off += 10;
    }
    idx.commit(&batch).unwrap();
    for (l, e, loc) in &batch.locations {
        assert_eq!(idx.location(*l, *e).unwrap(), Some(*loc), "entry {e}");
    }
    assert_eq!(idx.location(5, 2500).unwrap(), None);
    assert_eq!(idx.location(5, 2999).unwrap(), None);
    assert_eq!(idx.last_entry(5).unwrap(), Some(3009));
    let moved = Location { log_id: 2, offset: 16, len: 41 };
    let moved2 = Location { log_id: 2, offset: 57, len: 42 };
    idx.commit(&IndexBatch { locations: vec![(5, 100, moved), (5, 101, moved2)], ..Default::default() }).unwrap();
    assert_eq!(idx.location(5, 100).unwrap(), Some(moved));
    assert_eq!(idx.location(5, 101).unwrap(), Some(moved2));
    assert_eq!(
        idx.location(5, 102).unwrap(),
        batch.locations.iter().find(|x| x.1 == 102).map(|x| x.2),
        "older run still serves its other entries"
    );
    assert_eq!(idx.last_entry(5).unwrap(), Some(3009));
    // A re-add across an aligned boundary of ids (60..70: any index that
    // groups ids by 64 splits it) wins on both sides; the older run keeps
    // the ids after it.
    let readd: Vec<(u64, u64, Location)> =
        (60..70u64).map(|e| (5, e, Location { log_id: 3, offset: 16 + 10 * (e - 60), len: 10 })).collect();
    idx.commit(&IndexBatch { locations: readd.clone(), ..Default::default() }).unwrap();
    for (l, e, loc) in &readd {
        assert_eq!(idx.location(*l, *e).unwrap(), Some(*loc), "entry {e}: the re-add");
    }
    for e in [59u64, 70, 127, 128] {
        assert_eq!(idx.location(5, e).unwrap(), batch.locations.iter().find(|x| x.1 == e).map(|x| x.2), "entry {e}");
    }
    // Ledgers written round-robin: every flush holds one entry of each.
    for round in 0..130u64 {
        let locations = (100..110u64)
            .map(|l| (l, round, Location { log_id: 4, offset: 16 + 10 * (round * 10 + l - 100), len: 10 }))
            .collect();
        idx.commit(&IndexBatch { locations, ..Default::default() }).unwrap();
    }
    for l in 100..110u64 {
        assert_eq!(idx.last_entry(l).unwrap(), Some(129));
        for e in [0u64, 63, 64, 129] {
            assert_eq!(idx.location(l, e).unwrap().map(|x| x.offset), Some(16 + 10 * (e * 10 + l - 100)), "{l}/{e}");
        }
        let all = idx.locations(l, 0, 200, 1000).unwrap();
        assert_eq!((all.found.len(), all.next), (130, None));
    }
}

fn runs_of(idx: &dyn LedgerIndex) -> Vec<RunInfo> {
    let mut out = Vec::new();
    idx.for_each_run(&mut |r| out.push(r)).unwrap();
    out
}

/// Back-to-back locations in `log` from `off` for entries `ids` of 10 bytes each.
fn laid_out(log: u32, off: u64, ids: std::ops::Range<u64>) -> Vec<(u64, Location)> {
    ids.enumerate().map(|(i, e)| (e, Location { log_id: log, offset: off + 10 * i as u64, len: 10 })).collect()
}

/// GC's side of the contract: runs are listed, deleted ledgers vanish whole
/// and durably, and compaction's moves apply only to runs still as read.
fn index_gc_operations(open: impl Fn(&Path) -> Box<dyn LedgerIndex>) {
    let t = tempfile::tempdir().unwrap();
    {
        let idx = open(t.path());
        let mut batch = IndexBatch::default();
        for l in 1..=3u64 {
            for (e, loc) in laid_out(1, 16 + 1000 * l, 0..20) {
                batch.locations.push((l, e, loc));
            }
            batch.ledgers.push((l, LedgerRecord { fenced: false, lac: 19 }));
        }
        idx.commit(&batch).unwrap();
        let runs = runs_of(&*idx);
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[1].ledger_id, runs[1].first_entry, runs[1].log_id, runs[1].len()), (2, 0, 1, 20));
        assert_eq!(runs[1].bytes(), 200);
        assert_eq!(runs[1].location(3), Location { log_id: 1, offset: 16 + 2000 + 30, len: 10 });

        // Deleting ledger 2 takes its runs and record, nothing else.
        assert_eq!(idx.delete_ledgers(&[2, 99], &[]).unwrap(), 1);
        assert_eq!(idx.location(2, 5).unwrap(), None);
        assert_eq!(idx.ledger(2).unwrap(), None);
        assert_eq!(idx.location(1, 5).unwrap(), laid_out(1, 1016, 0..20).get(5).map(|x| x.1));

        // Move ledger 1's and ledger 3's runs to log 7, plus a stale move.
        let r1 = runs.iter().find(|r| r.ledger_id == 1).unwrap().clone();
        let r3 = runs.iter().find(|r| r.ledger_id == 3).unwrap().clone();
        let r2 = runs.iter().find(|r| r.ledger_id == 2).unwrap().clone();
        let moves = vec![
            RunMove { old: r1.clone(), moved: laid_out(7, 16, 0..20) },
            RunMove { old: r3.clone(), moved: laid_out(7, 216, 0..20) },
            RunMove { old: r2, moved: laid_out(7, 416, 0..20) },
        ];
        assert_eq!(idx.replace_runs(&moves).unwrap(), vec![true, true, false], "ledger 2 is gone: its move is stale");
        assert_eq!(idx.location(1, 19).unwrap(), Some(Location { log_id: 7, offset: 16 + 190, len: 10 }));
        assert_eq!(idx.location(3, 9).unwrap(), Some(Location { log_id: 7, offset: 216 + 90, len: 10 }));
        assert_eq!(idx.location(2, 0).unwrap(), None, "a stale move never brings a ledger back");
        // Applying the same move again finds the run changed: refused.
        assert_eq!(idx.replace_runs(&moves[..1]).unwrap(), vec![false]);

        // A move whose new run would land on a key some other run holds is refused.
        idx.commit(&IndexBatch {
            locations: laid_out(9, 16, 30..35).into_iter().map(|(e, l)| (1, e, l)).collect(),
            ..Default::default()
        })
        .unwrap();
        let stale_target =
            RunInfo { ledger_id: 1, first_entry: 0, log_id: 7, base: 16, ends: (1..=20).map(|i| 10 * i).collect() };
        let clash = RunMove { old: stale_target, moved: laid_out(8, 16, 30..35) };
        assert_eq!(idx.replace_runs(&[clash]).unwrap(), vec![false]);
        assert_eq!(idx.location(1, 30).unwrap(), Some(Location { log_id: 9, offset: 16, len: 10 }));
    }
    // All of it durable.
    let idx = open(t.path());
    assert_eq!(idx.location(2, 0).unwrap(), None);
    assert_eq!(idx.location(1, 0).unwrap(), Some(Location { log_id: 7, offset: 16, len: 10 }));
    assert_eq!(idx.location(3, 15).unwrap(), Some(Location { log_id: 7, offset: 216 + 150, len: 10 }));
    assert!(runs_of(&*idx).iter().all(|r| r.log_id != 1), "nothing references log 1 any more");
}

/// A run written over a longer one at the same key (recovery re-adding the
/// head of what a bookie already holds, split over two flushes) keeps the
/// longer run's tail; a compaction move that would leave an entry with no
/// location is refused.
fn index_never_loses_a_committed_entry(open: impl Fn(&Path) -> Box<dyn LedgerIndex>) {
    let t = tempfile::tempdir().unwrap();
    let idx = open(t.path());
    let entries = |log, off, ids| laid_out(log, off, ids).into_iter().map(|(e, l)| (4, e, l)).collect::<Vec<_>>();
    idx.commit(&IndexBatch { locations: entries(1, 16, 10..20), ..Default::default() }).unwrap();
    // Re-adds of 10..14 land in log 2 under the same key (4, 10).
    idx.commit(&IndexBatch { locations: entries(2, 16, 10..15), ..Default::default() }).unwrap();
    for e in 10..15u64 {
        assert_eq!(idx.location(4, e).unwrap().map(|l| l.log_id), Some(2), "entry {e}: the re-add");
    }
    for e in 15..20u64 {
        assert_eq!(
            idx.location(4, e).unwrap(),
            Some(Location { log_id: 1, offset: 16 + 10 * (e - 10), len: 10 }),
            "entry {e}: the old run's tail keeps its location"
        );
    }
    // The rest of the re-adds land later, overlapping the kept tail: they win.
    idx.commit(&IndexBatch { locations: entries(3, 16, 15..20), ..Default::default() }).unwrap();
    assert_eq!(idx.location(4, 17).unwrap().map(|l| l.log_id), Some(3));

    // A move that leaves out entry 17 of log 3's run while nothing else
    // covers it must not apply.
    let run3 = runs_of(&*idx).into_iter().find(|r| r.log_id == 3).unwrap();
    let partial = RunMove { old: run3.clone(), moved: laid_out(9, 16, 15..17) };
    assert_eq!(idx.replace_runs(&[partial]).unwrap(), vec![false]);
    assert_eq!(idx.location(4, 17).unwrap().map(|l| l.log_id), Some(3));
    let whole = RunMove { old: run3, moved: laid_out(9, 16, 15..20) };
    assert_eq!(idx.replace_runs(&[whole]).unwrap(), vec![true]);
    assert_eq!(idx.location(4, 19).unwrap().map(|l| l.log_id), Some(9));
}

/// Range look-ups (the batch read's) agree with single look-ups over every
/// shape the index holds: long runs split at the run bound, striped ids
/// (runs of two), re-adds over the head, the middle and across the end of
/// older runs, neighbouring ledgers, ids at the top of the range; and a
/// range walked by `next` sees every id once.
fn index_range_look_ups_agree_with_single_look_ups(open: impl Fn(&Path) -> Box<dyn LedgerIndex>) {
    let t = tempfile::tempdir().unwrap();
    let idx = open(t.path());
    let commit = |l: u64, log: u32, ids: Vec<u64>| {
        let mut off = 16u64;
        let locations = ids
            .into_iter()
            .map(|e| {
                let len = 30 + (e % 7) as u32;
                let loc = Location { log_id: log, offset: off, len };
                off += len as u64;
                (l, e, loc)
            })
            .collect();
        idx.commit(&IndexBatch { locations, ..Default::default() }).unwrap();
    };
    commit(6, 1, (0..50).collect());
    commit(7, 1, (0..600).collect());
    commit(8, 1, (0..50).collect());
    // A stripe of E=3, Qw=2 as bookie 0 holds it: runs of two ids.
    commit(7, 2, (600..1200).filter(|e| e % 3 != 1).collect());
    commit(7, 3, (100..110).collect());
    commit(7, 4, (590..605).collect());
    commit(7, 5, (300..301).collect());
    // More than one run record holds.
    commit(7, 6, (2000..5000).collect());
    commit(7, 7, (2990..3010).collect());
    // A re-add straddling an aligned boundary of 64 ids.
    commit(7, 8, (60..70).collect());
    commit(7, 9, (120..200).filter(|e| e % 2 == 0).collect());
    let check = |first: u64, last: u64, max: usize| {
        let mut at = first;
        loop {
            let r = idx.locations(7, at, last, max).unwrap();
            assert!(r.found.len() <= max, "{first}..={last} max {max}: {} found", r.found.len());
            let stop = r.next.map_or(last, |n| n - 1);
            let expected: Vec<(u64, Location)> =
                (at..=stop).filter_map(|e| idx.location(7, e).unwrap().map(|l| (e, l))).collect();
            assert_eq!(r.found, expected, "{first}..={last} max {max}, from {at}");
            match r.next {
                None => break,
                Some(n) => {
                    assert!(n > at && n <= last, "{first}..={last} max {max}: next {n} from {at}");
                    at = n;
                }
            }
        }
    };
    for (first, last, max) in
        [(0, 5999, 100_000), (0, 0, 1), (99, 111, 3), (590, 610, 1), (1199, 2001, 7), (5000, 5999, 4)]
    {
        check(first, last, max);
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..200 {
        let first = rnd(5200);
        let last = first + rnd(1500);
        let max = 1 + rnd(900) as usize;
        check(first, last, max);
    }
    assert_eq!(idx.locations(7, 10, 9, 5).unwrap(), RangeLocations::default(), "an empty range");
    assert_eq!(idx.locations(9, 0, 100, 5).unwrap(), RangeLocations::default(), "an unknown ledger");
    commit(u64::MAX, 1, vec![u64::MAX - 2, u64::MAX - 1, u64::MAX]);
    let top = idx.locations(u64::MAX, u64::MAX - 5, u64::MAX, 2).unwrap();
    assert_eq!(top.found.iter().map(|f| f.0).collect::<Vec<_>>(), vec![u64::MAX - 2, u64::MAX - 1]);
    assert_eq!(top.next, Some(u64::MAX));
    let end = idx.locations(u64::MAX, u64::MAX, u64::MAX, 2).unwrap();
    assert_eq!((end.found.len(), end.next), (1, None));
}

#[test]
fn sled_index_conforms() {
    index_suite(|dir| Box::new(SledIndex::open(dir).unwrap()));
    index_contiguous_entries_and_overlapping_re_adds(|dir| Box::new(SledIndex::open(dir).unwrap()));
    index_gc_operations(|dir| Box::new(SledIndex::open(dir).unwrap()));
    index_never_loses_a_committed_entry(|dir| Box::new(SledIndex::open(dir).unwrap()));
    index_range_look_ups_agree_with_single_look_ups(|dir| Box::new(SledIndex::open(dir).unwrap()));
}
