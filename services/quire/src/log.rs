//! `quire log`: named logs over chains of ledgers (issue #23, docs/logs.md)
//! through the client library.
//!
//! - `create`: a log with its ledgers' quorums, rollover and retention;
//! - `append`: records (from --records or stdin lines), printing each
//!   offset; it takes the log over (recovering the last ledger, fencing the
//!   writer that held it: a gateway retakes it at its next append);
//! - `read`, `tail` (follow from an offset), `trim`, `info`, `list`, `delete`;
//! - `cursor`: print, create, acknowledge, seek or delete a durable cursor.

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Subcommand};
use quire_client::{Client, ClientOptions};
use quire_log::{LogConfig, Retention, Rollover};

use crate::bookies::MetaTarget;

#[derive(Debug, Args)]
pub struct LogArgs {
    #[command(flatten)]
    target: MetaTarget,
    #[command(subcommand)]
    cmd: LogCmd,
}

#[derive(Debug, Subcommand)]
enum LogCmd {
    /// Create a log.
    Create {
        /// Its name (1 to 128 of A-Z a-z 0-9 . _ -).
        name: String,
        /// Ensemble size of its ledgers.
        #[arg(long, default_value_t = 3)]
        ensemble: u32,
        /// Write quorum.
        #[arg(long, default_value_t = 3)]
        write_quorum: u32,
        /// Ack quorum.
        #[arg(long, default_value_t = 2)]
        ack_quorum: u32,
        /// Roll to a new ledger after this many records (0: no limit).
        #[arg(long, default_value_t = Rollover::default().max_entries)]
        rollover_entries: u64,
        /// ... or this many payload bytes (0: no limit).
        #[arg(long, default_value_t = Rollover::default().max_bytes)]
        rollover_bytes: u64,
        /// ... or a ledger this old, in milliseconds (0: no limit).
        #[arg(long, default_value_t = Rollover::default().max_age_ms)]
        rollover_age_ms: u64,
        /// Trim whole ledgers older than this, in milliseconds (0: keep).
        #[arg(long, default_value_t = 0)]
        retention_age_ms: u64,
        /// Trim the oldest whole ledgers while the log holds more bytes (0: keep).
        #[arg(long, default_value_t = 0)]
        retention_bytes: u64,
    },
    /// Append records (taking the log over); print each one's offset.
    Append {
        /// The log.
        name: String,
        /// Records to append ("record-0", ...); without it, one per stdin line.
        #[arg(long)]
        records: Option<u64>,
        /// Make the appends idempotent: this producer, sequence numbers from --sequence.
        #[arg(long, requires = "sequence")]
        producer_id: Option<String>,
        /// The first record's sequence number.
        #[arg(long, requires = "producer_id")]
        sequence: Option<u64>,
    },
    /// Print records from an offset (or a time), up to the committed end:
    /// offset, time (ms since the Unix epoch), payload.
    Read {
        /// The log.
        name: String,
        /// First offset.
        #[arg(long, default_value_t = 0, conflicts_with = "from_time")]
        from: u64,
        /// Start at the first record at or after this time, in
        /// milliseconds since the Unix epoch (`$(date -d 09:00 +%s%3N)`).
        #[arg(long)]
        from_time: Option<u64>,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Follow a log: print its records as they are committed, from --from on.
    Tail {
        /// The log.
        name: String,
        /// First offset.
        #[arg(long, default_value_t = 0, conflicts_with = "from_time")]
        from: u64,
        /// Start at the first record at or after this time (ms since the Unix epoch).
        #[arg(long)]
        from_time: Option<u64>,
    },
    /// Move the trim point; ledgers wholly below it are deleted.
    Trim {
        /// The log.
        name: String,
        /// The first offset to keep.
        #[arg(long)]
        before: u64,
    },
    /// Print a log: its ledgers with offset ranges, owner, epoch, trim point.
    Info {
        /// The log.
        name: String,
    },
    /// List log names.
    List {
        /// Start after this name.
        #[arg(long, default_value = "")]
        start_after: String,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Delete a log and its ledgers.
    Delete {
        /// The log.
        name: String,
    },
    /// A durable cursor: print it, or create, acknowledge, seek or delete it.
    Cursor {
        /// The log.
        name: String,
        /// The cursor.
        cursor: String,
        /// Create it at "start", "end" or an offset.
        #[arg(long, conflicts_with_all = ["ack", "seek", "delete"])]
        create: Option<String>,
        /// With --create: the log is not trimmed past it.
        #[arg(long, requires = "create")]
        holds_retention: bool,
        /// Acknowledge every record below this offset (forward only).
        #[arg(long, conflicts_with_all = ["seek", "delete"])]
        ack: Option<u64>,
        /// Move it to this offset, back or forward.
        #[arg(long, conflicts_with = "delete")]
        seek: Option<u64>,
        /// Delete it.
        #[arg(long)]
        delete: bool,
    },
}

pub fn run(a: LogArgs) -> anyhow::Result<()> {
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

fn print_records(records: &[quire_client::LogEntry]) {
    for r in records {
        println!("{}\t{}\t{}", r.offset, r.time_ms, String::from_utf8_lossy(&r.payload));
    }
}

async fn run_cmd(client: &Client, cmd: LogCmd) -> anyhow::Result<()> {
    match cmd {
        LogCmd::Create {
            name,
            ensemble,
            write_quorum,
            ack_quorum,
            rollover_entries,
            rollover_bytes,
            rollover_age_ms,
            retention_age_ms,
            retention_bytes,
        } => {
            let config = LogConfig {
                ensemble_size: ensemble,
                write_quorum,
                ack_quorum,
                rollover: Rollover {
                    max_entries: rollover_entries,
                    max_bytes: rollover_bytes,
                    max_age_ms: rollover_age_ms,
                },
                retention: Retention { max_age_ms: retention_age_ms, max_bytes: retention_bytes },
            };
            let owner = format!("cli-{}", std::process::id());
            let w = client.create_log(&name, config, &owner).await.with_context(|| format!("create log {name}"))?;
            println!("{}", w.metadata().await.to_json());
        }
        LogCmd::Append { name, records, producer_id, sequence } => {
            let payloads: Vec<Bytes> = match records {
                Some(n) => (0..n).map(|i| Bytes::from(format!("record-{i}"))).collect(),
                None => std::io::stdin()
                    .lock()
                    .lines()
                    .map(|l| l.map(Bytes::from))
                    .collect::<Result<_, _>>()
                    .context("read stdin")?,
            };
            if payloads.is_empty() {
                anyhow::bail!("no records to append");
            }
            let owner = format!("cli-{}", std::process::id());
            let w = client.open_log_writer(&name, &owner).await.with_context(|| format!("take log {name} over"))?;
            let producer = producer_id.as_deref().zip(sequence);
            let offsets = w.append_batch(payloads, producer).await.context("append")?;
            for o in &offsets {
                println!("{o}");
            }
            // Readers see a ledger's records up to the LAC its bookies
            // know; the writer publishes it once idle. Wait for that (on the
            // bookies' long poll), so that when this returns every record
            // printed is readable, though this process ends with it.
            let last = *offsets.iter().max().expect("a record");
            let seen = client.read_log_wait(&name, last, 1, Duration::from_secs(5)).await;
            if !seen.is_ok_and(|r| !r.is_empty()) {
                eprintln!("log {name}: offset {last} is acknowledged but not yet readable");
            }
            eprintln!("log {name}: {} records appended at epoch {}", offsets.len(), w.metadata().await.record.epoch);
        }
        LogCmd::Read { name, from, from_time, limit } => {
            let from = match from_time {
                Some(t) => {
                    client.log_offset_at_time(&name, t).await.with_context(|| format!("find time {t} in log {name}"))?
                }
                None => from,
            };
            let records = client.read_log(&name, from, limit).await.with_context(|| format!("read log {name}"))?;
            print_records(&records);
            let next = records.last().map_or(from, |r| r.offset + 1);
            eprintln!("log {name}: next offset {next}");
        }
        LogCmd::Tail { name, from, from_time } => {
            let mut at = match from_time {
                Some(t) => {
                    client.log_offset_at_time(&name, t).await.with_context(|| format!("find time {t} in log {name}"))?
                }
                None => from,
            };
            loop {
                let records = client
                    .read_log_wait(&name, at, 1000, Duration::from_secs(30))
                    .await
                    .with_context(|| format!("follow log {name}"))?;
                print_records(&records);
                if let Some(last) = records.last() {
                    at = last.offset + 1;
                }
            }
        }
        LogCmd::Trim { name, before } => {
            println!("{}", client.trim_log(&name, before).await.with_context(|| format!("trim log {name}"))?.to_json());
        }
        LogCmd::Info { name } => println!("{}", client.log_meta(&name).await?.to_json()),
        LogCmd::List { start_after, limit } => {
            let (names, next) = client.list_logs(&start_after, limit).await.context("list logs")?;
            for n in names {
                println!("{n}");
            }
            if let Some(n) = next {
                eprintln!("more: --start-after {n}");
            }
        }
        LogCmd::Delete { name } => {
            client.delete_log(&name).await?;
            eprintln!("log {name} deleted");
        }
        LogCmd::Cursor { name, cursor, create, holds_retention, ack, seek, delete } => {
            let c = if let Some(at) = create {
                let start = match at.as_str() {
                    "start" => quire_client::CursorStart::Start,
                    "end" => quire_client::CursorStart::End,
                    n => quire_client::CursorStart::At(n.parse().context("--create is start, end or an offset")?),
                };
                client.create_cursor(&name, &cursor, start, holds_retention).await?
            } else if let Some(p) = ack {
                client.move_cursor(&name, &cursor, p, false).await?
            } else if let Some(p) = seek {
                client.move_cursor(&name, &cursor, p, true).await?
            } else if delete {
                client.delete_cursor(&name, &cursor).await?;
                eprintln!("cursor {cursor} of log {name} deleted");
                return Ok(());
            } else {
                client.cursor(&name, &cursor).await?
            };
            println!("{}", c.to_json());
        }
    }
    Ok(())
}
