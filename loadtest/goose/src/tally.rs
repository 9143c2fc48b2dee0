//! Bytes moved and checks failed, counted beside goose's own request metrics:
//! goose times requests, these say how many entries and MB those requests
//! carried and whether what came back was right.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static APPENDED_ENTRIES: AtomicU64 = AtomicU64::new(0);
static APPENDED_BYTES: AtomicU64 = AtomicU64::new(0);
static READ_ENTRIES: AtomicU64 = AtomicU64::new(0);
static READ_BYTES: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static WRONG: AtomicU64 = AtomicU64::new(0);
/// The first moment anything moved and the latest, for rates over the time
/// the load ran rather than the process lived.
static WINDOW: Mutex<Option<(Instant, Instant)>> = Mutex::new(None);
/// The first few failure reasons, to print at the end.
static FIRST_FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());
const KEEP_FAILURES: usize = 20;

fn touch() {
    let now = Instant::now();
    let mut w = WINDOW.lock().expect("tally window lock");
    *w = Some(match *w {
        Some((first, _)) => (first, now),
        None => (now, now),
    });
}

pub fn appended(entries: u64, entry_bytes: usize) {
    APPENDED_ENTRIES.fetch_add(entries, Ordering::Relaxed);
    APPENDED_BYTES.fetch_add(entries * entry_bytes as u64, Ordering::Relaxed);
    touch();
}

pub fn read(entries: u64, entry_bytes: usize) {
    READ_ENTRIES.fetch_add(entries, Ordering::Relaxed);
    READ_BYTES.fetch_add(entries * entry_bytes as u64, Ordering::Relaxed);
    touch();
}

pub fn failure(why: &str) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    let mut kept = FIRST_FAILURES.lock().expect("tally failures lock");
    if kept.len() < KEEP_FAILURES {
        kept.push(why.to_string());
    }
}

/// A reply that contradicts what was written (its reason is kept by [`failure`], which follows).
pub fn wrong() {
    WRONG.fetch_add(1, Ordering::Relaxed);
}

/// What the run moved and how fast.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Totals {
    pub seconds: f64,
    pub appended_entries: u64,
    pub appended_entries_per_s: f64,
    pub append_mb_per_s: f64,
    pub read_entries: u64,
    pub read_entries_per_s: f64,
    pub read_mb_per_s: f64,
    pub failures: u64,
    pub wrong_replies: u64,
    pub first_failures: Vec<String>,
}

pub fn totals() -> Totals {
    let seconds = match *WINDOW.lock().expect("tally window lock") {
        Some((first, last)) => (last - first).as_secs_f64().max(1e-3),
        None => 0.0,
    };
    let per_s = |n: u64| if seconds > 0.0 { n as f64 / seconds } else { 0.0 };
    let ae = APPENDED_ENTRIES.load(Ordering::Relaxed);
    let re = READ_ENTRIES.load(Ordering::Relaxed);
    Totals {
        seconds,
        appended_entries: ae,
        appended_entries_per_s: per_s(ae),
        append_mb_per_s: per_s(APPENDED_BYTES.load(Ordering::Relaxed)) / 1e6,
        read_entries: re,
        read_entries_per_s: per_s(re),
        read_mb_per_s: per_s(READ_BYTES.load(Ordering::Relaxed)) / 1e6,
        failures: FAILURES.load(Ordering::Relaxed),
        wrong_replies: WRONG.load(Ordering::Relaxed),
        first_failures: FIRST_FAILURES.lock().expect("tally failures lock").clone(),
    }
}
