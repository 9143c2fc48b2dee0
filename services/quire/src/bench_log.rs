//! `quire bench --mode log-takeover` and `--mode log-catch-up` (issue #23).
//!
//! **Takeover under load.** `--ledgers` logs are appended to for the whole
//! run (`--window` appends in flight on each, as `--mode log`); one more
//! log is taken over again and again by two alternating owners, each
//! driving 10 appends in flight until the other takes it. Every
//! `--takeover-interval-ms` the idle owner calls `open_log_writer`: the
//! time to its return (fence and recover the open ledger, rebuild the
//! producers since the last rollover, a new ledger, the CAS) and the
//! log's write gap (from the previous owner's last acknowledged append to
//! the new owner's first) are recorded; p50 and p99 are printed with the
//! load's append latency.
//!
//! **Catch-up.** One log is filled with `--fill-mb` MB (`--window` appends in
//! flight, rolling every `--log-rollover-entries` records), then read from
//! offset 0 to its end, 4096 records per call, as a consumer that fell
//! behind does (`--drop-caches`: from the disk): MB/s, every record checked (its length, and that each
//! record written is read once, at consecutive offsets).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::{BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use quire_client::{Client, ClientError, LogWriter};

use crate::bench::BenchArgs;

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

fn ms(h: &Histogram<u64>, p: f64) -> f64 {
    h.value_at_quantile(p) as f64 / 1000.0
}

fn config(a: &BenchArgs) -> quire_log::LogConfig {
    quire_log::LogConfig {
        ensemble_size: a.ensemble as u32,
        write_quorum: a.write_quorum as u32,
        ack_quorum: a.ack_quorum as u32,
        rollover: quire_log::Rollover { max_entries: a.log_rollover_entries, ..Default::default() },
        retention: Default::default(),
    }
}

/// A record that names its offset (known once written: its index in the fill).
fn record(index: u64, len: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(len.max(8));
    b.put_u64_le(index);
    b.resize(len.max(8), 0x6c);
    b.freeze()
}

/// The load's appenders: one of `window` per log, until `until`.
async fn load(w: LogWriter, payload: Bytes, until: Instant, h: Arc<Mutex<Histogram<u64>>>) -> anyhow::Result<()> {
    while Instant::now() < until {
        let sent = Instant::now();
        w.append(payload.clone()).await.context("a load append")?;
        let _ = h.lock().expect("histogram lock").record((sent.elapsed().as_micros() as u64).max(1));
    }
    Ok(())
}

/// Appends to the contested log until its writer is fenced; the moment of
/// each acknowledgement goes to `last_ack`, the first to `first_ack`.
async fn contest(w: LogWriter, payload: Bytes, until: Instant, acks: Arc<Mutex<(Option<Instant>, Option<Instant>)>>) {
    while Instant::now() < until {
        match w.append(payload.clone()).await {
            Ok(_) => {
                let now = Instant::now();
                let mut a = acks.lock().expect("acks lock");
                a.0.get_or_insert(now);
                a.1 = Some(now);
            }
            Err(ClientError::LogFenced(_)) => return,
            Err(e) => {
                eprintln!("contested append: {e}");
                return;
            }
        }
    }
}

