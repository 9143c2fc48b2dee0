//! `quire bench --mode catch-up`: how fast a consumer that fell behind reads
//! a closed ledger back, in MB/s, to set beside the disk's read bandwidth.
//!
//! Fills `--ledgers` ledgers with `--fill-mb` MB in all (closed loop,
//! `--window` adds in flight per ledger), closes them, optionally drops the
//! kernel's page cache (`--drop-caches`, root only) so reads come from the
//! entry logs on disk, then reads every ledger from entry 0 to its end, all
//! ledgers at once: as one scan each (batch reads over the ensemble's
//! stripes, a few batches ahead), or with `--read-range N`, N entries per
//! call. Every entry read is checked: the ids it carries and its length.

use std::collections::VecDeque;
use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use quire_client::{Client, CreateLedger};

use crate::bench::{BenchArgs, Format};

/// An entry that names itself: ledger id and entry id, then filler.
fn entry(ledger_id: u64, entry_id: u64, len: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(len.max(16));
    b.put_u64_le(ledger_id);
    b.put_u64_le(entry_id);
    b.resize(len.max(16), 0x5a);
    b.freeze()
}

/// Writes `entries` entries to a new ledger; its id.
async fn fill(client: &Client, spec: CreateLedger, entries: u64, len: usize, window: usize) -> anyhow::Result<u64> {
    let w = client.create(spec).await.context("create a ledger")?;
    let id = w.ledger_id();
    let mut pending = VecDeque::new();
    for e in 0..entries {
        if pending.len() >= window.max(1) {
            let p: quire_client::PendingAdd = pending.pop_front().expect("non-empty");
            p.await.context("fill add")?;
        }
        pending.push_back(w.submit(entry(id, e, len)).await.context("fill submit")?);
    }
    for p in pending {
        p.await.context("fill add")?;
    }
    let meta = w.close().await.context("close a filled ledger")?;
    anyhow::ensure!(
        meta.last_entry_id == entries as i64 - 1,
        "ledger {id} closed at {} after {entries} adds",
        meta.last_entry_id
    );
    Ok(id)
}

/// Checks that `got` is entries `from..` of ledger `id`, each `len` bytes
/// naming itself.
fn check(id: u64, from: u64, len: usize, got: &[quire_proto::v1::Entry]) -> anyhow::Result<()> {
    for (i, e) in got.iter().enumerate() {
        let want = from + i as u64;
        let p = &e.payload;
        anyhow::ensure!(
            e.entry_id == want
                && p.len() == len.max(16)
                && p[..8] == id.to_le_bytes()
                && p[8..16] == want.to_le_bytes(),
            "ledger {id}: entry {want} came back as {} with {} bytes",
            e.entry_id,
            p.len()
        );
    }
    Ok(())
}

/// Reads ledger `id` (entries 0..`entries`) back: with `range` 0 as one
/// scan (batch reads, a window ahead: how a consumer catches up), else
/// `range` entries per call. Latencies in µs of each batch or call.
async fn read_back(client: Client, id: u64, entries: u64, len: usize, range: u64) -> anyhow::Result<Histogram<u64>> {
    let mut h = Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds");
    let reader = client.open(id).await.with_context(|| format!("open ledger {id}"))?;
    let mut next = 0u64;
    if range == 0 {
        let mut scan = reader.scan(0, entries - 1).await.with_context(|| format!("scan ledger {id}"))?;
        let mut started = Instant::now();
        while let Some(got) = scan.next_batch().await.with_context(|| format!("read {id} from {next}"))? {
            let _ = h.record((started.elapsed().as_micros() as u64).max(1));
            check(id, next, len, &got)?;
            next += got.len() as u64;
            started = Instant::now();
        }
        anyhow::ensure!(next == entries, "ledger {id}: the scan ended at {next} of {entries}");
        return Ok(h);
    }
    while next < entries {
        let to = (next + range - 1).min(entries - 1);
        let started = Instant::now();
        let got =
            reader.read_range(next, to, range as usize).await.with_context(|| format!("read {id}:{next}..={to}"))?;
        let _ = h.record((started.elapsed().as_micros() as u64).max(1));
        anyhow::ensure!(got.len() as u64 == to - next + 1, "ledger {id}: {} entries for {next}..={to}", got.len());
        check(id, next, len, &got)?;
        next = to + 1;
    }
    Ok(h)
}

