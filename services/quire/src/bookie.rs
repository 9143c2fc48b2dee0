//! `quire bookie show|decommission|recommission|gc ID`: one bookie, and the
//! operator's word on it.
//!
//! Decommissioning drains a bookie: it is no longer placed on, it refuses
//! normal adds (writers move away by ensemble change) but keeps serving
//! reads, and the auditor has every ledger that names it re-replicated.
//! Once no ledger names it, the auditor retires it (DECOMMISSIONED); the id
//! may not register again. Progress is the count of ledgers still naming it.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use quire_metaclient::MetaClient;
use quire_proto::v1;

use crate::bookies::{state_name, MetaTarget};

#[derive(Debug, Args)]
pub struct BookieArgs {
    #[command(flatten)]
    target: MetaTarget,
    #[command(subcommand)]
    cmd: BookieCmd,
}

#[derive(Debug, Subcommand)]
enum BookieCmd {
    /// A bookie's registration, state and the ledgers it still holds.
    Show(OneBookie),
    /// Drain a bookie (its data is re-replicated elsewhere), then retire it.
    Decommission(Decommission),
    /// Cancel a decommissioning that has not finished.
    Recommission(OneBookie),
    /// Run a garbage-collection pass on the bookie now and print its report:
    /// deleted ledgers dropped, dead entry logs removed, sparse ones compacted.
    Gc(Gc),
}

