//! `quire bench`: a direct-client write benchmark, like BookKeeper's
//! `bin/benchmark writes`. Creates ledgers (E/Qw/Qa as asked), then appends
//! for a while, closed loop (a window of adds in flight per ledger) or open
//! loop at a target rate (latency from each add's scheduled time, so a stall
//! counts against every add it delays). Prints progress every second and
//! percentiles at the end; `--format json|csv` for machines.
//! `--mode catch-up` measures reading closed ledgers back instead
//! (bench_catchup.rs); `--mode log-takeover` and `--mode log-catch-up` a
//! log's takeover under load and its catch-up read (bench_log.rs).

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use quire_client::{Client, ClientOptions, CreateLedger};

use crate::bookies::MetaTarget;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable.
    Text,
    /// One JSON object.
    Json,
    /// A header and one row per second, then a summary row (`second` = "total").
    Csv,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Appends for --duration-secs.
    Write,
    /// Fills ledgers with --fill-mb, closes them, reads them back from entry 0.
    CatchUp,
    /// Appends to --ledgers logs (issue #23) for --duration-secs, --window
    /// appends in flight on each (closed loop only), rolling every
    /// --log-rollover-entries records.
    Log,
    /// --ledgers logs under load while one more log is taken over every
    /// --takeover-interval-ms by alternating owners: takeover time and
    /// write gap, p50/p99 (bench_log.rs).
    LogTakeover,
    /// Fills one log with --fill-mb, reads it back from offset 0: MB/s.
    LogCatchUp,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    target: MetaTarget,
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Mode::Write)]
    pub(crate) mode: Mode,
    /// Catch-up: MB written (over all ledgers) before reading back.
    #[arg(long, default_value_t = 256.0)]
    pub(crate) fill_mb: f64,
    /// Catch-up: entries per read call; 0 reads each ledger as one scan
    /// (batch reads a window ahead).
    #[arg(long, default_value_t = 0)]
    pub(crate) read_range: u64,
    /// Catch-up: sync and drop the kernel's page cache before reading (root
    /// only; the bookies must be on this machine), so reads reach the disk.
    #[arg(long)]
    pub(crate) drop_caches: bool,
    /// Ledgers written at once.
    #[arg(long, default_value_t = 1)]
    pub(crate) ledgers: usize,
    /// Ensemble size.
    #[arg(long, default_value_t = 3)]
    pub(crate) ensemble: usize,
    /// Write quorum.
    #[arg(long, default_value_t = 3)]
    pub(crate) write_quorum: usize,
    /// Ack quorum.
    #[arg(long, default_value_t = 2)]
    pub(crate) ack_quorum: usize,
    /// Payload bytes per entry.
    #[arg(long, default_value_t = 1024)]
    pub(crate) entry_bytes: usize,
    /// Target adds per second over all ledgers (open loop); 0: closed loop.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Closed loop: adds in flight per ledger.
    #[arg(long, default_value_t = 100)]
    pub(crate) window: usize,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 10)]
    pub(crate) duration_secs: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub(crate) format: Format,
    /// Keep the ledgers (default: deleted at the end).
    #[arg(long)]
    pub(crate) keep: bool,
    /// Log mode: records per ledger of each log (the default rollover's).
    #[arg(long, default_value_t = quire_log::Rollover::default().max_entries)]
    pub(crate) log_rollover_entries: u64,
    /// Closed loop: drive each ledger (or log, with --mode log) with
    /// --window tasks each awaiting its own append (default: one task per
    /// ledger or log keeps the window full, submitting and collecting in
    /// order).
    #[arg(long)]
    pub(crate) tasks: bool,
    /// Log takeover: the pause between takeovers.
    #[arg(long, default_value_t = 500)]
    pub(crate) takeover_interval_ms: u64,
    /// The client's async worker threads (default: one per core).
    #[arg(long)]
    pub(crate) worker_threads: Option<usize>,
    /// Ledger modes: answer an add only once a reader that starts then
    /// sees it, as a log's writer does (read your writes: its LAC stored
    /// on Qa bookies). Measures that rule's cost on ledgers alone, the
    /// like-for-like reference for `--mode log`.
    #[arg(long)]
    pub(crate) visible_acks: bool,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

/// Latencies (µs) of the current second and of the whole run.
struct Recorder {
    second: Histogram<u64>,
    total: Histogram<u64>,
    failed: u64,
}

