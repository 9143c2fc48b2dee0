//! `quire certs`: the cluster CA and role certificates.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use quire_pki::{init_dir, CertAuthority, IssueOptions, LocalCluster, Validity};
use quire_proto::Role;

#[derive(Debug, Subcommand)]
pub enum CertsCmd {
    /// Create a CA and a certificate for every member of a local cluster in DIR.
    Init(InitArgs),
    /// Issue one more certificate from the CA in DIR.
    Issue(IssueArgs),
}

#[derive(Debug, Args)]
pub struct SanArgs {
    /// Extra DNS names to put in the certificate(s) (repeatable).
    #[arg(long = "dns")]
    dns: Vec<String>,
    /// Extra IP addresses to put in the certificate(s) (repeatable).
    #[arg(long = "ip")]
    ip: Vec<IpAddr>,
    /// Validity in days.
    #[arg(long, default_value_t = 365)]
    days: i64,
}

impl SanArgs {
    fn options(&self) -> IssueOptions {
        let mut o = IssueOptions { validity: Validity::days(self.days), ..IssueOptions::default() };
        o.dns_names.extend(self.dns.iter().cloned());
        o.ips.extend(self.ip.iter().copied());
        o
    }
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to create the CA and certificates in.
    #[arg(long)]
    dir: PathBuf,
    /// Cluster name, recorded in the CA's subject.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Number of metadata replicas (ids 1..=N).
    #[arg(long, default_value_t = 3)]
    metadata: u32,
    /// Number of bookies (ids 1..=N).
    #[arg(long, default_value_t = 3)]
    bookies: u32,
    /// Number of auditors (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    auditors: u32,
    /// Number of replication workers (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// Number of gateways (ids 1..=N).
    #[arg(long, default_value_t = 1)]
    gateways: u32,
    /// Do nothing when the directory already holds a CA (an init step that
    /// runs on every `docker compose up`).
    #[arg(long)]
    if_missing: bool,
    /// The first id of each numbered role (0 for Kubernetes StatefulSets,
    /// whose pod index is the id). The client and admin certificates are
    /// always id 1.
    #[arg(long, default_value_t = 1)]
    first_id: u32,
    #[command(flatten)]
    san: SanArgs,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// Directory holding ca.pem and ca.key; the new pair is written there.
    #[arg(long)]
    dir: PathBuf,
    /// The role: bookie, metadata, auditor, replication-worker, gateway, client or admin.
    #[arg(long)]
    role: Role,
    /// The instance id ([A-Za-z0-9._-], at most 64).
    #[arg(long)]
    id: String,
    #[command(flatten)]
    san: SanArgs,
}

pub fn run(cmd: CertsCmd) -> anyhow::Result<()> {
    match cmd {
        CertsCmd::Init(a) => {
            if a.if_missing && a.dir.join("ca.pem").exists() {
                println!("{} already holds a CA: nothing to do", a.dir.display());
                return Ok(());
            }
            // The CA with the singletons (one of each other service, a client, the operator)...
            let layout = LocalCluster { metadata: 0, bookies: 0 };
            let ca = init_dir(&a.dir, &a.cluster, &layout, &a.san.options())
                .with_context(|| format!("initialise certificates in {}", a.dir.display()))?;
            let mut members: Vec<(Role, String)> =
                layout.members().into_iter().filter(|(r, _)| matches!(r, Role::Client | Role::Admin)).collect();
            // ...then every numbered identity.
            for (role, n) in [
                (Role::Metadata, a.metadata),
                (Role::Bookie, a.bookies),
                (Role::Auditor, a.auditors),
                (Role::ReplicationWorker, a.workers),
                (Role::Gateway, a.gateways),
            ] {
                for id in a.first_id..a.first_id + n {
                    let id = id.to_string();
                    ca.issue(role, &id, &a.san.options())?.write(&a.dir, role, &id)?;
                    members.push((role, id));
                }
            }
            println!("created CA and {} certificates in {}", members.len(), a.dir.display());
            for (role, id) in members {
                println!("  {role}-{id}.pem");
            }
            Ok(())
        }
        CertsCmd::Issue(a) => {
            let ca = CertAuthority::load(&a.dir).with_context(|| format!("load CA from {}", a.dir.display()))?;
            let issued = ca.issue(a.role, &a.id, &a.san.options()).context("issue certificate")?;
            let (cert, key) = issued.write(&a.dir, a.role, &a.id).context("write certificate")?;
            println!("issued quire://{}/{}: {} {}", a.role, a.id, cert.display(), key.display());
            Ok(())
        }
    }
}
