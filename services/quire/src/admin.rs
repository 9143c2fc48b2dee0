//! Operator checks, the counterparts of BookKeeper's shell:
//! - `quire under-replicated`: ledgers the auditor marked below Qw copies;
//! - `quire selftest`: write, read back and delete a ledger through the cluster;
//! - `quire bookie-sanity`: a ledger on each bookie alone (E=Qw=Qa=1), written,
//!   read back and deleted, so that a bookie that cannot store is named.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use quire_client::{Client, ClientOptions, CreateLedger};

use crate::bookies::MetaTarget;

#[derive(Debug, Args)]
pub struct UnderReplicatedArgs {
    #[command(flatten)]
    target: MetaTarget,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SelfTestArgs {
    #[command(flatten)]
    target: MetaTarget,
    /// Entries to write.
    #[arg(long, default_value_t = 100)]
    entries: u64,
    /// Ensemble, write and ack quorum.
    #[arg(long, default_value_t = 3)]
    ensemble: usize,
    #[arg(long, default_value_t = 3)]
    write_quorum: usize,
    #[arg(long, default_value_t = 2)]
    ack_quorum: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct BookieSanityArgs {
    #[command(flatten)]
    target: MetaTarget,
    /// Entries to write on each bookie.
    #[arg(long, default_value_t = 10)]
    entries: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn client(target: &MetaTarget) -> anyhow::Result<(Client, quire_rpc::RpcClient)> {
    let rpc = target.rpc()?;
    let meta = Arc::new(target.meta_client(&rpc)?);
    let opts = ClientOptions { add_timeout: Duration::from_secs(3), ..ClientOptions::default() };
    Ok((Client::new(rpc.clone(), meta, opts), rpc))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

pub fn under_replicated(a: UnderReplicatedArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (client, rpc) = client(&a.target)?;
        let marks = client.under_replicated().await.context("list under-replicated ledgers")?;
        rpc.close(Duration::from_millis(100)).await;
        if a.json {
            let rows: Vec<_> = marks
                .iter()
                .map(|m| {
                    serde_json::json!({
                        "ledger_id": m.ledger_id, "missing_bookies": m.missing_bookie_ids,
                        "reason": m.reason, "marked_at_ms": m.marked_at_ms,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        } else {
            println!("{:<12} {:<24} REASON", "LEDGER", "MISSING BOOKIES");
            for m in &marks {
                println!("{:<12} {:<24} {}", m.ledger_id, m.missing_bookie_ids.join(","), m.reason);
            }
            eprintln!("{} under-replicated ledger(s)", marks.len());
        }
        Ok(())
    })
}

/// Writes `n` entries to `w`, closes it, reads them back; the failure says where.
async fn write_read(client: &Client, w: quire_client::LedgerWriter, n: u64) -> anyhow::Result<(u64, f64)> {
    let id = w.ledger_id();
    let first_ensemble = w.metadata().segments[0].members.clone();
    let started = Instant::now();
    let mut pending = Vec::new();
    for i in 0..n {
        pending.push(w.submit(Bytes::from(format!("selftest-{id}-{i}"))).await.context("append")?);
    }
    for p in pending {
        p.await.context("append")?;
    }
    let closed = w.close().await.context("close")?;
    anyhow::ensure!(closed.last_entry_id == n as i64 - 1, "closed at {} after {n} adds", closed.last_entry_id);
    // An ensemble change (appended, or in place when nothing was acknowledged
    // yet) means a bookie failed the writes, even though the data is safe.
    if closed.segments.len() > 1 || closed.segments[0].members != first_ensemble {
        let _ = client.delete(id).await;
        let moved: Vec<&str> = closed.last_segment().members.iter().map(|m| m.bookie_id.as_str()).collect();
        let was: Vec<&str> = first_ensemble.iter().map(|m| m.bookie_id.as_str()).collect();
        anyhow::bail!("bookies {was:?} failed writes; the writer moved to {moved:?}");
    }
    let r = client.open(id).await.context("open")?;
    let entries = r.read_range(0, n.saturating_sub(1), n as usize).await.context("read back")?;
    anyhow::ensure!(entries.len() as u64 == n, "read back {} of {n} entries", entries.len());
    for (i, e) in entries.iter().enumerate() {
        anyhow::ensure!(e.payload == format!("selftest-{id}-{i}").as_bytes(), "entry {i} came back different");
    }
    client.delete(id).await.context("delete")?;
    Ok((id, started.elapsed().as_secs_f64() * 1000.0))
}

pub fn selftest(a: SelfTestArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.entries > 0, "--entries must be at least 1");
    runtime()?.block_on(async {
        let (client, rpc) = client(&a.target)?;
        let spec = CreateLedger {
            ensemble: a.ensemble,
            write_quorum: a.write_quorum,
            ack_quorum: a.ack_quorum,
            custom: BTreeMap::new(),
            visible_acks: false,
        };
        let w = client.create(spec).await.context("create a ledger")?;
        let (id, ms) = write_read(&client, w, a.entries).await?;
        rpc.close(Duration::from_millis(100)).await;
        if a.json {
            println!("{}", serde_json::json!({ "ok": true, "ledger_id": id, "entries": a.entries, "millis": ms }));
        } else {
            println!("selftest ok: ledger {id}, {} entries written, read back and deleted in {ms:.0} ms", a.entries);
        }
        Ok(())
    })
}

pub fn bookie_sanity(a: BookieSanityArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.entries > 0, "--entries must be at least 1");
    runtime()?.block_on(async {
        let (client, rpc) = client(&a.target)?;
        let bookies = client.bookies().refresh().await.context("list bookies")?;
        let mut rows = Vec::new();
        let mut failed = 0;
        for b in &bookies {
            let spec = CreateLedger { ensemble: 1, write_quorum: 1, ack_quorum: 1, custom: BTreeMap::new(), visible_acks: false };
            let res = match client.create_on(vec![b.bookie_id.clone()], spec).await {
                Ok(w) => write_read(&client, w, a.entries).await,
                Err(e) => Err(anyhow::Error::new(e).context("create a ledger on it")),
            };
            match res {
                Ok((_, ms)) => rows.push((b.bookie_id.clone(), b.address.clone(), true, format!("{ms:.0} ms"))),
                Err(e) => {
                    failed += 1;
                    rows.push((b.bookie_id.clone(), b.address.clone(), false, format!("{e:#}")));
                }
            }
        }
        rpc.close(Duration::from_millis(100)).await;
        if a.json {
            let out: Vec<_> = rows
                .iter()
                .map(|(id, addr, ok, detail)| serde_json::json!({ "id": id, "address": addr, "ok": ok, "detail": detail }))
                .collect();
            println!("{}", serde_json::Value::Array(out));
        } else {
            println!("{:<10} {:<22} {:<6} DETAIL", "BOOKIE", "ADDRESS", "OK");
            for (id, addr, ok, detail) in &rows {
                println!("{id:<10} {addr:<22} {:<6} {detail}", if *ok { "yes" } else { "NO" });
            }
        }
        anyhow::ensure!(failed == 0, "{failed} of {} bookies failed the sanity check", rows.len());
        anyhow::ensure!(!rows.is_empty(), "no bookie is registered");
        Ok(())
    })
}
