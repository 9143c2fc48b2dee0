//! The metadata state machine alone at production size (issue #46): no
//! network, no Raft, no sled; the commands a cluster's ledgers go through,
//! applied in order, as every replica applies them.
//!
//! - BENCH_LEDGERS (1 000 000) ledgers are created (E=3, three bookies
//!   with instance ids, two short custom keys) and closed; every tenth of
//!   the way: commands/s, and resident memory per ledger held;
//! - a snapshot of the state: encoded (as the leader does every 5 000
//!   entries) and decoded (as a replica installing it does), time and size;
//! - a log's takeover sweep (`SweepLogLedgers`) with BENCH_LOG_LEDGERS
//!   (100) ledgers made for the log among all the others, next to a scan of
//!   every ledger with the same filter (what the sweep did before the
//!   index of ledgers by log).
//!
//! Run: `make bench-scale` (its state machine part), or
//! `cargo bench -p quire-metadata --bench scale`.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

use std::collections::BTreeMap;
use std::time::Instant;

use quire_metadata::raft::state_machine::{decode_snapshot, encode_snapshot};
use quire_metadata::state::{Command, Ledger, LedgerState, MetaState, NewLedger, Outcome, OWNER_KEY};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The resident high-water mark (`/proc/self/clear_refs` resets it).
fn hwm_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn new_ledger(custom: BTreeMap<String, Vec<u8>>) -> NewLedger {
    NewLedger {
        ensemble_size: 3,
        write_quorum: 3,
        ack_quorum: 2,
        bookie_ids: (1..=3).map(|i| format!("bookie-{i}")).collect(),
        instance_ids: (1..=3).map(|i| format!("{i:032x}")).collect(),
        custom,
        now_ms: 1_780_000_000_000,
    }
}

fn created(o: Outcome) -> Ledger {
    match o {
        Outcome::Ledger(l) => l,
        other => panic!("{other:?}"),
    }
}

