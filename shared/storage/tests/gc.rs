//! Garbage collection in one process: deleted ledgers leave the index and
//! their space is reclaimed; compaction moves live entries without losing or
//! changing one, while reads go on; a damaged live entry stops compaction
//! of its log rather than being dropped or copied.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quire_proto::v1::Entry;
use quire_storage::gc::Throttle;
use quire_storage::{StorageError, Store, StoreConfig};

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir.join("journal"), dir.join("ledgers"));
    c.flush_interval = Duration::from_secs(3600); // tests flush explicitly
    c.entry_log_bytes = 64 * 1024;
    c
}

fn entry(l: u64, e: u64) -> Entry {
    let payload: Vec<u8> = (0..500u64).map(|i| (l * 31 + e * 7 + i) as u8).collect();
    Entry::sealed(l, e, e as i64 - 1, Bytes::from(payload))
}

/// `ledgers` × `n` entries, interleaved (so every entry log holds some of
/// each ledger), flushed every `per_flush` rounds.
async fn write_interleaved(store: &Store, ledgers: &[u64], n: u64, per_flush: u64) {
    for e in 0..n {
        for l in ledgers {
            store.add(entry(*l, e), false).await.unwrap();
        }
        if (e + 1) % per_flush == 0 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
}

fn read_back(store: &Store, l: u64, n: u64) {
    for e in 0..n {
        assert_eq!(store.read(l, e).unwrap(), entry(l, e), "ledger {l} entry {e}");
    }
}

fn entry_log_bytes(dir: &Path) -> (u64, usize) {
    let mut total = 0;
    let mut files = 0;
    for f in std::fs::read_dir(dir.join("ledgers/entrylogs")).unwrap() {
        total += f.unwrap().metadata().unwrap().len();
        files += 1;
    }
    (total, files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_half_compact_restart_the_other_half_reads_back_and_disk_use_drops() {
    let t = tempfile::tempdir().unwrap();
    let all: Vec<u64> = (1..=8).collect();
    let (before, files_before) = {
        let store = Store::open(config(t.path())).unwrap();
        write_interleaved(&store, &all, 200, 25).await;
        let before = entry_log_bytes(t.path());
        assert_eq!(store.delete_ledgers(&[2, 4, 6, 8, 1234]).unwrap(), 4, "ledger 1234 was never here");
        for l in [2, 4, 6, 8] {
            assert!(matches!(store.read(l, 0), Err(StorageError::NoSuchLedger(_))), "ledger {l} is gone at once");
        }
        let out = store.collect_garbage(0.8, &mut Throttle::new(0)).unwrap();
        assert!(out.logs_compacted > 0, "{out:?}");
        assert!(out.bytes_reclaimed > 0, "{out:?}");
        assert_eq!(out.failures, 0);
        assert_eq!(store.verify_index().unwrap(), Vec::<String>::new());
        for l in [1, 3, 5, 7] {
            read_back(&store, l, 200);
        }
        let usage = store.log_usage();
        assert!(!usage.is_empty());
        before
    };
    let store = Store::open(config(t.path())).unwrap();
    for l in [1, 3, 5, 7] {
        read_back(&store, l, 200);
    }
    for l in [2, 4, 6, 8] {
        assert!(matches!(store.read(l, 0), Err(StorageError::NoSuchLedger(_))), "ledger {l} stays gone");
    }
    assert_eq!(store.verify_index().unwrap(), Vec::<String>::new());
    let (after, files_after) = entry_log_bytes(t.path());
    assert!(
        after * 10 < before * 6,
        "half the data deleted: {before} bytes in {files_before} logs, now {after} in {files_after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_nothing_references_are_removed_without_copying() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(config(t.path())).unwrap();
    write_interleaved(&store, &[1, 2], 300, 50).await;
    let (_, files) = entry_log_bytes(t.path());
    store.delete_ledgers(&[1, 2]).unwrap();
    let out = store.collect_garbage(0.0, &mut Throttle::new(0)).unwrap();
    assert_eq!(out.entries_moved, 0);
    assert_eq!(out.logs_removed as usize, files - 1, "every log but the current one");
    assert_eq!(entry_log_bytes(t.path()).1, 1);
    // Nothing sparse is compacted at threshold 0, and a second pass finds nothing.
    assert_eq!(store.collect_garbage(0.0, &mut Throttle::new(0)).unwrap().logs_removed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_while_compaction_moves_their_entries() {
    let t = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(config(t.path())).unwrap());
    write_interleaved(&store, &[1, 2, 3], 300, 20).await;
    store.delete_ledgers(&[2]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            let mut i = 0u64;
            while !done.load(Ordering::Acquire) || reads < 1000 {
                let (l, e) = (if i.is_multiple_of(2) { 1 } else { 3 }, (i * 7919) % 300);
                assert_eq!(store.read(l, e).unwrap(), entry(l, e), "ledger {l} entry {e} mid-compaction");
                reads += 1;
                i += 1;
            }
            reads
        })
    };
    // Slow enough that the reader overlaps every step.
    let out = store.collect_garbage(0.9, &mut Throttle::new(4 * 1024 * 1024)).unwrap();
    done.store(true, Ordering::Release);
    assert!(reader.join().unwrap() >= 1000);
    assert!(out.logs_compacted > 0, "{out:?}");
    for l in [1, 3] {
        read_back(&store, l, 300);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_live_entry_stops_its_logs_compaction_and_loses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(config(t.path())).unwrap();
    write_interleaved(&store, &[1, 2], 100, 10).await;
    store.delete_ledgers(&[2]).unwrap();
    // Damage one payload byte of ledger 1's entry 3 in the first log.
    let first = t.path().join("ledgers/entrylogs/entrylog-00000001.log");
    let mut bytes = std::fs::read(&first).unwrap();
    // A record: len u32 | ledger u64 | entry u64 | lac i64 | length u64 | crc u32 | payload.
    let ids: Vec<u8> = [1u64.to_be_bytes(), 3u64.to_be_bytes()].concat();
    let at = bytes.windows(ids.len()).position(|w| w == ids).expect("entry 3 is in the first log");
    bytes[at + 36 + 10] ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();
    let out = store.collect_garbage(0.9, &mut Throttle::new(0)).unwrap();
    assert!(out.failures >= 1, "{out:?} {:?}", store.log_usage());
    assert!(first.exists(), "the log holding the only local copy stays");
    assert!(matches!(store.read(1, 3), Err(StorageError::CorruptEntry(..))), "still reported corrupt, never absent");
    for e in (0..100).filter(|e| *e != 3) {
        assert_eq!(store.read(1, e).unwrap(), entry(1, e));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_deleted_while_in_the_write_cache_does_not_come_back() {
    let t = tempfile::tempdir().unwrap();
    {
        let store = Store::open(config(t.path())).unwrap();
        write_interleaved(&store, &[1], 10, 100).await;
        for e in 0..10 {
            store.add(entry(5, e), false).await.unwrap();
        }
        assert!(store.has_entries(5).unwrap());
        store.delete_ledgers(&[5]).unwrap();
        assert!(!store.has_entries(5).unwrap());
        assert!(!store.ledger_ids().contains(&5));
        store.flush().unwrap();
        assert!(matches!(store.read(5, 0), Err(StorageError::NoSuchLedger(5))));
    }
    let store = Store::open(config(t.path())).unwrap();
    assert!(matches!(store.read(5, 0), Err(StorageError::NoSuchLedger(5))));
    read_back(&store, 1, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_entries_leave_the_ledger_fenced_and_an_explicit_lac_creates_nothing() {
    let t = tempfile::tempdir().unwrap();
    {
        let store = Store::open(config(t.path())).unwrap();
        write_interleaved(&store, &[1, 2], 50, 10).await;
        assert_eq!(store.drop_entries(&[2]).unwrap(), 1);
        assert!(!store.has_entries(2).unwrap());
        assert!(matches!(store.read(2, 0), Err(StorageError::NoSuchEntry(2, 0))), "known, fenced, empty");
        assert!(matches!(store.add(entry(2, 50), false).await, Err(StorageError::Fenced(2))));
        // An explicit LAC for a ledger never seen does not make it known.
        assert!(!store.write_lac(77, 5));
        assert!(!store.knows_ledger(77));
        assert!(store.write_lac(1, 49));
    }
    let store = Store::open(config(t.path())).unwrap();
    assert!(store.is_fenced(2), "the fence outlives a restart");
    assert!(!store.has_entries(2).unwrap());
    read_back(&store, 1, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_landing_after_its_ledgers_deletion_leaves_the_ledger_visible_to_the_next_pass() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(config(t.path())).unwrap();
    // The add is queued to the journal before delete_ledgers runs; whether
    // it lands before or after, its entry must never sit in the index under a
    // ledger the store does not list (GC could never find it again).
    for l in 1000..1100u64 {
        store.add(entry(l, 0), false).await.unwrap();
        let late = store.add(entry(l, 1), false);
        store.delete_ledgers(&[l]).unwrap();
        late.await.unwrap();
        store.flush().unwrap();
        if store.has_entries(l).unwrap() {
            assert!(store.ledger_ids().contains(&l), "ledger {l} holds entries but is not listed");
        }
    }
    drop(store);
    let store = Store::open(config(t.path())).unwrap();
    for l in 1000..1100u64 {
        if store.has_entries(l).unwrap() {
            assert!(store.ledger_ids().contains(&l), "ledger {l} after a restart");
        }
    }
}