/// Flushes dirty pages and empties the page cache, so reads reach the disk.
pub(crate) fn drop_caches() -> anyhow::Result<()> {
    let status = std::process::Command::new("sync").status().context("run sync")?;
    anyhow::ensure!(status.success(), "sync failed");
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").context("write /proc/sys/vm/drop_caches (needs root)")?;
    Ok(())
}

pub async fn run(client: &Client, a: &BenchArgs, spec: CreateLedger) -> anyhow::Result<()> {
    let len = a.entry_bytes.max(16);
    let total_entries = ((a.fill_mb * 1e6) / len as f64).ceil().max(a.ledgers as f64) as u64;
    let per_ledger = total_entries / a.ledgers as u64;
    let fill_started = Instant::now();
    let mut fills = tokio::task::JoinSet::new();
    for _ in 0..a.ledgers {
        let (c, s) = (client.clone(), spec.clone());
        let window = a.window;
        fills.spawn(async move { fill(&c, s, per_ledger, len, window).await });
    }
    let mut ids = Vec::new();
    while let Some(r) = fills.join_next().await {
        ids.push(r.context("fill task")??);
    }
    let fill_secs = fill_started.elapsed().as_secs_f64();
    let bytes = per_ledger * a.ledgers as u64 * len as u64;
    if a.format == Format::Text {
        eprintln!(
            "filled {} ledgers, {:.1} MB in {fill_secs:.1} s ({:.1} MB/s)",
            a.ledgers,
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / fill_secs
        );
    }
    if a.drop_caches {
        drop_caches()?;
    }

    let read_started = Instant::now();
    let mut reads = tokio::task::JoinSet::new();
    for &id in &ids {
        reads.spawn(read_back(client.clone(), id, per_ledger, len, a.read_range));
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds");
    while let Some(r) = reads.join_next().await {
        h.add(r.context("read task")??).expect("same bounds");
    }
    let secs = read_started.elapsed().as_secs_f64();
    let entries = per_ledger * a.ledgers as u64;
    let mb_s = bytes as f64 / 1e6 / secs;
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    match a.format {
        Format::Text => {
            println!(
                "catch-up read: {} ledgers (E={} Qw={} Qa={}), {len} B entries, {}, page cache {}",
                a.ledgers,
                a.ensemble,
                a.write_quorum,
                a.ack_quorum,
                if a.read_range == 0 { "one scan each".to_string() } else { format!("{} per call", a.read_range) },
                if a.drop_caches { "dropped" } else { "kept" }
            );
            println!(
                "read      {entries} entries, {:.1} MB in {secs:.1} s: {:.0} entries/s, {mb_s:.1} MB/s",
                bytes as f64 / 1e6,
                entries as f64 / secs
            );
            let what = if a.read_range == 0 { "batch" } else { "range" };
            println!("{what}     p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms", q(0.5), q(0.99), h.max() as f64 / 1000.0);
        }
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "mode": "catch-up", "ledgers": a.ledgers, "ensemble": a.ensemble, "write_quorum": a.write_quorum,
                "ack_quorum": a.ack_quorum, "entry_bytes": len, "read_range": a.read_range, "drop_caches": a.drop_caches,
                "fill_seconds": fill_secs, "fill_mb_per_s": bytes as f64 / 1e6 / fill_secs,
                "seconds": secs, "entries": entries, "bytes": bytes, "entries_per_s": entries as f64 / secs, "mb_per_s": mb_s,
                "range_latency_ms": {"p50": q(0.5), "p99": q(0.99), "max": h.max() as f64 / 1000.0},
            })
        ),
        Format::Csv => {
            println!("entries,bytes,seconds,entries_per_s,mb_per_s,range_p50_ms,range_p99_ms");
            println!("{entries},{bytes},{secs:.3},{:.0},{mb_s:.2},{:.3},{:.3}", entries as f64 / secs, q(0.5), q(0.99));
        }
    }
    let _ = std::io::stdout().flush();
    if !a.keep {
        for id in ids {
            let _ = client.delete(id).await;
        }
    }
    Ok(())
}
