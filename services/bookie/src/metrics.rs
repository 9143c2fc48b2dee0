//! The bookie's Prometheus metrics: the store's counters, the journal's,
//! garbage collection's, and each entry log's size and live fraction (as
//! the last GC pass or usage scan found them).

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use quire_runtime::metrics::metric;
use quire_storage::Store;

/// The exposition text.
pub fn render(store: &Store, add_seconds: &quire_metrics::Histogram, limbo: &crate::integrity::Limbo) -> String {
    let mut s = String::new();
    metric(
        &mut s,
        "quire_bookie_integrity_check_pending",
        "gauge",
        "1 while the data-integrity check has ledgers in limbo (their absent entries answered LEDGER_IN_LIMBO).",
        u64::from(!limbo.is_empty()),
    );
    metric(
        &mut s,
        "quire_bookie_ledgers_in_limbo",
        "gauge",
        "Ledgers in limbo (0 before they are listed).",
        limbo.len(),
    );
    add_seconds.render(
        &mut s,
        "quire_bookie_add_seconds",
        "Acknowledged adds: from the request to the fdatasync of the group commit holding it.",
    );
    let j0 = store.journal_stats();
    j0.sync_seconds.render(&mut s, "quire_bookie_journal_sync_seconds", "Write + fdatasync time of each group commit.");
    j0.batch_records.render(&mut s, "quire_bookie_journal_batch_records", "Records per group commit.");
    metric(
        &mut s,
        "quire_bookie_journal_queue_records",
        "gauge",
        "Records handed to the journal and not yet synced.",
        j0.appended.load(Relaxed).saturating_sub(j0.records.load(Relaxed)),
    );
    metric(
        &mut s,
        "quire_bookie_write_cache_bytes",
        "gauge",
        "Payload bytes journaled and not yet flushed to an entry log.",
        store.write_cache_bytes(),
    );
    metric(
        &mut s,
        "quire_bookie_reads_write_cache_total",
        "counter",
        "Reads served from the write cache.",
        store.stats().reads_write_cache.load(Relaxed),
    );
    metric(
        &mut s,
        "quire_bookie_reads_read_cache_total",
        "counter",
        "Reads served from the read-ahead cache.",
        store.stats().reads_read_cache.load(Relaxed),
    );
    let st = store.stats();
    let j = store.journal_stats();
    let counters: [(&str, &str, u64); 20] = [
        (
            "quire_bookie_journal_failed",
            "1 once a journal write or fsync (file or directory) failed: every add is refused until a restart, which replays what is durable.",
            store.journal_failed() as u64,
        ),
        (
            "quire_bookie_read_only",
            "1 while the bookie refuses normal adds (journal or flush failure, disk guard, operator).",
            store.read_only().is_some() as u64,
        ),
        ("quire_bookie_adds_total", "Adds acknowledged.", st.adds.load(Relaxed)),
        ("quire_bookie_reads_total", "Reads served.", st.reads.load(Relaxed)),
        ("quire_bookie_range_reads_total", "Range reads (ReadEntries) answered.", st.range_reads.load(Relaxed)),
        (
            "quire_bookie_range_read_regions_total",
            "Positioned reads of entry-log regions made by range reads.",
            st.range_read_regions.load(Relaxed),
        ),
        ("quire_bookie_flushes_total", "Write-cache flushes to the entry logs.", st.flushes.load(Relaxed)),
        ("quire_bookie_journal_syncs_total", "Journal fdatasyncs (group commits).", j.syncs.load(Relaxed)),
        ("quire_bookie_journal_records_total", "Journal records written.", j.records.load(Relaxed)),
        ("quire_bookie_journal_bytes_total", "Journal bytes written.", j.bytes.load(Relaxed)),
        (
            "quire_bookie_journal_segments_reused_total",
            "Journal segments started in a spare's file (no zero-fill).",
            j.segments_reused.load(Relaxed),
        ),
        (
            "quire_bookie_journal_segments_retired_total",
            "Checkpointed journal segments deleted or kept as spares.",
            j.segments_deleted.load(Relaxed) + j.segments_spared.load(Relaxed),
        ),
        ("quire_bookie_gc_passes_total", "Garbage-collection passes over the entry logs.", st.gc_passes.load(Relaxed)),
        (
            "quire_bookie_gc_ledgers_deleted_total",
            "Ledgers dropped: deleted in the metadata service, or closed with no ensemble naming this bookie.",
            st.gc_ledgers_deleted.load(Relaxed),
        ),
        ("quire_bookie_gc_entry_logs_removed_total", "Entry logs removed whole.", st.gc_logs_removed.load(Relaxed)),
        ("quire_bookie_gc_entry_logs_compacted_total", "Entry logs compacted.", st.gc_logs_compacted.load(Relaxed)),
        ("quire_bookie_gc_entries_moved_total", "Entries moved by compaction.", st.gc_entries_moved.load(Relaxed)),
        (
            "quire_bookie_gc_reclaimed_bytes_total",
            "Disk bytes freed by garbage collection (removed logs less the copies written).",
            st.gc_bytes_reclaimed.load(Relaxed),
        ),
        (
            "quire_bookie_gc_compaction_failures_total",
            "Compactions stopped by an error (the log is kept).",
            st.gc_compaction_failures.load(Relaxed),
        ),
        ("quire_bookie_parked_long_polls", "Long polls parked now.", st.parked_waits.load(Relaxed) as u64),
    ];
    for (name, help, v) in counters {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        metric(&mut s, name, kind, help, v);
    }
    let seconds = |us: u64| us as f64 / 1e6;
    metric(
        &mut s,
        "quire_bookie_journal_sync_seconds_total",
        "counter",
        "Time in journal fdatasync.",
        seconds(j.sync_us_total.load(Relaxed)),
    );
    metric(
        &mut s,
        "quire_bookie_gc_compaction_seconds_total",
        "counter",
        "Time spent compacting entry logs.",
        seconds(st.gc_compaction_us.load(Relaxed)),
    );
    let usage = store.log_usage();
    let _ = writeln!(s, "# HELP quire_bookie_entry_log_bytes Record bytes in an entry log.");
    let _ = writeln!(s, "# TYPE quire_bookie_entry_log_bytes gauge");
    for u in &usage {
        let _ = writeln!(s, "quire_bookie_entry_log_bytes{{log=\"{:08x}\"}} {}", u.log_id, u.total_bytes);
    }
    let _ =
        writeln!(s, "# HELP quire_bookie_entry_log_live_ratio Fraction of an entry log the index still references.");
    let _ = writeln!(s, "# TYPE quire_bookie_entry_log_live_ratio gauge");
    for u in &usage {
        let _ = writeln!(s, "quire_bookie_entry_log_live_ratio{{log=\"{:08x}\"}} {:.4}", u.log_id, u.live_fraction());
    }
    s
}