fn main() {
    let total = env("BENCH_LEDGERS", 1_000_000);
    let log_ledgers = env("BENCH_LOG_LEDGERS", 100);
    let mut s = MetaState::default();
    let rss0 = rss_bytes();
    let custom: BTreeMap<String, Vec<u8>> =
        [("app".to_string(), b"orders".to_vec()), ("tenant".to_string(), b"t-17".to_vec())].into();
    let t0 = Instant::now();
    let mut tenth = Instant::now();
    for i in 1..=total {
        let mut l = created(s.apply(Command::CreateLedger(new_ledger(custom.clone()))).0);
        let version = l.version;
        l.state = LedgerState::Closed;
        l.last_entry_id = 999;
        l.length = 1_024_000;
        match s.apply(Command::UpdateLedger { ledger: l, expected_version: version }).0 {
            Outcome::Ledger(_) => {}
            other => panic!("{other:?}"),
        }
        if i % (total / 10).max(1) == 0 {
            let held = rss_bytes().saturating_sub(rss0);
            println!(
                "RESULT phase=apply ledgers={i} commands_per_s={:.0} rss_mb={:.1} bytes_per_ledger={:.0}",
                2.0 * (total / 10).max(1) as f64 / tenth.elapsed().as_secs_f64(),
                rss_bytes() as f64 / 1e6,
                held as f64 / i as f64
            );
            tenth = Instant::now();
        }
    }
    let apply_secs = t0.elapsed().as_secs_f64();

    let t = Instant::now();
    let snap = encode_snapshot(&s).unwrap();
    let encode_ms = t.elapsed().as_millis();
    let t = Instant::now();
    let back = decode_snapshot(&snap).unwrap();
    let decode_ms = t.elapsed().as_millis();
    assert_eq!(back.ledgers.len(), s.ledgers.len());
    println!(
        "RESULT phase=snapshot ledgers={total} bytes={} bytes_per_ledger={:.0} encode_ms={encode_ms} decode_ms={decode_ms} apply_s={apply_secs:.1}",
        snap.len(),
        snap.len() as f64 / total as f64
    );
    drop(back);

    // The snapshot installed into a fresh replica's storage (sled, synced),
    // as a follower whose disk was lost installs it: time, and the peak
    // resident memory it adds (the high-water mark reset first).
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let (log, mut sm) = quire_metadata::raft::open_storage(dir.path()).unwrap();
    drop(log);
    let meta = openraft::SnapshotMeta {
        last_log_id: Some(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 1)),
        last_membership: Default::default(),
        snapshot_id: "bench".into(),
    };
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (rss_before, t) = (rss_bytes(), Instant::now());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use openraft::storage::RaftStateMachine;
        use tokio::io::AsyncWriteExt;
        // As a follower receives it: the leader's snapshot file, written
        // to the receiving file chunk by chunk, then installed.
        let file = quire_metadata::raft::snapshot_file::file_bytes(&meta, &snap);
        drop(snap);
        let mut f = sm.begin_receiving_snapshot().await.unwrap();
        for chunk in file.chunks(1 << 20) {
            f.write_all(chunk).await.unwrap();
        }
        f.shutdown().await.unwrap();
        drop(file);
        sm.install_snapshot(&meta, f).await.unwrap();
    });
    let install_ms = t.elapsed().as_millis();
    println!(
        "RESULT phase=install ledgers={total} install_ms={install_ms} rss_peak_added_mb={:.0} rss_added_after_mb={:.0}",
        (hwm_bytes().saturating_sub(rss_before)) as f64 / 1e6,
        (rss_bytes().saturating_sub(rss_before)) as f64 / 1e6
    );
    drop(sm);

    // The copy a snapshot build takes under the state's read lock, and the
    // scans that filter every ledger (GetBookie's load, a decommission).
    let t = Instant::now();
    let copy = s.clone();
    let clone_ms = t.elapsed().as_millis();
    drop(copy);
    let t = Instant::now();
    let (named, _) = s.bookie_load("bookie-1");
    println!(
        "RESULT phase=scans ledgers={} state_clone_ms={clone_ms} bookie_load_ms={} named={named}",
        s.ledgers.len(),
        t.elapsed().as_millis()
    );

    // A log's ledgers among all the others: made for it by its writers
    // (open, unlisted), then the log created listing the newest.
    let name = "orders";
    let caller = quire_metadata::state::Caller { role: "gateway".into(), id: "1".into() };
    let mut made = Vec::new();
    for _ in 0..log_ledgers.max(1) {
        let custom: BTreeMap<String, Vec<u8>> = [
            (quire_log::config::LEDGER_KEY.to_string(), name.as_bytes().to_vec()),
            (OWNER_KEY.to_string(), b"gateway/1".to_vec()),
        ]
        .into();
        made.push(created(s.apply(Command::CreateLedger(new_ledger(custom))).0).ledger_id);
    }
    let newest = *made.last().unwrap();
    let log = quire_log::LogMeta {
        record: quire_log::LogRecord::new(name, "gateway/1", newest),
        config: quire_log::LogConfig {
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            rollover: Default::default(),
            retention: Default::default(),
        },
        producers: Default::default(),
        creator: "gateway/1".into(),
        created_at_ms: 0,
        version: 0,
        principal: String::new(),
    };
    match s.apply(Command::CreateLog { log, caller, now_ms: 1 }).0 {
        Outcome::Log(..) => {}
        other => panic!("{other:?}"),
    }
    // The scan the sweep used to make: every ledger below the newest, with its filter.
    let t = Instant::now();
    let scanned = s
        .ledgers
        .values()
        .take_while(|l| l.ledger_id < newest)
        .filter(|l| {
            l.state == LedgerState::Open
                && l.custom.get(quire_log::config::LEDGER_KEY).is_some_and(|v| v.as_slice() == name.as_bytes())
        })
        .count();
    let scan_us = t.elapsed().as_micros();
    let t = Instant::now();
    let (_, touched) = s.apply(Command::SweepLogLedgers { log: name.into() });
    let sweep_us = t.elapsed().as_micros();
    assert_eq!(scanned as u64, log_ledgers.max(1) - 1);
    assert_eq!(touched.len() as u64, 2 * (log_ledgers.max(1) - 1), "each swept ledger and its mark");
    println!(
        "RESULT phase=sweep ledgers={} log_ledgers={} swept={} sweep_us={sweep_us} full_scan_us={scan_us}",
        s.ledgers.len(),
        log_ledgers.max(1),
        touched.len() / 2
    );
}