#[derive(Debug, Args)]
struct Gc {
    #[command(flatten)]
    one: OneBookie,
    /// Compact up to the major threshold (default: the minor one).
    #[arg(long)]
    major: bool,
    /// Longest to wait for the pass, in seconds (it goes on if the wait ends).
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

#[derive(Debug, Args)]
struct OneBookie {
    /// The bookie id.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct Decommission {
    #[command(flatten)]
    one: OneBookie,
    /// Wait until the bookie is retired, printing progress (0: return at once).
    #[arg(long, default_value_t = 0)]
    wait_secs: u64,
}

pub fn run(a: BookieArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let rpc = a.target.rpc()?;
        let meta = a.target.meta_client(&rpc)?;
        let result = async {
            match &a.cmd {
                BookieCmd::Show(o) => print(o, &show(&meta, &o.id).await?),
                BookieCmd::Gc(g) => {
                    let b = show(&meta, &g.one.id).await?.bookie.unwrap_or_default();
                    anyhow::ensure!(
                        !b.address.is_empty(),
                        "bookie {} is not registered: no address to reach",
                        g.one.id
                    );
                    let peer = rpc.peer(&b.address, quire_proto::Role::Bookie, Some(&g.one.id));
                    let r = peer
                        .call_full(
                            v1::RunGcRequest { major: g.major },
                            quire_rpc::CallOptions::timeout(Duration::from_secs(g.timeout_secs)),
                        )
                        .await
                        .with_context(|| format!("gc on bookie {} at {}", g.one.id, b.address))?;
                    print_gc(&g.one, &r.body.report.unwrap_or_default());
                    Ok(())
                }
                BookieCmd::Recommission(o) => {
                    set_state(&meta, &o.id, v1::BookieState::Available).await?;
                    print(o, &show(&meta, &o.id).await?)
                }
                BookieCmd::Decommission(d) => {
                    set_state(&meta, &d.one.id, v1::BookieState::Decommissioning).await?;
                    let deadline = Instant::now() + Duration::from_secs(d.wait_secs);
                    loop {
                        let s = show(&meta, &d.one.id).await?;
                        let retired =
                            s.bookie.as_ref().is_some_and(|b| b.state == v1::BookieState::Decommissioned as i32);
                        if retired || Instant::now() >= deadline {
                            print(&d.one, &s)?;
                            if !retired && d.wait_secs > 0 {
                                anyhow::bail!("bookie {} is not retired after {} s", d.one.id, d.wait_secs);
                            }
                            return Ok(());
                        }
                        if !d.one.json {
                            eprintln!(
                                "bookie {}: {} ledgers still name it, {} marked under-replicated",
                                d.one.id, s.ledgers, s.under_replicated_ledgers
                            );
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }
        .await;
        rpc.close(Duration::from_millis(100)).await;
        result
    })
}

async fn set_state(meta: &MetaClient, id: &str, state: v1::BookieState) -> anyhow::Result<()> {
    meta.call(v1::SetBookieStateRequest { bookie_id: id.to_string(), state: state as i32 })
        .await
        .with_context(|| format!("set bookie {id} {}", state_name(state as i32)))?;
    Ok(())
}

async fn show(meta: &MetaClient, id: &str) -> anyhow::Result<v1::GetBookieResponse> {
    meta.call(v1::GetBookieRequest { bookie_id: id.to_string() }).await.with_context(|| format!("bookie {id}"))
}

/// The bookie as JSON (the same shape the gateway answers with).
pub fn bookie_json(s: &v1::GetBookieResponse) -> serde_json::Value {
    let b = s.bookie.clone().unwrap_or_default();
    serde_json::json!({
        "id": b.bookie_id, "address": b.address, "rack": b.rack, "state": state_name(b.state),
        "instance_id": b.instance_id, "registered": s.registered,
        "free_disk_bytes": b.free_disk_bytes, "total_disk_bytes": b.total_disk_bytes,
        "ledgers": s.ledgers, "under_replicated_ledgers": s.under_replicated_ledgers,
        "decommission_requested_at_ms": s.decommission_requested_at_ms,
    })
}

fn print(o: &OneBookie, s: &v1::GetBookieResponse) -> anyhow::Result<()> {
    if o.json {
        println!("{}", bookie_json(s));
        return Ok(());
    }
    let b = s.bookie.clone().unwrap_or_default();
    println!("bookie      {}", b.bookie_id);
    println!("address     {}", b.address);
    println!("rack        {}", b.rack);
    println!("state       {}", state_name(b.state));
    println!("instance    {}", b.instance_id);
    println!("registered  {}", s.registered);
    println!("ledgers     {} (ledgers whose ensembles name it)", s.ledgers);
    println!("marked      {} (under-replicated ledgers missing its copies)", s.under_replicated_ledgers);
    Ok(())
}

fn print_gc(o: &OneBookie, r: &v1::GcReport) {
    if o.json {
        println!(
            "{}",
            serde_json::json!({
                "kind": r.kind, "ledgers_deleted": r.ledgers_deleted, "ledgers_unconfirmed": r.ledgers_unconfirmed,
                "ledgers_not_here": r.ledgers_not_here,
                "entry_logs_removed": r.entry_logs_removed, "entry_logs_compacted": r.entry_logs_compacted,
                "entries_moved": r.entries_moved, "bytes_reclaimed": r.bytes_reclaimed,
                "compaction_failures": r.compaction_failures, "duration_ms": r.duration_ms,
                "deletion_skipped": r.deletion_skipped,
            })
        );
        return;
    }
    println!("pass              {} ({} ms)", r.kind, r.duration_ms);
    println!("ledgers deleted   {} ({} not confirmed, kept)", r.ledgers_deleted, r.ledgers_unconfirmed);
    println!("ledgers moved off {} (closed, no ensemble names this bookie: copies dropped)", r.ledgers_not_here);
    println!("logs removed      {}", r.entry_logs_removed);
    println!("logs compacted    {} ({} entries moved)", r.entry_logs_compacted, r.entries_moved);
    println!("bytes reclaimed   {}", r.bytes_reclaimed);
    if r.compaction_failures > 0 {
        println!("failures          {} (logs kept for a later pass; see the bookie's log)", r.compaction_failures);
    }
    if !r.deletion_skipped.is_empty() {
        println!("deletion skipped  {}", r.deletion_skipped);
    }
}
