//! `quire bookie show|decommission|recommission ID`: one bookie, and the
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
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::v1;

use crate::bookies::{state_name, MetaTarget};

#[derive(Debug, Args)]
pub struct BookieArgs {
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
}

#[derive(Debug, Args)]
struct OneBookie {
    #[command(flatten)]
    target: MetaTarget,
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
        let one = match &a.cmd {
            BookieCmd::Show(o) | BookieCmd::Recommission(o) => o,
            BookieCmd::Decommission(d) => &d.one,
        };
        let rpc = one.target.rpc()?;
        let meta = MetaClient::new(rpc.clone(), one.target.metadata.clone(), MetaClientOptions::default());
        let result = async {
            match &a.cmd {
                BookieCmd::Show(o) => print(o, &show(&meta, &o.id).await?),
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
