//! One log at the segment cap in the metadata state machine (issue #47,
//! hole 2): what a rollover and a trim of a log listing 65,536 ledgers
//! cost in apply, under the state's write lock, on every replica. No
//! network, no Raft, no sled: the commands alone, as every replica
//! applies them.
//!
//! The log is made in one edit that lists BENCH_LOG_SEGMENTS - 1 ledgers
//! (empty, sealed: a writer that rolls with nothing written does this,
//! one ledger at a time), then:
//! - `roll`: the open ledger closed at 10 records and the next one listed
//!   (the log now lists BENCH_LOG_SEGMENTS, the cap);
//! - `trim`: the trim point moved to 5, which drops every empty ledger
//!   below it with its metadata.
//!
//! Three rounds, each on a log of its own. Run: `make bench-scale`, or
//! `cargo bench -p quire-metadata --bench log_apply`.

#[global_allocator]
static ALLOC: quire_runtime::Allocator = quire_runtime::Allocator;

use std::collections::BTreeMap;
use std::time::Instant;

use quire_log::{LogConfig, LogMeta, LogRecord, LogSegment};
use quire_metadata::state::{Caller, Command, Ledger, LedgerState, MetaState, NewLedger, Outcome, OWNER_KEY};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn gateway() -> Caller {
    Caller { role: "gateway".into(), id: "1".into() }
}

/// A ledger made for log `name` by gateway 1.
fn made_for(s: &mut MetaState, name: &str) -> Ledger {
    let custom: BTreeMap<String, Vec<u8>> = [
        (quire_log::config::LEDGER_KEY.to_string(), name.as_bytes().to_vec()),
        (OWNER_KEY.to_string(), b"gateway/1".to_vec()),
    ]
    .into();
    let new = NewLedger {
        ensemble_size: 3,
        write_quorum: 3,
        ack_quorum: 2,
        bookie_ids: (1..=3).map(|i| format!("bookie-{i}")).collect(),
        instance_ids: (1..=3).map(|i| format!("{i:032x}")).collect(),
        custom,
        now_ms: 1_780_000_000_000,
    };
    match s.apply(Command::CreateLedger(new)).0 {
        Outcome::Ledger(l) => l,
        other => panic!("{other:?}"),
    }
}

/// `l` closed at `last` (-1: empty), as its writer's update.
fn closed(l: &Ledger, last: i64) -> (Ledger, u64) {
    let mut c = l.clone();
    c.state = LedgerState::Closed;
    c.last_entry_id = last;
    c.length = (last + 1) as u64 * 64;
    (c, l.version)
}

fn stored(o: Outcome) -> LogMeta {
    match o {
        Outcome::Log(l, _) => *l,
        other => panic!("{other:?}"),
    }
}

fn update(s: &mut MetaState, log: &LogMeta, record: LogRecord, ledgers: Vec<(Ledger, u64)>) -> LogMeta {
    let new = LogMeta { record, ..log.clone() };
    let cmd = Command::UpdateLog { log: new, expected_version: log.version, ledgers, caller: gateway(), now_ms: 2 };
    stored(s.apply(cmd).0)
}

fn main() {
    let segments = env("BENCH_LOG_SEGMENTS", quire_metadata::logs::LOG_SEGMENTS_MAX as u64) as usize;
    let mut s = MetaState::default();
    for round in 0..3 {
        let name = format!("full-{round}");
        // Ledgers 0..segments-1 listed (the first made the log; the last
        // open), then one more for the rollover.
        let ledgers: Vec<Ledger> = (0..segments).map(|_| made_for(&mut s, &name)).collect();
        let config = LogConfig {
            ensemble_size: 3,
            write_quorum: 3,
            ack_quorum: 2,
            rollover: Default::default(),
            retention: Default::default(),
        };
        let log = LogMeta {
            record: LogRecord::new(&name, "gateway/1", ledgers[0].ledger_id),
            config,
            producers: Default::default(),
            creator: String::new(),
            created_at_ms: 0,
            version: 0,
            principal: String::new(),
        };
        let log = stored(s.apply(Command::CreateLog { log, caller: gateway(), now_ms: 1 }).0);
        // Every ledger but the last two closed empty; one edit lists them
        // sealed, and the last but one open.
        for l in &ledgers[..segments - 2] {
            let (c, v) = closed(l, -1);
            match s.apply(Command::UpdateLedger { ledger: c, expected_version: v }).0 {
                Outcome::Ledger(_) => {}
                other => panic!("{other:?}"),
            }
        }
        let mut record = log.record.clone();
        record.segments[0].end_offset = Some(0);
        for l in &ledgers[1..segments - 2] {
            record.segments.push(LogSegment {
                ledger_id: l.ledger_id,
                first_offset: 0,
                end_offset: Some(0),
                sealed_at_ms: 0,
            });
        }
        let open = &ledgers[segments - 2];
        record.segments.push(LogSegment {
            ledger_id: open.ledger_id,
            first_offset: 0,
            end_offset: None,
            sealed_at_ms: 0,
        });
        let t = Instant::now();
        let log = update(&mut s, &log, record, vec![]);
        let build_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(log.record.segments.len(), segments - 1);

        // The rollover: the open ledger closed at 10 records, the next listed.
        let open = s.ledgers.get(&open.ledger_id).unwrap();
        let rolled = log.record.roll(1, 9, ledgers[segments - 1].ledger_id).unwrap();
        let t = Instant::now();
        let log = update(&mut s, &log, rolled, vec![closed(&open, 9)]);
        let roll_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(log.record.segments.len(), segments);

        // A trim to 5: every empty ledger below goes, with its metadata.
        let (trimmed, gone) = log.record.trim(5).unwrap();
        let t = Instant::now();
        let log = update(&mut s, &log, trimmed, vec![]);
        let trim_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(log.record.segments.len(), 2);
        println!(
            "RESULT phase=log_apply round={round} segments={segments} build_edit_ms={build_ms:.1} roll_ms={roll_ms:.2} trim_ms={trim_ms:.1} trimmed_ledgers={}",
            gone.len()
        );
    }
}
