//! `quire bookies`: the bookie registry, from the metadata service.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quire_metaclient::{MetaClient, MetaClientOptions};
use quire_proto::v1;
use quire_proto::Role;
use quire_rpc::{ClientOptions, Credentials, RpcClient, TlsFiles};

/// Where the metadata service is, and the operator's certificate to reach
/// it: the connection flags. Global, so that they go before or after a
/// subcommand (`quire bookie --metadata M decommission 3` and `quire bookie
/// decommission 3 --metadata M` alike); a global flag cannot be required by
/// clap, so each is checked when used.
#[derive(Debug, Args)]
pub struct MetaTarget {
    /// Metadata replicas, host:port, comma-separated.
    #[arg(long, env = "QUIRE_METADATA", value_delimiter = ',', global = true)]
    metadata: Vec<String>,
    /// Directory with ca.pem and the operator's certificate (admin-<as-id>.pem).
    #[arg(long, env = "QUIRE_CERTS_DIR", global = true)]
    certs_dir: Option<PathBuf>,
    /// See --certs-dir.
    #[arg(long, default_value = "1", global = true)]
    pub as_id: String,
}

impl MetaTarget {
    /// The metadata replicas (--metadata or QUIRE_METADATA).
    pub fn metadata(&self) -> anyhow::Result<Vec<String>> {
        anyhow::ensure!(
            !self.metadata.is_empty(),
            "--metadata is required (or QUIRE_METADATA): the metadata replicas, host:port, comma-separated"
        );
        Ok(self.metadata.clone())
    }

    /// The certificates directory (--certs-dir or QUIRE_CERTS_DIR).
    pub fn certs_dir(&self) -> anyhow::Result<&Path> {
        self.certs_dir.as_deref().context(
            "--certs-dir is required (or QUIRE_CERTS_DIR): the directory with ca.pem and the operator's certificate",
        )
    }

    /// A metadata client over `rpc`.
    pub fn meta_client(&self, rpc: &RpcClient) -> anyhow::Result<MetaClient> {
        Ok(MetaClient::new(rpc.clone(), self.metadata()?, MetaClientOptions::default()))
    }

    /// One metadata request as the operator, on a runtime of its own.
    pub fn call<C>(&self, req: C) -> anyhow::Result<C::Response>
    where
        C: quire_proto::method::Call + Clone,
    {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let rpc = self.rpc()?;
            let meta = self.meta_client(&rpc)?;
            let r = meta.call(req).await;
            rpc.close(Duration::from_millis(100)).await;
            r.with_context(|| C::METHOD.name())
        })
    }

    /// An RPC client holding the operator's certificate (inside a runtime).
    pub fn rpc(&self) -> anyhow::Result<RpcClient> {
        let files = TlsFiles::in_dir(self.certs_dir()?, Role::Admin, &self.as_id);
        let creds = Credentials::load(&files).context("load credentials")?;
        Ok(RpcClient::new(&creds, ClientOptions::default())?)
    }
}

#[derive(Debug, Args)]
pub struct BookiesArgs {
    #[command(flatten)]
    target: MetaTarget,
    /// Wait until at least this many bookies are registered (at most --wait-ms).
    #[arg(long, default_value_t = 0)]
    at_least: usize,
    /// How long --at-least may wait, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn state_name(s: i32) -> &'static str {
    match v1::BookieState::try_from(s) {
        Ok(v1::BookieState::Available) => "available",
        Ok(v1::BookieState::ReadOnly) => "read-only",
        Ok(v1::BookieState::Decommissioning) => "decommissioning",
        Ok(v1::BookieState::Decommissioned) => "decommissioned",
        _ => "unknown",
    }
}

pub fn list(a: BookiesArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let rpc = a.target.rpc()?;
        let meta = a.target.meta_client(&rpc)?;
        let mut resp = meta.call(v1::ListBookiesRequest {}).await.context("list bookies")?;
        if resp.bookies.len() < a.at_least {
            let wait = Duration::from_millis(a.wait_ms);
            let bookies = meta
                .wait_for_registry(wait, |b| b.len() >= a.at_least)
                .await
                .context("watch bookies")?
                .with_context(|| format!("fewer than {} bookies registered within {} ms", a.at_least, a.wait_ms))?;
            resp = v1::ListBookiesResponse { bookies, ..resp };
        }
        rpc.close(Duration::from_millis(100)).await;
        // Registered bookies, then the decommissioning or retired ones that are down.
        let all: Vec<&v1::BookieRecord> = resp.bookies.iter().chain(&resp.retired).collect();
        if a.json {
            let rows: Vec<_> = all
                .iter()
                .map(|b| {
                    serde_json::json!({
                        "id": b.bookie_id, "address": b.address, "rack": b.rack, "state": state_name(b.state),
                        "instance_id": b.instance_id, "free_disk_bytes": b.free_disk_bytes, "total_disk_bytes": b.total_disk_bytes,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
        } else {
            println!("{:<10} {:<22} {:<12} {:<16} {:<34} {:>8}", "ID", "ADDRESS", "RACK", "STATE", "INSTANCE", "DISK");
            for b in &all {
                let used = if b.total_disk_bytes > 0 {
                    format!("{:.0}%", 100.0 * (1.0 - b.free_disk_bytes as f64 / b.total_disk_bytes as f64))
                } else {
                    "-".into()
                };
                println!(
                    "{:<10} {:<22} {:<12} {:<16} {:<34} {:>8}",
                    b.bookie_id,
                    b.address,
                    b.rack,
                    state_name(b.state),
                    b.instance_id,
                    used
                );
            }
        }
        Ok(())
    })
}