impl Recorder {
    fn record(&mut self, r: Result<Duration, String>) {
        match r {
            Ok(d) => {
                let us = (d.as_micros() as u64).max(1);
                let _ = self.second.record(us);
                let _ = self.total.record(us);
            }
            Err(_) => self.failed += 1,
        }
    }
}

/// One ledger's writer loop until `until`.
async fn drive(
    w: quire_client::LedgerWriter,
    payload: Bytes,
    rate_per_ledger: f64,
    window: usize,
    until: Instant,
    rec: Arc<Mutex<Recorder>>,
) {
    if rate_per_ledger > 0.0 {
        // One task per ledger submits each add at its scheduled time and
        // collects acknowledgements in order (a writer acknowledges in entry
        // order); no task or timer per add, so the generator's own cost stays
        // near the closed loop's. When submit blocks (the writer is at its
        // pending bound) the schedule slips, and the latency, measured from
        // the schedule, says so.
        let interval = Duration::from_secs_f64(1.0 / rate_per_ledger);
        let start = tokio::time::Instant::now();
        let mut pending: VecDeque<(tokio::time::Instant, quire_client::PendingAdd)> = VecDeque::new();
        let mut i = 0u64;
        loop {
            let now = tokio::time::Instant::now();
            let mut next_due = None;
            loop {
                let due = start + interval.mul_f64(i as f64);
                if due.into_std() >= until {
                    break;
                }
                if due > now {
                    next_due = Some(due);
                    break;
                }
                match w.submit(payload.clone()).await {
                    Ok(p) => pending.push_back((due, p)),
                    Err(e) => {
                        rec.lock().expect("recorder lock").record(Err(e.to_string()));
                        return;
                    }
                }
                i += 1;
            }
            if next_due.is_none() && pending.is_empty() {
                break;
            }
            let front = async {
                match pending.front_mut() {
                    Some((due, p)) => (*due, p.await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                (due, r) = front => {
                    pending.pop_front();
                    let r = r.map(|_| due.elapsed()).map_err(|e| e.to_string());
                    rec.lock().expect("recorder lock").record(r);
                }
                _ = tokio::time::sleep_until(next_due.unwrap_or(now)), if next_due.is_some() => {}
            }
        }
    } else {
        let w = &w;
        closed_loop(|| w.submit(payload.clone()), window, until, &rec).await;
    }
}

/// A closed loop from one task: `window` appends in flight, each made by
/// `submit` and collected in the order made (a ledger or a log
/// acknowledges in order), until `until`.
async fn closed_loop<S, P, T>(mut submit: impl FnMut() -> S, window: usize, until: Instant, rec: &Mutex<Recorder>)
where
    S: std::future::Future<Output = Result<P, quire_client::ClientError>>,
    P: std::future::Future<Output = Result<T, quire_client::ClientError>>,
{
    let mut pending = VecDeque::new();
    while Instant::now() < until {
        while pending.len() < window.max(1) {
            let sent = Instant::now();
            match submit().await {
                Ok(p) => pending.push_back((sent, p)),
                Err(e) => {
                    rec.lock().expect("recorder lock").record(Err(e.to_string()));
                    return;
                }
            }
        }
        if let Some((sent, p)) = pending.pop_front() {
            let r = p.await.map(|_| sent.elapsed()).map_err(|e| e.to_string());
            rec.lock().expect("recorder lock").record(r);
        }
    }
    for (sent, p) in pending {
        let r = p.await.map(|_| sent.elapsed()).map_err(|e| e.to_string());
        rec.lock().expect("recorder lock").record(r);
    }
}

/// One of a ledger's `window` appenders until `until` (`--tasks`).
async fn drive_task(w: quire_client::LedgerWriter, payload: Bytes, until: Instant, rec: Arc<Mutex<Recorder>>) {
    while Instant::now() < until {
        let sent = Instant::now();
        let r = match w.submit(payload.clone()).await {
            Ok(p) => p.await,
            Err(e) => Err(e),
        };
        let failed = r.is_err();
        rec.lock().expect("recorder lock").record(r.map(|_| sent.elapsed()).map_err(|e| e.to_string()));
        if failed {
            return;
        }
    }
}

/// One log's writer loop until `until`: `window` appends in flight from one
/// task, submitted and collected in order (as [`drive`] does a ledger's).
async fn drive_log_window(
    w: quire_client::LogWriter,
    payload: Bytes,
    window: usize,
    until: Instant,
    rec: Arc<Mutex<Recorder>>,
) {
    let w = &w;
    closed_loop(|| w.submit(payload.clone()), window, until, &rec).await;
}

/// One of a log's `window` appenders until `until` (`--tasks`: a log
/// writer orders appends as it takes them, so `window` of these keep that
/// many in flight).
async fn drive_log(w: quire_client::LogWriter, payload: Bytes, until: Instant, rec: Arc<Mutex<Recorder>>) {
    while Instant::now() < until {
        let sent = Instant::now();
        let r = w.append(payload.clone()).await;
        let failed = r.is_err();
        rec.lock().expect("recorder lock").record(r.map(|_| sent.elapsed()).map_err(|e| e.to_string()));
        if failed {
            return;
        }
    }
}

fn q(h: &Histogram<u64>, p: f64) -> f64 {
    h.value_at_quantile(p) as f64 / 1000.0
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.ledgers > 0 && a.duration_secs > 0, "--ledgers and --duration-secs must be positive");
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = a.worker_threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(async {
        let rpc = a.target.rpc()?;
        let meta = Arc::new(a.target.meta_client(&rpc)?);
        let client = Client::new(rpc.clone(), meta, ClientOptions::default());
        let spec = CreateLedger {
            ensemble: a.ensemble,
            write_quorum: a.write_quorum,
            ack_quorum: a.ack_quorum,
            custom: BTreeMap::new(),
            visible_acks: a.visible_acks,
        };
        // A cluster just started may still be registering its bookies.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let n = client.bookies().refresh().await.map(|b| b.len()).unwrap_or(0);
            if n >= a.ensemble {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "{n} bookies registered; an ensemble of {} needs more", a.ensemble);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if a.mode == Mode::CatchUp {
            let r = crate::bench_catchup::run(&client, &a, spec).await;
            rpc.close(Duration::from_millis(200)).await;
            return r;
        }
        if matches!(a.mode, Mode::LogTakeover | Mode::LogCatchUp) {
            let r = if a.mode == Mode::LogTakeover {
                crate::bench_log::takeover(&client, &a).await
            } else {
                crate::bench_log::catch_up(&client, &a).await
            };
            rpc.close(Duration::from_millis(200)).await;
            return r;
        }
        anyhow::ensure!(a.mode != Mode::Log || a.rate == 0, "--mode log runs a closed loop only (--rate 0)");
        let mut writers = Vec::new();
        let mut logs = Vec::new();
        for i in 0..a.ledgers {
            if a.mode == Mode::Log {
                let config = quire_log::LogConfig {
                    ensemble_size: a.ensemble as u32,
                    write_quorum: a.write_quorum as u32,
                    ack_quorum: a.ack_quorum as u32,
                    rollover: quire_log::Rollover { max_entries: a.log_rollover_entries, ..Default::default() },
                    retention: Default::default(),
                };
                let name = format!("bench-{}-{i}", std::process::id());
                logs.push(client.create_log(&name, config, "bench").await.context("create a log")?);
            } else {
                writers.push(client.create(spec.clone()).await.context("create a ledger")?);
            }
        }
        let payload = Bytes::from(vec![0x71u8; a.entry_bytes]);
        let rec = Arc::new(Mutex::new(Recorder { second: hist(), total: hist(), failed: 0 }));
        let started = Instant::now();
        let until = started + Duration::from_secs(a.duration_secs);
        let rate_per_ledger = a.rate as f64 / a.ledgers as f64;
        let mut tasks = tokio::task::JoinSet::new();
        for w in &writers {
            if a.tasks && a.rate == 0 {
                for _ in 0..a.window.max(1) {
                    tasks.spawn(drive_task(w.clone(), payload.clone(), until, rec.clone()));
                }
            } else {
                tasks.spawn(drive(w.clone(), payload.clone(), rate_per_ledger, a.window, until, rec.clone()));
            }
        }
        for l in &logs {
            if a.tasks {
                for _ in 0..a.window.max(1) {
                    tasks.spawn(drive_log(l.clone(), payload.clone(), until, rec.clone()));
                }
            } else {
                tasks.spawn(drive_log_window(l.clone(), payload.clone(), a.window, until, rec.clone()));
            }
        }
        let mut seconds: Vec<(u64, u64, f64, f64)> = Vec::new(); // (second, adds, p50 ms, p99 ms)
        if a.format == Format::Csv {
            println!("second,adds,adds_per_s,mb_per_s,p50_ms,p99_ms,p999_ms,max_ms,failed");
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + Duration::from_secs(1), Duration::from_secs(1));
        let mut n = 0u64;
        while !tasks.is_empty() {
            tokio::select! {
                _ = tick.tick() => {
                    n += 1;
                    let h = std::mem::replace(&mut rec.lock().expect("recorder lock").second, hist());
                    let adds = h.len();
                    let line = (n, adds, q(&h, 0.5), q(&h, 0.99));
                    match a.format {
                        Format::Text => eprintln!(
                            "[{n:>3}s] {adds:>7} adds/s  {:>7.1} MB/s  p50 {:.2} ms  p99 {:.2} ms",
                            adds as f64 * a.entry_bytes as f64 / 1e6, line.2, line.3
                        ),
                        Format::Csv => println!(
                            "{n},{adds},{adds},{:.2},{:.3},{:.3},{:.3},{:.3},",
                            adds as f64 * a.entry_bytes as f64 / 1e6, line.2, line.3, q(&h, 0.999), h.max() as f64 / 1000.0
                        ),
                        Format::Json => {}
                    }
                    seconds.push(line);
                }
                r = tasks.join_next() => { if let Some(Err(e)) = r { anyhow::bail!("writer task: {e}"); } }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let (total, failed) = {
            let r = rec.lock().expect("recorder lock");
            (r.total.clone(), r.failed)
        };
        let h = &total;
        let adds = h.len();
        let per_s = adds as f64 / secs;
        let mb_s = per_s * a.entry_bytes as f64 / 1e6;
        match a.format {
            Format::Text => {
                let mode = if a.rate > 0 { format!("open loop at {} adds/s", a.rate) } else { format!("closed loop, {} in flight per ledger", a.window) };
                let mode = if a.visible_acks && a.mode != Mode::Log { format!("{mode}, answered once visible") } else { mode };
                let what = if a.mode == Mode::Log {
                    format!("logs {} (rolled every {} records)", a.ledgers, a.log_rollover_entries)
                } else {
                    format!("ledgers {}", a.ledgers)
                };
                println!("{what} (E={} Qw={} Qa={}), {} B entries, {mode}", a.ensemble, a.write_quorum, a.ack_quorum, a.entry_bytes);
                println!("adds      {adds} in {secs:.1} s: {per_s:.0}/s, {mb_s:.1} MB/s ({failed} failed)");
                println!(
                    "latency   p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
                    q(h, 0.5), q(h, 0.95), q(h, 0.99), q(h, 0.999), h.max() as f64 / 1000.0
                );
                let (requests, copies) = client.add_requests();
                println!(
                    "batching  {requests} add requests to bookies, {:.1} copies each",
                    copies as f64 / requests.max(1) as f64
                );
            }
            Format::Json => println!(
                "{}",
                serde_json::json!({
                    "ledgers": a.ledgers, "ensemble": a.ensemble, "write_quorum": a.write_quorum,
                    "ack_quorum": a.ack_quorum, "entry_bytes": a.entry_bytes, "rate": a.rate, "window": a.window,
                    "seconds": secs, "adds": adds, "failed": failed, "adds_per_s": per_s, "mb_per_s": mb_s,
                    "latency_ms": {"p50": q(h, 0.5), "p95": q(h, 0.95), "p99": q(h, 0.99), "p999": q(h, 0.999), "max": h.max() as f64 / 1000.0},
                    "per_second": seconds.iter().map(|(s, n, p50, p99)| serde_json::json!({"second": s, "adds": n, "p50_ms": p50, "p99_ms": p99})).collect::<Vec<_>>(),
                })
            ),
            Format::Csv => println!(
                "total,{adds},{per_s:.0},{mb_s:.2},{:.3},{:.3},{:.3},{:.3},{failed}",
                q(h, 0.5), q(h, 0.99), q(h, 0.999), h.max() as f64 / 1000.0
            ),
        }
        let _ = std::io::stdout().flush();
        for l in logs {
            if !a.keep {
                let _ = client.delete_log(l.name()).await;
            }
        }
        for w in writers {
            let id = w.ledger_id();
            let _ = w.close().await;
            if !a.keep {
                let _ = client.delete(id).await;
            }
        }
        rpc.close(Duration::from_millis(200)).await;
        anyhow::ensure!(failed == 0, "{failed} adds failed");
        Ok(())
    })
}
