//! Retention (issue #23 item 5): how far the retention service trims a log,
//! by the age of its sealed ledgers' records (the time of each one's last
//! record, issue #47 item 4, which the caller reads from the ledger; the
//! seal time where that is unknown: records written before records had a
//! time, or an empty ledger) and the bytes they hold, never past the
//! slowest cursor that holds retention. Whole ledgers only: the trim point
//! it picks is a segment's end, so that each trim frees a ledger. The open
//! segment is never trimmed (its records may not all be acknowledged).

use crate::chain::LogRecord;
use crate::config::Retention;

/// The trim point retention asks for, if it moves: the end of the last of
/// the oldest segments that are past `retention` (whose last record is
/// older than `max_age_ms`, so every record in them is, a log's record
/// times never decreasing; or, where `last_time_of` its ledger is None or
/// 0, sealed longer ago than that; or among the oldest while the sealed
/// segments hold more than `max_bytes`), at most `floor` (the slowest
/// holding cursor). `bytes_of` gives a sealed segment's ledger length
/// (None: unknown, then counted as nothing).
pub fn trim_point(
    record: &LogRecord,
    retention: &Retention,
    now_ms: u64,
    floor: Option<u64>,
    bytes_of: impl Fn(u64) -> Option<u64>,
    last_time_of: impl Fn(u64) -> Option<u64>,
) -> Option<u64> {
    if retention.max_age_ms == 0 && retention.max_bytes == 0 {
        return None;
    }
    let sealed: Vec<_> = record.segments.iter().filter(|s| s.end_offset.is_some()).collect();
    let mut held: u64 = sealed.iter().map(|s| bytes_of(s.ledger_id).unwrap_or(0)).sum();
    let mut to = record.trim_before;
    for s in &sealed {
        let aged_from = last_time_of(s.ledger_id).filter(|t| *t > 0).unwrap_or(s.sealed_at_ms);
        let old = retention.max_age_ms > 0 && aged_from > 0 && now_ms.saturating_sub(aged_from) >= retention.max_age_ms;
        let big = retention.max_bytes > 0 && held > retention.max_bytes;
        if !(old || big) {
            break;
        }
        held = held.saturating_sub(bytes_of(s.ledger_id).unwrap_or(0));
        to = s.end_offset.expect("sealed");
    }
    let to = floor.map_or(to, |f| to.min(f));
    (to > record.trim_before).then_some(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments 1: 0..10, 2: 10..20, 3: 20..30 sealed at 100, 200, 300 ms;
    /// 4 open. Each ledger holds 1000 bytes.
    fn log() -> LogRecord {
        let mut r = LogRecord::new("l", "o", 1).roll(1, 9, 2).unwrap().roll(1, 9, 3).unwrap().roll(1, 9, 4).unwrap();
        for (s, at) in r.segments.iter_mut().zip([100, 200, 300]) {
            s.sealed_at_ms = at;
        }
        r
    }

    fn bytes(_: u64) -> Option<u64> {
        Some(1000)
    }

    fn no_times(_: u64) -> Option<u64> {
        None
    }

    #[test]
    fn by_age_whole_ledgers_older_than_the_limit_go() {
        let r = Retention { max_age_ms: 150, max_bytes: 0 };
        assert_eq!(
            trim_point(&log(), &r, 360, None, bytes, no_times),
            Some(20),
            "sealed at 100 and 200 are 150 old at 360"
        );
        assert_eq!(trim_point(&log(), &r, 200, None, bytes, no_times), None, "none old enough");
        assert_eq!(trim_point(&log(), &r, 10_000, None, bytes, no_times), Some(30), "never the open segment");
    }

    #[test]
    fn by_age_the_records_time_counts_before_the_seal_time() {
        let mut l = log();
        // Records of 50 and 60 ms sealed late (at 1000 and 1100), then a
        // ledger of version-1 records (time 0) sealed at 1200.
        for (s, at) in l.segments.iter_mut().zip([1000, 1100, 1200]) {
            s.sealed_at_ms = at;
        }
        let times = |id: u64| [(1, 50), (2, 60), (3, 0)].into_iter().find(|(l, _)| *l == id).map(|(_, t)| t);
        let r = Retention { max_age_ms: 100, max_bytes: 0 };
        assert_eq!(trim_point(&l, &r, 200, None, bytes, times), Some(20), "by the records' time, not the seal's");
        assert_eq!(trim_point(&l, &r, 1300, None, bytes, times), Some(30), "by the seal time without a record time");
    }

    #[test]
    fn by_size_the_oldest_go_until_the_rest_fit() {
        let r = Retention { max_age_ms: 0, max_bytes: 1500 };
        assert_eq!(trim_point(&log(), &r, 0, None, bytes, no_times), Some(20), "3000 bytes: two ledgers go, 1000 stay");
        let r = Retention { max_age_ms: 0, max_bytes: 5000 };
        assert_eq!(trim_point(&log(), &r, 0, None, bytes, no_times), None);
    }

    #[test]
    fn a_holding_cursor_is_the_floor_and_no_setting_trims_nothing() {
        let r = Retention { max_age_ms: 1, max_bytes: 0 };
        assert_eq!(trim_point(&log(), &r, 10_000, Some(15), bytes, no_times), Some(15));
        assert_eq!(trim_point(&log(), &r, 10_000, Some(0), bytes, no_times), None);
        assert_eq!(trim_point(&log(), &Retention::default(), 10_000, None, bytes, no_times), None);
        let (trimmed, _) = log().trim(20).unwrap();
        assert_eq!(trim_point(&trimmed, &r, 10_000, None, bytes, no_times), Some(30), "from where it stands");
    }
}
