//! goose load scenarios against quire's HTTP gateway.
//!
//! ```text
//! cargo run --release -- --host http://127.0.0.1:8080 --scenarios appendheavy \
//!     --users 16 --increase-rate 16 --run-time 30s
//! ```
//! goose's own flags pick the host, users, duration and scenarios; quire's
//! knobs (entry size, quorums, batch sizes) are QUIRE_* environment
//! variables (loadtest/README.md). At the end it prints, besides goose's
//! report, one summary: per operation requests/s and latency percentiles,
//! entries/s and MB/s appended and read, and every check that failed. A read
//! that returns wrong bytes, or any failed request, makes the run exit non-zero.

mod gateway;
mod payload;
mod scenarios;
mod settings;
mod tally;

use goose::metrics::GooseMetrics;
use goose::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
struct Operation {
    requests: usize,
    failed: usize,
    requests_per_s: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
}

#[derive(Serialize)]
struct Summary {
    settings: BTreeMap<&'static str, String>,
    users: usize,
    goose_seconds: usize,
    operations: BTreeMap<String, Operation>,
    totals: tally::Totals,
}

fn summarise(metrics: &GooseMetrics) -> Summary {
    let seconds = metrics.duration.max(1) as f64;
    let mut operations = BTreeMap::new();
    for agg in metrics.requests.values() {
        let t = &agg.raw_data;
        let ms = |p: f32| t.percentile_us(p) as f64 / 1000.0;
        let name = format!("{} {}", agg.method, agg.path);
        operations.insert(
            name,
            Operation {
                requests: agg.success_count + agg.fail_count,
                failed: agg.fail_count,
                requests_per_s: (agg.success_count + agg.fail_count) as f64 / seconds,
                p50_ms: ms(0.5),
                p90_ms: ms(0.9),
                p99_ms: ms(0.99),
                p999_ms: ms(0.999),
                max_ms: t.maximum_time_us as f64 / 1000.0,
            },
        );
    }
    let s = settings::Settings::get();
    let settings = BTreeMap::from([
        ("entry_bytes", s.entry_bytes.to_string()),
        ("quorums", format!("E={} Qw={} Qa={}", s.ensemble, s.write_quorum, s.ack_quorum)),
        ("append_batch", s.append_batch.to_string()),
        ("tail_batch", s.tail_batch.to_string()),
        ("catchup_entries", s.catchup_entries.to_string()),
        ("read_range", s.read_range.to_string()),
        ("ledger_entries", s.ledger_entries.to_string()),
    ]);
    Summary {
        settings,
        users: metrics.maximum_users,
        goose_seconds: metrics.duration,
        operations,
        totals: tally::totals(),
    }
}

fn print(summary: &Summary) {
    println!("\n=== quire load summary ({} users, {} s) ===", summary.users, summary.goose_seconds);
    for (k, v) in &summary.settings {
        println!("  {k}: {v}");
    }
    println!(
        "{:<28} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "operation", "requests", "failed", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for (name, o) in &summary.operations {
        println!(
            "{:<28} {:>9} {:>7} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            name, o.requests, o.failed, o.requests_per_s, o.p50_ms, o.p90_ms, o.p99_ms, o.p999_ms, o.max_ms
        );
    }
    let t = &summary.totals;
    println!(
        "appended: {} entries, {:.0} entries/s, {:.2} MB/s | read: {} entries, {:.0} entries/s, {:.2} MB/s | over {:.1} s",
        t.appended_entries, t.appended_entries_per_s, t.append_mb_per_s, t.read_entries, t.read_entries_per_s,
        t.read_mb_per_s, t.seconds
    );
    println!("failed requests: {} (of which replies contradicting what was written: {})", t.failures, t.wrong_replies);
    for f in &t.first_failures {
        println!("  {f}");
    }
}

#[tokio::main]
async fn main() -> Result<(), GooseError> {
    let settings = settings::Settings::get();
    let mut attack = *GooseAttack::initialize()?
        // No telnet or WebSocket controller: a benchmark run takes no commands.
        .set_default(GooseDefault::NoTelnet, true)?
        .set_default(GooseDefault::NoWebSocket, true)?
        .set_default(GooseDefault::Host, "http://127.0.0.1:8080")?;
    for s in scenarios::all()? {
        attack = attack.register_scenario(s);
    }
    let metrics = attack.execute().await?;
    let summary = summarise(&metrics);
    print(&summary);
    if let Some(path) = &settings.report_json {
        let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("writing {path}: {e}");
            std::process::exit(2);
        }
    }
    // A wrong byte read back is a broken guarantee, whatever the throughput.
    if summary.totals.wrong_replies > 0 {
        eprintln!("{} replies contradicted what was written", summary.totals.wrong_replies);
        std::process::exit(1);
    }
    // A failed append or read is not a measurement: figures from a run
    // that failed requests describe a cluster that was not serving them.
    if summary.totals.failures > 0 {
        eprintln!("{} requests failed", summary.totals.failures);
        std::process::exit(1);
    }
    Ok(())
}
