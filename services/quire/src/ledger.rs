//! `quire ledger`: ledgers through the client library, for operators and the
//! local cluster's first ledger.
//!
//! - `write`: create a ledger, append entries (from --entries or stdin lines),
//!   close it, print its metadata;
//! - `read`: print entries up to the LAC;
//! - `info`, `recover`, `delete`, `list`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};
use quire_client::meta::LedgerMeta;
use quire_client::{Client, ClientOptions, CreateLedger};

use crate::bookies::MetaTarget;

#[derive(Debug, Args)]
pub struct LedgerArgs {
    #[command(flatten)]
    target: MetaTarget,
    #[command(subcommand)]
    cmd: LedgerCmd,
}

#[derive(Debug, Subcommand)]
enum LedgerCmd {
    /// Create a ledger, append entries, close it.
    Write {
        /// Ensemble size.
        #[arg(long, default_value_t = 3)]
        ensemble: usize,
        /// Write quorum.
        #[arg(long, default_value_t = 3)]
        write_quorum: usize,
        /// Ack quorum.
        #[arg(long, default_value_t = 2)]
        ack_quorum: usize,
        /// Entries to append ("entry-0", "entry-1", ...); without it, one entry per stdin line.
        #[arg(long)]
        entries: Option<u64>,
        /// Leave the ledger open (a reader can then recover it).
        #[arg(long)]
        no_close: bool,
    },
    /// Print a ledger's entries up to its LAC.
    Read {
        /// The ledger.
        #[arg(long)]
        ledger: u64,
        /// First entry.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Last entry (default: the LAC).
        #[arg(long)]
        to: Option<u64>,
    },
    /// Follow a ledger: print its entries as the LAC passes them, from
    /// --from on, until the ledger is closed (then say where it ended).
    Tail {
        /// The ledger.
        #[arg(long)]
        ledger: u64,
        /// First entry.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// Print a ledger's metadata.
    Info {
        /// The ledger.
        #[arg(long)]
        ledger: u64,
    },
    /// Fence a ledger, recover it to its true tail and close it there.
    Recover {
        /// The ledger.
        #[arg(long)]
        ledger: u64,
    },
    /// Delete a ledger (bookies reclaim its space by GC).
    Delete {
        /// The ledger.
        #[arg(long)]
        ledger: u64,
    },
    /// List ledgers: id, state, quorums, last entry, length (one
    /// metadata read per ledger; `--json` lists the ids alone, as the
    /// HTTP API does, with the id to start after for the next page).
    List {
        /// Start after this id.
        #[arg(long)]
        start_after: Option<u64>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn json(m: &LedgerMeta) -> serde_json::Value {
    m.to_json()
}

pub fn run(a: LedgerArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let rpc = a.target.rpc()?;
        let meta = Arc::new(a.target.meta_client(&rpc)?);
        let client = Client::new(rpc.clone(), meta, ClientOptions::default());
        let out = run_cmd(&client, a.cmd).await;
        rpc.close(Duration::from_millis(100)).await;
        out
    })
}

async fn run_cmd(client: &Client, cmd: LedgerCmd) -> anyhow::Result<()> {
    match cmd {
        LedgerCmd::Write { ensemble, write_quorum, ack_quorum, entries, no_close } => {
            let spec =
                CreateLedger { ensemble, write_quorum, ack_quorum, custom: BTreeMap::new(), visible_acks: false };
            let w = client.create(spec).await.context("create ledger")?;
            let payloads: Vec<Bytes> = match entries {
                Some(n) => (0..n).map(|i| Bytes::from(format!("entry-{i}"))).collect(),
                None => std::io::stdin()
                    .lock()
                    .lines()
                    .map(|l| l.map(Bytes::from))
                    .collect::<Result<_, _>>()
                    .context("read stdin")?,
            };
            let mut pending = Vec::with_capacity(payloads.len());
            for p in payloads {
                pending.push(w.submit(p).await.context("append")?);
            }
            for p in pending {
                p.await.context("append")?;
            }
            let m = if no_close { w.metadata() } else { w.close().await.context("close ledger")? };
            println!("{}", json(&m));
        }
        LedgerCmd::Read { ledger, from, to } => {
            let r = client.open(ledger).await.with_context(|| format!("open ledger {ledger}"))?;
            let lac = r.read_lac().await.context("read the LAC")?;
            let to = to.unwrap_or(lac.max(0) as u64);
            if lac >= 0 {
                for e in r.read_range(from, to, usize::MAX).await.context("read entries")? {
                    println!("{}\t{}", e.entry_id, String::from_utf8_lossy(&e.payload));
                }
            }
            eprintln!("ledger {ledger}: LAC {lac}");
        }
        LedgerCmd::Tail { ledger, from } => {
            let r = client.open(ledger).await.with_context(|| format!("open ledger {ledger}"))?;
            let mut tail = quire_client::Tail::new(r, from, None, 64);
            loop {
                match tail.step(Duration::from_secs(5)).await.with_context(|| format!("follow ledger {ledger}"))? {
                    quire_client::TailEvent::Entries(entries) => {
                        for e in entries {
                            println!("{}\t{}", e.entry_id, String::from_utf8_lossy(&e.payload));
                        }
                    }
                    quire_client::TailEvent::Idle { .. } => {}
                    quire_client::TailEvent::End { last_entry_id, .. } => {
                        eprintln!("ledger {ledger}: closed at entry {last_entry_id}");
                        break;
                    }
                }
            }
        }
        LedgerCmd::Info { ledger } => println!("{}", json(&client.metadata(ledger).await?)),
        LedgerCmd::Recover { ledger } => println!("{}", json(&client.recover(ledger).await?)),
        LedgerCmd::Delete { ledger } => {
            client.delete(ledger).await?;
            eprintln!("ledger {ledger} deleted");
        }
        LedgerCmd::List { start_after, limit, json } => {
            let (ids, next) = client.list(start_after, limit).await.context("list ledgers")?;
            if json {
                println!("{}", serde_json::json!({ "ledgers": ids, "next": next }));
                return Ok(());
            }
            println!("{:<12} {:<12} {:<8} {:>10} {:>12}", "LEDGER", "STATE", "E/QW/QA", "LAST", "LENGTH");
            for id in ids {
                let m = match client.metadata(id).await {
                    Ok(m) => m,
                    Err(quire_client::ClientError::NoSuchLedger(_)) => continue, // deleted meanwhile
                    Err(e) => return Err(e).with_context(|| format!("ledger {id}")),
                };
                let q = &m.quorums;
                println!(
                    "{:<12} {:<12} {:<8} {:>10} {:>12}",
                    id,
                    m.state.as_str(),
                    format!("{}/{}/{}", q.ensemble, q.write, q.ack),
                    m.last_entry_id,
                    m.length
                );
            }
            if let Some(n) = next {
                eprintln!("more: --start-after {n}");
            }
        }
    }
    Ok(())
}
