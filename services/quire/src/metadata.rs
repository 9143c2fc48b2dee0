//! `quire metadata`: the metadata cluster's status and membership.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::CallOptions;

use crate::bookies::MetaTarget;

#[derive(Debug, Args)]
pub struct MetadataArgs {
    #[command(flatten)]
    target: MetaTarget,
    #[command(subcommand)]
    cmd: MetadataCmd,
}

#[derive(Debug, Subcommand)]
pub enum MetadataCmd {
    /// Each replica's view: Raft state, term, leader, applied index, voters.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Set the voting replicas to exactly ID=HOST:PORT,... (new ones must be running).
    SetVoters {
        /// The voters, ID=HOST:PORT, comma-separated.
        #[arg(value_delimiter = ',', required = true)]
        voters: Vec<String>,
    },
}

pub fn run(a: MetadataArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let rpc = a.target.rpc()?;
        match a.cmd {
            MetadataCmd::Status { json } => {
                if !json {
                    println!(
                        "{:<22} {:<9} {:<10} {:>6} {:<22} {:>9} VOTERS",
                        "REPLICA", "ID", "STATE", "TERM", "LEADER", "APPLIED"
                    );
                }
                let mut rows = Vec::new();
                for addr in &a.target.metadata()? {
                    let peer = rpc.peer(addr, Role::Metadata, None);
                    let answer = peer
                        .call_full(v1::MetadataStatusRequest::default(), CallOptions::timeout(Duration::from_secs(3)))
                        .await;
                    match (answer, json) {
                        (Ok(r), true) => {
                            let s = r.body;
                            rows.push(serde_json::json!({
                                "address": addr, "replica_id": s.replica_id, "state": s.raft_state, "term": s.term,
                                "leader_address": s.leader_address, "last_applied_index": s.last_applied_index,
                                "voters": s.voters.iter().map(|v| v.id).collect::<Vec<_>>(),
                            }));
                        }
                        (Ok(r), false) => {
                            let s = r.body;
                            let voters: Vec<String> = s.voters.iter().map(|v| v.id.to_string()).collect();
                            println!(
                                "{:<22} {:<9} {:<10} {:>6} {:<22} {:>9} {}",
                                addr,
                                s.replica_id,
                                s.raft_state,
                                s.term,
                                s.leader_address,
                                s.last_applied_index,
                                voters.join(",")
                            );
                        }
                        (Err(e), true) => rows.push(serde_json::json!({ "address": addr, "error": e.to_string() })),
                        (Err(e), false) => println!("{addr:<22} unreachable: {e}"),
                    }
                }
                if json {
                    println!("{}", serde_json::Value::Array(rows));
                }
            }
            MetadataCmd::SetVoters { voters } => {
                let mut replicas = Vec::new();
                for v in &voters {
                    let (id, addr) = v.split_once('=').with_context(|| format!("{v:?} is not ID=HOST:PORT"))?;
                    replicas.push(v1::Replica {
                        id: id.parse().with_context(|| format!("bad id in {v:?}"))?,
                        address: addr.into(),
                    });
                }
                let meta = a.target.meta_client(&rpc)?;
                let r = meta
                    .call_waiting(v1::ChangeMembershipRequest { voters: replicas }, Duration::from_secs(60))
                    .await
                    .context("change membership")?;
                let now: Vec<String> = r.voters.iter().map(|v| format!("{}={}", v.id, v.address)).collect();
                println!("voters: {}", now.join(","));
            }
        }
        rpc.close(Duration::from_millis(100)).await;
        Ok(())
    })
}