pub async fn takeover(client: &Client, a: &BenchArgs) -> anyhow::Result<()> {
    let pid = std::process::id();
    let payload = Bytes::from(vec![0x71u8; a.entry_bytes]);
    let mut logs = Vec::new();
    for i in 0..a.ledgers {
        logs.push(
            client.create_log(&format!("bench-{pid}-load-{i}"), config(a), "bench").await.context("create a log")?,
        );
    }
    let name = format!("bench-{pid}-contested");
    let first = client.create_log(&name, config(a), "owner-0").await.context("create the contested log")?;
    let until = Instant::now() + Duration::from_secs(a.duration_secs);
    let appends = Arc::new(Mutex::new(hist()));
    let mut tasks = tokio::task::JoinSet::new();
    for l in &logs {
        for _ in 0..a.window.max(1) {
            tasks.spawn(load(l.clone(), payload.clone(), until, appends.clone()));
        }
    }
    let (mut took, mut gaps) = (hist(), hist());
    let mut acks = Arc::new(Mutex::new((None, None)));
    let mut contested = tokio::task::JoinSet::new();
    for _ in 0..10 {
        contested.spawn(contest(first.clone(), payload.clone(), until, acks.clone()));
    }
    let interval = Duration::from_millis(a.takeover_interval_ms.max(1));
    let mut n = 0u64;
    while Instant::now() + interval < until {
        tokio::time::sleep(interval).await;
        n += 1;
        let started = Instant::now();
        let w = client.open_log_writer(&name, &format!("owner-{}", n % 2)).await.context("take the log over")?;
        let _ = took.record((started.elapsed().as_micros() as u64).max(1));
        // The previous owner's appenders stop on LogFenced.
        while contested.join_next().await.is_some() {}
        let old_last = acks.lock().expect("acks lock").1;
        acks = Arc::new(Mutex::new((None, None)));
        for _ in 0..10 {
            contested.spawn(contest(w.clone(), payload.clone(), until, acks.clone()));
        }
        // The gap: from the old owner's last acknowledgement to the new one's first.
        let mut waited = 0;
        while acks.lock().expect("acks lock").0.is_none() && waited < 1000 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            waited += 1;
        }
        if let (Some(last), Some(first)) = (old_last, acks.lock().expect("acks lock").0) {
            let _ = gaps.record((first.saturating_duration_since(last).as_micros() as u64).max(1));
        }
        eprintln!("takeover {n}: {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    while let Some(r) = tasks.join_next().await {
        r.context("a load task")??;
    }
    while contested.join_next().await.is_some() {}
    let h = appends.lock().expect("histogram lock").clone();
    println!(
        "takeover under load: {} logs x {} in flight (E={} Qw={} Qa={}, {} B), one log taken over every {} ms",
        a.ledgers, a.window, a.ensemble, a.write_quorum, a.ack_quorum, a.entry_bytes, a.takeover_interval_ms
    );
    println!(
        "takeovers {n}: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        ms(&took, 0.5),
        ms(&took, 0.99),
        took.max() as f64 / 1000.0
    );
    println!(
        "write gap {}: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        gaps.len(),
        ms(&gaps, 0.5),
        ms(&gaps, 0.99),
        gaps.max() as f64 / 1000.0
    );
    println!(
        "load      {} appends: {:.0}/s  p50 {:.2} ms  p99 {:.2} ms",
        h.len(),
        h.len() as f64 / a.duration_secs as f64,
        ms(&h, 0.5),
        ms(&h, 0.99)
    );
    if !a.keep {
        for l in &logs {
            let _ = client.delete_log(l.name()).await;
        }
        let _ = client.delete_log(&name).await;
    }
    Ok(())
}

pub async fn catch_up(client: &Client, a: &BenchArgs) -> anyhow::Result<()> {
    let len = a.entry_bytes.max(8);
    let records = ((a.fill_mb * 1e6) / len as f64).ceil().max(1.0) as u64;
    let name = format!("bench-{}-catch-up", std::process::id());
    let w = client.create_log(&name, config(a), "bench").await.context("create a log")?;
    let started = Instant::now();
    // Batches of `window` records, four batches in flight (their order in
    // the log is whichever takes the writer first: each record names
    // itself, and the read back checks each is there once).
    let batch = a.window.max(1) as u64;
    let mut inflight = std::collections::VecDeque::new();
    let mut next = 0u64;
    while next < records {
        let n = batch.min(records - next);
        let payloads: Vec<Bytes> = (next..next + n).map(|i| record(i, len)).collect();
        let w2 = w.clone();
        inflight.push_back(tokio::spawn(async move { w2.append_batch(payloads, None).await }));
        next += n;
        if inflight.len() >= 4 {
            inflight.pop_front().expect("non-empty").await?.context("a fill append")?;
        }
    }
    for t in inflight {
        t.await?.context("a fill append")?;
    }
    let fill_secs = started.elapsed().as_secs_f64();
    if a.drop_caches {
        crate::bench_catchup::drop_caches()?;
    }
    let started = Instant::now();
    let mut from = 0u64;
    let mut bytes = 0u64;
    let mut seen = vec![false; records as usize];
    while from < records {
        let got = client.read_log(&name, from, 4096).await.with_context(|| format!("read from {from}"))?;
        anyhow::ensure!(!got.is_empty(), "the read stopped at {from} of {records}");
        for e in &got {
            let index = e.payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
            let fresh = index.is_some_and(|i| i < records && !std::mem::replace(&mut seen[i as usize], true));
            anyhow::ensure!(
                e.offset == from && e.payload.len() == len && fresh,
                "offset {from}: offset {}, {} bytes, record {index:?} (twice, or never written)",
                e.offset,
                e.payload.len()
            );
            from += 1;
            bytes += e.payload.len() as u64;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "log catch-up: {records} records of {len} B ({:.0} MB, rolled every {}), filled in {fill_secs:.1} s, page cache {}",
        bytes as f64 / 1e6,
        a.log_rollover_entries,
        if a.drop_caches { "dropped" } else { "kept" }
    );
    println!("read back in {secs:.1} s: {:.0} MB/s, {:.0} records/s", bytes as f64 / 1e6 / secs, records as f64 / secs);
    if !a.keep {
        let _ = client.delete_log(&name).await;
    }
    Ok(())
}
